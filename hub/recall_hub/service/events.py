"""JetStream side of events: the streams, and a durable pull consumer that applies each event and
acks it only after the change is committed. Several hubs share one durable consumer.

- applied (or already applied): ack;
- the store is unavailable: nak with a delay, so it is retried once the store is back;
- can never apply (malformed, unauthorised, conflicting) or failed too often: term, with the
  reason recorded on ``recall.v1.dlq.<kind>`` — never retried forever, never dropped silently.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import suppress

import nats.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig
from pydantic import ValidationError
from recall_schemas import RecallError, Unavailable
from recall_schemas.events import EVENT_ADAPTER, DeadLetter
from recall_schemas.subjects import (
    DEAD_LETTER_ROOT,
    DEAD_LETTER_STREAM,
    EVENT_ROOT,
    EVENTS_STREAM,
    HUB_EVENTS_CONSUMER,
    dead_letter_subject,
    event_publisher_of,
)

from recall_hub.context import HubContext
from recall_hub.ops.events import apply_event
from recall_hub.timeutil import from_ms, now_ms

log = logging.getLogger(__name__)

MAX_DELIVERIES = 8
RETRY_DELAY_S = 1.0


async def ensure_streams(js: JetStreamContext) -> None:
    for config in (
        StreamConfig(
            name=EVENTS_STREAM, subjects=[f"{EVENT_ROOT}.>"], storage=StorageType.FILE, duplicate_window=3600.0
        ),
        StreamConfig(name=DEAD_LETTER_STREAM, subjects=[f"{DEAD_LETTER_ROOT}.>"], storage=StorageType.FILE),
    ):
        try:
            await js.add_stream(config)
        except nats.js.errors.BadRequestError:
            await js.update_stream(config)


class EventConsumer:
    def __init__(self, ctx: HubContext, nc: NATS, batch: int = 32) -> None:
        self.ctx = ctx
        self.nc = nc
        self.js = nc.jetstream()
        self.batch = batch
        self._task: asyncio.Task[None] | None = None
        self._handled = asyncio.Condition()
        self.outcomes: list[tuple[str, str]] = []
        """(event_id, 'applied' | 'duplicate' | 'dead') for each delivery this process settled."""

    async def start(self) -> None:
        await ensure_streams(self.js)
        self._sub = await self.js.pull_subscribe(
            f"{EVENT_ROOT}.>",
            durable=HUB_EVENTS_CONSUMER,
            stream=EVENTS_STREAM,
            config=ConsumerConfig(
                ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL, ack_wait=30, max_deliver=-1
            ),
        )
        self._task = asyncio.create_task(self._run(), name="recall-event-consumer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        with suppress(Exception):
            await self._sub.unsubscribe()

    async def _run(self) -> None:
        while True:
            try:
                messages = await self._sub.fetch(self.batch, timeout=1.0)
            except (nats.errors.TimeoutError, TimeoutError):
                continue  # nothing to do for a second
            except (nats.errors.ConnectionClosedError, nats.errors.ConnectionReconnectingError):
                await asyncio.sleep(RETRY_DELAY_S)
                continue
            except Exception:
                log.exception("event fetch failed")
                await asyncio.sleep(RETRY_DELAY_S)
                continue
            for msg in messages:
                await self.handle(msg)

    async def handle(self, msg: Msg) -> None:
        publisher: str | None = None
        event_id = ""
        try:
            publisher = event_publisher_of(msg.subject)
            event = EVENT_ADAPTER.validate_json(msg.data)
            event_id = event.event_id
            kind = msg.subject.split(".", 4)[4]
            if kind != event.kind:
                raise ValueError(f"subject says {kind!r} but the payload is {event.kind!r}")
            if await self.ctx.redis.exists(self.ctx.keys.applied_event(publisher, event_id)):
                await msg.ack()
                await self._mark(event_id, "duplicate")
                return
            await apply_event(self.ctx, publisher, event)
            await self.ctx.redis.set(
                self.ctx.keys.applied_event(publisher, event_id), 1, ex=self.ctx.settings.applied_event_ttl_s
            )
        except Unavailable as exc:
            deliveries = msg.metadata.num_delivered or 1
            if deliveries < MAX_DELIVERIES:
                log.warning("event %s deferred (%s), delivery %d", msg.subject, exc, deliveries)
                await msg.nak(delay=RETRY_DELAY_S * deliveries)
                return
            await self._dead(msg, publisher, event_id, exc.code.value, f"still unavailable after {deliveries}: {exc}")
            return
        except RecallError as exc:
            await self._dead(msg, publisher, event_id, exc.code.value, exc.message)
            return
        except (ValidationError, ValueError) as exc:
            await self._dead(msg, publisher, event_id, "invalid", str(exc)[:2000])
            return
        except Exception as exc:
            log.exception("event %s failed", msg.subject)
            await self._dead(msg, publisher, event_id, "internal", repr(exc)[:2000])
            return
        await msg.ack()
        await self._mark(event_id, "applied")

    async def _dead(self, msg: Msg, publisher: str | None, event_id: str, code: str, reason: str) -> None:
        parts = msg.subject.split(".")
        kind = "_".join(parts[4:]) if len(parts) > 4 else "unknown"
        letter = DeadLetter(
            subject=msg.subject,
            publisher=publisher,
            reason=reason,
            code=code,
            payload=msg.data.decode("utf-8", errors="replace"),
            at=from_ms(now_ms()),
        )
        log.warning("event %s dead-lettered: %s (%s)", msg.subject, reason, code)
        await self.js.publish(dead_letter_subject(kind), letter.model_dump_json().encode())
        await msg.term()
        await self._mark(event_id or msg.subject, "dead")

    async def _mark(self, event_id: str, outcome: str) -> None:
        async with self._handled:
            self.outcomes.append((event_id, outcome))
            self._handled.notify_all()

    async def wait_for(self, event_id: str, deliveries: int = 1, within: float = 10.0) -> list[str]:
        """The outcomes of the first ``deliveries`` settlements of an event by this process."""

        def settled() -> list[str]:
            return [outcome for eid, outcome in self.outcomes if eid == event_id]

        async with asyncio.timeout(within), self._handled:
            await self._handled.wait_for(lambda: len(settled()) >= deliveries)
        return settled()
