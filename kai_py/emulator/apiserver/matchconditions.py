"""A webhook's ``matchConditions``: the small part of CEL that selecting by field needs.

The real API server evaluates each condition (CEL) before calling a webhook:
all true, the webhook is called; one false, it is skipped; an error, the
webhook's failurePolicy decides (Fail refuses the request, Ignore skips the
webhook). This evaluates the forms used to pick objects by their fields:

    has(object.spec.schedulerName) && object.spec.schedulerName == "kai-scheduler"
    object.metadata.namespace in ["a", "b"] || !(request.operation == "DELETE")

paths from ``object``, ``oldObject`` and ``request``; string, integer, boolean
and ``null`` literals and lists of them; ``==``, ``!=``, ``in``, ``!``, ``&&``,
``||`` and parentheses. Anything else, and a path to a field that is not there
outside ``has()``, is an error (``MatchConditionError``), as an unknown
field is in CEL.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

_TOKEN = re.compile(
    r"\s*(?:(?P<str>\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*')|(?P<num>-?\d+)"
    r"|(?P<op>&&|\|\||==|!=|[!()\[\],.])|(?P<name>[A-Za-z_][A-Za-z0-9_]*))"
)
_MISSING = object()


class _Err:
    """An error as a value: CEL's ``false && error`` is false, ``true || error`` true."""

    def __init__(self, message: str) -> None:
        self.message = message


class MatchConditionError(ValueError):
    """The expression is outside the supported subset, or reads a missing field."""


def _tokens(text: str) -> list[str]:
    found: list[str] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if match is None:
            raise MatchConditionError(f"cannot read {text[pos:]!r}")
        found.append(match.group(match.lastgroup or "name"))
        pos = match.end()
    return found


class _Parser:
    def __init__(self, text: str, variables: Mapping[str, Any]) -> None:
        self.tokens = _tokens(text)
        self.i = 0
        self.vars = variables

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token != expected):
            raise MatchConditionError(f"expected {expected or 'more'}, found {token!r}")
        self.i += 1
        return token

    def run(self) -> bool:
        value = self.disjunction()
        if self.peek() is not None:
            raise MatchConditionError(f"unexpected {self.peek()!r}")
        if isinstance(value, _Err):
            raise MatchConditionError(value.message)
        if not isinstance(value, bool):
            raise MatchConditionError("the expression is not a boolean")
        return value

    def disjunction(self) -> Any:
        value = self.conjunction()
        while self.peek() == "||":
            self.take()
            right = self.conjunction()
            value = _logical(value, right, absorbing=True)
        return value

    def conjunction(self) -> Any:
        value = self.unary()
        while self.peek() == "&&":
            self.take()
            right = self.unary()
            value = _logical(value, right, absorbing=False)
        return value

    def unary(self) -> Any:
        if self.peek() == "!":
            self.take()
            value = self.unary()
            return value if isinstance(value, _Err) else not _bool(value)
        left = self.operand()
        op = self.peek()
        if op in ("==", "!=", "in"):
            self.take()
            right = self.operand()
            for side in (left, right):
                if isinstance(side, _Err):
                    return side
            if op == "in":
                if not isinstance(right, list):
                    raise MatchConditionError("'in' needs a list")
                return left in right
            return (left == right) == (op == "==")
        return left

    def operand(self) -> Any:
        token = self.take()
        if token == "(":
            value = self.disjunction()
            self.take(")")
            return value
        if token == "[":
            items: list[Any] = []
            while self.peek() != "]":
                items.append(self.operand())
                if self.peek() == ",":
                    self.take()
            self.take("]")
            return items
        if token[0] in "\"'":
            return json.loads('"' + token[1:-1].replace('"', '\\"') + '"')
        if token.lstrip("-").isdigit():
            return int(token)
        if token in ("true", "false"):
            return token == "true"
        if token == "null":
            return None
        if token == "has":
            self.take("(")
            value = self.path(self.take())
            self.take(")")
            return value is not _MISSING
        value = self.path(token)
        return _Err("no such key") if value is _MISSING else value

    def path(self, root: str) -> Any:
        if root not in self.vars:
            raise MatchConditionError(f"undeclared reference to {root!r}")
        value: Any = self.vars[root]
        while self.peek() == ".":
            self.take()
            key = self.take()
            value = value.get(key, _MISSING) if isinstance(value, Mapping) else _MISSING
        return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise MatchConditionError("no matching overload: a logical operator needs booleans")
    return value


def _logical(left: Any, right: Any, *, absorbing: bool) -> Any:
    """``||`` (absorbing True) or ``&&``: one side equal to ``absorbing`` decides, even
    against an error on the other side; else an error wins."""
    for side in (left, right):
        if not isinstance(side, _Err) and _bool(side) is absorbing:
            return absorbing
    for side in (left, right):
        if isinstance(side, _Err):
            return side
    return not absorbing


def evaluate(expression: str, variables: Mapping[str, Any]) -> bool:
    """The condition's value; ``MatchConditionError`` where CEL would give an error."""
    return _Parser(expression, variables).run()
