"""Requests and replies of group coordination: sessions, agent state, ops handoff, key-value
memory, the change feed."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from .enums import BeadType, Visibility
from .ids import AiId, BeadId, GroupId, SessionId
from .models import Importance, MemoryBead, Metadata, Tag, WireModel
from .requests import BeadFilters, SearchResult

# --- sessions ----------------------------------------------------------------------------------

SessionState = Literal["active", "ended", "migrated"]


class Session(WireModel):
    session_id: SessionId
    owner: AiId
    group_id: GroupId | None = None
    state: SessionState = "active"
    created_at: datetime
    migrated_to: SessionId | None = None


class GetSession(WireModel):
    session_id: SessionId


class MigrateSession(WireModel):
    """Move every bead of ``old_session_id`` to ``new_session_id`` in one atomic step."""

    old_session_id: SessionId
    new_session_id: SessionId


class MigrationResult(WireModel):
    old_session_id: SessionId
    new_session_id: SessionId
    migrated_beads: int


class CheckSession(WireModel):
    session_id: SessionId


class IntegrityProblem(WireModel):
    bead_id: BeadId
    problem: str


class IntegrityReport(WireModel):
    session_id: SessionId
    beads: int
    problems: list[IntegrityProblem]

    @property
    def ok(self) -> bool:
        return not self.problems


# --- agent state -------------------------------------------------------------------------------


class Todo(WireModel):
    text: Annotated[str, Field(min_length=1, max_length=2000)]
    done: bool = False
    bead_id: BeadId | None = None


class AIState(WireModel):
    ai_id: AiId
    todos: list[Todo] = Field(default_factory=list)
    working_notes: str = ""
    context_summary: str = ""
    custom_state: dict[str, Any] = Field(default_factory=dict)
    updated_at: datetime | None = None
    inherited_from: list[AiId] = Field(default_factory=list, description="Identities whose state was transferred in")
    version: int = Field(
        default=0, ge=0, description="0 before the first save, +1 on every change; see SaveAIState.if_version"
    )


class SaveAIState(WireModel):
    """Replace the fields given; the others stay."""

    todos: list[Todo] | None = Field(default=None, max_length=500)
    working_notes: Annotated[str, Field(max_length=65536)] | None = None
    context_summary: Annotated[str, Field(max_length=65536)] | None = None
    custom_state: dict[str, Any] | None = None
    if_version: Annotated[int, Field(ge=0)] | None = Field(
        default=None,
        description="Save only if the state is still at this version (0: never saved); otherwise 'conflict' with "
        "the current version. Without it, the fields given replace whatever is there",
    )


class GetAIState(WireModel):
    pass


class TransferAIState(WireModel):
    """Hand the caller's state to ``to_ai_id`` (who must share a group): its todos and notes are merged in."""

    to_ai_id: AiId


# --- ops handoff -------------------------------------------------------------------------------

HandoffStatus = Literal["pending", "acknowledged"]


class TransferOps(WireModel):
    group_id: GroupId
    from_ops: AiId = Field(description="Must be the caller, the group's current ops")
    to_agent: AiId = Field(description="A current member who becomes the ops")
    context_summary: Annotated[str, Field(min_length=1, max_length=65536)]
    bead_ids: list[BeadId] = Field(
        default_factory=list, max_length=200, description="Beads the summary covers; default the group's most important"
    )
    handoff_id: Annotated[str, Field(pattern=r"^h_[a-z0-9]{4,40}$")] | None = Field(
        default=None, description="Idempotency: a retried transfer with the same id returns the first"
    )


class Handoff(WireModel):
    handoff_id: str
    group_id: GroupId
    from_ops: AiId
    to_ops: AiId
    handoff_bead_id: BeadId
    status: HandoffStatus
    created_at: datetime
    acknowledged_at: datetime | None = None


class ListHandoffs(WireModel):
    group_id: GroupId
    limit: Annotated[int, Field(ge=1, le=500)] = 50


class HandoffList(WireModel):
    handoffs: list[Handoff] = Field(description="The group's ops transfers, newest first")


class AcknowledgeHandoff(WireModel):
    handoff_id: Annotated[str, Field(pattern=r"^h_[a-z0-9]{4,40}$")]


class GetHandoffBrief(WireModel):
    group_id: GroupId
    max_tokens: Annotated[int, Field(ge=64, le=100_000)] = 1500


class HandoffBrief(WireModel):
    group_id: GroupId
    handoff: Handoff | None
    text: str = Field(description="The group's most important and recent memory, rendered, within max_tokens")
    bead_ids: list[BeadId]
    tokens: int
    open_todos: list[Todo]
    state: AIState | None = Field(default=None, description="The state handed over with the ops role")


# --- key-value memory --------------------------------------------------------------------------

Key = Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[^\s].*$")]


class KVEntry(WireModel):
    key: str
    value: str
    metadata: Metadata = Field(default_factory=dict)
    updated_at: datetime
    version: int = Field(default=1, ge=1, description="1 when first learnt, +1 on every change; see Learn.if_version")


class Learn(WireModel):
    key: Key
    value: Annotated[str, Field(max_length=65536)]
    metadata: Metadata = Field(default_factory=dict)
    if_version: Annotated[int, Field(ge=0)] | None = Field(
        default=None,
        description="Store only if the key is still at this version (0: only if nothing is learnt under it yet); "
        "otherwise 'conflict' with the current version",
    )


class Recall(WireModel):
    key: Key
    max_length: Annotated[int, Field(ge=1)] | None = None


class UnifiedRecall(WireModel):
    query: Annotated[str, Field(min_length=1, max_length=4096)]
    limit: Annotated[int, Field(ge=1, le=100)] = 10
    filters: BeadFilters = Field(default_factory=BeadFilters)


class UnifiedRecallResult(WireModel):
    entries: list[KVEntry] = Field(description="Key-value memories whose key or value matches")
    beads: SearchResult
    truncated: bool = Field(
        default=False, description="Cut to fit the bus's max payload: some of what matched is not in this reply"
    )


class PromoteToBead(WireModel):
    key: Key
    bead_type: BeadType = BeadType.FACT
    visibility: Visibility = Visibility.PRIVATE
    group_id: GroupId | None = None
    importance: Importance = 5
    tags: list[Tag] = Field(default_factory=list, max_length=32)

    @model_validator(mode="after")
    def _group_needs_group_id(self) -> PromoteToBead:
        if self.visibility is Visibility.GROUP and self.group_id is None:
            raise ValueError("visibility 'group' needs a group_id")
        return self


# --- change feed -------------------------------------------------------------------------------

ChangeAction = Literal["created", "updated", "deleted", "hidden", "forgotten"]
"""``forgotten``: the bead was forgotten; earlier entries of it in the log no longer carry its content."""


class Change(WireModel):
    """One change of a group (or global) bead. ``cursor`` orders a scope's changes."""

    cursor: str
    scope: str = Field(description="A group id, or 'global'")
    action: ChangeAction
    bead_id: BeadId
    by: AiId
    at: datetime
    bead: MemoryBead | None = Field(default=None, description="The bead after the change; absent for deletions")


class ChangesSince(WireModel):
    scope: Annotated[str, Field(pattern=r"^(global|g_[a-z0-9]{4,32})$")]
    cursor: Annotated[str, Field(pattern=r"^\d{1,19}-\d{1,19}$")] | None = Field(
        default=None, description="Last cursor seen; none: from the beginning"
    )
    limit: Annotated[int, Field(ge=1, le=1000)] = 200


class ChangeBatch(WireModel):
    changes: list[Change]
    cursor: str | None = Field(description="Pass back to continue; none when the scope has no changes yet")
    truncated: bool = Field(
        default=False,
        description="Cut to fit the bus's max payload: more changes follow `cursor` (the last one included); "
        "a change whose bead alone would not fit comes without its `bead`",
    )


class Notification(WireModel):
    """What the hub sends on an identity's own notification subject (``recall.v1.notify.<ai_id>``)."""

    kind: Literal["change", "handoff"]
    change: Change | None = None
    handoff: Handoff | None = None
    brief: HandoffBrief | None = None


__all__ = [
    "AIState",
    "AcknowledgeHandoff",
    "Change",
    "ChangeBatch",
    "ChangesSince",
    "CheckSession",
    "GetAIState",
    "GetHandoffBrief",
    "GetSession",
    "Handoff",
    "HandoffBrief",
    "HandoffList",
    "IntegrityProblem",
    "IntegrityReport",
    "KVEntry",
    "Learn",
    "ListHandoffs",
    "MigrateSession",
    "MigrationResult",
    "Notification",
    "PromoteToBead",
    "Recall",
    "SaveAIState",
    "Session",
    "Todo",
    "TransferAIState",
    "TransferOps",
    "UnifiedRecall",
    "UnifiedRecallResult",
]
