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
