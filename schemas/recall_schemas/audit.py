"""The audit trail of a group, for its ops: who read and wrote which of the group's beads, and when."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import Field

from .ids import AiId, BeadId, GroupId
from .models import WireModel


class GetAuditLog(WireModel):
    """Entries about the group's beads (group visibility) made by its current members, newest first; only
    the group's ops may ask. ``member`` or ``bead_id`` narrow it to one member's entries or one bead's."""

    group_id: GroupId
    member: AiId | None = Field(default=None, description="Only this current member's entries")
    bead_id: BeadId | None = Field(
        default=None, description="Only entries naming this bead of the group (by anyone, allowed or refused)"
    )
    limit: Annotated[int, Field(ge=1, le=1000)] = 100


class AuditRecord(WireModel):
    at: datetime
    ai_id: str = Field(description="Who made the request")
    op: str = Field(description="The operation")
    allowed: bool
    code: str = Field(description="'ok', or the error code of the refusal")
    bead_ids: list[BeadId] = Field(description="The group's beads the request or its reply named (others left out)")


class AuditTrail(WireModel):
    group_id: GroupId
    entries: list[AuditRecord] = Field(description="Newest first")
    truncated: bool = Field(
        default=False, description="Cut to fit the bus's max payload: some of what matched is not in this reply"
    )


__all__ = ["AuditRecord", "AuditTrail", "GetAuditLog"]
