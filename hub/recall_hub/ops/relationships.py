"""Typed edges between beads, and breadth-first traversal that never leaves the caller's view."""

from __future__ import annotations

from typing import Any

from recall_schemas import (
    AddRelationship,
    Direction,
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
from recall_hub.store.records import (
    bead_from_node,
    rel_label,
    relationship_from_edge,
    relationship_from_props,
    relationship_props,
)
from recall_hub.store.visibility import MY_GROUPS, visible
from recall_hub.timeutil import now_ms

ALL_TYPES = [t.value for t in RelType]


async def add_relationship(ctx: HubContext, caller: str, req: AddRelationship) -> Relationship:
    """Link two beads the caller can see; one atomic MERGE, so repeating it changes nothing twice."""
    rows = await ctx.graph.query(
        MY_GROUPS + f"MATCH (a:Bead {{bead_id: $from_id}}) WHERE {visible('a')} "
        f"MATCH (c:Bead {{bead_id: $to_id}}) WHERE {visible('c')} "
        f"MERGE (a)-[r:{rel_label(req.rel_type)}]->(c) "
        "ON CREATE SET r.created_at = $now, r.created_by = $caller "
        "SET r += $props RETURN r",
        {
            "caller": caller,
            "from_id": req.from_id,
            "to_id": req.to_id,
            "now": now_ms(),
            "props": relationship_props(req.properties),
        },
    )
    if not rows:
        raise NotFound(f"bead {req.from_id} or {req.to_id} not found")
    return relationship_from_edge(rows[0][0], req.from_id, req.to_id)


def _pattern(direction: Direction) -> str:
    return {
        Direction.OUT: "(a)-[r]->(b:Bead)",
        Direction.IN: "(a)<-[r]-(b:Bead)",
        Direction.BOTH: "(a)-[r]-(b:Bead)",
    }[direction]


def _edge(row: list[Any]) -> Relationship:
    edge, start_id, end_id = row
    return relationship_from_edge(edge, start_id, end_id)


async def get_relationships(ctx: HubContext, caller: str, req: GetRelationships) -> RelationshipList:
    types = [req.rel_type.value] if req.rel_type else ALL_TYPES
    rows = await ctx.graph.ro_query(
        MY_GROUPS + f"MATCH (a:Bead {{bead_id: $bead_id}}) WHERE {visible('a')} "
        f"OPTIONAL MATCH {_pattern(req.direction)} WHERE type(r) IN $types AND {visible('b')} "
        "RETURN a.bead_id, r, startNode(r).bead_id, endNode(r).bead_id",
        {"caller": caller, "bead_id": req.bead_id, "types": types},
    )
    if not rows:
        raise NotFound(f"bead {req.bead_id} not found")
    edges = [_edge(row[1:]) for row in rows if row[1] is not None]
    edges.sort(key=lambda e: (e.created_at, e.rel_type, e.from_id, e.to_id))
    return RelationshipList(relationships=edges)


async def expand(
    ctx: HubContext,
    caller: str,
    seeds: list[str],
    max_depth: int,
    rel_types: list[RelType],
    direction: Direction,
    limit: int,
) -> Subgraph:
    """Breadth-first expansion from visible ``seeds``; one query per hop.

    Only beads the caller can see are entered, so the walk never passes through a hidden bead.
    """
    types = [t.value for t in rel_types] or ALL_TYPES
    rows = await ctx.graph.ro_query(
        MY_GROUPS + f"MATCH (b:Bead) WHERE b.bead_id IN $ids AND {visible('b')} RETURN b.bead_id",
        {"caller": caller, "ids": seeds},
    )
    depth_of = {row[0]: 0 for row in rows}
    edges: dict[tuple[str, str, str], Relationship] = {}
    frontier = [s for s in seeds if s in depth_of]
    for depth in range(1, max_depth + 1):
        if not frontier or len(depth_of) >= limit:
            break
        # Ids and edge properties only: whole beads are read once, for the beads that are kept.
        rows = await ctx.graph.ro_query(
            MY_GROUPS + f"MATCH (a:Bead) WHERE a.bead_id IN $frontier MATCH {_pattern(direction)} "
            f"WHERE type(r) IN $types AND {visible('b')} "
            "RETURN b.bead_id, type(r), startNode(r).bead_id, endNode(r).bead_id, properties(r)",
            {"caller": caller, "frontier": frontier, "types": types},
        )
        next_frontier: list[str] = []
        for bead_id, rel_type, start_id, end_id, props in rows:
            if bead_id not in depth_of:
                if len(depth_of) >= limit:
                    continue
                depth_of[bead_id] = depth
                next_frontier.append(bead_id)
            key = (rel_type, start_id, end_id)
            if key not in edges:
                edges[key] = relationship_from_props(rel_type, start_id, end_id, props)
        frontier = next_frontier
    rows = await ctx.graph.ro_query(
        MY_GROUPS + f"MATCH (b:Bead) WHERE b.bead_id IN $ids AND {visible('b')} RETURN b",
        {"caller": caller, "ids": list(depth_of)},
    )
    nodes = {row[0].properties["bead_id"]: row[0] for row in rows}
    ordered = sorted(nodes, key=lambda i: (depth_of[i], i))
    return Subgraph(
        nodes=[GraphNode(bead=bead_from_node(nodes[i]), depth=depth_of[i]) for i in ordered],
        edges=[e for e in edges.values() if e.from_id in nodes and e.to_id in nodes],
    )


async def traverse_graph(ctx: HubContext, caller: str, req: TraverseGraph) -> Subgraph:
    graph = await expand(ctx, caller, [req.start_id], req.max_depth, req.rel_types, req.direction, req.limit)
    if not graph.nodes:
        raise NotFound(f"bead {req.start_id} not found")
    return graph
