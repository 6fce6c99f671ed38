"""Nexus Recall client library: what an agent runs."""

from recall_schemas import (
    Conflict,
    Forbidden,
    InternalError,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    RecallError,
    RecallTimeout,
    Unauthorized,
    Unavailable,
)

from .client import RecallClient
from .conflicts import retry_on_conflict

__all__ = [
    "Conflict",
    "Forbidden",
    "InternalError",
    "InvalidRequest",
    "NotFound",
    "PayloadTooLarge",
    "RecallClient",
    "RecallError",
    "RecallTimeout",
    "Unauthorized",
    "Unavailable",
    "retry_on_conflict",
]
