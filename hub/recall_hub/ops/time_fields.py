"""The time fields of requests as the store keeps them (epoch milliseconds): a bead's validity interval
and the moment of an ``as_of`` read."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from recall_schemas import BeadUpdates

from recall_hub.timeutil import to_ms


def validity_props(valid_from: datetime | None, valid_to: datetime | None) -> dict[str, int]:
    """The stored properties of a new bead's validity interval (an unset end is not stored)."""
    ends = {"valid_from": valid_from, "valid_to": valid_to}
    return {name: to_ms(value) for name, value in ends.items() if value is not None}


def validity_changes(updates: BeadUpdates) -> dict[str, Any]:
    """The interval ends an update sets, as stored; an end set to null is removed from the bead."""
    return {
        name: None if getattr(updates, name) is None else to_ms(getattr(updates, name))
        for name in ("valid_from", "valid_to")
        if name in updates.model_fields_set
    }


def as_of_ms(as_of: datetime) -> int:
    return to_ms(as_of)
