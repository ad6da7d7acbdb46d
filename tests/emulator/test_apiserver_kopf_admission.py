"""Kopf's own admission webhooks, registered by Kopf, are called by the emulator."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest
from apiserver_helpers import QUEUE_CRD, free_port, self_signed_cert, widget
from kopf.testing import KopfRunner

from kai_py.emulator.apiserver.threaded import ThreadedServer
from kai_py.emulator.storage.errors import ApiError

OPERATOR = textwrap.dedent("""\
    import kopf

    @kopf.on.startup()
    def configure(settings, **_):
        settings.admission.server = kopf.WebhookServer(
            addr="127.0.0.1", port={port}, certfile={cert!r}, pkeyfile={key!r}, cafile={cert!r})
        settings.admission.managed = "auto.test.kai-py.dev"

    @kopf.on.validate("test.kai-py.dev", "v1", "widgets")
    def no_big_widgets(spec, **_):
        if spec.get("size", 0) > 10:
            raise kopf.AdmissionError("widgets bigger than 10 are not allowed", code=422)

    @kopf.on.mutate("test.kai-py.dev", "v1", "widgets")
    def label_widgets(patch, **_):
        patch.metadata.setdefault("labels", {{}})["checked-by"] = "kopf"
""")


def _filled(server: ThreadedServer, kinds: tuple[str, ...]) -> bool:
    for kind in kinds:
        found, _ = server.call(server.store.list(kind))
        if not any(c.get("webhooks") for c in found):
            return False
    return True


def test_kopf_webhooks_validate_and_mutate(
    server: ThreadedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = self_signed_cert(tmp_path)
    port = free_port()
    operator = tmp_path / "operator.py"
    operator.write_text(OPERATOR.format(port=port, cert=str(cert), key=str(key)))
    server.call(server.store.create("customresourcedefinitions", QUEUE_CRD))
    monkeypatch.setenv("KUBECONFIG", server.kubeconfig_path)
    from kubernetes.config import kube_config

    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", server.kubeconfig_path)
    store = server.store
    with KopfRunner(
        ["run", "--standalone", "-A", "--verbose", str(operator)], timeout=60
    ) as runner:
        deadline = time.monotonic() + 20
        configs: list[dict[str, object]] = []
        # Kopf creates a configuration empty and fills in its webhooks once its server
        # listens: wait for the webhooks themselves.
        while time.monotonic() < deadline and not _filled(
            server,
            (
                "mutatingwebhookconfigurations",
                "validatingwebhookconfigurations",
            ),
        ):
            time.sleep(0.1)
        configs, _ = server.call(store.list("validatingwebhookconfigurations"))
        time.sleep(0.2)  # the server answers right after it published its address
        created = server.call(store.create("widgets", widget("small", size=3)))
        with pytest.raises(ApiError) as err:
            server.call(store.create("widgets", widget("big", size=50)))
    assert runner.exception is None, runner.output
    assert [c["metadata"]["name"] for c in configs] == ["auto.test.kai-py.dev"]
    assert created["metadata"]["labels"] == {"checked-by": "kopf"}
    assert err.value.code == 422
    assert "widgets bigger than 10 are not allowed" in err.value.message
    assert err.value.message.startswith('admission webhook "')
    assert json.dumps(err.value.status)  # a complete Status object
