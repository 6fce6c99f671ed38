"""Typed edges between beads, and breadth-first traversal that never leaves the caller's view."""

from __future__ import annotations

from recall_schemas import (
    AddRelationship,
    GetEdges,
    GetRelationships,
    NotFound,
    Relationship,
    RelationshipList,
    RelType,
    Subgraph,
    TraverseGraph,
)

from recall_hub.context import HubContext
from recall_hub.ops.time_fields import as_of_ms
from recall_hub.retrieval.walk import expand
from recall_hub.store.records import relationship_props
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


async def traverse_graph(ctx: HubContext, caller: str, req: TraverseGraph) -> Subgraph:
    graph = await expand(
        ctx, caller, [req.start_id], req.max_depth, req.rel_types, req.direction, req.limit,
        as_of=as_of_ms(req.as_of) if req.as_of is not None else None,
    )
    if not graph.nodes:
        raise NotFound(f"bead {req.start_id} not found")
    return graph
