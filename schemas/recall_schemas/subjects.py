"""NATS subjects of the protocol.

Requests go to ``recall.v1.req.<caller>.<op>``. NATS permissions let each identity publish only
under its own ``<caller>``, so the hub can trust the caller it reads from the subject.
"""

from __future__ import annotations

API_VERSION = "v1"
REQUEST_ROOT = f"recall.{API_VERSION}.req"
HUB_QUEUE_GROUP = "recall-hub"
SERVICE_NAME = "recall-hub"


def request_subject(caller: str, op: str) -> str:
    return f"{REQUEST_ROOT}.{caller}.{op}"


def endpoint_subject(op: str) -> str:
    """The wildcard subject a hub endpoint listens on for one operation."""
    return f"{REQUEST_ROOT}.*.{op}"


def caller_of(subject: str) -> str:
    """The caller token of a request subject (validated by the hub, not here)."""
    parts = subject.split(".")
    if len(parts) != 5 or ".".join(parts[:3]) != REQUEST_ROOT:
        raise ValueError(f"not a request subject: {subject!r}")
    return parts[3]


def inbox_prefix(caller: str) -> str:
    """The private reply-inbox prefix of an identity."""
    return f"_INBOX.{caller}"
