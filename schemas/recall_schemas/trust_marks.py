"""A bead's trust record: who verified or rejected it, when, and why (part of :class:`MemoryBead`)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from .ids import AiId


class TrustVerdict(StrEnum):
    VERIFIED = "verified"
    """Checked and found right: the bead ranks a little higher (bounded)."""
    REJECTED = "rejected"
    """Checked and found wrong: the bead is demoted in every ranking, like a superseded one."""


class TrustMark(BaseModel):
    """One identity's current verdict on a bead (one mark per identity: a later verdict replaces its earlier one)."""

    model_config = ConfigDict(extra="forbid")

    ai_id: AiId
    verdict: TrustVerdict
    at: datetime
    note: str | None = Field(default=None, description="The verifier's note, or the rejection's reason")
