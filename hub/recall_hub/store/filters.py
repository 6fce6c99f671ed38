"""Bead filters as parameterised Cypher predicates."""

from __future__ import annotations

from typing import Any

from recall_schemas import BeadFilters

from recall_hub.store.validity import holds_at
from recall_hub.timeutil import to_ms


def filter_clause(var: str, filters: BeadFilters) -> tuple[str, dict[str, Any]]:
    """``(" AND ...", params)`` for the filters that are set; an empty clause when none are."""
    parts: list[str] = []
    params: dict[str, Any] = {}
    # One membership test per tag: FalkorDB mis-evaluates list predicates over parameters after a WITH.
    for i, tag in enumerate(filters.tags):
        parts.append(f"$f_tag{i} IN {var}.tags")
        params[f"f_tag{i}"] = tag
    if filters.bead_types:
        parts.append(f"{var}.bead_type IN $f_types")
        params["f_types"] = [t.value for t in filters.bead_types]
    simple = {
        "session_id": filters.session_id,
        "group_id": filters.group_id,
        "created_by": filters.created_by,
        "visibility": filters.visibility.value if filters.visibility else None,
        "status": filters.status.value if filters.status else None,
    }
    for field, value in simple.items():
        if value is not None:
            parts.append(f"{var}.{field} = $f_{field}")
            params[f"f_{field}"] = value
    if filters.min_importance is not None:
        parts.append(f"{var}.importance >= $f_min_importance")
        params["f_min_importance"] = filters.min_importance
    if filters.max_importance is not None:
        parts.append(f"{var}.importance <= $f_max_importance")
        params["f_max_importance"] = filters.max_importance
    if filters.created_after is not None:
        parts.append(f"{var}.created_at >= $f_created_after")
        params["f_created_after"] = to_ms(filters.created_after)
    if filters.created_before is not None:
        parts.append(f"{var}.created_at < $f_created_before")
        params["f_created_before"] = to_ms(filters.created_before)
    if filters.valid_at is not None:
        parts.append(holds_at(var, "$f_valid_at"))
        params["f_valid_at"] = to_ms(filters.valid_at)
    clause = "".join(f" AND {p}" for p in parts)
    return clause, params


_LISTING_WHERE = {
    "session": "{v}.session_id = $value[0] AND {v}.created_by = $value[1]",
    "group": "{v}.group_id = $value",
    "tag": "$value IN {v}.tags",
    "since": "{v}.created_at >= $value",
}


def listing_clause(
    var: str, by: str, ascending: bool, after: tuple[int, str] | None, params: dict[str, Any]
) -> tuple[str, str]:
    """``(where, order)`` of a listing by ``by`` over the beads bound to ``var``, strictly after the position
    ``after`` in ``(created_at, bead_id)`` order (its parameters added to ``params``)."""
    where = _LISTING_WHERE[by].format(v=var)
    direction, onward, back = ("ASC", ">=", "<=") if ascending else ("DESC", "<=", ">=")
    if after is not None:
        # Not written as "created_at < $at OR (created_at = $at AND bead_id < $id)": FalkorDB returns
        # rows for which that OR is false (the cursor's own bead among them).
        where += (
            f" AND {var}.created_at {onward} $after_at"
            f" AND NOT ({var}.created_at = $after_at AND {var}.bead_id {back} $after_id)"
        )
        params.update(after_at=after[0], after_id=after[1])
    return where, f"{var}.created_at {direction}, {var}.bead_id {direction}"
