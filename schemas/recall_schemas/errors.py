"""The one error hierarchy: raised by the hub's domain code, carried on the wire as an
:class:`ErrorReply`, and raised again, as the same class, by the client."""

from __future__ import annotations

import difflib
from collections.abc import Collection
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class ErrorCode(StrEnum):
    INVALID = "invalid"
    """The request is malformed: bad JSON, wrong types, unknown fields, bad ids."""
    NOT_FOUND = "not_found"
    """The thing does not exist, or the caller may not see it (the two are indistinguishable)."""
    FORBIDDEN = "forbidden"
    """The caller can see the thing but may not do this to it (e.g. a non-ops changing membership)."""
    CONFLICT = "conflict"
    """The request collides with the current state (e.g. a group id already taken)."""
    TOO_LARGE = "too_large"
    """The payload exceeds the hub's configured limit."""
    UNAVAILABLE = "unavailable"
    """A backing store or the hub is down; retrying later may succeed."""
    TIMEOUT = "timeout"
    """No reply in time (raised by clients)."""
    UNAUTHORIZED = "unauthorized"
    """NATS refused the credentials, or they may not act as the caller's AI id: a setup mistake that
    retrying cannot fix (raised by clients)."""
    INTERNAL = "internal"
    """A bug in the hub; the message carries a reference for its log."""


HTTP_STATUS: dict[ErrorCode, int] = {
    ErrorCode.INVALID: 400,
    ErrorCode.UNAUTHORIZED: 401,
    ErrorCode.FORBIDDEN: 403,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.CONFLICT: 409,
    ErrorCode.TOO_LARGE: 413,
    ErrorCode.INTERNAL: 500,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.TIMEOUT: 504,
}
"""The HTTP-style status of each error code (the NATS service error header, the console's pages)."""


class ErrorBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    code: ErrorCode
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class ErrorReply(BaseModel):
    """The body of every error reply (the reply also carries the `Nats-Service-Error-Code` header)."""

    model_config = ConfigDict(extra="forbid")

    error: ErrorBody


class RecallError(Exception):
    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}

    def to_reply(self) -> ErrorReply:
        return ErrorReply(error=ErrorBody(code=self.code, message=self.message, details=self.details))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class InvalidRequest(RecallError):
    code = ErrorCode.INVALID


class NotFound(RecallError):
    code = ErrorCode.NOT_FOUND


class Forbidden(RecallError):
    code = ErrorCode.FORBIDDEN


class Conflict(RecallError):
    code = ErrorCode.CONFLICT


class PayloadTooLarge(RecallError):
    code = ErrorCode.TOO_LARGE


class Unavailable(RecallError):
    code = ErrorCode.UNAVAILABLE


class RecallTimeout(RecallError):
    code = ErrorCode.TIMEOUT


class Unauthorized(RecallError):
    code = ErrorCode.UNAUTHORIZED


class InternalError(RecallError):
    code = ErrorCode.INTERNAL


_BY_CODE: dict[ErrorCode, type[RecallError]] = {
    cls.code: cls
    for cls in (
        InvalidRequest,
        NotFound,
        Forbidden,
        Conflict,
        PayloadTooLarge,
        Unavailable,
        RecallTimeout,
        Unauthorized,
        InternalError,
    )
}


def error_from_reply(reply: ErrorReply) -> RecallError:
    """The exception that an error reply stands for."""
    return _BY_CODE[reply.error.code](reply.error.message, reply.error.details)


MAX_LISTED_ERRORS = 5


def describe_validation(
    exc: ValidationError,
    model: type[BaseModel] | None = None,
    *,
    show_input: bool = True,
    hidden: Collection[str] = (),
) -> str:
    """What is wrong with a request, one line per bad field: ``where: what (got value)``.

    An unknown field names the closest field of ``model`` (at that place in nested models) when one
    is close enough. ``show_input=False`` leaves the offending values out (they can be anything a
    publisher sent); ``hidden`` fields are never suggested (a caller cannot set them).
    """
    lines = []
    for err in exc.errors(include_url=False)[:MAX_LISTED_ERRORS]:
        loc = [str(p) for p in err["loc"]]
        where = ".".join(loc)
        if err["type"] == "extra_forbidden":
            known = [f for f in _fields_at(model, loc[:-1]) if not (len(loc) == 1 and f in hidden)]
            close = difflib.get_close_matches(loc[-1], known, n=1, cutoff=0.6) if loc else []
            hint = f"; did you mean '{close[0]}'?" if close else ""
            lines.append(f"{where}: unknown field{hint}"[:300])
            continue
        message = str(err["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
        message = message[:1].lower() + message[1:]
        if message == "field required":
            message = "required"
        got = ""
        if show_input and err["type"] != "missing" and loc:
            got = f" (got {_short(err.get('input'))})"
        lines.append((f"{where}: {message}" if loc else message)[:300] + got)
    more = len(exc.errors()) - MAX_LISTED_ERRORS
    if more > 0:
        lines.append(f"... and {more} more")
    return "\n".join(lines)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _fields_at(model: type[BaseModel] | None, path: list[str]) -> list[str]:
    """The field names of the (nested) model found at ``path`` under ``model``; empty if unknown."""
    for name in path:
        if model is None or name not in model.model_fields:
            return []
        annotation = model.model_fields[name].annotation
        candidates = getattr(annotation, "__args__", None) or (annotation,)
        model = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
    return list(model.model_fields) if model is not None else []
