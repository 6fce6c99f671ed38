"""Typed edges between beads, and breadth-first traversal that never leaves the caller's view."""

from __future__ import annotations

from recall_schemas import (
    AddRelationship,
    Direction,
    GetEdges,
    GetRelationships,
    GraphNode,
    NotFound,
    Relationship,
    RelationshipList,
    RelType,
    Subgraph,
    TraverseGraph,
)

from recall_hub.context import HubContext
from recall_hub.ops.time_fields import as_of_ms
from recall_hub.store.as_of import AsOfReads
from recall_hub.store.records import bead_from_props, relationship_props
from recall_hub.timeutil import now_ms


async def add_relationship(ctx: HubContext, caller: str, req: AddRelationship) -> Relationship:
    """Link two beads the caller can see; one atomic MERGE, so repeating it changes nothing twice."""
    edge = await ctx.relationships.add(
        caller, req.from_id, req.to_id, req.rel_type, relationship_props(req.properties), now_ms()
    )
    if edge is None:
        raise NotFound(f"bead {req.from_id} or {req.to_id} not found")
    if req.rel_type is RelType.FOLLOWS_FROM:
        await ctx.index_log.append(req.from_id)  # its keyword document holds the words of the beads it follows
    return edge


async def get_relationships(ctx: HubContext, caller: str, req: GetRelationships) -> RelationshipList:
    types = [req.rel_type.value] if req.rel_type else []
    edges = await ctx.relationships.of_bead(caller, req.bead_id, types, req.direction)
    if edges is None:
        raise NotFound(f"bead {req.bead_id} not found")
    edges.sort(key=lambda e: (e.created_at, e.rel_type, e.from_id, e.to_id))
    return RelationshipList(relationships=edges)


async def get_edges(ctx: HubContext, caller: str, req: GetEdges) -> RelationshipList:
    """One read for a graph view: every edge out of the listed beads the caller can see, to beads it can see."""
    ids = list(dict.fromkeys(req.bead_ids))
    edges = await ctx.relationships.edges_of(caller, ids, [t.value for t in req.rel_types])
    edges.sort(key=lambda e: (e.from_id, e.created_at, e.rel_type, e.to_id))
    return RelationshipList(relationships=edges)


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
        nodes=[GraphNode(bead=bead_from_props(found[i][0]), depth=depth_of[i]) for i in ordered],
        edges=[e for e in edges.values() if e.from_id in found and e.to_id in found],
    )


async def traverse_graph(ctx: HubContext, caller: str, req: TraverseGraph) -> Subgraph:
    graph = await expand(
        ctx, caller, [req.start_id], req.max_depth, req.rel_types, req.direction, req.limit,
        as_of=as_of_ms(req.as_of) if req.as_of is not None else None,
    )
    if not graph.nodes:
        raise NotFound(f"bead {req.start_id} not found")
    return graph
