"""Requests and replies of capture: facts extracted from a text under topic hubs, facts stored under
given topics (what the collectors send), and where a subject was met."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from .enums import BeadType, Provenance, Visibility
from .ids import BeadId, GroupId, SessionId
from .models import Content, Importance, Metadata, Tag, Title, WireModel
from .requests import MAX_BATCH, BeadFilters

TopicName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
FactKey = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:\-]+$")]
MAX_TOPICS = 64


class _Scoped(WireModel):
    """Where the stored beads go: the same rules as :class:`~recall_schemas.requests.CreateBead`."""

    visibility: Visibility = Visibility.PRIVATE
    group_id: GroupId | None = None
    session_id: SessionId | None = None
    importance: Importance = 5
    tags: list[Tag] = Field(default_factory=list, max_length=32, description="Put on every fact bead")

    @model_validator(mode="after")
    def _group_needs_group_id(self) -> _Scoped:
        if self.visibility is Visibility.GROUP and self.group_id is None:
            raise ValueError("visibility 'group' needs a group_id")
        return self


class RememberExtracted(_Scoped):
    """Facts extracted from ``text`` (by the hub's LLM, else by its outline of the text), each stored as a
    bead ``PART_OF`` a topic hub bead. The same text from the same caller into the same scope stores
    nothing new."""

    text: Annotated[str, StringConstraints(min_length=1, max_length=262_144)]
    max_facts: Annotated[int, Field(ge=1, le=MAX_BATCH)] = 50


class FactInput(WireModel):
    title: Title
    content: Content = ""
    key: FactKey | None = Field(
        default=None,
        description="Names the fact within the caller's scope: storing it again with another text updates the "
        "bead stored under the key instead of adding one. Without a key, the fact's text is its key.",
    )
    metadata: Metadata = Field(default_factory=dict)


class TopicInput(WireModel):
    name: TopicName
    facts: list[FactInput] = Field(min_length=1, max_length=MAX_BATCH)


class RememberTopics(_Scoped):
    """Facts already split by topic (a document's sections, say), stored ``PART_OF`` their topic hubs in
    one atomic step."""

    topics: list[TopicInput] = Field(min_length=1, max_length=MAX_TOPICS)
    bead_type: BeadType = BeadType.FACT
    provenance: Provenance = Provenance.RECORDED
    hub_metadata: Metadata = Field(default_factory=dict, description="Put on hub beads this request creates")

    @model_validator(mode="after")
    def _bounded(self) -> RememberTopics:
        if self.bead_type is BeadType.TOPIC:
            raise ValueError("facts cannot be of bead_type 'topic' (that marks the hubs)")
        if sum(len(t.facts) for t in self.topics) > MAX_BATCH:
            raise ValueError(f"at most {MAX_BATCH} facts in one request")
        return self


class StoredBead(WireModel):
    bead_id: BeadId
    title: str
    created: bool = Field(description="False when it was already there (a rerun, or a hub reused)")
    updated: bool = Field(default=False, description="Its text changed (a keyed fact stored again)")


class StoredTopic(WireModel):
    name: str
    hub: StoredBead = Field(description="The topic hub bead (bead_type 'topic'), one per topic name and scope")
    facts: list[StoredBead]


Extractor = Literal["llm", "outline", "given"]


class RememberedTopics(WireModel):
    extractor: Extractor = Field(
        description="Who split the text: the hub's LLM, the deterministic outline, or the caller ('given')"
    )
    fallback_reason: str | None = Field(
        default=None, description="Why the outline was used although an LLM is configured (malformed answer)"
    )
    replayed: bool = Field(default=False, description="This text was stored before: nothing was extracted again")
    created: int = Field(description="Beads created by this request, hubs included")
    updated: int = 0
    forgotten: int = Field(
        default=0, description="Facts left out: the same content was forgotten in this scope (forget_bead)"
    )
    topics: list[StoredTopic]


# --- where ---------------------------------------------------------------------------------------

PlaceKind = Literal["file", "commit", "session", "command"]


class RecallWhere(WireModel):
    """Where a subject was met: the files, commits, sessions and commands of the visible beads matching
    ``query``."""

    query: Annotated[str, Field(min_length=1, max_length=4096)]
    limit: Annotated[int, Field(ge=1, le=100)] = 30
    filters: BeadFilters = Field(default_factory=BeadFilters)


class Place(WireModel):
    kind: PlaceKind
    place: str = Field(description="A file path, a commit sha (with its repository), a session id, a command line")
    detail: str | None = Field(default=None, description="A heading, a commit subject, an exit status")
    bead_ids: list[BeadId] = Field(description="The matching beads met there, best first")
    score: float = Field(description="The best search score among them")
    last_seen: datetime


class WhereResult(WireModel):
    files: list[Place] = Field(default_factory=list)
    commits: list[Place] = Field(default_factory=list)
    sessions: list[Place] = Field(default_factory=list)
    commands: list[Place] = Field(default_factory=list)


__all__ = [
    "FactInput",
    "Place",
    "PlaceKind",
    "RecallWhere",
    "RememberExtracted",
    "RememberTopics",
    "RememberedTopics",
    "StoredBead",
    "StoredTopic",
    "TopicInput",
    "WhereResult",
]
