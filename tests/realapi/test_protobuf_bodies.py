"""Protobuf request bodies on both servers: each stores the same object as from JSON.

Each fixture of ``tests/emulator/fixtures/protobuf`` (a Go object as
client-go encodes it, and the same object in Go's JSON form) is created on
each server twice: once from the protobuf bytes, once from the JSON under
another name. What the server stores must be the same but for the name and
the server-set fields. On the real kube-apiserver this checks the fixtures;
on the emulator, its decoder.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from probes import Target

FIXTURES = Path(__file__).resolve().parents[1] / "emulator" / "fixtures" / "protobuf"
PROTOBUF = "application/vnd.kubernetes.protobuf"

#: fixture -> the collection it is created in
COLLECTIONS = {
    "namespace": "/api/v1/namespaces",
    "configmap": "/api/v1/namespaces/default/configmaps",
    "secret": "/api/v1/namespaces/default/secrets",
    "pvc": "/api/v1/namespaces/default/persistentvolumeclaims",
    "pod": "/api/v1/namespaces/default/pods",
    "event": "/api/v1/namespaces/default/events",
    "eventsv1": "/apis/events.k8s.io/v1/namespaces/default/events",
    "job": "/apis/batch/v1/namespaces/default/jobs",
    "cronjob": "/apis/batch/v1/namespaces/default/cronjobs",
    "deployment": "/apis/apps/v1/namespaces/default/deployments",
    "statefulset": "/apis/apps/v1/namespaces/default/statefulsets",
    "priorityclass": "/apis/scheduling.k8s.io/v1/priorityclasses",
    "lease": "/apis/coordination.k8s.io/v1/namespaces/default/leases",
    "runtimeclass": "/apis/node.k8s.io/v1/runtimeclasses",
    "storageclass": "/apis/storage.k8s.io/v1/storageclasses",
    "persistentvolume": "/api/v1/persistentvolumes",
}
SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")


def _stored(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    meta = out["metadata"]
    for key in SERVER_SET:
        meta.pop(key, None)
    meta.get("labels", {}).pop("kubernetes.io/metadata.name", None)
    out.pop("status", None)  # filled in by controllers at their own pace
    return out


def _text(obj: dict[str, Any]) -> str:
    """Sorted and indented, so a difference shows as a line diff.

    The object's own uid (in a Job's labels) and the random suffix
    of the token volume the real server adds to a pod are made alike.
    """
    text = json.dumps(_stored(obj), indent=1, sort_keys=True)
    text = text.replace(obj["metadata"]["uid"], "<uid>")
    return re.sub(r"kube-api-access-[a-z0-9]+", "kube-api-access-<random>", text)


@pytest.mark.parametrize("backend", ["emulator", "real"])
@pytest.mark.parametrize("fixture", sorted(COLLECTIONS))
def test_a_protobuf_body_is_stored_as_its_json_twin(
    servers: dict[str, Target], backend: str, fixture: str
) -> None:
    target, collection = servers[backend], COLLECTIONS[fixture]
    body = json.loads((FIXTURES / f"{fixture}.json").read_text())
    name = body["metadata"]["name"]
    status, from_pb = target.call(
        "POST", collection, (FIXTURES / f"{fixture}.pb").read_bytes(), content_type=PROTOBUF
    )
    assert status == 201, str(from_pb)
    body["metadata"]["name"] = f"{name}-json"
    status, from_json = target.call("POST", collection, body)
    assert status == 201, str(from_json)
    assert from_pb["metadata"]["name"] == name
    # The twin's name, also in the labels a Job controller adds, is the only other difference.
    assert _text(from_pb) == _text(from_json).replace(f'"{name}-json"', f'"{name}"')
