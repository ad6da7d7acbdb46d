"""The README's test command is exactly what CI runs, and its commands exist."""

from __future__ import annotations

import re
from pathlib import Path

from kai_py.cli import _build_parser

ROOT = Path(__file__).resolve().parent.parent


def _test_command() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Test", 1)[1]
    match = re.search(r"```sh\n(.+?)\n```", section, re.S)
    assert match, "README.md has no test command block"
    return match.group(1).strip()


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert ci[-1].strip() == _test_command()


def test_readme_documents_every_command() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    parser = _build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name in sub.choices:  # type: ignore[union-attr]
        assert f"### `kai-py {name}" in text, f"README.md does not document `kai-py {name}`"
