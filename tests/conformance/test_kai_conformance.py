"""KAI's own scheduler test cases, run as their README says (see kai_cases.py)."""

from __future__ import annotations

import pytest

from tests.conformance.kai_cases import (
    CASES_DIR,
    case_names,
    is_session,
    known_differences,
    run_case,
)

KNOWN = known_differences()
CASES = case_names()


def test_all_cases_are_here() -> None:
    assert len(CASES) == 179
    assert sum(is_session(n) for n in CASES) == 128
    assert (CASES_DIR / "README.md").exists(), "the provenance note must stay beside the cases"


def test_known_differences_name_real_cases() -> None:
    assert set(KNOWN) <= set(CASES)


@pytest.mark.parametrize("name", CASES)
def test_kai_case(name: str) -> None:
    result = run_case(name)
    if name in KNOWN:
        assert result.problems, f"{name} now passes: remove it from KNOWN-DIFFERENCES.md"
        pytest.xfail(KNOWN[name])
    assert not result.problems, "\n".join(result.problems)


def test_readme_states_both_counts() -> None:
    """The README's counts follow from the cases and the known differences."""
    readme = (CASES_DIR.parent.parent.parent / "README.md").read_text(encoding="utf-8")
    session = [n for n in CASES if is_session(n)]
    integration = [n for n in CASES if not is_session(n)]
    ok_integration = sum(n not in KNOWN for n in integration)
    ok_session = sum(n not in KNOWN for n in session)
    assert (
        f"{ok_integration} of {len(integration)} of KAI's scheduler integration cases and "
        f"{ok_session} of {len(session)} of its per-action session cases pass" in readme
    )
