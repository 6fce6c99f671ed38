"""When a fact holds in the world: a bead's ``valid_from``/``valid_to`` (epoch ms; unset ends are open).

The interval is closed, ``[valid_from, valid_to]``: a fact with ``valid_to == valid_from`` held at that
moment only. A bead without an interval holds at every moment (nothing says otherwise).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from recall_hub.store.graph import GraphStore
from recall_hub.store.visibility import MY_GROUPS, visible

OPEN_START = -(2**62)
OPEN_END = 2**62
"""What the derived indexes store for an unset end (range queries cannot test for a missing value)."""


def validity_attributes(props: Mapping[str, Any]) -> dict[str, int]:
    """A bead's interval as the derived indexes keep it: both ends, an unset one open."""
    start, end = props.get("valid_from"), props.get("valid_to")
    return {
        "valid_from": OPEN_START if start is None else int(start),
        "valid_to": OPEN_END if end is None else int(end),
    }


def holds_at(var: str, param: str) -> str:
    """Cypher predicate: the validity interval of ``var`` contains the moment ``param``."""
    return (
        f"({var}.valid_from IS NULL OR {var}.valid_from <= {param}) "
        f"AND ({var}.valid_to IS NULL OR {var}.valid_to >= {param})"
    )


def interval_after_change(bead: str) -> str:
    """Cypher predicate for an update: the interval ``bead`` will have after ``$changes`` is in order.
    Needs the parameters ``$from_changed`` and ``$to_changed`` (a change to null clears that end)."""
    new_from = f"(CASE WHEN $from_changed THEN $changes.valid_from ELSE {bead}.valid_from END)"
    new_to = f"(CASE WHEN $to_changed THEN $changes.valid_to ELSE {bead}.valid_to END)"
    return f"({new_from} IS NULL OR {new_to} IS NULL OR {new_to} >= {new_from})"


def interval_params(changes: dict[str, Any]) -> dict[str, Any]:
    return {"from_changed": "valid_from" in changes, "to_changed": "valid_to" in changes}


class DatedBeads:
    def __init__(self, graph: GraphStore) -> None:
        self.graph = graph

    async def in_window(self, caller: str, ids: Sequence[str], start: int, end: int) -> set[str]:
        """The visible beads among ``ids`` whose ``valid_from`` (else ``created_at``) is in ``[start, end)``."""
        if not ids:
            return set()
        rows = await self.graph.values(
            MY_GROUPS + f"MATCH (b:Bead) WHERE b.bead_id IN $ids AND {visible('b')} "
            "WITH b, coalesce(b.valid_from, b.created_at) AS at WHERE at >= $start AND at < $end "
            "RETURN b.bead_id",
            {"caller": caller, "ids": list(ids), "start": start, "end": end},
        )
        return {row[0] for row in rows}

    async def with_validity(self, caller: str, ids: Sequence[str]) -> set[str]:
        """The visible beads among ``ids`` that carry a ``valid_from`` (they know when they held)."""
        if not ids:
            return set()
        rows = await self.graph.values(
            MY_GROUPS + f"MATCH (b:Bead) WHERE b.bead_id IN $ids AND {visible('b')} AND b.valid_from IS NOT NULL "
            "RETURN b.bead_id",
            {"caller": caller, "ids": list(ids)},
        )
        return {row[0] for row in rows}
