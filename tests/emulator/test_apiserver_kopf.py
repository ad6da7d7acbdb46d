"""A tiny Kopf operator runs against the emulator, sees creations and patches status."""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

import pytest
from apiserver_helpers import QUEUE_CRD, widget
from kopf.testing import KopfRunner

from kai_py.emulator.apiserver.threaded import ThreadedServer

OPERATOR = textwrap.dedent("""\
    import kopf

    @kopf.on.startup()
    def configure(settings, **_):
        settings.watching.server_timeout = 10

    @kopf.on.create("test.kai-py.dev", "v1", "widgets")
    def created(body, spec, name, patch, logger, **_):
        logger.info(f"widget {name} created")
        kopf.info(body, reason="Seen", message=f"widget {name} seen")
        patch.status["phase"] = "Seen"
        patch.status["count"] = spec["size"] * 2

    @kopf.on.delete("test.kai-py.dev", "v1", "widgets")
    def deleted(name, logger, **_):
        logger.info(f"widget {name} cleaned up")
""")


def test_kopf_operator_sees_creations_and_patches_status(
    server: ThreadedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    operator = tmp_path / "operator.py"
    operator.write_text(OPERATOR)
    server.call(server.store.create("customresourcedefinitions", QUEUE_CRD))
    monkeypatch.setenv("KUBECONFIG", server.kubeconfig_path)
    # The kubernetes client reads $KUBECONFIG once, at import (long done by now); Kopf
    # logs in through it, so point its default at the emulator too.
    from kubernetes.config import kube_config

    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", server.kubeconfig_path)
    for var in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(var, raising=False)
    store = server.store
    with KopfRunner(
        ["run", "--standalone", "-A", "--verbose", str(operator)], timeout=60
    ) as runner:
        server.call(store.create("widgets", widget("w1", size=5)))
        deadline = time.monotonic() + 20
        status: dict[str, object] = {}
        while time.monotonic() < deadline:
            status = server.call(store.get("widgets", "default", "w1")).get("status") or {}
            if status.get("phase") == "Seen":
                break
            time.sleep(0.1)
        finalizers = server.call(store.get("widgets", "default", "w1"))["metadata"].get(
            "finalizers", []
        )
        server.call(store.delete("widgets", "default", "w1"))
        gone = False
        while time.monotonic() < deadline and not gone:
            items, _ = server.call(store.list("widgets", "default"))
            gone = not items
            time.sleep(0.1)
    assert runner.exit_code == 0, runner.output
    assert runner.exception is None
    assert "widget w1 created" in runner.output
    assert status == {"phase": "Seen", "count": 10}
    # Kopf's finalizer kept the object until its deletion handler had run.
    assert finalizers == ["kopf.zalando.org/KopfFinalizerMarker"]
    assert gone and "widget w1 cleaned up" in runner.output
    events, _ = server.call(
        store.list("events", "default", field_selector="involvedObject.name=w1")
    )
    assert [(e["reason"], e["message"], e["involvedObject"]["kind"]) for e in events] == [
        ("Seen", "widget w1 seen", "Widget")
    ]
    assert os.environ["KUBECONFIG"] == server.kubeconfig_path
