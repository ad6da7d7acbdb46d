"""kai-py's webhook server, as the chart configures it, called by a real kube-apiserver.

- A pod of over 1 MiB was answered 413 by the server (aiohttp's default body
  limit) and the API server then admitted it unchecked (failurePolicy Ignore).
- The pod webhooks' matchConditions keep pods of other schedulers away from
  kai-py's webhooks: with failurePolicy Fail and the webhook down, a
  default-scheduler pod is still created (the emulator has no CEL, so only the
  real server is asked).
- Broken reviews are answered 400 with a message, an unknown path 404.
- The scheduler's token could evict any pod: the eviction webhook refuses its
  evictions of pods kai-py does not schedule, and sees no one else's.

The server runs with the token of the chart's webhooks ServiceAccount and the
chart's RBAC for it: Kopf's start-up scan of CRDs was refused (403) before.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_helpers import NAMESPACE, by_kind, render
from realapi_backends import require_binaries
from realapi_server import RealApiServer, free_port

from kai_py.emulator.dev_cluster import kai_crds

Json = dict[str, Any]

NS = "team-a"
REPO = Path(__file__).resolve().parents[2]
CONFIGS = ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


@dataclass
class Served:
    server: RealApiServer
    port: int
    cert: Path
    log: Path

    def post(self, path: str, body: bytes) -> tuple[int, str]:
        req = urllib.request.Request(f"https://127.0.0.1:{self.port}{path}", body, method="POST")
        req.add_header("Content-Type", "application/json")
        context = ssl.create_default_context(cafile=str(self.cert))
        try:
            with urllib.request.urlopen(req, context=context, timeout=30) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()


def _cert(folder: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed for the webhook's certificate")
    cert, key = folder / "tls.crt", folder / "tls.key"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert)),
            *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def _pod(name: str, scheduler: str = "kai-scheduler", filler: int = 0) -> Json:
    container: Json = {"name": "main", "image": "busybox"}
    if filler:
        container["env"] = [{"name": "FILLER", "value": "x" * filler}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "annotations": {"gpu-fraction": "abc"}},
        "spec": {"schedulerName": scheduler, "containers": [container]},
    }


def _review(obj: Any, **request: Any) -> bytes:
    payload = {
        "uid": "1",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "operation": "CREATE",
        "userInfo": {"username": "someone"},
        "object": obj,
        **request,
    }
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": payload}
    return json.dumps(review).encode()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    workdir = tmp_path_factory.mktemp("webhooks")
    server = RealApiServer(workdir / "real", require_binaries()).start()
    process: subprocess.Popen[bytes] | None = None
    try:
        server.apply_crds(kai_crds())
        server.namespace(NS)
        server.namespace(NAMESPACE)
        # The webhooks' account and the scheduler's (whose evictions the webhook checks).
        chart = render()
        own = [
            o
            for o in chart
            if o["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")
            and o["metadata"]["name"]
            in ("kai-py-webhooks", "kai-webhooks", "kai-py-scheduler", "kai-scheduler")
        ]
        assert len(own) == 6, own
        deployment = by_kind(chart, "Deployment")["kai-py-webhooks"]["spec"]["template"]["spec"]
        chart_env = {e["name"]: e.get("value") for e in deployment["containers"][0]["env"]}
        server.apply_yaml(yaml.safe_dump_all(own))
        token = server.token_for(NAMESPACE, "kai-py-webhooks")
        kubeconfig = server.write_kubeconfig(
            str(workdir / "webhooks.kubeconfig"), token, "kai-py-webhooks"
        )
        cert, _ = _cert(workdir)
        port = free_port()
        env = {
            **os.environ,
            "KUBECONFIG": kubeconfig,
            "KAI_PY_WEBHOOK_PORT": str(port),
            "KAI_PY_WEBHOOK_ADDR": "127.0.0.1",
            "KAI_PY_WEBHOOK_CERT_DIR": str(workdir),
            "KAI_PY_SCHEDULER_USERS": str(chart_env["KAI_PY_SCHEDULER_USERS"]),
        }
        for var in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
            env.pop(var, None)
        log = workdir / "webhooks.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "kai_py.controllers.operator", "--controllers=webhooks"],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=REPO,
                env=env,
            )
        found = Served(server, port, cert, log)
        deadline = time.monotonic() + 60
        while True:
            try:
                if found.post("/pods-validate", _review(_pod("probe")))[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise AssertionError(f"the webhook server did not start\n{log.read_text()}")
            time.sleep(0.3)
        yield found
    finally:
        if process is not None:
            process.terminate()
            process.wait(15)
        server.stop()


def _install_webhooks(served: Served, values: Json, port: int | None = None) -> None:
    """The chart's webhook configurations, calling this test's server by URL."""
    for plural in CONFIGS:
        status, _ = served.server.request(
            "DELETE", f"/apis/admissionregistration.k8s.io/v1/{plural}/kai-webhooks"
        )
        assert status in (200, 404)
    objects = render(values)
    bundle = base64.b64encode(served.cert.read_bytes()).decode()
    for kind, plural in zip(KINDS, CONFIGS, strict=True):
        for config in by_kind(objects, kind).values():
            for hook in config["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {
                    "url": f"https://127.0.0.1:{port or served.port}{path}",
                    "caBundle": bundle,
                }
            served.server.must("POST", f"/apis/admissionregistration.k8s.io/v1/{plural}", config)
    time.sleep(1.5)  # the API server's webhook informers pick the configurations up


def _create(served: Served, pod: Json) -> tuple[int, Any]:
    return served.server.request("POST", f"/api/v1/namespaces/{NS}/pods", pod)


def test_broken_reviews_get_400_and_unknown_paths_404(served: Served) -> None:
    cases: list[tuple[bytes, str]] = [
        (b"null", "the body is null, not an AdmissionReview object"),
        (b"[1, 2]", "the body is a list, not an AdmissionReview object"),
        (b"{not json", "the body is not JSON: Expecting property name"),
        (_review(_pod("a"), uid=None), "request.uid: null is not a non-empty string"),
        (_review("a string"), "request.object: is a string, not an object or null"),
        (_review(_pod("a"), resource=[]), "request.resource: is a list, not an object"),
        (b"[" * 100_000 + b"]" * 100_000, "the body is JSON nested too deeply"),
    ]
    for body, message in cases:
        status, text = served.post("/pods-validate", body)
        assert status == 400 and text.startswith(message), (body[:60], status, text)
    status, text = served.post("/no-such-webhook", _review(_pod("a")))
    assert (status, text) == (404, "no webhook is served at /no-such-webhook")
    # A well-formed review still gets its answer (a refusal naming the value).
    status, text = served.post("/pods-validate", _review(_pod("a")))
    assert status == 200 and '"allowed": false' in text and "abc" in text, text
    log = served.log.read_text()
    assert "Traceback" not in log, log
    assert "403" not in log and "Forbidden" not in log and "forbidden" not in log, log


def test_a_large_pod_is_checked_not_admitted_unchecked(served: Served) -> None:
    _install_webhooks(served, {})  # failurePolicy Ignore, the chart's default
    big = _pod("big", filler=1_200_000)
    status, answer = _create(served, big)
    assert status == 422, (status, str(answer)[:300])
    assert answer["message"] == (
        'admission webhook "pods.kai-py.dev" denied the request: Pod team-a/big: '
        "metadata.annotations[gpu-fraction]: must be a number between 0 and 1, got 'abc'"
    )
    # A pod as large for another scheduler is not looked at by kai-py.
    status, answer = _create(served, _pod("big-other", "default-scheduler", filler=1_200_000))
    assert status == 201, (status, str(answer)[:300])


def test_pods_of_other_schedulers_never_reach_kai_py_webhooks(served: Served) -> None:
    # failurePolicy Fail with nothing listening: each call kai-py's webhooks get fails.
    _install_webhooks(served, {"webhooks": {"failurePolicy": "Fail"}}, port=free_port())
    started = time.monotonic()
    status, answer = _create(served, _pod("plain", "default-scheduler"))
    assert status == 201, answer
    assert time.monotonic() - started < 2
    status, answer = _create(served, _pod("ours"))
    assert status == 500 and "failed calling webhook" in answer["message"], answer


def _evict(served: Served, name: str, token: str | None = None) -> tuple[int, Any]:
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": NS},
        "deleteOptions": {"dryRun": ["All"]},  # admission runs; the pod stays
    }
    path = f"/api/v1/namespaces/{NS}/pods/{name}/eviction"
    kw = {"token": token} if token else {}
    return served.server.request("POST", path, eviction, **kw)


def test_the_scheduler_evicts_only_pods_kai_py_schedules(served: Served) -> None:
    _install_webhooks(served, {})  # the chart's defaults: failurePolicy Ignore elsewhere
    for name, scheduler in (("web", "default-scheduler"), ("train", "kai-scheduler")):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"schedulerName": scheduler, "containers": [{"name": "main", "image": "x"}]},
        }
        served.server.must("POST", f"/api/v1/namespaces/{NS}/pods", pod)
    scheduler = served.server.token_for(NAMESPACE, "kai-py-scheduler")
    status, answer = _evict(served, "web", scheduler)
    assert status == 403, (status, answer)
    assert answer["message"] == (
        'admission webhook "evictions.kai-py.dev" denied the request: pod team-a/web: '
        "spec.schedulerName is 'default-scheduler'; kai-py's scheduler evicts only pods "
        "it schedules (spec.schedulerName kai-scheduler)"
    )
    status, answer = _evict(served, "train", scheduler)
    assert status == 201, (status, answer)
    status, answer = _evict(served, "gone", scheduler)
    assert status == 404, (status, answer)
    # Anyone else's eviction is not sent to the webhook: with nothing listening and
    # failurePolicy Fail, an admin still evicts, and only the scheduler is held up.
    _install_webhooks(served, {}, port=free_port())
    status, answer = _evict(served, "web")
    assert status == 201, (status, answer)
    status, answer = _evict(served, "train", scheduler)
    assert status == 500 and "failed calling webhook" in answer["message"], (status, answer)
