"""RecallClient: an agent's connection to the hub, as one AI id."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar

import nats
from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from pydantic import BaseModel, ValidationError
from recall_schemas import (
    AddMember,
    AddRelationship,
    BeadList,
    ContextBlock,
    CreateBead,
    CreateGroup,
    DecayOldMemories,
    DecayReport,
    DeduplicateBeads,
    DeleteBead,
    Deleted,
    DuplicateReport,
    ErrorReply,
    FindSimilar,
    GetBead,
    GetByGroup,
    GetBySession,
    GetByTag,
    GetContext,
    GetRecent,
    GetRelationships,
    Group,
    GroupList,
    InvalidRequest,
    ListGroups,
    ListMembers,
    MemoryBead,
    RankByImportance,
    RecallTimeout,
    Relationship,
    RelationshipList,
    RelType,
    RemoveMember,
    SearchBeads,
    SearchResult,
    Subgraph,
    TraverseGraph,
    Unavailable,
    UpdateBead,
    Why,
    WhyResult,
    error_from_reply,
)
from recall_schemas.ids import AI_ID_PATTERN
from recall_schemas.subjects import inbox_prefix, request_subject

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)
ERROR_CODE_HEADER = "Nats-Service-Error-Code"


def _build(model: type[M], **fields: Any) -> M:
    """The request model, or :class:`InvalidRequest` naming what is wrong — before anything is sent."""
    try:
        return model(**fields)
    except ValidationError as exc:
        raise InvalidRequest(str(exc)) from exc


class RecallClient:
    """Async client of the Nexus Recall hub, acting as ``ai_id``.

    >>> async with RecallClient("a_worker1", "nats://127.0.0.1:4222") as client:
    ...     bead = await client.create_bead("Chose FalkorDB", "Graph + Redis in one", bead_type="decision")

    Requests that time out or find no hub are retried ``retries`` times with backoff; creates carry
    an idempotency key, so a retry never makes a second bead.
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
        nc: NATS | None = None,
    ) -> None:
        import re

        if not re.match(AI_ID_PATTERN, ai_id):
            raise InvalidRequest(f"{ai_id!r} is not an AI id (o_… or a_…)")
        self.ai_id = ai_id
        self.nats_url = nats_url
        self.timeout = timeout
        self.retries = retries
        self._creds = creds
        self._user = user
        self._password = password
        self._nc = nc
        self._owns_nc = nc is None

    async def connect(self) -> RecallClient:
        if self._nc is None:
            options: dict[str, Any] = {
                "servers": [self.nats_url],
                "name": f"recall-client:{self.ai_id}",
                "inbox_prefix": inbox_prefix(self.ai_id).encode(),
                "max_reconnect_attempts": -1,
                "reconnect_time_wait": 0.5,
                "allow_reconnect": True,
            }
            if self._creds:
                options["user_credentials"] = self._creds
            if self._user:
                options["user"] = self._user
                options["password"] = self._password
            try:
                self._nc = await nats.connect(**options)
            except Exception as exc:
                raise Unavailable(f"cannot connect to NATS at {self.nats_url}: {exc}") from exc
        return self

    async def close(self) -> None:
        if self._nc is not None and self._owns_nc:
            await self._nc.drain()
        self._nc = None

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
        subject = request_subject(self.ai_id, op)
        payload = request.model_dump_json(exclude_unset=True).encode()
        delay = 0.1
        for attempt in range(self.retries + 1):
            try:
                msg = await self.nc.request(subject, payload, timeout=self.timeout)
                break
            except (NatsTimeout, NoRespondersError) as exc:
                if attempt == self.retries:
                    if isinstance(exc, NoRespondersError):
                        raise Unavailable(f"no hub is serving {op}") from exc
                    raise RecallTimeout(f"{op}: no reply within {self.timeout}s") from exc
                log.debug("%s: %s, retry %d", op, type(exc).__name__, attempt + 1)
                await asyncio.sleep(delay)
                delay *= 2
        if msg.headers and ERROR_CODE_HEADER in msg.headers:
            try:
                error = ErrorReply.model_validate_json(msg.data)
            except ValidationError:
                raise Unavailable(
                    f"{op}: error {msg.headers.get(ERROR_CODE_HEADER)} {msg.headers.get('Nats-Service-Error')}"
                ) from None
            raise error_from_reply(error)
        return reply_type.model_validate_json(msg.data)

    # --- beads ----------------------------------------------------------------------------------

    async def create_bead(self, title: str, content: str = "", **fields: Any) -> MemoryBead:
        """Store a memory. ``fields``: any of :class:`CreateBead` (bead_type, importance, tags,
        session_id, subsession_id, group_id, visibility, metadata, provenance, idempotency_key)."""
        fields.setdefault("idempotency_key", uuid.uuid4().hex)
        return await self.call("create_bead", _build(CreateBead, title=title, content=content, **fields), MemoryBead)

    async def get_bead(self, bead_id: str) -> MemoryBead:
        return await self.call("get_bead", _build(GetBead, bead_id=bead_id), MemoryBead)

    async def update_bead(self, bead_id: str, **updates: Any) -> MemoryBead:
        """Change fields (any of :class:`BeadUpdates`); others stay as they are."""
        return await self.call("update_bead", _build(UpdateBead, bead_id=bead_id, updates=updates), MemoryBead)

    async def delete_bead(self, bead_id: str) -> Deleted:
        return await self.call("delete_bead", _build(DeleteBead, bead_id=bead_id), Deleted)

    # --- search and listing ---------------------------------------------------------------------

    async def search_beads(
        self, query: str, limit: int = 20, filters: dict[str, Any] | None = None, **options: Any
    ) -> SearchResult:
        """Search visible beads. ``filters``: :class:`BeadFilters` fields; ``options``: mode, max_tokens."""
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

    async def get_by_session(self, session_id: str, limit: int = 100) -> list[MemoryBead]:
        reply = await self.call("get_by_session", _build(GetBySession, session_id=session_id, limit=limit), BeadList)
        return reply.beads

    async def get_by_group(self, group_id: str, limit: int = 100) -> list[MemoryBead]:
        reply = await self.call("get_by_group", _build(GetByGroup, group_id=group_id, limit=limit), BeadList)
        return reply.beads

    async def get_by_tag(self, tag: str, limit: int = 100) -> list[MemoryBead]:
        reply = await self.call("get_by_tag", _build(GetByTag, tag=tag, limit=limit), BeadList)
        return reply.beads

    async def get_recent(self, limit: int = 10, since: datetime | None = None) -> list[MemoryBead]:
        reply = await self.call("get_recent", _build(GetRecent, limit=limit, since=since), BeadList)
        return reply.beads

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
        return (await self.call("get_relationships", request, RelationshipList)).relationships

    async def traverse_graph(
        self,
        start_id: str,
        max_depth: int = 3,
        rel_types: Sequence[RelType | str] = (),
        direction: str = "both",
        limit: int = 200,
    ) -> Subgraph:
        request = _build(
            TraverseGraph,
            start_id=start_id,
            max_depth=max_depth,
            rel_types=list(rel_types),
            direction=direction,
            limit=limit,
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
        request = _build(RankByImportance, bead_ids=list(bead_ids))
        return (await self.call("rank_by_importance", request, BeadList)).beads

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
