"""Requests and replies of trust: verifying and rejecting beads, and the list of stale beads."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field, StringConstraints

from .ids import BeadId, GroupId
from .models import MemoryBead, WireModel
from .trust_marks import TrustMark, TrustVerdict

Note = Annotated[str, StringConstraints(min_length=1, max_length=1000, strip_whitespace=True)]
StaleCursor = Annotated[str, Field(pattern=r"^[0-9]{1,19}:b_[a-z0-9]{4,32}$")]


class VerifyBead(WireModel):
    """Vouch for a bead someone else wrote (any identity that can see it; never its creator)."""

    bead_id: BeadId
    note: Note | None = Field(default=None, description="What was checked, or how")


class RejectBead(WireModel):
    """Mark a bead someone else wrote as wrong (any identity that can see it; never its creator)."""

    bead_id: BeadId
    reason: Note = Field(description="Why the bead is wrong")


class StaleReason(StrEnum):
    UNVERIFIED = "unverified"
    """Weak provenance (recorded or derived), older than the age asked for, and nobody verified or rejected it."""
    SOURCE_SUPERSEDED = "source_superseded"
    """A bead it was made from (``metadata.source_bead_id``) has a newer version the caller can see."""
    SOURCE_GONE = "source_gone"
    """A bead it was made from no longer exists for the caller: deleted, forgotten or out of the caller's view."""


class ListStale(WireModel):
    group_id: GroupId | None = Field(default=None, description="Only this group's beads (members only)")
    older_than_days: Annotated[float, Field(ge=0, le=36_500)] = Field(
        default=30, description="Age after which an unverified bead of weak provenance counts as stale"
    )
    limit: Annotated[int, Field(ge=1, le=500)] = 50
    cursor: StaleCursor | None = Field(
        default=None, description="A reply's `next_cursor`: continue after the beads already examined"
    )


class StaleCause(WireModel):
    reason: StaleReason
    source_id: BeadId | None = Field(default=None, description="The source bead concerned (source_* reasons)")
    newer_id: BeadId | None = Field(default=None, description="The source's newer version (source_superseded)")


class StaleBead(WireModel):
    bead: MemoryBead
    causes: list[StaleCause] = Field(min_length=1)


class StaleList(WireModel):
    items: list[StaleBead] = Field(description="Oldest first")
    next_cursor: str | None = Field(
        default=None, description="More beads remain to be examined: pass it as `cursor` to continue"
    )
    truncated: bool = Field(
        default=False, description="Cut to fit the bus's max payload: some of what matched is not in this reply"
    )


__all__ = [
    "ListStale",
    "RejectBead",
    "StaleBead",
    "StaleCause",
    "StaleList",
    "StaleReason",
    "TrustMark",
    "TrustVerdict",
    "VerifyBead",
]
