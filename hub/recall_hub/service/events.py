"""JetStream side of events: the streams, and a durable pull consumer that applies each event and
acks it only after the change is committed. Several hubs share one durable consumer.

Every delivery ends in exactly one of:

- applied (or already applied by this or another hub): ack;
- a store is unavailable (or applying took longer than ``event_apply_timeout_s``): nak with a growing
  delay, at most ``event_max_deliveries`` times, then dead;
- can never apply (too large, not an event subject, not JSON, the wrong model, unauthorised,
  conflicting) or failed in an unexpected way: dead — a bounded letter (an excerpt, the size and
  SHA-256 of the payload, the reason) on ``recall.v1.dlq.<kind>``, then term. If the letter cannot be
  published, the event is retried like an unavailable one and, at the last attempt, termed with the
  letter in the log.

Nothing an event holds can stop the consumer: every step of handling, settling included, is guarded,
and the loop survives whatever a handler raises. The consumer's own ``max_deliver`` is a server-side
backstop above the hub's bound, for a message the hub never gets to settle (a crash while applying).

Deduplication is the hub's, by ``(publisher, event_id)`` — the publisher being the subject token NATS
permissions bind to the connection. JetStream's ``Nats-Msg-Id`` deduplication is stream-wide, so any
identity could suppress another's event by publishing first under its message id: the client's ids are
random (unpredictable, never derived from the event), the stream's duplicate window is the server's
minimum, and an event whose ``Nats-Msg-Id`` begins with another identity (``<other>:…``) is refused
(dead-lettered, so the attempt is on record).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Literal, TypeVar

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from pydantic import ValidationError
from recall_schemas import RecallError, describe_validation
from recall_schemas.events import EVENT_ADAPTER, EVENT_KINDS, DeadLetter, Event
from recall_schemas.ids import AI_ID_PATTERN, SERVICE_ID_PATTERN
from recall_schemas.subjects import (
    DEAD_LETTER_ROOT,
    DEAD_LETTER_STREAM,
    EVENT_ROOT,
    EVENTS_STREAM,
    HUB_EVENTS_CONSUMER,
    dead_letter_subject,
)
from recall_schemas.tasks import stop_tasks

from recall_hub.config import HubSettings
from recall_hub.context import HubContext
from recall_hub.ops.events import apply_event
from recall_hub.outages import STORE_DOWN, log_failure
from recall_hub.timeutil import from_ms, now_ms

log = logging.getLogger(__name__)

Outcome = Literal["applied", "duplicate", "dead", "retry"]

DUPLICATE_WINDOW_S = 0.1
"""nats-server's minimum (it cannot be switched off): message ids are not how events are deduplicated."""
DEAD_LETTER_MAX_BYTES = 128 * 1024
"""Largest letter the dead-letter stream takes; a letter's fields are cut so that it always fits."""
MAX_OUTCOMES = 10_000
"""Settlements this process remembers for :meth:`EventConsumer.wait_for` (the oldest are forgotten)."""
MAX_REASON = 2000

_IDENTITY = re.compile(f"{AI_ID_PATTERN}|{SERVICE_ID_PATTERN}")


_NATS_DOWN = (
    nats.errors.ConnectionClosedError, nats.errors.ConnectionReconnectingError, nats.errors.NoRespondersError,
    nats.errors.TimeoutError, nats.errors.StaleConnectionError, nats.js.errors.ServiceUnavailableError,
)


def stream_configs(settings: HubSettings) -> tuple[StreamConfig, StreamConfig]:
    """RECALL_EVENTS and RECALL_DLQ, each bounded in age, bytes and message size."""
    events = StreamConfig(
        name=EVENTS_STREAM,
        subjects=[f"{EVENT_ROOT}.>"],
        storage=StorageType.FILE,
        retention=RetentionPolicy.LIMITS,
        discard=DiscardPolicy.OLD,
        max_age=float(settings.events_max_age_s),
        max_bytes=settings.events_max_bytes,
        max_msg_size=settings.event_max_bytes,
        duplicate_window=DUPLICATE_WINDOW_S,
        num_replicas=settings.stream_replicas,
    )
    dead_letters = StreamConfig(
        name=DEAD_LETTER_STREAM,
        subjects=[f"{DEAD_LETTER_ROOT}.>"],
        storage=StorageType.FILE,
        retention=RetentionPolicy.LIMITS,
        discard=DiscardPolicy.OLD,
        max_age=float(settings.dead_letters_max_age_s),
        max_bytes=settings.dead_letters_max_bytes,
        max_msg_size=DEAD_LETTER_MAX_BYTES,
        duplicate_window=120.0,  # letters carry the event's stream sequence as id: one letter per event
        num_replicas=settings.stream_replicas,
    )
    return events, dead_letters


STREAM_SETUP_ATTEMPTS = 20
JETSTREAM_SETUP_S = 120.0
"""How long a starting hub asks JetStream again while it does not answer: a cluster that lost a node elects new
stream leaders, or has no quorum until the node is back (seconds, up to the node's restart)."""
_UNANSWERED = (nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError)
_T = TypeVar("_T")


async def until_jetstream_answers(call: Callable[[], Awaitable[_T]], what: str) -> _T:
    """``call()`` (a JetStream API request), asked again at growing intervals (0.1 to 2 s) while JetStream does
    not answer it, for up to :data:`JETSTREAM_SETUP_S`: a hub started while its cluster elects leaders waits for
    them instead of exiting."""
    loop = asyncio.get_running_loop()
    give_up, pause = loop.time() + JETSTREAM_SETUP_S, 0.1
    while True:
        try:
            return await call()
        except _UNANSWERED as exc:
            if loop.time() + pause > give_up:
                raise
            log.warning("JetStream did not answer %s (%s); asking again in %.1f s", what, type(exc).__name__, pause)
        await asyncio.sleep(pause)
        pause = min(pause * 2, 2.0)


async def ensure_streams(js: JetStreamContext, settings: HubSettings) -> None:
    """Create the streams, or bring existing ones to the configured limits.

    Hubs starting together race: a stream another hub is creating in a cluster already refuses a second
    create ("in use") but is not found by an update until the cluster has placed it, so that is tried again.
    While JetStream does not answer, each request is asked again (:func:`until_jetstream_answers`)."""
    for config in stream_configs(settings):
        for attempt in range(STREAM_SETUP_ATTEMPTS):
            try:
                await until_jetstream_answers(functools.partial(js.add_stream, config),
                                              f"creating stream {config.name}")
                break
            except nats.js.errors.BadRequestError:
                try:
                    await until_jetstream_answers(functools.partial(js.update_stream, config),
                                                  f"updating stream {config.name}")
                    break
                except nats.js.errors.NotFoundError:
                    if attempt == STREAM_SETUP_ATTEMPTS - 1:
                        raise
                    await asyncio.sleep(0.05 * (attempt + 1))


def consumer_config(settings: HubSettings) -> ConsumerConfig:
    ack_wait = settings.event_apply_timeout_s + 10.0
    return ConsumerConfig(
        durable_name=HUB_EVENTS_CONSUMER,
        name=HUB_EVENTS_CONSUMER,
        filter_subject=f"{EVENT_ROOT}.>",
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        ack_wait=ack_wait,
        max_deliver=settings.event_max_deliveries + 2,
    )


def dead_letter(
    subject: str,
    data: bytes,
    *,
    publisher: str | None,
    event_id: str | None,
    code: str,
    reason: str,
    deliveries: int,
    excerpt_bytes: int,
) -> DeadLetter:
    """A letter whose size does not depend on the event: an excerpt, the size and hash of the whole."""
    excerpt = data[:excerpt_bytes]
    return DeadLetter(
        subject=subject[:512],
        publisher=publisher[:64] if publisher is not None else None,
        event_id=event_id,
        reason=reason[:MAX_REASON],
        code=code[:32],
        payload=excerpt.decode("utf-8", errors="replace"),
        payload_bytes=len(data),
        payload_sha256=hashlib.sha256(data).hexdigest(),
        truncated=len(excerpt) < len(data),
        deliveries=max(1, deliveries),
        at=from_ms(now_ms()),
    )


class _Dead(Exception):
    """The event can never apply."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class _Parsed:
    __slots__ = ("event", "kind", "publisher")

    def __init__(self, publisher: str, kind: str, event: Event) -> None:
        self.publisher = publisher
        self.kind = kind
        self.event = event


class EventConsumer:
    def __init__(self, ctx: HubContext, nc: NATS, batch: int = 32) -> None:
        self.ctx = ctx
        self.settings = ctx.settings
        self.nc = nc
        self.js = nc.jetstream()
        self.batch = batch
        self._task: asyncio.Task[None] | None = None
        self._handled = asyncio.Condition()
        self.outcomes: deque[tuple[str | None, str, Outcome]] = deque(maxlen=MAX_OUTCOMES)
        """(publisher, event_id or subject, outcome) of the latest deliveries this process settled."""

    async def start(self) -> None:
        await ensure_streams(self.js, self.settings)
        config = consumer_config(self.settings)
        try:  # create, or bring an existing durable consumer to this configuration
            await until_jetstream_answers(lambda: self.js.add_consumer(EVENTS_STREAM, config=config),
                                          f"creating consumer {HUB_EVENTS_CONSUMER}")
        except _UNANSWERED:  # a 503 is a JetStream error too, but says nothing of the configuration
            raise
        except nats.js.errors.Error as exc:
            log.warning("event consumer %s keeps its configuration: %s", HUB_EVENTS_CONSUMER, exc)
        self._sub = await self.js.pull_subscribe_bind(
            durable=HUB_EVENTS_CONSUMER, stream=EVENTS_STREAM, pending_bytes_limit=64 << 20
        )
        self._task = asyncio.create_task(self._run(), name="recall-event-consumer")

    async def stop(self) -> None:
        if self._task is not None:
            await stop_tasks([self._task])
            self._task = None
        with suppress(Exception):
            await self._sub.unsubscribe()

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def _run(self) -> None:
        keepalive = (self.settings.event_apply_timeout_s + 10.0) / 3
        while True:
            try:
                messages = await self._sub.fetch(self.batch, timeout=1.0)
            except (nats.errors.TimeoutError, TimeoutError):
                continue  # nothing to do for a second
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log_failure(log, "event fetch failed", exc, STORE_DOWN + _NATS_DOWN)
                await asyncio.sleep(self.settings.event_retry_delay_s)
                continue
            fetched = time.monotonic()
            for msg in messages:
                if time.monotonic() - fetched > keepalive:
                    await self._settle(msg.in_progress(), msg, "in_progress")  # the rest of a slow batch
                try:
                    await self.handle(msg)
                except asyncio.CancelledError:
                    raise
                except Exception:  # handle settles every message itself; this is the last guard
                    log.exception("event %.200s: unexpected failure in handling; terminated", msg.subject)
                    await self._settle(msg.term(), msg, "term")

    # --- one delivery ------------------------------------------------------------------------

    async def handle(self, msg: Msg) -> None:
        """Settle one delivery (ack, nak with delay, or dead-letter and term); never raises."""
        data: bytes = msg.data or b""
        parts = msg.subject.split(".")
        # as the subject says, for the letter; a message without a message id is nobody's (see _parse)
        attributed = len(parts) > 3 and bool((msg.headers or {}).get("Nats-Msg-Id"))
        publisher: str | None = parts[3][:64] if attributed else None
        event_id: str | None = None
        try:
            parsed = self._parse(msg, data)
            publisher, event_id = parsed.publisher, parsed.event.event_id
            outcome = await self._apply(parsed)
        except _Dead as dead:
            await self._dead(msg, data, publisher, event_id, dead.code, dead.reason)
            return
        except STORE_DOWN as exc:
            reason = "applying took too long" if isinstance(exc, TimeoutError) else str(exc) or type(exc).__name__
            await self._retry_or_dead(msg, data, publisher, event_id, reason)
            return
        except RecallError as exc:
            await self._dead(msg, data, publisher, event_id, exc.code.value, exc.message)
            return
        except ValidationError as exc:  # a model a handler builds from the event
            await self._dead(msg, data, publisher, event_id, "invalid", describe_validation(exc, show_input=False))
            return
        except ValueError as exc:
            await self._dead(msg, data, publisher, event_id, "invalid", str(exc)[:MAX_REASON])
            return
        except Exception as exc:
            log.exception("event %.200s failed", msg.subject)
            await self._dead(msg, data, publisher, event_id, "internal", repr(exc)[:MAX_REASON])
            return
        if await self._settle(msg.ack(), msg, "ack"):
            await self._mark(publisher, event_id, outcome)

    def _parse(self, msg: Msg, data: bytes) -> _Parsed:
        if len(data) > self.settings.event_max_bytes:
            raise _Dead("too_large", f"{len(data)} bytes exceed the limit of {self.settings.event_max_bytes}")
        parts = msg.subject.split(".")
        if len(parts) < 6 or ".".join(parts[:3]) != EVENT_ROOT:
            raise _Dead("invalid", "not an event subject")
        publisher, kind = parts[3], ".".join(parts[4:])
        if not _IDENTITY.fullmatch(publisher):
            raise _Dead("forbidden", "the subject's publisher is not an identity that may publish events")
        if kind not in EVENT_KINDS:
            raise _Dead("invalid", f"unknown event kind {kind[:100]!r}")
        message_id = (msg.headers or {}).get("Nats-Msg-Id")
        if not message_id:
            # The client sets one on every publish; a JetStream ack that another identity aimed at this
            # subject (as the reply subject of its own publish) never has one: not this publisher's.
            raise _Dead("invalid", "no Nats-Msg-Id header: publish each event with Nats-Msg-Id <publisher>:<random>")
        claimed = _IDENTITY.fullmatch(message_id.split(":", 1)[0])
        if claimed is not None and claimed.group() != publisher:
            # Only good for colliding with that identity's messages (the stream deduplicates ids
            # stream-wide); no client of that identity sends it, so this can only be an attempt: on record.
            raise _Dead("forbidden", f"Nats-Msg-Id names another identity ({claimed.group()}), not {publisher}")
        try:
            event = EVENT_ADAPTER.validate_json(data)
        except ValidationError as exc:
            raise _Dead("invalid", describe_validation(exc, show_input=False)) from None
        if event.kind != kind:
            raise _Dead("invalid", f"subject says {kind!r} but the payload is {event.kind!r}")
        return _Parsed(publisher, kind, event)

    async def _apply(self, parsed: _Parsed) -> Outcome:
        ctx = self.ctx
        publisher, event_id = parsed.publisher, parsed.event.event_id
        # Claim the event id for the time one attempt may take (below the consumer's ack_wait): a
        # copy delivered to another hub meanwhile is a duplicate. A crashed attempt's claim expires
        # before the server delivers the event again.
        claim_s = int(self.settings.event_apply_timeout_s) + 2
        if not await ctx.applied_events.claim(publisher, event_id, claim_s):
            return "duplicate"  # applied already, or being applied by another copy
        try:
            async with asyncio.timeout(self.settings.event_apply_timeout_s):
                await apply_event(ctx, publisher, parsed.event)
        except BaseException:
            with suppress(Exception):
                await ctx.applied_events.release(publisher, event_id)
            raise
        await ctx.applied_events.mark_applied(publisher, event_id, self.settings.applied_event_ttl_s)
        return "applied"

    def _deliveries(self, msg: Msg) -> int:
        try:
            return int(msg.metadata.num_delivered or 1)
        except Exception:
            return 1

    async def _retry_or_dead(
        self, msg: Msg, data: bytes, publisher: str | None, event_id: str | None, reason: str
    ) -> None:
        deliveries = self._deliveries(msg)
        if deliveries < self.settings.event_max_deliveries:
            log.warning("event %.200s deferred (%s), delivery %d", msg.subject, reason[:300], deliveries)
            await self._retry_later(msg, publisher, event_id, deliveries)
            return
        await self._dead(msg, data, publisher, event_id, "unavailable", f"still failing after {deliveries}: {reason}")

    async def _dead(
        self, msg: Msg, data: bytes, publisher: str | None, event_id: str | None, code: str, reason: str
    ) -> None:
        deliveries = self._deliveries(msg)
        kind = ".".join(msg.subject.split(".")[4:])
        letter = dead_letter(
            msg.subject,
            data,
            publisher=publisher,
            event_id=event_id,
            code=code,
            reason=reason,
            deliveries=deliveries,
            excerpt_bytes=self.settings.dead_letter_excerpt_bytes,
        )
        body = letter.model_dump_json().encode()
        log.warning("event %.200s dead-lettered: %.300s (%s)", msg.subject, letter.reason, code)
        headers = None
        with suppress(Exception):
            headers = {"Nats-Msg-Id": f"dead:{msg.metadata.sequence.stream}"}
        try:
            await self.js.publish(
                dead_letter_subject(kind.replace(".", "_") if kind in EVENT_KINDS else "unknown"),
                body,
                headers=headers,
            )
        except Exception as exc:
            if deliveries < self.settings.event_max_deliveries:
                log.warning("dead letter for %.200s not recorded (%s); the event is retried", msg.subject, exc)
                await self._retry_later(msg, publisher, event_id, deliveries)
                return
            log.error("dead letter for %.200s lost (%s); the event is terminated: %s", msg.subject, exc, body[:4096])
        if await self._settle(msg.term(), msg, "term"):
            await self._mark(publisher, event_id or msg.subject, "dead")

    async def _retry_later(self, msg: Msg, publisher: str | None, event_id: str | None, deliveries: int) -> None:
        if await self._settle(msg.nak(delay=self.settings.event_retry_delay_s * deliveries), msg, "nak"):
            await self._mark(publisher, event_id or msg.subject, "retry")

    async def _settle(self, action: Awaitable[None], msg: Msg, what: str) -> bool:
        """Send an ack/nak/term; when it cannot be sent, the server redelivers after ack_wait."""
        try:
            await action
        except Exception as exc:
            log.warning("could not %s event %.200s: %s", what, msg.subject, exc)
            return False
        return True

    # --- observation -------------------------------------------------------------------------

    async def _mark(self, publisher: str | None, event_id: str | None, outcome: Outcome) -> None:
        async with self._handled:
            self.outcomes.append((publisher, event_id or "", outcome))
            self._handled.notify_all()

    async def wait_for(
        self, event_id: str, deliveries: int = 1, within: float = 10.0, publisher: str | None = None
    ) -> list[str]:
        """The outcomes of the first ``deliveries`` settlements of an event by this process (of
        ``publisher``'s event, when given; dead events without an event id go by their subject)."""

        def settled() -> list[str]:
            return [
                outcome
                for who, eid, outcome in self.outcomes
                if eid == event_id and (publisher is None or who == publisher)
            ]

        async with asyncio.timeout(within), self._handled:
            await self._handled.wait_for(lambda: len(settled()) >= deliveries)
        return settled()[:deliveries]
