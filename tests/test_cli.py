"""The command line: every command answers --help, and `kai-py run` parses its own options."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kai_py.cli import main


@pytest.mark.parametrize("command", ["simulate", "run", "reserve", "crds", "dev"])
def test_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as shown:
        main([command, "--help"])
    assert shown.value.code == 0
    assert f"kai-py {command}" in capsys.readouterr().out


def test_every_option_of_run_says_what_it_does() -> None:
    from kai_py.controllers.operator import _parser

    silent = [
        action.option_strings
        for action in _parser()._actions
        if action.option_strings and not (action.help or "").strip()
    ]
    assert silent == []


def test_run_refuses_a_bad_period_like_any_bad_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        main(["run", "--schedule-period", "0"])
    assert refused.value.code == 2
    assert "--schedule-period: must be above 0" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from kai_py import __version__

    with pytest.raises(SystemExit) as shown:
        main(["--version"])
    assert shown.value.code == 0
    assert capsys.readouterr().out.strip() == f"kai-py {__version__}"


def test_run_without_a_usable_kubeconfig_stops_at_once_with_one_line(tmp_path: Path) -> None:
    """No tracebacks and no retrying: one line that says what to do, exit 1."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env["KUBECONFIG"] = str(tmp_path / "missing")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "kai_py.cli", "run"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 1
    assert time.monotonic() - started < 20
    lines = done.stderr.strip().splitlines()
    assert lines == [
        f"kai-py run: no usable kubeconfig: {tmp_path / 'missing'} does not exist; "
        "set KUBECONFIG, pass --kubeconfig PATH, or run kai-py in a pod"
    ]


def test_run_with_an_unreachable_server_says_so(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    done = subprocess.run(
        [sys.executable, "-m", "kai_py.cli", "run", "--kubeconfig", str(kubeconfig)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "kai-py run: cannot reach the API server at http://127.0.0.1:9: "
        "[Errno 111] Connection refused"
    ]


def test_dev_apply_of_a_missing_path_is_refused_before_starting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["dev", "--apply", str(tmp_path / "nope.yaml")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"kai-py dev: --apply: {tmp_path / 'nope.yaml'} does not exist"
    )
