"""PassMemo: what one pass keeps, the next finds; what a pass does not keep is gone."""

from __future__ import annotations

from kai_py.state.passmemo import PassMemo


def test_find_makes_once_per_key_and_keeps_only_what_the_last_pass_used() -> None:
    memo: PassMemo[str, list[int]] = PassMemo()
    made: list[str] = []

    def make(key: str) -> list[int]:
        made.append(key)
        return [len(made)]

    first = memo.find("a", lambda: make("a"))
    assert memo.find("b", lambda: make("b")) == [2]
    memo.done()
    # The next pass finds what the last one kept (the same object) without making it.
    assert memo.find("a", lambda: make("a")) is first
    assert made == ["a", "b"]
    memo.done()
    # "b" was not used by that pass: gone, made again.
    assert memo.find("b", lambda: make("b")) == [3]
    # No key: made each time, never kept.
    assert memo.find(None, lambda: make("-")) == [4]
    memo.done()
    assert memo.find(None, lambda: make("-")) == [5]
    assert made == ["a", "b", "b", "-", "-"]
