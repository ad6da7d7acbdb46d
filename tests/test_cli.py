"""The command line: every command answers --help, and `kai-py run` parses its own options."""

from __future__ import annotations

import pytest

from kai_py.cli import main


@pytest.mark.parametrize("command", ["simulate", "run", "reserve", "crds", "dev"])
def test_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as shown:
        main([command, "--help"])
    assert shown.value.code == 0
    assert f"kai-py {command}" in capsys.readouterr().out


def test_run_refuses_a_bad_period_like_any_bad_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        main(["run", "--schedule-period", "0"])
    assert refused.value.code == 2
    assert "--schedule-period: must be above 0" in capsys.readouterr().err
