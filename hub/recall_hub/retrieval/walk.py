"""Breadth-first walks over typed edges that never leave the caller's view (traversal, ``why``, history)."""

from __future__ import annotations

from recall_schemas import Direction, GraphNode, Relationship, RelType, Subgraph

from recall_hub.context import HubContext
from recall_hub.store.as_of import AsOfReads


async def expand(
    ctx: HubContext,
    caller: str,
    seeds: list[str],
    max_depth: int,
    rel_types: list[RelType],
    direction: Direction,
    limit: int,
    as_of: int | None = None,
) -> Subgraph:
    """Breadth-first expansion from visible ``seeds``; one query per hop.

    Only beads the caller can see are entered, so the walk never passes through a hidden bead. With
    ``as_of`` (epoch ms) the walk is the graph of then: beads and edges made later are not there, and
    beads read as their version of then.
    """
    types = [t.value for t in rel_types]
    past = AsOfReads(ctx.graph) if as_of is not None else None
    visible_seeds = (
        await ctx.beads.visible_ids(caller, seeds) if past is None or as_of is None
        else await past.visible_ids(caller, seeds, as_of)
    )
    depth_of = {s: 0 for s in seeds if s in visible_seeds}
    edges: dict[tuple[str, str, str], Relationship] = {}
    frontier = list(depth_of)
    for depth in range(1, max_depth + 1):
        if not frontier or len(depth_of) >= limit:
            break
        # Ids and edge properties only: whole beads are read once, for the beads that are kept.
        next_frontier: list[str] = []
        step = (
            await ctx.relationships.hop(caller, frontier, types, direction) if past is None or as_of is None
            else await past.hop(caller, frontier, types, direction, as_of)
        )
        for bead_id, edge in step:
            if bead_id not in depth_of:
                if len(depth_of) >= limit:
                    continue
                depth_of[bead_id] = depth
                next_frontier.append(bead_id)
            edges.setdefault((edge.rel_type.value, edge.from_id, edge.to_id), edge)
        frontier = next_frontier
    found = (
        await ctx.beads.many(caller, list(depth_of)) if past is None or as_of is None
        else await past.many(caller, list(depth_of), as_of)
    )
    ordered = sorted(found, key=lambda i: (depth_of[i], i))
    return Subgraph(
        nodes=[GraphNode(bead=ctx.beads.cache.bead(found[i][0]), depth=depth_of[i]) for i in ordered],
        edges=[e for e in edges.values() if e.from_id in found and e.to_id in found],
    )
