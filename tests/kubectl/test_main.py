"""``kubectl kai``'s kubeconfig: a missing file or an unknown context is a clear error."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from kai_py.apiclient.kube import kubeconfig_namespace
from kai_py.kubectl.main import main


def _kubeconfig(path: Path) -> str:
    user = {"name": "u", "user": {"token": "t"}}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
        "users": [user],
        "contexts": [
            {"name": "a", "context": {"cluster": "c", "user": "u"}},
            {"name": "b", "context": {"cluster": "c", "user": "u", "namespace": "team-b"}},
        ],
        "current-context": "a",
    }
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_the_namespace_is_the_contexts(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path / "config")
    assert kubeconfig_namespace(path) == "default"
    assert kubeconfig_namespace(path, "b") == "team-b"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--kubeconfig", "/nonexistent/config"], "Error: no usable kubeconfig:"),
        (["--context", "nowhere"], "Error: no usable kubeconfig:"),
    ],
)
def test_an_unusable_kubeconfig_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    if "--kubeconfig" not in args:
        args = ["--kubeconfig", _kubeconfig(tmp_path / "config"), *args]
    assert main([*args, "queues"], io.StringIO()) == 1
    err = capsys.readouterr().err
    assert err.startswith(said) and "Traceback" not in err, err
