"""The kubeconfig file the emulator writes for kubectl and clients."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

CONTEXT = "kai-py-emulator"
#: A token is sent only because some clients refuse a user without credentials;
#: the emulator accepts every request (there is no authentication or RBAC).
TOKEN = "kai-py-emulator-token"


def kubeconfig_text(url: str, namespace: str = "default") -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": {"server": url}}],
        "users": [{"name": CONTEXT, "user": {"token": TOKEN}}],
        "contexts": [
            {
                "name": CONTEXT,
                "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": namespace},
            }
        ],
        "current-context": CONTEXT,
        "preferences": {},
    }
    return yaml.safe_dump(config, sort_keys=False)


def write_kubeconfig(path: str | os.PathLike[str], url: str, namespace: str = "default") -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(kubeconfig_text(url, namespace))
    tmp.chmod(0o600)
    tmp.replace(target)
    return target
