"""The package map (docs/architecture.md) is true, and its contracts bite.

Each package under ``kai_py/`` is on the map, says what it owns in its docstring and
stays small enough to find one's way in; and the import-linter contracts in
pyproject.toml fail when a module imports the wrong way (a copy of the package is
given one bad import and checked)."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "kai_py"
MAP = (ROOT / "docs" / "architecture.md").read_text()
#: "About 15" modules a package, its __init__ not counted.
MAX_MODULES = 15


def _packages() -> list[Path]:
    return sorted(p.parent for p in PACKAGE.rglob("__init__.py") if "__pycache__" not in p.parts)


def test_every_top_level_part_is_on_the_map() -> None:
    rows = set(re.findall(r"^\| `([\w.]+/?)` \|", MAP, flags=re.M))
    parts = {f"{p.name}/" for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    parts |= {p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    assert parts == rows


@pytest.mark.parametrize("package", _packages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_each_package_is_small_and_says_what_it_owns(package: Path) -> None:
    modules = [p for p in package.glob("*.py") if p.name != "__init__.py"]
    assert len(modules) <= MAX_MODULES, sorted(p.name for p in modules)
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    # A sentence or more, not a placeholder such as the package's own name.
    assert len(doc.split()) >= 8, doc


#: (module that gets the import, the import, a contract that must then break)
WRONG_WAY = [
    ("state/idle.py", "from kai_py.writes import writer", "Layers"),
    ("binder/podhints.py", "from kai_py.podgrouper import service", "do not import each other"),
    ("simulate/inputs.py", "from kai_py.apiclient import kube", "simulate loader"),
    ("scheduler/model.py", "from kai_py.scheduler import cycle", "No import circles"),
    ("scheduler/resources.py", "import kubernetes", "scheduler is pure"),
    ("emulator/storage/store.py", "from kai_py.emulator.apiserver import server", "storage"),
]


@pytest.mark.parametrize(("module", "line", "contract"), WRONG_WAY, ids=[w[0] for w in WRONG_WAY])
def test_a_wrong_way_import_breaks_a_contract(
    tmp_path: Path, module: str, line: str, contract: str
) -> None:
    shutil.copytree(
        PACKAGE, tmp_path / "kai_py", ignore=shutil.ignore_patterns("__pycache__", "*.so")
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "kai_py" / module
    target.write_text(target.read_text() + f"\n{line}  # noqa\n")
    lint = Path(sys.executable).parent / "lint-imports"
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    run = subprocess.run(
        [str(lint), "--no-cache", "--no-logo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-2000:]
    # The broken contracts are listed by name after this heading (names are not wrapped
    # there, as they may be in the summary above it).
    broken = " ".join(run.stdout.split("Broken contracts", 1)[-1].split())
    assert contract in broken, run.stdout[-3000:]
