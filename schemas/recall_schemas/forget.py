"""Forgetting: a bead's content removed for good, a tombstone left in its place, and a deny-list that
keeps the same content from being stored again in the same scope."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import Field, StringConstraints

from .enums import Visibility
from .ids import AiId, BeadId, GroupId
from .models import WireModel

Reason = Annotated[str, StringConstraints(min_length=1, max_length=500, strip_whitespace=True)]

FORGOTTEN_REASON = "forgotten"
"""``details["reason"]`` of the ``conflict`` a create gets when its content was forgotten in that scope."""


class ForgetBead(WireModel):
    bead_id: BeadId
    reason: Reason = Field(description="Why it is forgotten (kept on the tombstone; never the content)")
    allow_again: bool = Field(
        default=False,
        description="False: the same or nearly the same content is refused in the bead's scope from now on",
    )


class Tombstone(WireModel):
    """What is left of a forgotten bead: who forgot it, when and why, and the hash of its content."""

    bead_id: BeadId
    content_hash: str = Field(description="sha256 hex of the normalised content the bead had")
    visibility: Visibility
    group_id: GroupId | None = None
    created_by: AiId
    forgotten_by: AiId
    forgotten_at: datetime
    reason: str
    denied: bool = Field(description="Whether the same content is still refused in the bead's scope")


class ForgetByAuthor(WireModel):
    ai_id: AiId = Field(description="The identity whose beads are forgotten")
    reason: Reason
    allow_again: bool = False


MAX_LISTED_IDS = 1000


class ForgottenByAuthor(WireModel):
    ai_id: AiId
    forgotten: int = Field(ge=0, description="Beads forgotten")
    by_scope: dict[str, int] = Field(
        default_factory=dict, description="Beads forgotten per scope: 'global', a group id, or 'private'"
    )
    bead_ids: list[BeadId] = Field(
        default_factory=list, description=f"The forgotten beads' ids (the first {MAX_LISTED_IDS})"
    )


class ListForgotten(WireModel):
    group_id: GroupId | None = Field(default=None, description="Only this group's tombstones")
    limit: Annotated[int, Field(ge=1, le=500)] = 100


class TombstoneList(WireModel):
    tombstones: list[Tombstone] = Field(description="Newest first")


class AllowForgotten(WireModel):
    bead_id: BeadId = Field(description="The forgotten bead whose content may be stored again")


__all__ = [
    "FORGOTTEN_REASON",
    "MAX_LISTED_IDS",
    "AllowForgotten",
    "ForgetBead",
    "ForgetByAuthor",
    "ForgottenByAuthor",
    "ListForgotten",
    "Tombstone",
    "TombstoneList",
]
