"""Requests and replies of versions: superseding a bead by a newer one, and a bead's version history."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import Field, StringConstraints, model_validator

from .ids import AiId, BeadId
from .models import MemoryBead, WireModel


class SupersedeBead(WireModel):
    """``new_id`` replaces ``old_id``: an ``UPDATES`` edge new → old; the old bead stays readable and ranks lower."""

    old_id: BeadId
    new_id: BeadId
    reason: Annotated[str, StringConstraints(min_length=1, max_length=1000, strip_whitespace=True)] | None = None

    @model_validator(mode="after")
    def _not_itself(self) -> SupersedeBead:
        if self.old_id == self.new_id:
            raise ValueError("a bead cannot supersede itself")
        return self


class GetHistory(WireModel):
    bead_id: BeadId
    limit: Annotated[int, Field(ge=1, le=200)] = Field(default=50, description="Most versions returned")


class VersionLink(WireModel):
    """``new_id`` superseded ``old_id``: who linked them, when, and why."""

    old_id: BeadId
    new_id: BeadId
    superseded_at: datetime
    superseded_by: AiId
    reason: str | None = None


class HistoryVersion(WireModel):
    bead: MemoryBead
    offset: int = Field(description="0: the bead asked about; -n: n versions older; +n: n versions newer")


class BeadHistory(WireModel):
    bead_id: BeadId
    versions: list[HistoryVersion] = Field(description="Oldest first; only versions the caller may see")
    links: list[VersionLink] = Field(description="The supersede links between the versions shown")
    truncated: bool = Field(
        default=False, description="Cut (by limit or to fit the bus's max payload): the farthest versions are left out"
    )


__all__ = ["BeadHistory", "GetHistory", "HistoryVersion", "SupersedeBead", "VersionLink"]
