"""Kubernetes API errors as exceptions that carry a ``Status`` object.

Every failure the emulator reports, in-process or over HTTP, is an
:class:`ApiError`; the HTTP layer sends ``error.status`` as the body with
``error.code`` as the HTTP status, so clients print what they would print
against a real API server.
"""

from __future__ import annotations

from typing import Any, ClassVar

JSON = dict[str, Any]


class ApiError(Exception):
    """A failed API call; ``status`` is a complete ``kind: Status`` object."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: JSON | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    @property
    def status(self) -> JSON:
        body: JSON = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body

    def __repr__(self) -> str:
        return f"ApiError({self.code}, {self.reason!r}, {self.message!r})"


def _details(name: str | None, group: str, kind: str) -> JSON:
    details: JSON = {"kind": kind}
    if name is not None:
        details["name"] = name
    if group:
        details["group"] = group
    return details


def _qualified(plural: str, group: str) -> str:
    return f"{plural}.{group}" if group else plural


def not_found(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{_qualified(plural, group)} "{name}" not found',
        details=_details(name, group, plural),
    )


def already_exists(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{_qualified(plural, group)} "{name}" already exists',
        details=_details(name, group, plural),
    )


def conflict(plural: str, group: str, name: str, why: str | None = None) -> ApiError:
    why = why or (
        "the object has been modified; please apply your changes to the latest version "
        "and try again"
    )
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_qualified(plural, group)} "{name}": {why}',
        details=_details(name, group, plural),
    )


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def forbidden(plural: str, group: str, name: str, why: str) -> ApiError:
    return ApiError(
        403,
        "Forbidden",
        f'{_qualified(plural, group)} "{name}" is forbidden: {why}',
        details=_details(name, group, plural),
    )


def method_not_allowed(
    message: str = "the server does not allow this method on the requested resource",
) -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def unsupported_media_type(content_type: str) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown "
        f"format - accepted media types include: application/json-patch+json, "
        f"application/merge-patch+json, application/apply-patch+yaml "
        f"(got {content_type!r})",
    )


def internal_error(message: str) -> ApiError:
    return ApiError(500, "InternalError", f"Internal error occurred: {message}")


class FieldError:
    """One cause of a 422 Invalid, worded like apimachinery's field.Error."""

    def __init__(
        self, field: str, reason: str, detail: str, value: Any = None, *, has_value: bool = True
    ) -> None:
        self.field = field
        self.reason = reason  # FieldValueInvalid, FieldValueRequired, ...
        self.detail = detail
        self.value = value
        self.has_value = has_value

    _TITLES: ClassVar[dict[str, str]] = {
        "FieldValueInvalid": "Invalid value",
        "FieldValueRequired": "Required value",
        "FieldValueNotSupported": "Unsupported value",
        "FieldValueForbidden": "Forbidden",
        "FieldValueDuplicate": "Duplicate value",
        "FieldValueTooLong": "Too long",
        "FieldValueTooMany": "Too many",
        "FieldValueTypeInvalid": "Invalid value",
    }

    def body(self) -> str:
        """The message without the field path, as in ``details.causes[].message``."""
        title = self._TITLES.get(self.reason, "Invalid value")
        if self.reason in ("FieldValueRequired", "FieldValueForbidden", "FieldValueTooLong"):
            return f"{title}: {self.detail}" if self.detail else title
        if not self.has_value:
            return f"{title}: {self.detail}" if self.detail else title
        rendered = render_value(self.value)
        return f"{title}: {rendered}: {self.detail}" if self.detail else f"{title}: {rendered}"

    def text(self) -> str:
        return f"{self.field}: {self.body()}"


def render_value(value: Any) -> str:
    """Render a value the way Go's ``%#v``-ish field errors do: strings quoted."""
    import json

    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return json.dumps(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def invalid(kind: str, group: str, name: str, errors: list[FieldError]) -> ApiError:
    """A 422 Invalid whose message reads ``Kind.group "name" is invalid: ...``."""
    qualified = f"{kind}.{group}" if group else kind
    texts = [e.text() for e in errors]
    summary = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    details: JSON = {
        "name": name,
        "kind": kind,
        "causes": [{"reason": e.reason, "message": e.body(), "field": e.field} for e in errors],
    }
    if group:
        details["group"] = group
    return ApiError(422, "Invalid", f'{qualified} "{name}" is invalid: {summary}', details=details)
