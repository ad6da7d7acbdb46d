"""kai-py compiled by mypyc (``KAI_PY_MYPYC=1``, setup.py: the scheduler and the
state and writes modules of the operator's cycle) decides and writes as the interpreted one: a
copy of the repository is built with it, and the scheduler, conformance, scenario,
state, simulate and operator suites run against that copy.

Tests marked ``interpreted`` are left out there: they watch the scheduler's internals
by patching them, which calls between compiled modules do not see."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SUITES = (
    "tests/scheduler",
    "tests/conformance",
    "tests/scenarios",
    "tests/state",
    "tests/simulate",
    "tests/operator",
)
NOT_COPIED = shutil.ignore_patterns(
    ".git", ".venv", "build", "*.so", "__pycache__", "*_cache", ".hypothesis", "*.egg-info"
)


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, check=False)


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_the_compiled_build_passes_the_scheduling_and_operator_suites(tmp_path: Path) -> None:
    copy = tmp_path / "kai-py"
    shutil.copytree(REPO, copy, ignore=NOT_COPIED)
    env = {**os.environ, "KAI_PY_MYPYC": "1", "PYTHONPATH": str(copy)}
    build = _run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], copy, env)
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-4000:]

    probe = (
        "import kai_py.scheduler as s, kai_py.scheduler.session as m, kai_py.state.builder"
        " as b; print(s.compiled(), m.__file__, b.__file__)"
    )
    found = _run([sys.executable, "-c", probe], copy, env)
    assert found.stdout.startswith("True "), found.stdout + found.stderr
    for path in found.stdout.split()[1:]:
        assert path.startswith(str(copy)) and path.endswith(".so"), found.stdout

    args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not interpreted", *SUITES]
    suites = _run([sys.executable, *args], copy, env)
    # 0: every test collected passed (none collected would be 5).
    assert suites.returncode == 0, suites.stdout[-6000:] + suites.stderr[-2000:]


def test_the_compile_extra_has_what_mypyc_type_checks_against() -> None:
    # mypyc type-checks the compiled modules as `mypy --strict kai_py` does in the
    # tests: the tests get mypy and its stubs from the compile extra, so a stub the
    # type check needs is one a build has too (without types-PyYAML the image's
    # compile step failed in its fresh venv).
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]

    def names(specs: list[str]) -> set[str]:
        return {spec.split(">")[0].split("=")[0].split("<")[0].strip() for spec in specs}

    assert "kai-py[compile]" in names(extras["test"])
    assert not {n for n in names(extras["test"]) if n == "mypy" or n.startswith("types-")}
    assert {"mypy", "setuptools", "wheel", "types-PyYAML"} <= names(extras["compile"])
    # The image and the README build with it: the image's build venv from
    # locks/build.txt, the lock of the compile extra (tests/test_lock.py checks it holds it).
    assert re.search(
        r"/opt/build/bin/pip install [^\n]*-r locks/build\.txt", (REPO / "Dockerfile").read_text()
    )
    assert "pip install '.[compile]' && KAI_PY_MYPYC=1" in (REPO / "README.md").read_text()
