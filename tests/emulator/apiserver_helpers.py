"""Helpers shared by the emulator API server tests (fixtures are in conftest.py)."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from kai_py.api import jsoncodec

T = TypeVar("T")
KUBECTL = shutil.which("kubectl")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run an async test body (the suite does not depend on pytest-asyncio)."""
    return asyncio.run(coro)


class Kubectl:
    """The real kubectl binary pointed at the emulator, with its own cache folder."""

    def __init__(self, kubeconfig: str, cache: Path) -> None:
        self.env = {
            **os.environ,
            "KUBECONFIG": kubeconfig,
            "KUBECACHEDIR": str(cache),
            "HOME": str(cache),
        }

    def __call__(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 30
    ) -> subprocess.CompletedProcess[str]:
        assert KUBECTL is not None
        proc = subprocess.run(
            [KUBECTL, *args],
            env=self.env,
            input=input,
            text=True,
            capture_output=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({proc.returncode}):\n"
                f"{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def popen(self, *args: str) -> subprocess.Popen[str]:
        assert KUBECTL is not None
        return subprocess.Popen(
            [KUBECTL, *args],
            env=self.env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )


def pod_body(
    name: str,
    *,
    namespace: str = "default",
    labels: dict[str, str] | None = None,
    node: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}], **spec},
    }
    if node:
        body["spec"]["nodeName"] = node
    return body


QUEUE_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.kai-py.dev"},
    "spec": {
        "group": "test.kai-py.dev",
        "scope": "Namespaced",
        "names": {
            "plural": "widgets",
            "singular": "widget",
            "kind": "Widget",
            "shortNames": ["wd"],
            "categories": ["all"],
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                    {"name": "Color", "type": "string", "jsonPath": ".spec.color"},
                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                ],
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {
                                    "size": {"type": "integer", "minimum": 1, "maximum": 100},
                                    "color": {
                                        "type": "string",
                                        "enum": ["red", "green", "blue"],
                                        "default": "red",
                                    },
                                    "label": {"type": "string", "pattern": "^[a-z]+$"},
                                    "tags": {
                                        "type": "array",
                                        "items": {"type": "string"},
                                        "maxItems": 3,
                                    },
                                    "extra": {
                                        "type": "object",
                                        "x-kubernetes-preserve-unknown-fields": True,
                                    },
                                },
                            },
                            "status": {
                                "type": "object",
                                "properties": {
                                    "phase": {"type": "string"},
                                    "count": {"type": "integer"},
                                },
                            },
                        },
                    }
                },
            }
        ],
    },
}


def widget(name: str, size: Any = 3, namespace: str = "default", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "test.kai-py.dev/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"size": size, **spec},
    }


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def self_signed_cert(folder: Path) -> tuple[Path, Path]:
    """(cert, key) for a webhook on 127.0.0.1; skips the test where openssl is missing."""
    import pytest

    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make the webhook's self-signed certificate")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


class StoredVersionsUntouched:
    """Records every version the store emits (its JSON then); ``check`` fails if one was
    changed in place since. The in-process clients get stored objects shared, read-only:
    a controller or kubelet that changed one would change the store behind its back."""

    def __init__(self, store: Any) -> None:
        self.seen: list[tuple[dict[str, Any], bytes]] = []
        emit = store._emit

        def recording(rt: Any, event_type: str, obj: dict[str, Any], old: Any) -> None:
            self.seen.append((obj, jsoncodec.dumps(obj)))
            emit(rt, event_type, obj, old)

        store._emit = recording

    def check(self) -> None:
        changed = [
            f"{obj.get('kind')} {(obj.get('metadata') or {}).get('name')}"
            for obj, raw in self.seen
            if jsoncodec.dumps(obj) != raw
        ]
        assert not changed, f"stored objects changed in place: {changed}"
