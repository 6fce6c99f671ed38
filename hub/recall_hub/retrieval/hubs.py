"""Topic hubs in search: left out of the results, their facts stand in for them.

A hub bead (bead_type ``topic``) names a topic and little else, so it often matches a query best while
saying least. Searches leave hubs out unless asked; when a hub was among the best candidates, its
``PART_OF`` facts join the candidates with part of the hub's relevance, so a query whose best matches
are all hubs still answers with what those hubs hold.
"""

from __future__ import annotations

from typing import Any

from recall_schemas import BeadFilters, BeadType

from recall_hub.context import HubContext
from recall_hub.retrieval.ranking import Fused
from recall_hub.store.topics import HUB_TYPE, TopicStore

EXPAND_FROM = 5
"""Hubs among this many best candidates lend their relevance to their facts."""
PER_HUB = 10
"""Facts of one hub admitted as candidates (most important, then newest)."""
HUB_SHARE = 0.5
"""The part of a hub's relevance its facts get."""


def hubs_wanted(include_hubs: bool, filters: BeadFilters) -> bool:
    """Hubs stay in the results when asked for, or when the filters ask for topic beads by type."""
    return include_hubs or BeadType.TOPIC in filters.bead_types


async def replace_hubs(
    ctx: HubContext, caller: str, fused: dict[str, Fused], seen: dict[str, dict[str, Any]]
) -> set[str]:
    """Remove the hubs among the screened candidates ``seen`` from ``fused`` (in place); the facts of the
    best of them join it. Returns the facts that joined (not screened yet)."""
    hubs = [bead_id for bead_id in fused if seen.get(bead_id, {}).get("bead_type") == HUB_TYPE]
    if not hubs:
        return set()
    best = {e.bead_id for e in sorted(fused.values(), key=lambda e: (-e.relevance, e.bead_id))[:EXPAND_FROM]}
    facts_of = await TopicStore(ctx.graph).hubs_among(caller, hubs, [h for h in hubs if h in best], PER_HUB)
    removed = {hub_id: fused.pop(hub_id) for hub_id in hubs}
    joined: set[str] = set()
    for hub_id, facts in facts_of.items():
        lent = removed[hub_id].relevance * HUB_SHARE
        for fact in facts:
            if fact not in fused:
                joined.add(fact)
            entry = fused.setdefault(fact, Fused(fact))
            entry.relevance = max(entry.relevance, lent)
    return joined
