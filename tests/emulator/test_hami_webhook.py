"""kai-py's HAMi webhook, served by Kopf and called by the emulated API server on pod
creation: HAMi's resources become kai-py's sharing; what cannot be translated is refused."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path
from typing import Any

import kopf
import pytest
from apiserver_helpers import free_port, self_signed_cert
from kopf.testing import KopfRunner

from kai_py.controllers.webhooks.hami import memory_cap_enabled, mutation
from kai_py.emulator.apiserver.threaded import ThreadedServer
from kai_py.emulator.storage.errors import ApiError
from kai_py.gpu.hami import HamiError

OPERATOR = textwrap.dedent("""\
    import kopf
    from kai_py.controllers.webhooks import hami

    # A registry of its own: handlers other tests' imports put on the default one
    # (the pod webhook among them) must not run here.
    kopf.set_default_registry(kopf.OperatorRegistry())

    @kopf.on.login()
    def login(**kwargs):
        return kopf.login_via_client(**kwargs)

    @kopf.on.startup()
    def configure(settings, **_):
        settings.admission.server = kopf.WebhookServer(
            addr="127.0.0.1", port={port}, certfile={cert!r}, pkeyfile={key!r}, cafile={cert!r})
        settings.admission.managed = "hami.test.kai-py.dev"

    hami.register(kopf.get_default_registry())
""")


def _filled(server: ThreadedServer, kinds: tuple[str, ...]) -> bool:
    for kind in kinds:
        found, _ = server.call(server.store.list(kind))
        if not any(c.get("webhooks") for c in found):
            return False
    return True


def _pod(
    name: str, limits: dict[str, str], env: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "vllm", "image": "x", "resources": {"limits": limits}}
    if env:
        container["env"] = env
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulerName": "kai-scheduler", "containers": [container]},
    }


def test_the_webhook_translates_hami_pods(
    server: ThreadedServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    cert, key = self_signed_cert(tmp_path)
    port = free_port()
    operator = tmp_path / "operator.py"
    operator.write_text(OPERATOR.format(port=port, cert=str(cert), key=str(key)))
    monkeypatch.setenv("KUBECONFIG", server.kubeconfig_path)
    monkeypatch.setenv("KAI_PY_HAMI_CORE", "true")
    from kubernetes.config import kube_config

    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", server.kubeconfig_path)
    store = server.store
    article = _pod(
        "engine",
        {"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "45"},
        [{"name": "CUDA_DISABLE_CONTROL", "value": "true"}],
    )
    service = _pod("svc", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"})
    # Only the HAMi webhook: an earlier test that imported the webhook server module put
    # the pod device-access webhook on Kopf's default registry too.
    saved = kopf.get_default_registry()
    fresh = kopf.OperatorRegistry()
    kopf.on.login(registry=fresh)(kopf.login_via_client)
    kopf.set_default_registry(fresh)
    request.addfinalizer(lambda: kopf.set_default_registry(saved))
    with KopfRunner(["run", "--standalone", "-A", str(operator)], timeout=60) as runner:
        deadline = time.monotonic() + 20
        # Kopf creates a configuration empty and fills in its webhooks once its server
        # listens: wait for the webhooks themselves.
        while time.monotonic() < deadline and not _filled(
            server, ("mutatingwebhookconfigurations",)
        ):
            time.sleep(0.1)
        time.sleep(0.2)  # the server answers right after it published its address
        engine = server.call(store.create("pods", article))
        svc = server.call(store.create("pods", service))
        with pytest.raises(ApiError) as err:
            server.call(store.create("pods", _pod("bad", {"nvidia.com/gpumem-percentage": "150"})))
    assert runner.exception is None, runner.output
    ann = engine["metadata"]["annotations"]
    assert ann["gpu-fraction"] == "0.45" and ann["gpu-fraction-num-devices"] == "2"
    assert "nvidia.com/gpumem-percentage: 45" in ann["kai.scheduler/hami-translation"]
    container = engine["spec"]["containers"][0]
    assert "nvidia.com/gpu" not in (container.get("resources") or {}).get("limits", {})
    # vLLM's case: HAMi-core is off in that container, so it gets no cap.
    assert [e["name"] for e in container["env"]] == ["CUDA_DISABLE_CONTROL"]
    assert svc["metadata"]["annotations"]["gpu-memory"] == "8000"
    assert {"name": "CUDA_DEVICE_MEMORY_LIMIT", "value": "8000m"} in svc["spec"]["containers"][0][
        "env"
    ]
    assert err.value.code == 422
    assert "Pod default/bad" in err.value.message
    assert (
        "nvidia.com/gpumem-percentage: must be a whole number 0..100, got '150'"
        in err.value.message
    )


def test_the_mutation_leaves_other_pods_alone_and_caps_only_when_asked() -> None:
    hami_pod = _pod("p", {"nvidia.com/gpumem": "100"})
    assert mutation(hami_pod, memory_cap=False, scheduler_name="other") is None
    plain = _pod("p", {"nvidia.com/gpu": "1"})
    assert mutation(plain, memory_cap=True, scheduler_name="kai-scheduler") is None
    kai = _pod("p", {})
    kai["metadata"]["annotations"] = {"gpu-memory": "2048"}
    assert mutation(kai, memory_cap=False, scheduler_name="kai-scheduler") is None
    capped = mutation(kai, memory_cap=True, scheduler_name="kai-scheduler")
    assert capped is not None
    assert capped["spec"]["containers"][0]["env"] == [
        {"name": "CUDA_DEVICE_MEMORY_LIMIT", "value": "2048m"}
    ]
    assert not memory_cap_enabled({}) and memory_cap_enabled({"KAI_PY_HAMI_CORE": "true"})


@pytest.mark.parametrize(
    ("annotations", "words"),
    [
        (
            {"hami.io/node-scheduler-policy": "Spread"},
            "Pod default/p: metadata.annotations[hami.io/node-scheduler-policy]: 'Spread' is "
            "not a policy kai-py applies: expected binpack or spread",
        ),
        (
            {"hami.io/gpu-scheduler-policy": "binpack,numa"},
            "Pod default/p: metadata.annotations[hami.io/gpu-scheduler-policy]: 'binpack,numa'",
        ),
        (
            {"nvidia.com/use-gpuindexes": "0,one"},
            "Pod default/p: metadata.annotations[nvidia.com/use-gpuindexes]: 'one' in '0,one' "
            "is not a card index",
        ),
        (
            {"nvidia.com/use-gpuuuid": "GPU-aaaa,12345"},
            "Pod default/p: metadata.annotations[nvidia.com/use-gpuuuid]: '12345'",
        ),
    ],
)
def test_the_webhook_refuses_bad_hami_annotations_by_pod_key_and_value(
    annotations: dict[str, str], words: str
) -> None:
    pod = _pod("p", {"nvidia.com/gpu": "1"})
    pod["metadata"]["annotations"] = annotations
    with pytest.raises(HamiError) as caught:
        mutation(pod, memory_cap=False, scheduler_name="kai-scheduler")
    assert str(caught.value).startswith(words)


def test_the_webhook_admits_good_and_blank_hami_annotations_unchanged() -> None:
    pod = _pod("p", {"nvidia.com/gpu": "1"})
    pod["metadata"]["annotations"] = {
        "hami.io/node-scheduler-policy": "spread",
        "hami.io/gpu-scheduler-policy": "binpack",
        "nvidia.com/use-gpuindexes": "0,1",
        "nvidia.com/nouse-gpuuuid": "   ",  # no constraint, as in HAMi v2.10
    }
    assert mutation(pod, memory_cap=False, scheduler_name="kai-scheduler") is None
    # Another scheduler's pod is not this webhook's to judge.
    pod["metadata"]["annotations"]["hami.io/gpu-scheduler-policy"] = "topology-aware"
    assert mutation(pod, memory_cap=False, scheduler_name="other") is None
