"""The one error hierarchy: raised by the hub's domain code, carried on the wire as an
:class:`ErrorReply`, and raised again, as the same class, by the client."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


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
    INTERNAL = "internal"
    """A bug in the hub; the message carries a reference for its log."""


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
        InternalError,
    )
}


def error_from_reply(reply: ErrorReply) -> RecallError:
    """The exception that an error reply stands for."""
    return _BY_CODE[reply.error.code](reply.error.message, reply.error.details)
