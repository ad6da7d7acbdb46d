"""A PodGroup the API server refuses is told on the pod, on both backends.

The refusal comes from an admission webhook of the cluster's own (a policy engine,
say) that denies PodGroups of one queue: before, the pod stayed Pending with no
Event and the reason was only in the operator's log, once per retry.
"""

from __future__ import annotations

import base64
import json
import shutil
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from operator_helpers import Operator, create_pod, events_of, pod, wait_for
from realapi_backends import Backend

NS = "team-a"
DENIAL = 'queue "ghost" is closed to new PodGroups by the cluster policy'


class _Deny(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        request = review["request"]
        queue = ((request.get("object") or {}).get("spec") or {}).get("queue")
        answer: dict[str, Any] = {"uid": request["uid"], "allowed": queue != "ghost"}
        if queue == "ghost":
            answer["status"] = {"code": 403, "message": DENIAL}
        body = json.dumps(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": answer}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def denying_webhook(backend: Backend, api: k8s.ApiClient, tmp_path: Path) -> Iterator[None]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed for the test webhook's certificate")
    key, cert = tmp_path / "tls.key", tmp_path / "tls.crt"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert)),
            *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Deny)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    k8s.AdmissionregistrationV1Api(api).create_validating_webhook_configuration(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "queue-policy"},
            "webhooks": [
                {
                    "name": "podgroups.queue-policy.test",
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{port}/validate",
                        "caBundle": base64.b64encode(cert.read_bytes()).decode(),
                    },
                    "rules": [
                        {
                            "apiGroups": ["scheduling.run.ai"],
                            "apiVersions": ["*"],
                            "operations": ["CREATE"],
                            "resources": ["podgroups"],
                        }
                    ],
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "failurePolicy": "Fail",
                }
            ],
        }
    )
    try:
        yield
    finally:
        server.shutdown()


def test_a_refused_podgroup_is_one_warning_event_on_the_pod(
    denying_webhook: None, operator: Operator, core: k8s.CoreV1Api
) -> None:
    body = pod("lost", NS, "unused")
    del body["metadata"]["annotations"]["pod-group-name"]  # the pod-grouper makes its group
    body["metadata"]["labels"]["kai.scheduler/queue"] = "ghost"
    create_pod(core, body)

    def warned() -> list[Any]:
        return [e for e in events_of(core, NS, "lost") if e.reason == "PodGroupNotCreated"]

    (event,) = wait_for(warned, timeout=30, what=f"the pod's Warning\n{operator.log}")
    assert event.type == "Warning"
    assert event.message.startswith(
        'Pod "team-a/lost": metadata.annotations["pod-group-name"]: not set, so the pod is '
        "not scheduled: its PodGroup team-a/pg-lost-"
    ), event.message
    assert '(queue "ghost") was refused by the API server' in event.message
    assert DENIAL in event.message
    # The grouper keeps trying (the policy may change; an API error's retry comes
    # every 2 s) but says so once: no second Event, no count bumped.
    time.sleep(6)
    (again,) = warned()
    assert (again.count or 1) == 1, again
