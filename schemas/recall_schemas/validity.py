"""Time on the wire: when a fact holds in the world (``valid_from``/``valid_to``), reads as the store
knew them at a past moment (``as_of``), and the date window a search understood in its query."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, AwareDatetime, Field

from .models import WireModel


def _in_utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


UtcTime = Annotated[AwareDatetime, AfterValidator(_in_utc)]
"""A moment with its time zone (a naive one is refused), carried as UTC."""

AS_OF = (
    "Answer as the store knew it at this moment (ISO 8601 with a time zone): beads created later do not exist, "
    "changed ones show the version of then. Who may see what is still decided now."
)
VALID_FROM = "When the fact starts to hold in the world (ISO 8601 with a time zone); unset: since always"
VALID_TO = "When the fact stops holding (at or after valid_from); unset: still holds"
VALID_AT = "Only beads whose validity interval [valid_from, valid_to] contains this moment (unset ends are open)"


def check_interval(valid_from: datetime | None, valid_to: datetime | None) -> None:
    """Refuse an interval that ends before it starts."""
    if valid_from is not None and valid_to is not None and valid_to < valid_from:
        raise ValueError("valid_to must not be before valid_from")


class DateWindow(WireModel):
    """A date expression found in a search's query and the window it names: beads whose ``valid_from``
    (else ``created_at``) falls in ``[start, end)`` rank higher. A question about time ("when did …")
    without a window has neither: beads that carry a ``valid_from`` rank higher."""

    text: str = Field(description="The words of the query that name the window, e.g. 'last May'")
    start: datetime | None = None
    end: datetime | None = Field(default=None, description="Exclusive")
    boost: float = Field(description="Multiplier on the relevance of the beads that fall in the window")


__all__ = ["AS_OF", "VALID_AT", "VALID_FROM", "VALID_TO", "DateWindow", "UtcTime", "check_interval"]
