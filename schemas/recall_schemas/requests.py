"""Every request and reply of the request/reply API, one model each.

The caller's identity is never part of a request: the hub reads it from the subject.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, model_validator

from .enums import BeadStatus, BeadType, Direction, Provenance, RelType, Role, Visibility
from .errors import ErrorBody
from .ids import AiId, BeadId, GroupId, SessionId
from .models import (
    Content,
    Group,
    Importance,
    MemoryBead,
    Metadata,
    Relationship,
    RelationshipProperties,
    Subgraph,
    Tag,
    Title,
    WireModel,
)
from .validity import AS_OF, VALID_AT, VALID_FROM, VALID_TO, DateWindow, UtcTime, check_interval

MAX_LIMIT = 500
"""The most items one request's ``limit`` may ask for (listings page past it)."""
Limit = Annotated[int, Field(ge=1, le=MAX_LIMIT)]
REFERENCE_TIME = (
    "When the question is asked (ISO 8601 with a time zone): date expressions in the query ('last week', 'in "
    "May') are read against it; default now, or as_of"
)
MAX_TAGS = 32
"""Tags one bead may carry."""
DEADLINE_HEADER = "Recall-Deadline"
"""Request header: when the caller stops waiting, as absolute Unix epoch milliseconds (the client sends
its send time + timeout). The hub skips a request whose deadline passed before it could start it."""
INDEX_SEQ_HEADER = "Recall-Index-Seq"
"""Reply header: how far the answering hub has recorded writes in its index log (``<ms>-<n>``). A
client keeps the largest it has seen and sends it as :data:`INDEX_AFTER_HEADER`."""
INDEX_AFTER_HEADER = "Recall-Index-After"
"""Request header: a search first brings the hub's keyword index up to this position (bounded), so a
caller finds its own writes whichever hub answers."""
REQUEST_ID_HEADER = "Recall-Request-Id"
"""Request header: an id the caller chooses for one request (the same on its retries); the hub's log lines
about the request carry it, and makes one up when a request has none."""


def index_seq_key(seq: str) -> tuple[int, int]:
    """An index-log position as a comparable pair; a malformed one sorts first (it asks for nothing)."""
    ms, _, n = seq.partition("-")
    try:
        return int(ms), int(n or 0)
    except ValueError:
        return (0, 0)


IdempotencyKey = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:\-]+$")]


class SearchMode(StrEnum):
    KEYWORD = "keyword"
    VECTOR = "vector"
    HYBRID = "hybrid"


# --- beads -------------------------------------------------------------------------------------


class CreateBead(WireModel):
    title: Title
    content: Content = ""
    bead_type: BeadType = BeadType.FACT
    importance: Importance = 5
    tags: list[Tag] = Field(default_factory=list, max_length=MAX_TAGS)
    session_id: SessionId | None = None
    subsession_id: Annotated[str, Field(max_length=64)] | None = None
    group_id: GroupId | None = None
    visibility: Visibility = Visibility.PRIVATE
    metadata: Metadata = Field(default_factory=dict)
    provenance: Provenance = Provenance.AUTHORED
    idempotency_key: IdempotencyKey | None = Field(
        default=None, description="A retried create with the same key returns the first bead"
    )
    valid_from: UtcTime | None = Field(default=None, description=VALID_FROM)
    valid_to: UtcTime | None = Field(default=None, description=VALID_TO)

    @model_validator(mode="after")
    def _group_needs_group_id(self) -> CreateBead:
        if self.visibility is Visibility.GROUP and self.group_id is None:
            raise ValueError("visibility 'group' needs a group_id")
        check_interval(self.valid_from, self.valid_to)
        return self


MAX_BATCH = 256
"""Beads one ``create_beads`` request may carry (a batch must also fit the bus's max payload)."""


class CreateBeads(WireModel):
    """Several creates in one request: each bead is checked, stored and made idempotent on its own."""

    beads: list[CreateBead] = Field(min_length=1, max_length=MAX_BATCH)


class CreatedItem(WireModel):
    """One bead of a batch: its id (the first bead's, for a replayed idempotency key), or why it was
    refused (nothing of it was written). The beads themselves are not echoed: a batch reply stays small."""

    bead_id: BeadId | None = None
    created: bool = Field(default=False, description="False for a replay of an earlier create with the same key")
    error: ErrorBody | None = None


class CreatedBeads(WireModel):
    items: list[CreatedItem] = Field(description="One per requested bead, in request order")


class GetBead(WireModel):
    bead_id: BeadId
    as_of: UtcTime | None = Field(default=None, description=AS_OF)


class BeadUpdates(WireModel):
    """Fields to change; those left out stay as they are."""

    title: Title | None = None
    content: Content | None = None
    bead_type: BeadType | None = None
    importance: Importance | None = None
    tags: list[Tag] | None = Field(default=None, max_length=MAX_TAGS)
    metadata: Metadata | None = None
    status: BeadStatus | None = None
    visibility: Visibility | None = None
    group_id: GroupId | None = None
    valid_from: UtcTime | None = Field(default=None, description=VALID_FROM + " (null clears it)")
    valid_to: UtcTime | None = Field(default=None, description=VALID_TO + " (null clears it)")

    @model_validator(mode="after")
    def _interval_in_order(self) -> BeadUpdates:
        check_interval(self.valid_from, self.valid_to)
        return self


Version = Annotated[int, Field(ge=1)]


class UpdateBead(WireModel):
    bead_id: BeadId
    updates: BeadUpdates
    if_version: Version | None = Field(
        default=None, description="Apply only if the bead's version is still this one; otherwise 'conflict'"
    )


class EditBead(WireModel):
    """Changes relative to the bead's current state, applied atomically: concurrent edits of one bead never
    lose each other (two agents adding a tag each both find their tag), unlike an ``update_bead`` of a list
    read a moment before. Removals apply before additions; a field left empty changes nothing."""

    bead_id: BeadId
    add_tags: list[Tag] = Field(default_factory=list, max_length=MAX_TAGS, description="Tags to add if missing")
    remove_tags: list[Tag] = Field(default_factory=list, max_length=MAX_TAGS, description="Tags to remove if present")
    set_metadata: Metadata = Field(
        default_factory=dict, description="Metadata keys to set (added or replaced); other keys stay"
    )
    remove_metadata: list[Annotated[str, Field(min_length=1, max_length=256)]] = Field(
        default_factory=list, max_length=64, description="Metadata keys to remove if present"
    )
    add_importance: Annotated[int, Field(ge=-10, le=10)] = Field(
        default=0, description="Added to the importance, which stays within 0..10 (negative lowers it)"
    )
    if_version: Version | None = Field(
        default=None, description="Apply only if the bead's version is still this one; otherwise 'conflict'"
    )

    @model_validator(mode="after")
    def _something_to_change(self) -> EditBead:
        if not (self.add_tags or self.remove_tags or self.set_metadata or self.remove_metadata or self.add_importance):
            raise ValueError("nothing to change: give add_tags, remove_tags, set_metadata, remove_metadata or "
                             "add_importance")
        if both := set(self.add_tags) & set(self.remove_tags):
            raise ValueError(f"tags both added and removed: {sorted(both)}")
        if both := set(self.set_metadata) & set(self.remove_metadata):
            raise ValueError(f"metadata keys both set and removed: {sorted(both)}")
        return self


class DeleteBead(WireModel):
    bead_id: BeadId
    if_version: Version | None = Field(
        default=None, description="Delete only if the bead's version is still this one; otherwise 'conflict'"
    )


class Deleted(WireModel):
    bead_id: BeadId
    deleted: bool


class BeadList(WireModel):
    beads: list[MemoryBead]
    truncated: bool = Field(
        default=False, description="Cut to fit the bus's max payload: some of what matched is not in this reply"
    )
    next_cursor: str | None = Field(
        default=None,
        description="Listings: more beads follow; pass it as `cursor` to continue after the last one returned",
    )


# --- search and listing ------------------------------------------------------------------------


class BeadFilters(WireModel):
    tags: list[Tag] = Field(default_factory=list, description="A bead must carry every one of these tags")
    bead_types: list[BeadType] = Field(default_factory=list)
    session_id: SessionId | None = None
    group_id: GroupId | None = None
    created_by: AiId | None = None
    visibility: Visibility | None = None
    min_importance: Importance | None = None
    max_importance: Importance | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    status: BeadStatus | None = Field(default=None, description="None: any status (archived ones rank lower)")
    valid_at: UtcTime | None = Field(default=None, description=VALID_AT)


class SearchBeads(WireModel):
    query: Annotated[str, Field(min_length=1, max_length=4096)]
    limit: Limit = 20
    filters: BeadFilters = Field(default_factory=BeadFilters)
    mode: SearchMode = SearchMode.HYBRID
    max_tokens: Annotated[int, Field(ge=1, le=200_000)] | None = Field(
        default=None, description="Return only the best hits whose beads fit this many tokens"
    )
    use_priors: bool = Field(
        default=True, description="Weigh importance, recency, provenance and status (bounded; see docs)"
    )
    fusion: Literal["score", "rrf"] = Field(
        default="score",
        description="How hybrid mode fuses the keyword and vector lists: weighted normalised scores (default, "
        "best measured) or Reciprocal Rank Fusion on rank positions",
    )
    include_hubs: bool = Field(
        default=False,
        description="Also return topic hub beads (bead_type 'topic'); left out by default, their facts stand in",
    )
    as_of: UtcTime | None = Field(default=None, description=AS_OF)
    reference_time: UtcTime | None = Field(default=None, description=REFERENCE_TIME)


class RankSource(WireModel):
    list: str = Field(description="'keyword', 'vector' or 'tokens' (the query's words matched one by one)")
    rank: int = Field(ge=1)
    raw_score: float


class ScoreExplanation(WireModel):
    sources: list[RankSource] = Field(default_factory=list)
    relevance: float = Field(description="Fused relevance before priors")
    prior: float = Field(description="Joint multiplier of importance, recency, provenance and status")
    notes: list[str] = Field(default_factory=list)


class SearchHit(WireModel):
    bead: MemoryBead
    score: float
    explanation: ScoreExplanation


class SearchResult(WireModel):
    hits: list[SearchHit]
    tokens: int | None = Field(default=None, description="Tokens of the returned beads when max_tokens was set")
    truncated: bool = Field(
        default=False, description="Cut to fit the bus's max payload: some of what matched is not in this reply"
    )
    date_window: DateWindow | None = Field(
        default=None, description="The date expression understood in the query, if any, and the window it names"
    )


ListCursor = Annotated[str, Field(pattern=r"^[0-9]{1,19}:b_[a-z0-9]{4,32}$")]
CURSOR = "Opaque: a listing reply's `next_cursor`, to continue after its last bead; none: from the start"


class GetBySession(WireModel):
    session_id: SessionId
    limit: Limit = 100
    cursor: ListCursor | None = Field(default=None, description=CURSOR)
    as_of: UtcTime | None = Field(default=None, description=AS_OF)


class GetByGroup(WireModel):
    group_id: GroupId
    limit: Limit = 100
    cursor: ListCursor | None = Field(default=None, description=CURSOR)
    as_of: UtcTime | None = Field(default=None, description=AS_OF)


class GetByTag(WireModel):
    tag: Tag
    limit: Limit = 100
    cursor: ListCursor | None = Field(default=None, description=CURSOR)
    as_of: UtcTime | None = Field(default=None, description=AS_OF)


class GetRecent(WireModel):
    limit: Limit = 10
    since: datetime | None = None
    cursor: ListCursor | None = Field(default=None, description=CURSOR)
    as_of: UtcTime | None = Field(default=None, description=AS_OF)


# --- relationships and graph -------------------------------------------------------------------


class AddRelationship(WireModel):
    from_id: BeadId
    to_id: BeadId
    rel_type: RelType
    properties: RelationshipProperties = Field(default_factory=RelationshipProperties)

    @model_validator(mode="after")
    def _no_self_loop(self) -> AddRelationship:
        if self.from_id == self.to_id:
            raise ValueError("a bead cannot relate to itself")
        return self


MAX_EDGE_SOURCES = 500
"""Beads one ``get_edges`` request may name."""


class GetRelationships(WireModel):
    bead_id: BeadId
    rel_type: RelType | None = None
    direction: Direction = Direction.BOTH


class GetEdges(WireModel):
    bead_ids: list[BeadId] = Field(
        min_length=1, max_length=MAX_EDGE_SOURCES,
        description="Beads whose outgoing edges to read (ids the caller cannot see add nothing)",
    )
    rel_types: list[RelType] = Field(default_factory=list, description="Empty: every type")


class RelationshipList(WireModel):
    relationships: list[Relationship]
    truncated: bool = Field(
        default=False, description="Cut to fit the bus's max payload: some of what matched is not in this reply"
    )


class TraverseGraph(WireModel):
    start_id: BeadId
    max_depth: Annotated[int, Field(ge=1, le=6)] = 3
    rel_types: list[RelType] = Field(default_factory=list, description="Empty: every type")
    direction: Direction = Direction.BOTH
    limit: Limit = 200
    as_of: UtcTime | None = Field(default=None, description=AS_OF)


# --- maintenance -------------------------------------------------------------------------------


class DeduplicateBeads(WireModel):
    bead_id: BeadId | None = Field(default=None, description="Only the cluster of this bead")
    group_id: GroupId | None = Field(default=None, description="Only beads of this group")
    similarity_threshold: Annotated[float, Field(gt=0, le=1)] | None = Field(
        default=None, description="Also cluster near-duplicates whose cosine similarity reaches this (e.g. 0.95)"
    )
    merge: bool = Field(
        default=False,
        description="Keep the oldest bead of each cluster, archive the rest (superseded by it) and record "
        "every author on the keeper (corroborated_by)",
    )


class DuplicateCluster(WireModel):
    content_hash: str = Field(description="Content hash of the oldest bead")
    bead_ids: list[BeadId] = Field(description="Oldest first")
    kind: Literal["exact", "near"] = "exact"
    min_similarity: float | None = Field(default=None, description="Lowest cosine inside a near cluster")
    authors: list[AiId] = Field(default_factory=list, description="Every identity who wrote one of them")
    merged_into: BeadId | None = Field(default=None, description="Set when merge=true merged this cluster")


class DuplicateReport(WireModel):
    clusters: list[DuplicateCluster]
    truncated: bool = Field(
        default=False, description="Cut to fit the bus's max payload: some of what matched is not in this reply"
    )


class RankByImportance(WireModel):
    bead_ids: list[BeadId] = Field(min_length=1, max_length=500)


class DecayOldMemories(WireModel):
    threshold_days: Annotated[float, Field(gt=0, le=36500)] = 90
    dry_run: bool = False


class DecayReport(WireModel):
    archived: list[BeadId]
    truncated: bool = Field(
        default=False, description="Cut to fit the bus's max payload: some of what matched is not in this reply"
    )


# --- semantic recall ------------------------------------------------------------------------------


class FindSimilar(WireModel):
    bead_id: BeadId
    threshold: Annotated[float, Field(ge=-1, le=1)] = 0.7
    limit: Limit = 10


class Why(WireModel):
    """A semantic seed, then a walk along typed edges: the context a similarity search is blind to."""

    query: Annotated[str, Field(min_length=1, max_length=4096)]
    hops: Annotated[int, Field(ge=0, le=4)] = 2
    rel_types: list[RelType] = Field(default_factory=list, description="Empty: every type")
    seeds: Annotated[int, Field(ge=1, le=20)] = 3
    limit: Limit = 50
    filters: BeadFilters = Field(default_factory=BeadFilters)


class WhyResult(WireModel):
    seeds: list[BeadId]
    graph: Subgraph
    truncated: bool = Field(
        default=False, description="Cut to fit the bus's max payload: some of what matched is not in this reply"
    )


class GetContext(WireModel):
    """The best visible memory for ``query`` that fits ``max_tokens``, as one rendered block."""

    query: Annotated[str, Field(min_length=1, max_length=4096)]
    max_tokens: Annotated[int, Field(ge=16, le=200_000)] = 1000
    filters: BeadFilters = Field(default_factory=BeadFilters)
    max_per_source: Annotated[int, Field(ge=1, le=50)] = 2
    include_hubs: bool = Field(
        default=False,
        description="Also pack topic hub beads (bead_type 'topic'); left out by default, their facts stand in",
    )
    reference_time: UtcTime | None = Field(default=None, description=REFERENCE_TIME)


class ContextBlock(WireModel):
    text: str
    bead_ids: list[BeadId]
    tokens: int
    max_tokens: int
    dropped: int = Field(description="Relevant beads left out for the budget or the per-source cap")
    truncated: bool = Field(
        default=False, description="Cut to fit the bus's max payload: some of what matched is not in this reply"
    )


# --- groups ------------------------------------------------------------------------------------


class CreateGroup(WireModel):
    name: Annotated[str, Field(min_length=1, max_length=200)]
    group_id: GroupId | None = Field(default=None, description="Choose the id; default a fresh one")


class AddMember(WireModel):
    group_id: GroupId
    ai_id: AiId
    role: Role = Role.AGENT


class RemoveMember(WireModel):
    group_id: GroupId
    ai_id: AiId


class ListMembers(WireModel):
    group_id: GroupId


class ListGroups(WireModel):
    """The groups the caller belongs to."""


class GroupList(WireModel):
    groups: list[Group]
    truncated: bool = Field(
        default=False, description="Cut to fit the bus's max payload: some of what matched is not in this reply"
    )


__all__ = [
    "MAX_EDGE_SOURCES",
    "MAX_TAGS",
    "AddMember",
    "AddRelationship",
    "BeadFilters",
    "BeadList",
    "BeadUpdates",
    "Content",
    "ContextBlock",
    "CreateBead",
    "CreateBeads",
    "CreateGroup",
    "CreatedBeads",
    "CreatedItem",
    "DecayOldMemories",
    "DecayReport",
    "DeduplicateBeads",
    "DeleteBead",
    "Deleted",
    "DuplicateCluster",
    "DuplicateReport",
    "EditBead",
    "FindSimilar",
    "GetBead",
    "GetByGroup",
    "GetBySession",
    "GetByTag",
    "GetContext",
    "GetEdges",
    "GetRecent",
    "GetRelationships",
    "Group",
    "GroupList",
    "ListGroups",
    "ListMembers",
    "MemoryBead",
    "RankByImportance",
    "RankSource",
    "Relationship",
    "RelationshipList",
    "RemoveMember",
    "ScoreExplanation",
    "SearchBeads",
    "SearchHit",
    "SearchMode",
    "SearchResult",
    "Subgraph",
    "TraverseGraph",
    "UpdateBead",
    "Why",
    "WhyResult",
]
