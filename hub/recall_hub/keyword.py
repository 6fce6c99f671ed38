"""Keyword retrieval through FalkorDB's full-text index over title + content."""

from __future__ import annotations

import re

from recall_schemas import BeadFilters

from .context import HubContext
from .filters import filter_clause
from .visibility import MY_GROUPS, visible

_WORD = re.compile(r"\w+", re.UNICODE)
MAX_TERMS = 32


def fulltext_query(text: str) -> str | None:
    """The caller's words as a RediSearch OR-query, or None when there is no word in it.

    Only word characters survive, so no query syntax from the caller ever reaches the index.
    """
    terms = list(dict.fromkeys(w.lower() for w in _WORD.findall(text) if len(w) <= 64))[:MAX_TERMS]
    return "|".join(terms) if terms else None


async def keyword_candidates(
    ctx: HubContext, caller: str, text: str, filters: BeadFilters, limit: int
) -> list[tuple[str, float]]:
    """Visible beads matching ``text``, best first. Visibility and filters apply before the limit."""
    query = fulltext_query(text)
    if query is None:
        return []
    clause, params = filter_clause("b", filters)
    rows = await ctx.graph.ro_query(
        MY_GROUPS + "CALL db.idx.fulltext.queryNodes('Bead', $q) YIELD node AS b, score "
        f"WITH b, score, my_groups WHERE {visible('b')}{clause} "
        "RETURN b.bead_id, score ORDER BY score DESC, b.created_at DESC LIMIT $limit",
        {"caller": caller, "q": query, "limit": limit, **params},
    )
    return [(row[0], float(row[1])) for row in rows]
