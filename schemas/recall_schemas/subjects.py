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


EVENT_ROOT = f"recall.{API_VERSION}.evt"
NOTIFY_ROOT = f"recall.{API_VERSION}.notify"
DEAD_LETTER_ROOT = f"recall.{API_VERSION}.dlq"

EVENTS_STREAM = "RECALL_EVENTS"
"""JetStream stream of ``recall.v1.evt.>``: session, group and ops events published by agents and services."""
DEAD_LETTER_STREAM = "RECALL_DLQ"
"""JetStream stream of ``recall.v1.dlq.>``: events that can never apply, with their reason."""
HUB_EVENTS_CONSUMER = "recall-hub-events"


def event_subject(publisher: str, kind: str) -> str:
    """Where ``publisher`` emits an event of ``kind`` (e.g. ``session.started``)."""
    return f"{EVENT_ROOT}.{publisher}.{kind}"


def notify_subject(ai_id: str) -> str:
    """An identity's own notification subject (change feed, handoff briefs)."""
    return f"{NOTIFY_ROOT}.{ai_id}"


def dead_letter_subject(kind: str) -> str:
    return f"{DEAD_LETTER_ROOT}.{kind}"
