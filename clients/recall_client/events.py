"""Typed publishers of session, group and ops events (JetStream, at-least-once; the hub applies
each event once, whatever the redeliveries)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import TYPE_CHECKING, Any

from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import PubAck
from nats.js.errors import NoStreamResponseError, ServiceUnavailableError
from recall_schemas import Unavailable
from recall_schemas.coordination import TransferOps
from recall_schemas.events import (
    EventBase,
    GroupCreated,
    MemberAdded,
    MemberRemoved,
    OpsTransferred,
    SessionContinued,
    SessionEnded,
    SessionMigrated,
    SessionStarted,
)
from recall_schemas.subjects import event_subject

if TYPE_CHECKING:
    from nats.aio.client import Client as NATS

_NO_ACK = (NatsTimeout, NoRespondersError, NoStreamResponseError, ServiceUnavailableError)
"""Nothing was stored, or it was and the ack was lost: either way publishing again is safe."""


class EventPublisher:
    """``client.events``: one method per event. Each returns the JetStream acknowledgement.

    ``event_id`` defaults to a fresh one; pass your own to make a retried publish a duplicate: the hub
    applies each ``(publisher, event_id)`` once, the publisher being the subject token NATS binds to
    this connection. The ``Nats-Msg-Id`` of each publish is random (``<publisher>:<128 random bits>``),
    never derived from the event: JetStream deduplicates message ids stream-wide, so an id another
    identity could predict would let it publish first under that id and make the server drop this event.
    """

    def __init__(self, nc: NATS, publisher: str, timeout: float = 5.0, retries: int = 2) -> None:
        self._js = nc.jetstream(timeout=timeout)
        self.publisher = publisher
        self.timeout = timeout
        self.retries = retries

    async def publish(self, event: EventBase) -> PubAck:
        """Publish, trying again while no acknowledgement comes (a NATS node lost, a stream leader being
        elected) for up to ``timeout`` × (``retries`` + 1): the hub applies the event once however many
        copies are stored."""
        kind: str = getattr(event, "kind")  # noqa: B009 - every concrete event has a literal kind
        deadline = time.monotonic() + self.timeout * (self.retries + 1)
        delay = 0.1
        while True:
            try:
                return await self._js.publish(
                    event_subject(self.publisher, kind),
                    event.model_dump_json().encode(),
                    timeout=max(0.1, min(self.timeout, deadline - time.monotonic())),
                    headers={"Nats-Msg-Id": f"{self.publisher}:{uuid.uuid4().hex}"},
                )
            except _NO_ACK as exc:
                if time.monotonic() + delay >= deadline:
                    raise Unavailable(f"could not publish {kind}: {exc or type(exc).__name__}") from exc
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
            except Exception as exc:
                raise Unavailable(f"could not publish {kind}: {exc}") from exc

    @staticmethod
    def _id(event_id: str | None) -> str:
        return event_id or uuid.uuid4().hex

    async def session_started(
        self, session_id: str, group_id: str | None = None, *, ai_id: str | None = None, event_id: str | None = None
    ) -> PubAck:
        return await self.publish(
            SessionStarted(event_id=self._id(event_id), session_id=session_id, group_id=group_id, ai_id=ai_id)
        )

    async def session_continued(
        self, session_id: str, *, ai_id: str | None = None, event_id: str | None = None
    ) -> PubAck:
        return await self.publish(SessionContinued(event_id=self._id(event_id), session_id=session_id, ai_id=ai_id))

    async def session_migrated(
        self, old_session_id: str, new_session_id: str, *, ai_id: str | None = None, event_id: str | None = None
    ) -> PubAck:
        return await self.publish(
            SessionMigrated(
                event_id=self._id(event_id), old_session_id=old_session_id, new_session_id=new_session_id, ai_id=ai_id
            )
        )

    async def session_ended(self, session_id: str, *, ai_id: str | None = None, event_id: str | None = None) -> PubAck:
        return await self.publish(SessionEnded(event_id=self._id(event_id), session_id=session_id, ai_id=ai_id))

    async def group_created(self, group_id: str, name: str, *, event_id: str | None = None) -> PubAck:
        return await self.publish(GroupCreated(event_id=self._id(event_id), group_id=group_id, name=name))

    async def member_added(
        self, group_id: str, ai_id: str, role: str = "agent", *, event_id: str | None = None
    ) -> PubAck:
        return await self.publish(MemberAdded(event_id=self._id(event_id), group_id=group_id, ai_id=ai_id, role=role))

    async def member_removed(self, group_id: str, ai_id: str, *, event_id: str | None = None) -> PubAck:
        return await self.publish(MemberRemoved(event_id=self._id(event_id), group_id=group_id, ai_id=ai_id))

    async def ops_transfer(self, *, event_id: str | None = None, **transfer: Any) -> PubAck:
        """Fields of :class:`TransferOps` (group_id, from_ops, to_agent, context_summary, bead_ids)."""
        return await self.publish(OpsTransferred(event_id=self._id(event_id), transfer=TransferOps(**transfer)))
