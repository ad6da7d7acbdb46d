"""The chart's CRD upgrade on a real kube-apiserver: what its hook Job runs, with its
own ServiceAccount and RBAC, turns an older CRD into this version's.

Helm installs ``crds/`` once and never upgrades them; before the hook, a field
added to a CRD was pruned from every object until someone ran ``kubectl apply``.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from chart_helpers import NAMESPACE, render
from realapi_backends import require_binaries
from realapi_server import RealApiServer

from kai_py.api.crdgen import crd_documents

Json = dict[str, Any]

REPO = Path(__file__).resolve().parents[2]
QUEUES = "/apis/scheduling.run.ai/v2/queues"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def _older_crds() -> list[Json]:
    """This version's CRDs as an older release had them: Queue without
    ``spec.displayName``, and no Topology CRD at all."""
    older = []
    for doc in crd_documents():
        if doc["metadata"]["name"] == "topologies.kai.scheduler":
            continue
        doc = copy.deepcopy(doc)
        if doc["metadata"]["name"] == "queues.scheduling.run.ai":
            for version in doc["spec"]["versions"]:
                del version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
                    "displayName"
                ]
        older.append(doc)
    return older


def _queue(name: str) -> Json:
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"displayName": "Team A", "resources": {}},
    }


def _hook_kubeconfig(server: RealApiServer, workdir: Path) -> str:
    """A kubeconfig with the token of the hook's ServiceAccount, bound as the chart binds it."""
    server.namespace(NAMESPACE)
    hooks = [
        o
        for o in render()
        if "helm.sh/hook" in (o["metadata"].get("annotations") or {}) and o["kind"] != "Job"
    ]
    assert {o["kind"] for o in hooks} == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding"}
    server.apply_yaml(yaml.safe_dump_all(hooks))
    token = server.token_for(NAMESPACE, "kai-py-crds")
    return server.write_kubeconfig(str(workdir / "crds.kubeconfig"), token, "kai-py-crds")


def _apply(kubeconfig: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_SERVICE")}
    # The Job's command: `kai-py crds --apply` (its image's entry point is kai-py).
    return subprocess.run(
        [sys.executable, "-m", "kai_py.cli", "crds", "--apply", "--kubeconfig", kubeconfig],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )


def test_the_hook_upgrades_crds_so_a_new_field_is_served(tmp_path: Path) -> None:
    server = RealApiServer(tmp_path / "real", require_binaries()).start()
    try:
        server.apply_crds(_older_crds())
        # The older CRD prunes the field a newer kai-py reads.
        server.must("POST", QUEUES, _queue("before"))
        assert "displayName" not in server.must("GET", f"{QUEUES}/before")["spec"]

        kubeconfig = _hook_kubeconfig(server, tmp_path)
        done = _apply(kubeconfig)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert "created topologies.kai.scheduler" in lines, lines
        assert "updated queues.scheduling.run.ai (generation 1 -> 2)" in lines, lines
        assert "unchanged podgroups.scheduling.run.ai" in lines, lines

        server.must("POST", QUEUES, _queue("after"))
        assert server.must("GET", f"{QUEUES}/after")["spec"]["displayName"] == "Team A"
        # A new kind answers 429 ("storage is initializing") for a moment after it is
        # Established; Helm's client retries those.
        deadline = time.monotonic() + 10
        while server.request("GET", "/apis/kai.scheduler/v1alpha1/topologies")[0] != 200:
            assert time.monotonic() < deadline, "topologies are not served"
            time.sleep(0.1)
        # Run again (every upgrade runs it): nothing changes.
        again = _apply(kubeconfig)
        assert again.returncode == 0, again.stderr
        assert all(line.startswith("unchanged ") for line in again.stdout.splitlines())
        # The hook's token reaches kai-py's CRDs only.
        other = dict(crd_documents()[0])
        other["metadata"] = {"name": "widgets.example.com"}
        token = yaml.safe_load(Path(kubeconfig).read_text())["users"][0]["user"]["token"]
        status, _ = server.request(
            "PATCH",
            f"{CRDS}/widgets.example.com?fieldManager=x",
            other,
            token=token,
            content_type="application/apply-patch+yaml",
        )
        assert status == 403
    finally:
        server.stop()
