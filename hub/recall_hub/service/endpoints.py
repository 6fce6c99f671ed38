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
import json
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import version as package_version
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from pydantic import BaseModel, ValidationError
from recall_schemas import (
    HTTP_STATUS,
    OPERATIONS,
    AuditTrail,
    BeadHistory,
    BeadList,
    ContextBlock,
    DecayReport,
    DuplicateReport,
    ErrorReply,
    GroupList,
    InternalError,
    InvalidRequest,
    PayloadTooLarge,
    RecallError,
    RecallTimeout,
    RelationshipList,
    SearchResult,
    StaleList,
    Subgraph,
    Unavailable,
    WhyResult,
    describe_validation,
)
from recall_schemas.coordination import ChangeBatch, Notification, UnifiedRecallResult
from recall_schemas.ids import AI_ID_PATTERN
from recall_schemas.requests import (
    DEADLINE_HEADER,
    INDEX_AFTER_HEADER,
    INDEX_SEQ_HEADER,
    REQUEST_ID_HEADER,
)
from recall_schemas.subjects import HUB_QUEUE_GROUP, SERVICE_NAME, caller_of, endpoint_subject, inbox_prefix

from recall_hub.context import HubContext
from recall_hub.logs import serving
from recall_hub.ops.dispatch import dispatch
from recall_hub.ops.history import cut_history, history_items
from recall_hub.ops.listing import PAGED_OPERATIONS, cursor_after
from recall_hub.ops.trust import cut_stale
from recall_hub.retrieval.freshness import reading_after
from recall_hub.retrieval.search import KEYWORD_READERS, render
from recall_hub.service.metrics import HubMetrics
from recall_hub.service.micro import Endpoint, Service
from recall_hub.service.tracing import Tracing
from recall_hub.store.audit import bead_ids_of
from recall_hub.store.index_log import ZERO
from recall_hub.timeutil import now_ms
from recall_hub.tokens import count_tokens

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


# --- replies that fit the bus ---------------------------------------------------------------------------

REPLY_HEADROOM = 1024
"""Bytes of the bus's max payload kept for a reply's headers (NATS counts headers and body together)."""


@dataclass(frozen=True)
class _Cut:
    """How a reply with a list is cut to its first ``n`` items (and marked ``truncated``)."""

    items: Callable[[Any], Sequence[Any]]
    """The items that may be cut, in the order they are kept."""
    cut: Callable[[str, Any, int], BaseModel]
    """``(op, reply, n)``: the reply with its first ``n`` items only, ``truncated`` set."""
    sized: bool = True
    """The items' encoded sizes bound the reply's, so a first guess at ``n`` can be computed."""
    additive: bool = True
    """... and add up to it (but for a few bytes): the guess is the answer, or nearly."""
    slim: Callable[[Any], BaseModel | None] | None = None
    """When not even one item fits: a lighter reply that still makes progress (None: there is none)."""


def _cut_beads(op: str, reply: BeadList, n: int) -> BeadList:
    beads = reply.beads[:n]
    paged = op in PAGED_OPERATIONS and bool(beads)
    return reply.model_copy(
        update={"beads": beads, "truncated": True, "next_cursor": cursor_after(beads[-1]) if paged else None}
    )


def _cut_hits(op: str, reply: SearchResult, n: int) -> SearchResult:
    hits = reply.hits[:n]
    tokens = None if reply.tokens is None else sum(count_tokens(render(h.bead)) + 1 for h in hits)
    return reply.model_copy(update={"hits": hits, "tokens": tokens, "truncated": True})


def _depth_first(graph: Subgraph) -> list[Any]:
    return sorted(graph.nodes, key=lambda node: node.depth)  # stable: the walk's order within a depth


def _cut_graph(graph: Subgraph, n: int) -> Subgraph:
    kept = {node.bead.bead_id for node in _depth_first(graph)[:n]}
    return graph.model_copy(
        update={
            "nodes": [node for node in graph.nodes if node.bead.bead_id in kept],
            "edges": [e for e in graph.edges if e.from_id in kept and e.to_id in kept],
            "truncated": True,
        }
    )


def _cut_why(op: str, reply: WhyResult, n: int) -> WhyResult:
    graph = _cut_graph(reply.graph, n)
    kept = {node.bead.bead_id for node in graph.nodes}
    return reply.model_copy(update={"graph": graph, "seeds": [s for s in reply.seeds if s in kept], "truncated": True})


def _cut_context(op: str, reply: ContextBlock, n: int) -> ContextBlock:
    # The text is the kept beads rendered one after the other, each starting with a header that ends in
    # "| <bead id>] " (retrieval.search.render), joined by blank lines: cut before bead n's header.
    text = reply.text
    if n < len(reply.bead_ids):
        header = text.find(f" | {reply.bead_ids[n]}] ")
        start = text.rfind("\n\n[", 0, header) if header > 0 else -1
        text = text[:start] if start >= 0 else ""
    kept = reply.bead_ids[:n] if text else []
    return reply.model_copy(
        update={
            "text": text,
            "bead_ids": kept,
            "tokens": count_tokens(text) + len(kept) if text else 0,
            "dropped": reply.dropped + len(reply.bead_ids) - len(kept),
            "truncated": True,
        }
    )


def _interleaved(reply: UnifiedRecallResult) -> list[Any]:
    entries, hits = reply.entries, reply.beads.hits
    out: list[Any] = []
    for i in range(max(len(entries), len(hits))):
        out += ([entries[i]] if i < len(entries) else []) + ([hits[i]] if i < len(hits) else [])
    return out


def _cut_unified(op: str, reply: UnifiedRecallResult, n: int) -> UnifiedRecallResult:
    kept = _interleaved(reply)[:n]
    entries = [item for item in kept if item in reply.entries]
    hits = [item for item in kept if item in reply.beads.hits]
    beads = _cut_hits(op, reply.beads, len(hits)) if len(hits) < len(reply.beads.hits) else reply.beads
    return reply.model_copy(update={"entries": entries, "beads": beads, "truncated": True})


def _cut_changes(op: str, reply: ChangeBatch, n: int) -> ChangeBatch:
    changes = reply.changes[:n]
    return reply.model_copy(
        update={"changes": changes, "cursor": changes[-1].cursor if changes else reply.cursor, "truncated": True}
    )


def _slim_changes(reply: ChangeBatch) -> ChangeBatch | None:
    # A change whose bead alone is too large still moves the feed on: it comes without its bead.
    if not reply.changes:
        return None
    first = reply.changes[0].model_copy(update={"bead": None})
    return reply.model_copy(update={"changes": [first], "cursor": first.cursor, "truncated": True})


def _cut_list(field: str) -> Callable[[str, Any, int], BaseModel]:
    def cut(op: str, reply: Any, n: int) -> BaseModel:
        result: BaseModel = reply.model_copy(update={field: getattr(reply, field)[:n], "truncated": True})
        return result

    return cut


_CUTS: dict[type[BaseModel], _Cut] = {
    BeadList: _Cut(lambda r: r.beads, _cut_beads),
    SearchResult: _Cut(lambda r: r.hits, _cut_hits),
    Subgraph: _Cut(_depth_first, lambda op, r, n: _cut_graph(r, n), additive=False),
    WhyResult: _Cut(lambda r: _depth_first(r.graph), _cut_why, additive=False),
    ContextBlock: _Cut(lambda r: r.bead_ids, _cut_context, sized=False, additive=False),
    UnifiedRecallResult: _Cut(_interleaved, _cut_unified),
    ChangeBatch: _Cut(lambda r: r.changes, _cut_changes, slim=_slim_changes),
    RelationshipList: _Cut(lambda r: r.relationships, _cut_list("relationships")),
    DuplicateReport: _Cut(lambda r: r.clusters, _cut_list("clusters")),
    DecayReport: _Cut(lambda r: r.archived, _cut_list("archived")),
    GroupList: _Cut(lambda r: r.groups, _cut_list("groups")),
    StaleList: _Cut(lambda r: r.items, cut_stale),
    BeadHistory: _Cut(history_items, cut_history),
    AuditTrail: _Cut(lambda r: r.entries, _cut_list("entries")),
}


def _size(item: Any) -> int:
    return len(item.model_dump_json()) if isinstance(item, BaseModel) else len(json.dumps(item))


def fit_reply(op: str, reply: BaseModel, limit: int) -> tuple[BaseModel, bytes]:
    """``reply`` and its encoding, cut to at most ``limit`` bytes if need be.

    A reply over the limit would never arrive (NATS refuses it): its list is cut to the longest prefix
    that fits and it says ``truncated`` (listings also give the ``next_cursor`` after their last bead; a
    change batch's ``cursor`` is its last change). A reply that cannot be cut that far — not even one item
    fits, or it has no list — is :class:`PayloadTooLarge` instead of silence.
    """
    body = reply.model_dump_json().encode()
    if len(body) <= limit:
        return reply, body
    rule = _CUTS.get(type(reply))
    items = rule.items(reply) if rule is not None else []
    best: tuple[BaseModel, bytes] | None = None

    def attempt(n: int) -> bool:
        nonlocal best
        assert rule is not None
        candidate = rule.cut(op, reply, n)
        data = candidate.model_dump_json().encode()
        if len(data) > limit:
            return False
        best = (candidate, data)
        return True

    high = len(items) - 1  # all of them do not fit
    if rule is not None and high >= 1:
        if rule.sized:  # as many items as fit by their own sizes: for additive replies the usual answer
            room = limit - len(rule.cut(op, reply, 0).model_dump_json()) - 256
            guess = 0
            for item in items[:high]:
                room -= _size(item) + 1
                if room < 0:
                    break
                guess += 1
            high = max(1, min(high, guess if rule.additive else guess + 1))
        if rule.additive and attempt(high):
            while high + 1 < len(items) and attempt(high + 1):  # the margin may leave room for a few more
                high += 1
        else:
            low = 1
            while low <= high:
                middle = (low + high) // 2
                if attempt(middle):
                    low = middle + 1
                else:
                    high = middle - 1
    if best is None and rule is not None and rule.slim is not None:
        slim = rule.slim(reply)
        if slim is not None and len(data := slim.model_dump_json().encode()) <= limit:
            best = (slim, data)
    if best is None:
        raise PayloadTooLarge(
            f"the reply to {op} ({len(body)} bytes) cannot be cut to fit the bus's max payload ({limit} bytes)",
            {"reason": "reply_too_large", "reply_bytes": len(body), "max_bytes": limit},
        )
    return best


def fit_notification(body: bytes, limit: int) -> bytes | None:
    """A notification that fits ``limit`` bytes: as is, or without the bead or brief it carries (the
    receiver fetches them); None if even that does not fit."""
    if len(body) <= limit:
        return body
    note = Notification.model_validate_json(body)
    slim = note.model_copy(
        update={"change": note.change.model_copy(update={"bead": None}) if note.change else None, "brief": None}
    )
    data = slim.model_dump_json().encode()
    return data if len(data) <= limit else None


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


# --- fairness between identities ---------------------------------------------------------------------


class _Caller:
    """What one identity has in progress in this process."""

    __slots__ = ("bytes", "requests", "running")

    def __init__(self, max_running: int) -> None:
        self.requests = 0
        self.bytes = 0
        self.running = asyncio.Semaphore(max_running)


class CallerLimits:
    """Per-identity admission: the requests and payload bytes one caller may have in progress (running or
    waiting) are capped — beyond, :class:`Unavailable` with ``details.reason == "busy"`` at once — and only
    ``max_running`` of them run at the same time, so one identity's flood never takes every slot.

    A request is always admitted when its caller has nothing else in progress, whatever its size (the
    payload limit bounds it). Callers with nothing in progress are forgotten.
    """

    def __init__(self, max_running: int, max_requests: int, max_bytes: int) -> None:
        self.max_running = max_running
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self._callers: dict[str, _Caller] = {}

    def admit(self, caller: str, size: int) -> _Caller:
        state = self._callers.get(caller)
        if state is None:
            state = self._callers[caller] = _Caller(self.max_running)
        elif state.requests >= self.max_requests or state.bytes + size > self.max_bytes:
            raise Unavailable(
                f"busy: {caller} already has {state.requests} requests ({state.bytes} bytes) in progress "
                f"at this hub (limits {self.max_requests} requests, {self.max_bytes} bytes); retry later",
                {
                    "reason": "busy",
                    "in_progress": state.requests,
                    "in_progress_bytes": state.bytes,
                    "max_requests": self.max_requests,
                    "max_bytes": self.max_bytes,
                },
            )
        state.requests += 1
        state.bytes += size
        return state

    def release(self, caller: str, state: _Caller, size: int) -> None:
        state.requests -= 1
        state.bytes -= size
        if state.requests == 0 and self._callers.get(caller) is state:
            del self._callers[caller]

    def in_progress(self, caller: str) -> tuple[int, int]:
        """``(requests, bytes)`` the caller has in progress."""
        state = self._callers.get(caller)
        return (state.requests, state.bytes) if state else (0, 0)


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

    def _admit(self, caller: str, size: int) -> _Caller:
        try:
            return self.limits.admit(caller, size)
        except Unavailable:
            self.metrics.rejected("busy")
            raise

    async def _handed_off_done(self) -> None:
        """Wait, bounded, for the vectors of writes handed off (``create_settle``) before a read that must see
        its caller's writes; the keyword index is brought up to them where it is read
        (:mod:`~recall_hub.retrieval.freshness`)."""
        try:
            async with asyncio.timeout(self.ctx.settings.index_wait_s):
                await self.ctx.background.wait_for_earlier()
        except TimeoutError:
            log.warning("handed-off writes still running after %.1f s; answering meanwhile",
                        self.ctx.settings.index_wait_s)

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
        admitted: _Caller,
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
                        if op not in KEYWORD_READERS:
                            after = None
                        elif after:
                            await self._handed_off_done()
                        with reading_after(after):
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
            for task in stuck:
                task.cancel()
            if stuck:
                log.warning("%d requests still running %.0f s into the shutdown were cancelled", len(stuck),
                            IN_FLIGHT_AT_STOP_S)
                await asyncio.wait(stuck, timeout=IN_FLIGHT_AT_STOP_S)


def _describe(exc: RecallError) -> str:
    return f"{ERROR_STATUS[exc.code.value]} {exc.code.value}: {exc.message}"[:500]


async def _answer_error(endpoint: Endpoint, request: Msg, exc: RecallError) -> None:
    if not request.reply:  # nobody is waiting for it
        return
    reply: ErrorReply = exc.to_reply()
    body = reply.model_dump_json().encode()
    await endpoint.respond_error(request, ERROR_STATUS[exc.code.value], exc.code.value, body)
