"""RecallClient: an agent's connection to the hub, as one AI id.

Why this module is long (~970 lines): it is the typed public API, one short method per hub operation (54 of
them, each a docstring and a request), and splitting the class across files would scatter what a reader
looks up in one place; the transport pieces (in-flight limits, conflicts, events, tracing) live apart."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import MaxPayloadError, NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from pydantic import BaseModel, ValidationError
from recall_schemas import (
    MAX_EDGE_SOURCES,
    AddMember,
    AddRelationship,
    AuditRecord,
    AuditTrail,
    BeadHistory,
    BeadList,
    ContextBlock,
    CreateBead,
    CreateBeads,
    CreatedBeads,
    CreatedItem,
    CreateGroup,
    DecayOldMemories,
    DecayReport,
    DeduplicateBeads,
    DeleteBead,
    Deleted,
    DuplicateReport,
    EditBead,
    ErrorReply,
    FindSimilar,
    GetAuditLog,
    GetBead,
    GetByGroup,
    GetBySession,
    GetByTag,
    GetContext,
    GetEdges,
    GetHistory,
    GetRecent,
    GetRelationships,
    Group,
    GroupList,
    InvalidRequest,
    ListGroups,
    ListMembers,
    ListStale,
    MemoryBead,
    PayloadTooLarge,
    RankByImportance,
    RecallTimeout,
    RejectBead,
    Relationship,
    RelationshipList,
    RelType,
    RemoveMember,
    SearchBeads,
    SearchResult,
    StaleBead,
    StaleList,
    Subgraph,
    SupersedeBead,
    TraverseGraph,
    Unauthorized,
    Unavailable,
    UpdateBead,
    VerifyBead,
    Why,
    WhyResult,
    describe_validation,
    error_from_reply,
)
from recall_schemas import capture as cap
from recall_schemas import coordination as c
from recall_schemas import forget as fg
from recall_schemas.creds import jwt_claims, parse_creds
from recall_schemas.ids import AI_ID_PATTERN
from recall_schemas.requests import (
    DEADLINE_HEADER,
    INDEX_AFTER_HEADER,
    INDEX_SEQ_HEADER,
    MAX_BATCH,
    MAX_LIMIT,
    REQUEST_ID_HEADER,
    index_seq_key,
)
from recall_schemas.subjects import inbox_prefix, notify_subject, request_subject
from recall_schemas.tasks import stop_tasks

from .conflicts import DEFAULT_ATTEMPTS, retry_on_conflict
from .connections import close_nats
from .events import EventPublisher
from .tracing import client_span, tracing_from_env

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)
_CHANGES_PAGE = 200
CONNECT_TIMEOUT_S = 10.0
"""How long a client waits for NATS by default before it reports the bus unavailable."""
ERROR_CODE_HEADER = "Nats-Service-Error-Code"


def creds_identity(path: str) -> str:
    """The identity a NATS credentials file was issued to: the ``name`` of its user JWT (unverified;
    the server verifies). Read before nats-py sees the file, which loops forever on one without a JWT."""
    try:
        text = Path(path).expanduser().read_text()
    except OSError as exc:
        raise Unauthorized(f"cannot read NATS credentials {path}: {exc}") from exc
    try:
        jwt, _ = parse_creds(text)
        claims = jwt_claims(jwt)
    except ValueError as exc:
        raise Unauthorized(f"{path}: {exc}") from exc
    return str(claims.get("name", ""))


class _InFlight:
    """How many requests, and payload bytes, one client has on the bus at once.

    A burst beyond it waits here, first come first served, instead of being pushed onto the bus at once: a
    few hundred large requests sent together reach the hub's connection faster than it can read them, and
    a NATS server disconnects a reader that falls 64 MB behind (a slow consumer), for every client. A
    request waits at most the client's timeout and is then not sent at all. One request is always let
    through when nothing else is in flight, whatever its size.
    """

    def __init__(self, max_requests: int, max_bytes: int) -> None:
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.requests = 0
        self.bytes = 0
        self._waiting: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    def _fits(self, size: int) -> bool:
        return self.requests == 0 or (self.requests < self.max_requests and self.bytes + size <= self.max_bytes)

    def _take(self, size: int) -> None:
        self.requests += 1
        self.bytes += size

    async def acquire(self, size: int, patience: float) -> None:
        """Room for a request of ``size`` bytes; :class:`TimeoutError` if none came within ``patience`` s."""
        if not self._waiting and self._fits(size):
            self._take(size)
            return
        entry = (size, asyncio.get_running_loop().create_future())
        self._waiting.append(entry)
        try:
            async with asyncio.timeout(patience):
                await entry[1]
        except BaseException:
            if entry[1].done() and not entry[1].cancelled():
                self.release(size)  # granted just as we gave up
            else:
                entry[1].cancel()
                with contextlib.suppress(ValueError):
                    self._waiting.remove(entry)
                self._wake()  # a large request that gave up may have held back smaller ones
            raise

    def release(self, size: int) -> None:
        self.requests -= 1
        self.bytes -= size
        self._wake()

    def _wake(self) -> None:
        while self._waiting and self._fits(self._waiting[0][0]):
            size, future = self._waiting.popleft()
            if not future.done():
                self._take(size)
                future.set_result(None)


def _build(model: type[M], **fields: Any) -> M:
    """The request model, or :class:`InvalidRequest` naming what is wrong — before anything is sent."""
    try:
        return model(**fields)
    except ValidationError as exc:
        raise InvalidRequest(describe_validation(exc, model)) from exc


class RecallClient:
    """Async client of the Nexus Recall hub, acting as ``ai_id``.

    >>> async with RecallClient("a_worker1", "nats://127.0.0.1:4222") as client:
    ...     bead = await client.create_bead("Chose FalkorDB", "Graph + Redis in one", bead_type="decision")

    Requests that time out or find no hub are retried ``retries`` times with backoff; creates carry
    an idempotency key, so a retry never makes a second bead.

    Every request carries a ``Recall-Request-Id`` (the same on its retries; the hub's log lines about it
    show it). With ``tracing`` (default: ``RECALL_TRACING``) and OpenTelemetry installed, each request is
    a client span whose trace the hub continues.
    """

    def __init__(
        self,
        ai_id: str,
        nats_url: str = "nats://127.0.0.1:4222",
        *,
        creds: str | None = None,
        user: str | None = None,
        password: str | None = None,
        timeout: float = 5.0,
        retries: int = 2,
        connect_timeout: float = CONNECT_TIMEOUT_S,
        nc: NATS | None = None,
        max_in_flight: int = 64,
        max_in_flight_bytes: int = 4 << 20,
        tracing: bool | None = None,
    ) -> None:
        if not re.fullmatch(AI_ID_PATTERN, ai_id):
            raise InvalidRequest(f"{ai_id!r} is not an AI id (o_… or a_…)")
        if max_in_flight < 1 or max_in_flight_bytes < 1:
            raise InvalidRequest("max_in_flight and max_in_flight_bytes must be at least 1")
        self.ai_id = ai_id
        self.nats_url = nats_url
        self.timeout = timeout
        self.retries = retries
        self._in_flight = _InFlight(max_in_flight, max_in_flight_bytes)
        self._index_seq: str | None = None
        """The furthest index-log position a hub reported to this client: its searches ask for it, so
        they find this client's own writes whichever hub answers."""
        self._denied: str | None = None
        """The last permissions violation NATS reported for this connection (a setup mistake)."""
        self.connect_timeout = connect_timeout
        self._creds = creds
        self._user = user
        self._password = password
        self._nc = nc
        self._owns_nc = nc is None
        self._connecting = asyncio.Lock()
        self._events: EventPublisher | None = None
        self.tracing = tracing_from_env() if tracing is None else tracing

    @property
    def creds(self) -> str | None:
        """The path of the NATS credentials file this client connects with, if any."""
        return self._creds

    @property
    def index_position(self) -> str | None:
        """How far the hubs' keyword index must be for this client's searches: its own last write, or a
        position it was given with :meth:`read_after`. Hand it to another client (another agent) so that
        client's searches find these writes too."""
        return self._index_seq

    def read_after(self, position: str | None) -> None:
        """Let this client's searches find everything written up to ``position`` (another client's
        :attr:`index_position`): a hub waits, bounded, until its keyword index has it."""
        if position and (self._index_seq is None or index_seq_key(position) > index_seq_key(self._index_seq)):
            self._index_seq = position

    async def connect(self) -> RecallClient:
        """Connect, once: concurrent first calls (two adapters sharing a client) share one connection."""
        if self._nc is not None:
            return self
        async with self._connecting:
            if self._nc is None:
                self._nc = await self._open()
        return self

    async def _open(self) -> NATS:
        options: dict[str, Any] = {
            "servers": [url.strip() for url in self.nats_url.split(",")],
            "name": f"recall-client:{self.ai_id}",
            "inbox_prefix": inbox_prefix(self.ai_id).encode(),
            "max_reconnect_attempts": -1,
            "reconnect_time_wait": 0.5,
            "allow_reconnect": True,
        }
        if self._creds:
            issued_to = creds_identity(self._creds)
            if issued_to != self.ai_id:
                if re.fullmatch(AI_ID_PATTERN, issued_to):
                    raise Unauthorized(f"credentials {self._creds} belong to {issued_to}, not {self.ai_id}")
                log.warning("credentials %s are issued to %r, not %s", self._creds, issued_to, self.ai_id)
            options["user_credentials"] = self._creds
        if self._user:
            options["user"] = self._user
            options["password"] = self._password
        return await self._connect(options)

    async def _connect(self, options: dict[str, Any]) -> NATS:
        """``nats.connect``, but a server that refuses the credentials fails it at once instead of
        being retried forever (``max_reconnect_attempts=-1`` also governs the first connect)."""
        refused = asyncio.Event()

        async def on_error(exc: Exception) -> None:
            text = str(exc).lower()
            if "authorization violation" in text:
                refused.set()
            elif "permissions violation" in text and any(
                own in str(exc) for own in (request_subject(self.ai_id, ""), inbox_prefix(self.ai_id))
            ):  # refused to publish this identity's requests or to receive its replies
                self._denied = str(exc)
            log.warning("NATS (%s): %s", self.ai_id, exc)

        connecting = asyncio.ensure_future(nats.connect(**options, error_cb=on_error))
        denied = asyncio.ensure_future(refused.wait())
        try:
            await asyncio.wait({connecting, denied}, timeout=self.connect_timeout, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            # The caller gave up (its own timeout, a sidecar's): the attempt must end with it, or it would go on
            # retrying, connect once NATS is back, and hold a connection nobody closes.
            await stop_tasks([connecting])
            if connecting.done() and not connecting.cancelled() and connecting.exception() is None:
                await close_nats(connecting.result())
            raise
        finally:
            denied.cancel()
        if not connecting.done():
            await stop_tasks([connecting])
            if connecting.done() and not connecting.cancelled() and connecting.exception() is None:
                return connecting.result()  # connected just as it was given up
            if refused.is_set():
                raise Unauthorized(f"NATS at {self.nats_url} refused the credentials of {self.ai_id}")
            raise Unavailable(f"cannot reach NATS at {self.nats_url} within {self.connect_timeout}s")
        try:
            return connecting.result()
        except Exception as exc:
            raise Unavailable(f"cannot connect to NATS at {self.nats_url}: {exc}") from exc

    async def close(self) -> None:
        """Drain the connection (:func:`~recall_client.connections.close_nats`): a connection left reconnecting
        would retry forever."""
        nc, self._nc = self._nc, None
        if nc is not None and self._owns_nc:
            await close_nats(nc)

    async def __aenter__(self) -> RecallClient:
        return await self.connect()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    @property
    def nc(self) -> NATS:
        if self._nc is None:
            raise Unavailable("client is not connected; use 'async with RecallClient(...)'")
        return self._nc

    async def call(self, op: str, request: BaseModel, reply_type: type[M]) -> M:
        """Send one request and decode its reply; hub errors are raised as their typed exception."""
        with client_span(op, self.ai_id, self.tracing) as trace_headers:
            return await self._call(op, request, reply_type, {REQUEST_ID_HEADER: uuid.uuid4().hex, **trace_headers})

    async def _call(self, op: str, request: BaseModel, reply_type: type[M], fixed_headers: Mapping[str, str]) -> M:
        subject = request_subject(self.ai_id, op)
        payload = request.model_dump_json(exclude_unset=True).encode()
        try:
            await self._in_flight.acquire(len(payload), self.timeout)
        except TimeoutError:
            raise RecallTimeout(
                f"{op}: this client's requests in flight left no room within {self.timeout}s; nothing was sent"
            ) from None
        try:
            msg = await self._send(op, subject, payload, fixed_headers)
        finally:
            self._in_flight.release(len(payload))
        seq = msg.headers.get(INDEX_SEQ_HEADER) if msg.headers else None
        self.read_after(seq)
        if msg.headers and ERROR_CODE_HEADER in msg.headers:
            try:
                error = ErrorReply.model_validate_json(msg.data)
            except ValidationError:
                raise Unavailable(
                    f"{op}: error {msg.headers.get(ERROR_CODE_HEADER)} {msg.headers.get('Nats-Service-Error')}"
                ) from None
            raise error_from_reply(error)
        return reply_type.model_validate_json(msg.data)

    async def _send(self, op: str, subject: str, payload: bytes, fixed_headers: Mapping[str, str]) -> Msg:
        """The reply to one request, with ``retries`` further attempts after timeouts or no responders."""
        delay = 0.1
        for attempt in range(self.retries + 1):
            # The hub skips a request still waiting for a slot when this attempt has given up on it.
            headers = {**fixed_headers, DEADLINE_HEADER: str(time.time_ns() // 1_000_000 + int(self.timeout * 1000))}
            if self._index_seq is not None:
                headers[INDEX_AFTER_HEADER] = self._index_seq
            try:
                msg = await self._request(subject, payload, headers)
                break
            except MaxPayloadError as exc:
                raise PayloadTooLarge(
                    f"{op}: a request of {len(payload)} bytes exceeds the bus's max payload ({self.nc.max_payload})"
                ) from exc
            except (NatsTimeout, NoRespondersError) as exc:
                if self._denied is not None:
                    raise Unauthorized(
                        f"{op}: NATS does not let this connection act as {self.ai_id} (are the credentials "
                        f"{self.ai_id}'s?): {self._denied}"
                    ) from exc
                if attempt == self.retries:
                    if isinstance(exc, NoRespondersError):
                        raise Unavailable(f"no hub is serving {op}") from exc
                    raise RecallTimeout(f"{op}: no reply within {self.timeout}s") from exc
                log.debug("%s: %s, retry %d", op, type(exc).__name__, attempt + 1)
                await asyncio.sleep(delay)
                delay *= 2
        return msg

    async def _request(self, subject: str, payload: bytes, headers: dict[str, str]) -> Msg:
        """One attempt, ``timeout`` long: the request is sent again while no hub is subscribed (a hub
        starting, restarting or reconnecting to NATS), so a short gap costs a pause, not an attempt."""
        deadline = time.monotonic() + self.timeout
        pause = 0.05
        while True:
            try:
                return await self.nc.request(
                    subject, payload, timeout=max(0.01, deadline - time.monotonic()), headers=headers
                )
            except NoRespondersError:
                if time.monotonic() + pause >= deadline:
                    raise
                await asyncio.sleep(pause)
                pause = min(pause * 2, 0.5)

    # --- beads ----------------------------------------------------------------------------------

    async def create_bead(self, title: str, content: str = "", **fields: Any) -> MemoryBead:
        """Store a memory. ``fields``: any of :class:`CreateBead` (bead_type, importance, tags,
        session_id, subsession_id, group_id, visibility, metadata, provenance, idempotency_key)."""
        fields.setdefault("idempotency_key", uuid.uuid4().hex)
        return await self.call("create_bead", _build(CreateBead, title=title, content=content, **fields), MemoryBead)

    async def create_beads(
        self,
        beads: Iterable[CreateBead | Mapping[str, Any]],
        *,
        batch_size: int = 64,
        batch_bytes: int = 256 * 1024,
        concurrency: int = 1,
        progress: Callable[[int], None] | None = None,
    ) -> list[CreatedItem]:
        """Store many beads, in batches of at most ``batch_size`` beads and ``batch_bytes`` bytes with
        ``concurrency`` batches in flight. The beads of one batch are stored in order (``created_at`` a
        millisecond apart, so sessions keep it); batches sent concurrently may interleave. A bead
        without an idempotency key gets one, so a retried batch stores nothing twice. One
        :class:`CreatedItem` per bead, in order (an item carries ``error`` when that bead was refused);
        ``progress(n)`` is called with how many beads were answered."""
        requests = [b if isinstance(b, CreateBead) else _build(CreateBead, **b) for b in beads]
        requests = [
            r if r.idempotency_key else r.model_copy(update={"idempotency_key": uuid.uuid4().hex}) for r in requests
        ]
        batches: list[list[CreateBead]] = []
        size = 0
        for request in requests:
            encoded = len(request.model_dump_json(exclude_unset=True)) + 1
            if not batches or len(batches[-1]) >= min(batch_size, MAX_BATCH) or size + encoded > batch_bytes:
                batches.append([])
                size = 0
            batches[-1].append(request)
            size += encoded
        results: list[list[CreatedItem]] = [[] for _ in batches]
        slots = asyncio.Semaphore(max(1, concurrency))
        answered = 0

        async def send(i: int, batch: list[CreateBead]) -> None:
            nonlocal answered
            async with slots:
                reply = await self.call("create_beads", CreateBeads(beads=batch), CreatedBeads)
            results[i] = reply.items
            answered += len(batch)
            if progress is not None:
                progress(answered)

        await asyncio.gather(*(send(i, batch) for i, batch in enumerate(batches)))
        return [item for batch in results for item in batch]

    async def get_bead(self, bead_id: str, as_of: datetime | None = None) -> MemoryBead:
        """The bead; with ``as_of``, its version of then (not found if it was created later)."""
        return await self.call("get_bead", _build(GetBead, bead_id=bead_id, as_of=as_of), MemoryBead)

    async def update_bead(self, bead_id: str, *, if_version: int | None = None, **updates: Any) -> MemoryBead:
        """Change fields (any of :class:`BeadUpdates`); others stay as they are. With ``if_version``
        the change applies only if the bead is still at that version, else :class:`Conflict`."""
        request = _build(UpdateBead, bead_id=bead_id, updates=updates, if_version=if_version)
        return await self.call("update_bead", request, MemoryBead)

    async def modify_bead(
        self, bead_id: str, change: Callable[[MemoryBead], dict[str, Any]], attempts: int = DEFAULT_ATTEMPTS
    ) -> MemoryBead:
        """Read-modify-write without losing concurrent changes: read the bead, ask ``change`` for the
        fields to set (e.g. ``lambda b: {"content": b.content + " (checked)"}``), write them if nobody
        changed the bead meanwhile, and start over from a fresh read if somebody did
        (:func:`~recall_client.retry_on_conflict`). For tags, metadata keys and importance,
        :meth:`edit_bead` needs no read at all."""

        async def attempt() -> MemoryBead:
            bead = await self.get_bead(bead_id)
            return await self.update_bead(bead_id, if_version=bead.version, **change(bead))

        return await retry_on_conflict(attempt, attempts)

    async def edit_bead(
        self,
        bead_id: str,
        *,
        add_tags: Sequence[str] = (),
        remove_tags: Sequence[str] = (),
        set_metadata: Mapping[str, Any] | None = None,
        remove_metadata: Sequence[str] = (),
        add_importance: int = 0,
        if_version: int | None = None,
    ) -> MemoryBead:
        """Change tags, metadata keys and importance relative to the bead's current state, atomically on the
        hub: concurrent edits never lose each other (``add_importance=1`` from ten agents adds ten)."""
        request = _build(
            EditBead, bead_id=bead_id, add_tags=list(add_tags), remove_tags=list(remove_tags),
            set_metadata=dict(set_metadata or {}), remove_metadata=list(remove_metadata),
            add_importance=add_importance, if_version=if_version,
        )
        return await self.call("edit_bead", request, MemoryBead)

    async def delete_bead(self, bead_id: str, *, if_version: int | None = None) -> Deleted:
        return await self.call("delete_bead", _build(DeleteBead, bead_id=bead_id, if_version=if_version), Deleted)

    # --- search and listing ---------------------------------------------------------------------

    async def search_beads(
        self, query: str, limit: int = 20, filters: dict[str, Any] | None = None, **options: Any
    ) -> SearchResult:
        """Search visible beads. ``filters``: :class:`BeadFilters` fields (e.g. valid_at); ``options``: mode,
        max_tokens, as_of (search the store as it was then)."""
        request = _build(SearchBeads, query=query, limit=limit, filters=filters or {}, **options)
        return await self.call("search_beads", request, SearchResult)

    async def find_similar(self, bead_id: str, threshold: float = 0.7, limit: int = 10) -> SearchResult:
        request = _build(FindSimilar, bead_id=bead_id, threshold=threshold, limit=limit)
        return await self.call("find_similar", request, SearchResult)

    async def why(
        self, query: str, hops: int = 2, rel_types: Sequence[RelType | str] = (), **options: Any
    ) -> WhyResult:
        """Semantic seeds for ``query`` plus the typed graph around them. ``options``: seeds, limit, filters."""
        request = _build(Why, query=query, hops=hops, rel_types=list(rel_types), **options)
        return await self.call("why", request, WhyResult)

    async def context(self, query: str, max_tokens: int = 1000, **options: Any) -> ContextBlock:
        """The best memory for ``query`` that fits ``max_tokens``, rendered as one text block.
        ``options``: filters, max_per_source."""
        request = _build(GetContext, query=query, max_tokens=max_tokens, **options)
        return await self.call("context", request, ContextBlock)

    async def _listing(self, op: str, model: type[BaseModel], limit: int, **fields: Any) -> list[MemoryBead]:
        """Up to ``limit`` beads of a listing, page after page: a page cut to fit the bus says
        ``truncated``, and its ``next_cursor`` continues the listing after its last bead."""
        return [bead async for bead in self._pages(op, model, limit, **fields)]

    async def _pages(
        self, op: str, model: type[BaseModel], limit: int | None, **fields: Any
    ) -> AsyncIterator[MemoryBead]:
        """The beads of a listing as they are read, page after page (at most :data:`MAX_LIMIT` a request), up to
        ``limit`` (None: all of them)."""
        read = 0
        size = MAX_LIMIT if limit is None else min(limit, MAX_LIMIT)
        request = _build(model, limit=size, **fields)  # a first page names no cursor
        while True:
            reply = await self.call(op, request, BeadList)
            for bead in reply.beads:
                yield bead
            read += len(reply.beads)
            if (limit is not None and read >= limit) or reply.next_cursor is None or not reply.beads:
                return
            size = MAX_LIMIT if limit is None else min(limit - read, MAX_LIMIT)
            request = _build(model, limit=size, cursor=reply.next_cursor, **fields)

    async def get_by_session(
        self, session_id: str, limit: int = 100, as_of: datetime | None = None
    ) -> list[MemoryBead]:
        """The visible beads of a session (your own of that id, else a groupmate's), oldest first: up to
        ``limit`` (paged for you). Every listing takes ``as_of``: the listing as the store knew it then."""
        return await self._listing("get_by_session", GetBySession, limit, session_id=session_id, as_of=as_of)

    async def get_by_group(self, group_id: str, limit: int = 100, as_of: datetime | None = None) -> list[MemoryBead]:
        """The beads of a group, newest first: up to ``limit`` (paged for you)."""
        return await self._listing("get_by_group", GetByGroup, limit, group_id=group_id, as_of=as_of)

    async def get_by_tag(self, tag: str, limit: int = 100, as_of: datetime | None = None) -> list[MemoryBead]:
        """Visible beads with ``tag``, newest first: up to ``limit`` (paged for you)."""
        return await self._listing("get_by_tag", GetByTag, limit, tag=tag, as_of=as_of)

    def iter_by_tag(self, tag: str) -> AsyncIterator[MemoryBead]:
        """Every visible bead with ``tag``, newest first, read page after page as the caller goes on."""
        return self._pages("get_by_tag", GetByTag, None, tag=tag)

    def iter_by_session(self, session_id: str) -> AsyncIterator[MemoryBead]:
        """Every visible bead of a session (:meth:`get_by_session`'s), oldest first, read page after page."""
        return self._pages("get_by_session", GetBySession, None, session_id=session_id)

    async def get_recent(
        self, limit: int = 10, since: datetime | None = None, as_of: datetime | None = None
    ) -> list[MemoryBead]:
        """The most recent visible beads (created at or after ``since``): up to ``limit``, paged for you."""
        return await self._listing("get_recent", GetRecent, limit, **({"since": since} if since else {}), as_of=as_of)

    # --- relationships ----------------------------------------------------------------------------

    async def add_relationship(
        self, from_id: str, to_id: str, rel_type: RelType | str, **properties: Any
    ) -> Relationship:
        """Link two beads. ``properties``: strength, similarity, replaces, metadata."""
        request = _build(AddRelationship, from_id=from_id, to_id=to_id, rel_type=rel_type, properties=properties)
        return await self.call("add_relationship", request, Relationship)

    async def get_relationships(
        self, bead_id: str, rel_type: RelType | str | None = None, direction: str = "both"
    ) -> list[Relationship]:
        request = _build(GetRelationships, bead_id=bead_id, rel_type=rel_type, direction=direction)
        reply = await self.call("get_relationships", request, RelationshipList)
        if reply.truncated:
            log.warning(
                "get_relationships(%s): %d edges returned, the rest did not fit the bus",
                bead_id,
                len(reply.relationships),
            )
        return reply.relationships

    async def get_edges(
        self, bead_ids: Sequence[str], rel_types: Sequence[RelType | str] = ()
    ) -> list[Relationship]:
        """Every edge out of the given beads (those this identity may see) to beads it may see, in one read per
        :data:`~recall_schemas.MAX_EDGE_SOURCES` beads: the edges of a graph view. An edge between two
        given beads comes once."""
        ids = list(dict.fromkeys(bead_ids))
        edges: list[Relationship] = []
        for start in range(0, len(ids), MAX_EDGE_SOURCES):
            request = _build(GetEdges, bead_ids=ids[start : start + MAX_EDGE_SOURCES], rel_types=list(rel_types))
            reply = await self.call("get_edges", request, RelationshipList)
            if reply.truncated:
                log.warning("get_edges: %d edges returned, the rest did not fit the bus", len(reply.relationships))
            edges += reply.relationships
        return edges

    async def traverse_graph(
        self,
        start_id: str,
        max_depth: int = 3,
        rel_types: Sequence[RelType | str] = (),
        direction: str = "both",
        limit: int = 200,
        as_of: datetime | None = None,
    ) -> Subgraph:
        """Breadth-first walk from ``start_id``; with ``as_of``, over the graph as it was then."""
        request = _build(
            TraverseGraph,
            start_id=start_id,
            max_depth=max_depth,
            rel_types=list(rel_types),
            direction=direction,
            limit=limit,
            as_of=as_of,
        )
        return await self.call("traverse_graph", request, Subgraph)

    # --- maintenance ------------------------------------------------------------------------------

    async def deduplicate_beads(
        self,
        bead_id: str | None = None,
        group_id: str | None = None,
        similarity_threshold: float | None = None,
        merge: bool = False,
    ) -> DuplicateReport:
        """Clusters of equal (and, with ``similarity_threshold``, near-equal) beads; ``merge`` keeps the
        oldest of each, records every author on it and archives the rest."""
        request = _build(
            DeduplicateBeads,
            bead_id=bead_id,
            group_id=group_id,
            similarity_threshold=similarity_threshold,
            merge=merge,
        )
        return await self.call("deduplicate_beads", request, DuplicateReport)

    async def rank_by_importance(self, bead_ids: Sequence[str]) -> list[MemoryBead]:
        """The visible ones of ``bead_ids``, most important first. A reply cut to fit the bus holds the
        most important ones; the rest are ranked by further requests and follow them."""
        ranked: list[MemoryBead] = []
        remaining = list(bead_ids)
        while True:
            reply = await self.call("rank_by_importance", _build(RankByImportance, bead_ids=remaining), BeadList)
            ranked.extend(reply.beads)
            returned = {bead.bead_id for bead in reply.beads}
            remaining = [i for i in remaining if i not in returned]
            if not reply.truncated or not reply.beads or not remaining:
                return ranked

    async def decay_old_memories(self, threshold_days: float = 90, dry_run: bool = False) -> DecayReport:
        request = _build(DecayOldMemories, threshold_days=threshold_days, dry_run=dry_run)
        return await self.call("decay_old_memories", request, DecayReport)

    # --- groups -----------------------------------------------------------------------------------

    async def create_group(self, name: str, group_id: str | None = None) -> Group:
        return await self.call("create_group", _build(CreateGroup, name=name, group_id=group_id), Group)

    async def add_member(self, group_id: str, ai_id: str, role: str = "agent") -> Group:
        return await self.call("add_member", _build(AddMember, group_id=group_id, ai_id=ai_id, role=role), Group)

    async def remove_member(self, group_id: str, ai_id: str) -> Group:
        return await self.call("remove_member", _build(RemoveMember, group_id=group_id, ai_id=ai_id), Group)

    async def list_members(self, group_id: str) -> Group:
        return await self.call("list_members", _build(ListMembers, group_id=group_id), Group)

    async def list_groups(self) -> list[Group]:
        return (await self.call("list_groups", ListGroups(), GroupList)).groups

    # --- sessions -------------------------------------------------------------------------------

    async def get_session(self, session_id: str) -> c.Session:
        return await self.call("get_session", _build(c.GetSession, session_id=session_id), c.Session)

    async def migrate_session_with_memories(self, old_session_id: str, new_session_id: str) -> c.MigrationResult:
        request = _build(c.MigrateSession, old_session_id=old_session_id, new_session_id=new_session_id)
        return await self.call("migrate_session_with_memories", request, c.MigrationResult)

    async def check_session(self, session_id: str) -> c.IntegrityReport:
        return await self.call("check_session", _build(c.CheckSession, session_id=session_id), c.IntegrityReport)

    # --- agent state ----------------------------------------------------------------------------

    async def ai_state_save(self, **fields: Any) -> c.AIState:
        """Save any of todos, working_notes, context_summary, custom_state (others stay). With ``if_version``
        (the ``version`` of the state read), only if nobody saved since, else :class:`Conflict`."""
        return await self.call("ai_state_save", _build(c.SaveAIState, **fields), c.AIState)

    async def ai_state_get(self) -> c.AIState:
        return await self.call("ai_state_get", c.GetAIState(), c.AIState)

    async def ai_state_transfer(self, to_ai_id: str) -> c.AIState:
        return await self.call("ai_state_transfer", _build(c.TransferAIState, to_ai_id=to_ai_id), c.AIState)

    # --- ops handoff ----------------------------------------------------------------------------

    async def transfer_ops(
        self, group_id: str, to_agent: str, context_summary: str, bead_ids: Sequence[str] = (), **options: Any
    ) -> c.Handoff:
        """Hand this identity's ops role in ``group_id`` to ``to_agent``, with a context summary."""
        options.setdefault("handoff_id", "h_" + uuid.uuid4().hex)
        request = _build(
            c.TransferOps,
            group_id=group_id,
            from_ops=self.ai_id,
            to_agent=to_agent,
            context_summary=context_summary,
            bead_ids=list(bead_ids),
            **options,
        )
        return await self.call("transfer_ops", request, c.Handoff)

    async def acknowledge_handoff(self, handoff_id: str) -> c.Handoff:
        return await self.call("acknowledge_handoff", _build(c.AcknowledgeHandoff, handoff_id=handoff_id), c.Handoff)

    async def list_handoffs(self, group_id: str, limit: int = 50) -> list[c.Handoff]:
        """A group's ops transfers, newest first, each with its status and acknowledgement (members only)."""
        reply = await self.call("list_handoffs", _build(c.ListHandoffs, group_id=group_id, limit=limit), c.HandoffList)
        return reply.handoffs

    async def handoff_brief(self, group_id: str, max_tokens: int = 1500) -> c.HandoffBrief:
        request = _build(c.GetHandoffBrief, group_id=group_id, max_tokens=max_tokens)
        return await self.call("handoff_brief", request, c.HandoffBrief)

    # --- key-value memory -----------------------------------------------------------------------

    async def learn(
        self, key: str, value: str, metadata: dict[str, Any] | None = None, *, if_version: int | None = None
    ) -> c.KVEntry:
        """Remember ``value`` under ``key``. With ``if_version`` (the ``version`` of the entry read; 0 for a key
        not learnt yet), only if nobody changed it since, else :class:`Conflict`."""
        request = _build(c.Learn, key=key, value=value, metadata=metadata or {}, if_version=if_version)
        return await self.call("learn", request, c.KVEntry)

    async def recall(self, key: str, max_length: int | None = None) -> c.KVEntry:
        return await self.call("recall", _build(c.Recall, key=key, max_length=max_length), c.KVEntry)

    async def unified_recall(self, query: str, limit: int = 10, **options: Any) -> c.UnifiedRecallResult:
        request = _build(c.UnifiedRecall, query=query, limit=limit, **options)
        return await self.call("unified_recall", request, c.UnifiedRecallResult)

    async def promote_to_bead(self, key: str, **fields: Any) -> MemoryBead:
        """Turn a learnt key-value memory into a bead; ``fields``: bead_type, visibility, group_id, ..."""
        return await self.call("promote_to_bead", _build(c.PromoteToBead, key=key, **fields), MemoryBead)

    # --- lifecycle: trust, supersede, history ---------------------------------------------------

    async def verify_bead(self, bead_id: str, note: str | None = None) -> MemoryBead:
        """Vouch for a bead another identity wrote (it ranks a little higher); the bead with your mark.
        Verifying again changes nothing; your own bead is ``Forbidden``."""
        return await self.call("verify_bead", _build(VerifyBead, bead_id=bead_id, note=note), MemoryBead)

    async def reject_bead(self, bead_id: str, reason: str) -> MemoryBead:
        """Mark a bead another identity wrote as wrong, saying why (it is demoted in every ranking)."""
        return await self.call("reject_bead", _build(RejectBead, bead_id=bead_id, reason=reason), MemoryBead)

    async def list_stale(
        self, group_id: str | None = None, older_than_days: float = 30, limit: int = 50
    ) -> list[StaleBead]:
        """Visible beads due for a re-check, oldest first, each with its causes: weak provenance and unverified
        past ``older_than_days``, or a source (``metadata.source_bead_id``) superseded or gone. Pages for
        you until ``limit`` are found or nothing is left."""
        found: list[StaleBead] = []
        cursor: str | None = None
        while len(found) < limit:
            request = _build(
                ListStale, group_id=group_id, older_than_days=older_than_days, limit=limit - len(found), cursor=cursor
            )
            reply = await self.call("list_stale", request, StaleList)
            found.extend(reply.items)
            if reply.next_cursor is None:
                break
            cursor = reply.next_cursor
        return found

    async def supersede_bead(self, old_id: str, new_id: str, reason: str | None = None) -> Relationship:
        """``new_id`` replaces ``old_id`` (an UPDATES edge new → old): the old bead stays readable and ranks
        lower. Needs the right to change the old bead; superseding again returns the same link."""
        request = _build(SupersedeBead, old_id=old_id, new_id=new_id, reason=reason)
        return await self.call("supersede_bead", request, Relationship)

    async def get_history(self, bead_id: str, limit: int = 50) -> BeadHistory:
        """The versions of a bead you may see, oldest first (``offset`` < 0 older, > 0 newer), with who
        superseded which, when and why."""
        return await self.call("get_history", _build(GetHistory, bead_id=bead_id, limit=limit), BeadHistory)

    # --- lifecycle: forget -----------------------------------------------------------------------

    async def forget_bead(self, bead_id: str, reason: str, *, allow_again: bool = False) -> fg.Tombstone:
        """Forget a bead for good (its creator, or the group's ops): its content, vectors, index entries and
        edges go, a tombstone stays; unless ``allow_again``, the same content is refused in its scope."""
        request = _build(fg.ForgetBead, bead_id=bead_id, reason=reason, allow_again=allow_again)
        return await self.call("forget_bead", request, fg.Tombstone)

    async def forget_by_author(self, ai_id: str, reason: str, *, allow_again: bool = False) -> fg.ForgottenByAuthor:
        """Forget every bead ``ai_id`` created: all of them if it is this identity, else those of the groups
        this identity is ops of."""
        request = _build(fg.ForgetByAuthor, ai_id=ai_id, reason=reason, allow_again=allow_again)
        return await self.call("forget_by_author", request, fg.ForgottenByAuthor)

    async def list_forgotten(self, group_id: str | None = None, limit: int = 100) -> list[fg.Tombstone]:
        """Tombstones this identity forgot, or of the groups it is ops of; newest first."""
        request = _build(fg.ListForgotten, group_id=group_id, limit=limit)
        return (await self.call("list_forgotten", request, fg.TombstoneList)).tombstones

    async def allow_forgotten(self, bead_id: str) -> fg.Tombstone:
        """Let a forgotten bead's content be stored again in its scope."""
        return await self.call("allow_forgotten", _build(fg.AllowForgotten, bead_id=bead_id), fg.Tombstone)

    # --- lifecycle: time -------------------------------------------------------------------------

    # --- capture: extraction, collectors ---------------------------------------------------------

    async def remember_extracted(self, text: str, **fields: Any) -> cap.RememberedTopics:
        """Facts extracted from ``text`` (by the hub's LLM, else by outline), each stored ``PART_OF`` its topic
        hub; the same text again stores nothing new. ``fields``: visibility, group_id, session_id, max_facts,
        importance, tags. An LLM extraction can take longer than the client's ``timeout``: give it room."""
        request = _build(cap.RememberExtracted, text=text, **fields)
        return await self.call("remember_extracted", request, cap.RememberedTopics)

    async def remember_topics(
        self, topics: Sequence[cap.TopicInput | Mapping[str, Any]], **fields: Any
    ) -> cap.RememberedTopics:
        """Facts already split by topic (``[{"name": ..., "facts": [{"title", "content", "key", "metadata"}]}]``),
        stored ``PART_OF`` their topic hubs in one atomic step; a keyed fact stored again with another text
        updates its bead. ``fields``: visibility, group_id, session_id, bead_type, provenance, tags, hub_metadata."""
        request = _build(cap.RememberTopics, topics=list(topics), **fields)
        return await self.call("remember_topics", request, cap.RememberedTopics)

    async def recall_where(
        self, query: str, limit: int = 30, filters: dict[str, Any] | None = None
    ) -> cap.WhereResult:
        """Where a subject was met: the files, commits, sessions and commands of the visible beads about it."""
        request = _build(cap.RecallWhere, query=query, limit=limit, filters=filters or {})
        return await self.call("recall_where", request, cap.WhereResult)

    # --- audit ----------------------------------------------------------------------------------

    async def audit_log(
        self, group_id: str, member: str | None = None, bead_id: str | None = None, limit: int = 100
    ) -> list[AuditRecord]:
        """Who read and wrote the group's beads (allowed or refused), newest first: the group's ops only
        (a member gets ``Forbidden``). ``member`` or ``bead_id`` narrow it to one member or one bead."""
        request = _build(GetAuditLog, group_id=group_id, member=member, bead_id=bead_id, limit=limit)
        return (await self.call("audit_log", request, AuditTrail)).entries

    # --- change feed ----------------------------------------------------------------------------

    async def changes_since(self, scope: str, cursor: str | None = None, limit: int = 200) -> c.ChangeBatch:
        request = _build(c.ChangesSince, scope=scope, cursor=cursor, limit=limit)
        return await self.call("changes_since", request, c.ChangeBatch)

    async def changes(self, scope: str, since: str | None = None) -> AsyncIterator[c.Change]:
        """Every change of a group's (or ``"global"``) beads after cursor ``since``, then live ones.

        ``async for change in client.changes(group_id, since=cursor)``: what was missed is replayed
        first, then changes arrive as they happen; no change is yielded twice. Remember
        ``change.cursor`` to resume later. Ends when the client closes.
        """
        queue: asyncio.Queue[c.Change] = asyncio.Queue()

        async def on_notification(msg: Any) -> None:
            note = _notification(msg)
            if note is not None and note.kind == "change" and note.change is not None and note.change.scope == scope:
                queue.put_nowait(note.change)

        sub = await self.nc.subscribe(notify_subject(self.ai_id), cb=on_notification)
        await self.nc.flush()
        try:
            cursor = since
            while True:
                batch = await self.changes_since(scope, cursor, limit=_CHANGES_PAGE)
                for change in batch.changes:
                    yield change
                cursor = batch.cursor
                # A batch cut to fit the bus says so (its cursor is its last change); a full one may
                # have more behind it.
                if not batch.truncated and len(batch.changes) < _CHANGES_PAGE:
                    break
            while True:
                change = await queue.get()
                if cursor is None or _cursor_key(change.cursor) > _cursor_key(cursor):
                    cursor = change.cursor
                    yield change
        finally:
            await sub.unsubscribe()

    def notifications(self) -> NotificationStream:
        """Everything the hub sends to this identity (changes, handoff briefs), as it happens::

        async with client.notifications() as stream:   # subscribed once this returns
            async for note in stream: ...
        """
        return NotificationStream(self.nc, notify_subject(self.ai_id))

    @property
    def events(self) -> EventPublisher:
        """Typed publishers of session, group and ops events, as this identity."""
        if self._events is None:
            self._events = EventPublisher(self.nc, self.ai_id, self.timeout, self.retries)
        return self._events


def _notification(msg: Msg) -> c.Notification | None:
    """The :class:`Notification` a message on the notification subject carries, or None for anything else.

    Only the hub may publish there, but others can make the NATS server deliver to it: an identity that
    publishes an event with this subject as its reply subject gets JetStream's publish ack
    (``{"stream": ..., "seq": ...}``) sent here (docs/security.md). Such messages are dropped."""
    try:
        return c.Notification.model_validate_json(msg.data)
    except ValidationError:
        log.debug("ignored a message on %s that is not a notification: %r", msg.subject, msg.data[:120])
        return None


class NotificationStream:
    """Everything the hub sends to one identity's notification subject, in order; anything on that subject
    that is not a :class:`Notification` is skipped."""

    def __init__(self, nc: NATS, subject: str) -> None:
        self._nc = nc
        self._subject = subject
        self._queue: asyncio.Queue[c.Notification] = asyncio.Queue()
        self._sub: Any = None

    async def __aenter__(self) -> NotificationStream:
        async def on_notification(msg: Any) -> None:
            note = _notification(msg)
            if note is not None:
                self._queue.put_nowait(note)

        self._sub = await self._nc.subscribe(self._subject, cb=on_notification)
        await self._nc.flush()  # the server has the subscription before we return
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()

    def __aiter__(self) -> NotificationStream:
        return self

    async def __anext__(self) -> c.Notification:
        return await self._queue.get()


def _cursor_key(cursor: str) -> tuple[int, int]:
    ms, _, seq = cursor.partition("-")
    return int(ms), int(seq or 0)
