"""Stored things: beads, relationships, groups."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from .enums import BeadStatus, BeadType, Provenance, RelType, Role, Visibility
from .ids import AiId, BeadId, GroupId, SessionId
from .trust_marks import TrustMark

Tag = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:/\-]{0,63}$")]
Title = Annotated[str, StringConstraints(min_length=1, max_length=512)]
Content = Annotated[str, StringConstraints(max_length=262_144)]
Importance = Annotated[int, Field(ge=0, le=10)]
Metadata = dict[str, Any]

RESERVED_METADATA_PREFIX = "_recall"
"""Metadata keys starting with this are the hub's own; clients may not set them."""


class WireModel(BaseModel):
    """Base of every message: unknown fields are an error, never silently dropped."""

    model_config = ConfigDict(extra="forbid", use_enum_values=False)


class MemoryBead(WireModel):
    bead_id: BeadId
    title: Title
    content: Content
    content_hash: str = Field(description="sha256 hex of the normalised content")
    bead_type: BeadType
    importance: Importance
    tags: list[Tag]
    created_at: datetime
    updated_at: datetime
    accessed_at: datetime
    created_by: AiId
    session_id: SessionId | None = None
    subsession_id: str | None = None
    group_id: GroupId | None = None
    visibility: Visibility
    metadata: Metadata = Field(default_factory=dict)
    status: BeadStatus = BeadStatus.ACTIVE
    provenance: Provenance = Provenance.AUTHORED
    corroborated_by: list[AiId] = Field(
        default_factory=list, description="Other identities who wrote the same memory (merged duplicates)"
    )
    version: int = Field(
        default=1, ge=1, description="1 when created, +1 on every change; pass it as if_version to update safely"
    )
    # --- lifecycle: trust ---
    trust: list[TrustMark] = Field(
        default_factory=list, description="Who verified or rejected the bead, when and why (one mark per identity)"
    )
    # --- lifecycle: time ---
    valid_from: datetime | None = Field(default=None, description="When the fact starts to hold; None: since always")
    valid_to: datetime | None = Field(default=None, description="When the fact stops holding; None: still holds")
    # --- capture ---


class RelationshipProperties(WireModel):
    strength: float | None = Field(default=None, ge=0, le=1)
    similarity: float | None = Field(default=None, ge=-1, le=1)
    replaces: bool | None = None
    metadata: Metadata = Field(default_factory=dict)


class Relationship(WireModel):
    from_id: BeadId
    to_id: BeadId
    rel_type: RelType
    properties: RelationshipProperties = Field(default_factory=RelationshipProperties)
    created_at: datetime
    created_by: AiId


class Member(WireModel):
    ai_id: AiId
    role: Role
    joined_at: datetime


class Group(WireModel):
    group_id: GroupId
    name: str
    created_at: datetime
    created_by: AiId
    members: list[Member] = Field(default_factory=list)


class GraphNode(WireModel):
    bead: MemoryBead
    depth: int = Field(ge=0, description="Hops from the start (traversal) or from the nearest seed (why)")


class Subgraph(WireModel):
    nodes: list[GraphNode]
    edges: list[Relationship]
    truncated: bool = Field(
        default=False, description="Cut to fit the bus's max payload: some of what matched is not in this reply"
    )
