"""The locks in locks/ agree with pyproject.toml: the image and CI install from them
(Dockerfile, .ci/run), so a dependency added to pyproject.toml but not locked, or a pin
outside the range pyproject.toml allows, would make the image and CI differ from what
pyproject.toml says. scripts/lock.sh remakes them."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
LOCKS = ROOT / "locks"
#: Each lock and the extras of pyproject.toml it holds beside the dependencies.
EXTRAS = {"runtime.txt": (), "build.txt": ("compile",), "ci.txt": ("test", "compile")}
#: The locks are resolved for CPython 3.11 on Linux (scripts/lock.sh): markers are
#: read for that platform.
PLATFORM = {"sys_platform": "linux", "platform_system": "Linux", "os_name": "posix"}
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def parse_lock(text: str, where: str) -> dict[str, Version]:
    """The pins of a lock file: name -> version. Every requirement line must be an exact
    pin followed by its hashes."""
    pins: dict[str, Version] = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line or line[0] in "# \t":
            continue
        match = _PIN.match(line)
        assert match, f"{where} line {i + 1}: {line!r} is not an exact pin (name==version)"
        nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
        assert nxt.startswith("--hash=sha256:"), f"{where}: {match.group(1)} has no hash"
        pins[canonicalize_name(match.group(1))] = Version(match.group(2))
    return pins


def required(project: dict[str, object], extras: tuple[str, ...]) -> list[Requirement]:
    """pyproject.toml's requirements for these extras, with kai-py's references to its
    own extras (``kai-py[compile]``) followed, keeping those whose markers hold on
    the locks' platform."""
    name = canonicalize_name(str(project["name"]))
    optional = project.get("optional-dependencies", {})
    assert isinstance(optional, dict)
    out: list[Requirement] = []
    todo = [str(d) for d in project["dependencies"]]  # type: ignore[attr-defined]
    seen: set[str] = set()
    todo += [d for extra in extras for d in optional[extra]]
    while todo:
        req = Requirement(todo.pop())
        if canonicalize_name(req.name) == name:
            for extra in sorted(req.extras - seen):
                seen.add(extra)
                todo += optional[extra]
            continue
        if req.marker is None or req.marker.evaluate(PLATFORM):
            out.append(req)
    return out


def check(
    project: dict[str, object], lock_text: str, extras: tuple[str, ...], where: str
) -> list[str]:
    """What is wrong between pyproject.toml and one lock, one sentence per problem."""
    pins = parse_lock(lock_text, where)
    problems = []
    for req in required(project, extras):
        got = pins.get(canonicalize_name(req.name))
        if got is None:
            problems.append(f"{where}: {req.name} (pyproject.toml: {req}) is not locked")
        elif not req.specifier.contains(got, prereleases=True):
            problems.append(
                f"{where}: {req.name}=={got} is outside pyproject.toml's range {req.specifier}"
            )
    return problems


def _project() -> dict[str, object]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    project = data["project"]
    assert isinstance(project, dict)
    return project


@pytest.mark.parametrize("lock", sorted(EXTRAS))
def test_lock_holds_what_pyproject_requires(lock: str) -> None:
    text = (LOCKS / lock).read_text(encoding="utf-8")
    assert check(_project(), text, EXTRAS[lock], f"locks/{lock}") == []


def test_locks_pin_the_same_versions() -> None:
    """CI tests the versions the image ships: a package pinned in two locks has one
    version."""
    pins = {lock: parse_lock((LOCKS / lock).read_text(encoding="utf-8"), lock) for lock in EXTRAS}
    runtime = pins["runtime.txt"]
    for lock, other in pins.items():
        for name, version in other.items():
            if name in runtime:
                assert version == runtime[name], (
                    f"{lock} pins {name}=={version}, runtime.txt {runtime[name]}"
                )


def test_a_disagreement_is_named() -> None:
    """The check itself: a dependency missing from the lock, and a pin outside the range."""
    project = {
        "name": "kai-py",
        "dependencies": ["kopf>=1.44", "networkx>=3.2"],
        "optional-dependencies": {},
    }
    lock = "kopf==1.40.0 \\\n    --hash=sha256:00\n"
    assert check(project, lock, (), "lock") == [
        "lock: networkx (pyproject.toml: networkx>=3.2) is not locked",
        "lock: kopf==1.40.0 is outside pyproject.toml's range >=1.44",
    ]
