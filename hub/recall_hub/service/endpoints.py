"""The NATS edge of the hub: subjects, headers, payload decoding, error replies, and fair admission of
each caller's requests. No domain logic here.

Each operation is an endpoint of one NATS micro service (discovery and stats via ``$SRV``) on
``recall.v1.req.*.<op>`` in the ``recall-hub`` queue group, so hub processes share the load. The
caller is the subject's fourth token; NATS permissions make that token unforgeable.

A request passes four checks in the subscription callback, which never waits, so the hub keeps reading
its socket however busy it is (a NATS server disconnects a reader that falls 64 MB behind): the reply
inbox (under auth), its ``Recall-Deadline``, its size, and its caller's admission — the requests and
bytes that identity already has in this process (:class:`CallerLimits`). Over the limit, the caller gets
``unavailable`` (busy) at once, and nobody else is slowed down. An admitted request then runs in its own
task once its caller has a free running slot (``caller_max_running``) and the process one
(``max_concurrency``), unless its deadline passed while it waited: then it is skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from importlib.metadata import version as package_version
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from pydantic import ValidationError
from recall_schemas import (
    HTTP_STATUS,
    OPERATIONS,
    ErrorReply,
    InternalError,
    InvalidRequest,
    PayloadTooLarge,
    RecallError,
    RecallTimeout,
    Unavailable,
    describe_validation,
)
from recall_schemas.ids import AI_ID_PATTERN
from recall_schemas.requests import (
    DEADLINE_HEADER,
    INDEX_AFTER_HEADER,
    INDEX_SEQ_HEADER,
    REQUEST_ID_HEADER,
)
from recall_schemas.subjects import HUB_QUEUE_GROUP, SERVICE_NAME, caller_of, endpoint_subject, inbox_prefix
from recall_schemas.tasks import stop_tasks

from recall_hub.context import HubContext
from recall_hub.logs import serving
from recall_hub.ops.dispatch import dispatch
from recall_hub.retrieval.freshness import reading_after, settling, work_settled
from recall_hub.retrieval.search import KEYWORD_READERS, SETTLED_IN_RANK, SETTLED_READERS
from recall_hub.service.admission import CallerLimits, CallerState
from recall_hub.service.metrics import HubMetrics
from recall_hub.service.micro import Endpoint, Service
from recall_hub.service.replies import REPLY_HEADROOM, fit_notification, fit_reply
from recall_hub.service.tracing import Tracing
from recall_hub.store.audit import bead_ids_of
from recall_hub.store.index_log import ZERO
from recall_hub.timeutil import now_ms

log = logging.getLogger(__name__)

_AI_ID = re.compile(AI_ID_PATTERN)
IN_FLIGHT_AT_STOP_S = 30.0
"""How long a stopping hub waits for the requests it is serving before it cancels them."""
ERROR_STATUS = {code.value: str(status) for code, status in HTTP_STATUS.items()}
"""The Nats-Service-Error code of each error (the codes of :data:`recall_schemas.HTTP_STATUS`)."""


def caller_token(subject: str) -> str:
    """The caller of a request subject, or :class:`InvalidRequest` if it is not an AI id."""
    try:
        caller = caller_of(subject)
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from exc
    if not _AI_ID.fullmatch(caller):
        raise InvalidRequest(f"caller id {caller!r} in the subject is not an AI id")
    return caller


def request_id_of(headers: Mapping[str, str] | None) -> str:
    """The request's ``Recall-Request-Id`` (cut to 64 printable characters), or a new id."""
    given = headers.get(REQUEST_ID_HEADER) if headers else None
    if given:
        printable = "".join(ch for ch in given[:64] if ch.isprintable())
        if printable:
            return printable
    return uuid.uuid4().hex


def deadline_of(headers: Mapping[str, str] | None) -> int | None:
    """The request's ``Recall-Deadline`` (Unix epoch ms), None without one."""
    raw = headers.get(DEADLINE_HEADER) if headers else None
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise InvalidRequest(f"header {DEADLINE_HEADER} must be Unix epoch milliseconds, not {raw[:40]!r}") from None


async def handle(ctx: HubContext, op: str, subject: str, payload: bytes, max_reply_bytes: int | None = None) -> bytes:
    """Decode, authorise by subject, run, encode. Raises only :class:`RecallError`.

    With ``max_reply_bytes`` (the bus's max payload less room for headers) the reply is cut to fit:
    see :func:`fit_reply`.
    """
    caller = caller_token(subject)
    if len(payload) > ctx.settings.max_payload_bytes:
        raise PayloadTooLarge(f"payload of {len(payload)} bytes exceeds the limit of {ctx.settings.max_payload_bytes}")
    operation = OPERATIONS[op]
    request = None
    try:
        try:
            request = operation.request.model_validate_json(payload or b"{}")
        except ValidationError as exc:
            raise InvalidRequest(describe_validation(exc, operation.request), {"op": op}) from exc
        try:
            reply = await dispatch(ctx, caller, op, request)
        except ValidationError as exc:  # a model a handler builds from the request (e.g. promote_to_bead)
            raise InvalidRequest(describe_validation(exc), {"op": op}) from exc
        if max_reply_bytes is None:
            body = reply.model_dump_json().encode()
        else:
            reply, body = fit_reply(op, reply, max_reply_bytes)
    except RecallError as exc:
        await ctx.audit.record(caller, op, False, exc.code.value, bead_ids_of(request))
        raise
    held: set[str] = set()
    named = bead_ids_of(request, reply, held=held)  # what the caller really got
    await ctx.audit.record(caller, op, True, "ok", named, held=held)
    return body


def reply_inbox_ok(subject: str, reply: str | None) -> bool:
    """Whether ``reply`` lies in the private inbox of the subject's caller (``_INBOX.<caller>.…``).

    The hub's response permission lets it answer whatever reply subject a request names; checking it
    here means the hub can never be used to put a message into another identity's inbox.
    """
    try:
        caller = caller_of(subject)
    except ValueError:
        return False
    return bool(reply) and str(reply).startswith(f"{inbox_prefix(caller)}.")


# --- the micro endpoints -----------------------------------------------------------------------------


INGEST_OPERATIONS = frozenset({
    "create_bead", "create_beads", "update_bead", "edit_bead", "learn", "ai_state_save", "remember_extracted",
    "remember_topics", "transfer_ops",
})
"""Operations whose requests carry text in bulk (up to the payload limit): a hub serves them on a NATS
connection of its own. nats-server buffers what a connection has not read yet up to its ``max_pending``, in
order, and cuts the connection beyond: a burst of large writes can then only ever fill (and at worst cut) the
ingest connection, while reads and everything else keep arriving on the other, unqueued behind them."""


BULK_BYTES = 64 << 10
"""A request larger than this is *bulk*: only ``bulk_max_running`` of them run in a hub process at once. Their
work is mostly copying (decoding, hashing, sending the text to the stores and back in the reply: milliseconds
of the event loop each), which would otherwise sit between every other request and its answer."""
_NO_WAIT = contextlib.nullcontext()


class HubService:
    """Runs the endpoints of one hub process on a NATS connection."""

    def __init__(
        self, ctx: HubContext, nc: NATS, version: str | None = None, metrics: HubMetrics | None = None,
        ingest: NATS | None = None,
    ) -> None:
        self.ctx = ctx
        self.nc = nc
        self.ingest = ingest or nc
        """The connection of :data:`INGEST_OPERATIONS` (the main one unless given)."""
        self.version = version or package_version("nexus-recall")
        """What ``$SRV.INFO`` reports: the installed package's version unless given."""
        self._service: Service | None = None
        settings = ctx.settings
        self.metrics = metrics if metrics is not None else HubMetrics()
        self.metrics.know_operations(OPERATIONS)
        self.tracing = Tracing(settings.tracing)
        self.serving = False
        """True while the endpoints are subscribed."""
        self.metrics_url: str | None = None
        """Where this process serves /metrics, /healthz and /readyz (None: ``metrics_port`` unset)."""
        self._slots = asyncio.Semaphore(settings.max_concurrency)
        self._bulk = asyncio.Semaphore(settings.bulk_max_running)
        self.limits = CallerLimits(settings.caller_max_running, settings.caller_max_requests, settings.caller_max_bytes)
        self.endpoints: dict[str, Endpoint] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._private_inboxes = bool(settings.auth_required or settings.nats_creds or settings.nats_user)
        """Under NATS auth, answer only into the caller's own inbox (see :func:`reply_inbox_ok`)."""
        self.repaired: asyncio.Task[int] | None = None
        self.events: Any = None
        """The process's EventConsumer, once running."""

    @property
    def max_reply_bytes(self) -> int:
        """The largest reply body the bus takes (its max payload, from the server, less room for headers)."""
        return self.nc.max_payload - REPLY_HEADROOM

    async def _notify(self, subject: str, body: bytes) -> None:
        fitted = fit_notification(body, self.max_reply_bytes)
        if fitted is None:
            log.warning("notification of %d bytes on %s cannot fit the bus; not sent", len(body), subject)
            return
        await self.nc.publish(subject, fitted)

    async def start(self) -> None:
        self.ctx.feed.notifier = self._notify
        service = self._service = Service(self.nc, SERVICE_NAME, self.version, "Nexus Recall memory hub")
        await service.start()
        settings = self.ctx.settings
        for op in OPERATIONS:
            endpoint = Endpoint(op, endpoint_subject(op), HUB_QUEUE_GROUP)
            self.endpoints[op] = endpoint
            service.endpoints.append(endpoint)
            await endpoint.listen(
                self.ingest if op in INGEST_OPERATIONS else self.nc, self._handler(op),
                settings.endpoint_pending_msgs, settings.endpoint_pending_bytes,
            )
        self.serving = True
        log.info("hub serving %d operations on %s", len(OPERATIONS), endpoint_subject("<op>"))

    def _record(self, op: str, started_ns: int, error: str | None = None, code: str | None = None) -> None:
        """One request of ``op`` answered (or dropped), ``started_ns`` (``perf_counter_ns``) after it arrived; on
        failure ``error`` describes it (for ``$SRV.STATS``) and ``code`` names it (an error code, ``dropped``
        or ``reply_failed``)."""
        elapsed_ns = time.perf_counter_ns() - started_ns
        self.endpoints[op].record(elapsed_ns, error)
        self.metrics.request_done(op, elapsed_ns / 1e9, code if error is not None else None)

    def _handler(self, op: str) -> Callable[[Msg], Awaitable[None]]:
        async def on_request(request: Msg) -> None:
            # NATS runs one subscription's callbacks one at a time, and a hub that stops reading its socket
            # is cut off by the server: decide at once, and leave the waiting and the work to a task.
            started = time.perf_counter_ns()
            endpoint = self.endpoints[op]
            if self._private_inboxes and not reply_inbox_ok(request.subject, request.reply):
                log.warning(
                    "dropped %s on %s: reply subject %r is not the caller's inbox",
                    op,
                    request.subject,
                    request.reply,
                )
                self.metrics.drop("foreign_inbox")
                self._record(op, started, "dropped: the reply subject is not the caller's inbox", "dropped")
                return
            size = len(request.data)
            try:
                caller = caller_token(request.subject)
                deadline = deadline_of(request.headers)
                self._check_deadline(deadline, "arrival")
                if size > self.ctx.settings.max_payload_bytes:
                    raise PayloadTooLarge(
                        f"payload of {size} bytes exceeds the limit of {self.ctx.settings.max_payload_bytes}"
                    )
                admitted = self._admit(caller, size)
            except RecallError as exc:
                self._record(op, started, _describe(exc), exc.code.value)
                try:
                    await _answer_error(endpoint, request, exc)
                except Exception:
                    log.exception("could not reply to %s", op)
                return
            self.metrics.in_flight.labels(op).inc()
            task = asyncio.create_task(self._serve(op, request, started, caller, admitted, size, deadline))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        return on_request

    def _admit(self, caller: str, size: int) -> CallerState:
        try:
            return self.limits.admit(caller, size)
        except Unavailable:
            self.metrics.rejected("busy")
            raise

    def _check_deadline(self, deadline: int | None, stage: str) -> None:
        """:class:`RecallTimeout` if the caller has given up; ``stage``: "arrival" or "queued" (for the reply)."""
        if deadline is None:
            return
        now = now_ms()
        if now > deadline + self.ctx.settings.deadline_grace_ms:
            self.metrics.rejected("deadline")
            raise RecallTimeout(
                f"skipped: the caller's deadline passed {now - deadline} ms before the hub could start it",
                {"reason": "deadline", "stage": stage, "deadline": deadline, "hub_time": now},
            )

    async def _serve(
        self,
        op: str,
        request: Msg,
        started: int,
        caller: str,
        admitted: CallerState,
        size: int,
        deadline: int | None,
    ) -> None:
        error: str | None = None
        code: str | None = None
        with (
            serving(request_id_of(request.headers), caller, op),
            self.tracing.server_span(op, caller, request.headers) as span,
        ):
            try:
                try:
                    async with admitted.running, self._bulk if size > BULK_BYTES else _NO_WAIT, self._slots:
                        self._check_deadline(deadline, "queued")  # the wait for a slot may have outlasted the caller
                        after = request.headers.get(INDEX_AFTER_HEADER) if request.headers else None
                        with (
                            settling(self.ctx, deadline, caller) if op in SETTLED_READERS else _NO_WAIT,
                            reading_after(after if op in KEYWORD_READERS else None),
                        ):
                            if op not in SETTLED_IN_RANK:
                                await work_settled()
                            body = await handle(self.ctx, op, request.subject, request.data, self.max_reply_bytes)
                except RecallError as exc:
                    error, code = _describe(exc), exc.code.value
                    await _answer_error(self.endpoints[op], request, exc)
                    return
                except Exception:
                    ref = uuid.uuid4().hex[:12]
                    log.exception("internal error %s in %s", ref, op)
                    internal = InternalError(f"internal error (ref {ref})", {"ref": ref})
                    error, code = _describe(internal), internal.code.value
                    await _answer_error(self.endpoints[op], request, internal)
                    return
                seq = self.ctx.index_log.last_appended
                await self.endpoints[op].respond(request, body, {INDEX_SEQ_HEADER: seq} if seq != ZERO else None)
            except Exception as failure:
                log.exception("could not reply to %s", op)
                error = error or f"reply failed: {type(failure).__name__}"
                code = code or "reply_failed"
            finally:
                self.limits.release(caller, admitted, size)
                self.metrics.in_flight.labels(op).dec()
                self._record(op, started, error, code)
                span.finish(code)
                if log.isEnabledFor(logging.DEBUG):
                    took_ms = (time.perf_counter_ns() - started) / 1e6
                    log.debug("%s by %s: %s in %.1f ms", op, caller, code or "ok", took_ms)

    async def stop(self) -> None:
        self.serving = False
        if self._service is not None:
            await self._service.stop()
        if self._tasks:  # requests in flight are answered; one that cannot finish does not hold the shutdown
            _, stuck = await asyncio.wait(set(self._tasks), timeout=IN_FLIGHT_AT_STOP_S)
            if stuck:
                log.warning("%d requests still running %.0f s into the shutdown were cancelled", len(stuck),
                            IN_FLIGHT_AT_STOP_S)
                await stop_tasks(stuck, within=IN_FLIGHT_AT_STOP_S)


def _describe(exc: RecallError) -> str:
    return f"{ERROR_STATUS[exc.code.value]} {exc.code.value}: {exc.message}"[:500]


async def _answer_error(endpoint: Endpoint, request: Msg, exc: RecallError) -> None:
    if not request.reply:  # nobody is waiting for it
        return
    reply: ErrorReply = exc.to_reply()
    body = reply.model_dump_json().encode()
    await endpoint.respond_error(request, ERROR_STATUS[exc.code.value], exc.code.value, body)
