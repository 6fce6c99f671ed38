"""Typed edges between beads. Every read and write takes the caller: an edge is seen, made or walked
only between beads the caller may see, so a walk never passes through a hidden bead."""

from __future__ import annotations

from typing import Any

from recall_schemas import Direction, Relationship, RelType

from recall_hub.store.graph import GraphStore
from recall_hub.store.records import rel_label, relationship_from_edge, relationship_from_props
from recall_hub.store.visibility import MY_GROUPS, visible

ALL_TYPES = [t.value for t in RelType]


def _pattern(direction: Direction) -> str:
    return {
        Direction.OUT: "(a)-[r]->(b:Bead)",
        Direction.IN: "(a)<-[r]-(b:Bead)",
        Direction.BOTH: "(a)-[r]-(b:Bead)",
    }[direction]


class RelationshipStore:
    def __init__(self, graph: GraphStore) -> None:
        self.graph = graph

    async def add(
        self, caller: str, from_id: str, to_id: str, rel_type: RelType, props: dict[str, Any], now: int
    ) -> Relationship | None:
        """Link two beads the caller can see; one atomic MERGE, so repeating it changes nothing twice."""
        rows = await self.graph.query(
            MY_GROUPS + f"MATCH (a:Bead {{bead_id: $from_id}}) WHERE {visible('a')} "
            f"MATCH (c:Bead {{bead_id: $to_id}}) WHERE {visible('c')} "
            f"MERGE (a)-[r:{rel_label(rel_type)}]->(c) "
            "ON CREATE SET r.created_at = $now, r.created_by = $caller "
            "SET r += $props RETURN r",
            {"caller": caller, "from_id": from_id, "to_id": to_id, "now": now, "props": props},
        )
        return relationship_from_edge(rows[0][0], from_id, to_id) if rows else None

    async def of_bead(
        self, caller: str, bead_id: str, types: list[str], direction: Direction
    ) -> list[Relationship] | None:
        """The edges of a visible bead to other visible beads; None when the bead is not visible."""
        rows = await self.graph.values(
            MY_GROUPS + f"MATCH (a:Bead {{bead_id: $bead_id}}) WHERE {visible('a')} "
            f"OPTIONAL MATCH {_pattern(direction)} WHERE type(r) IN $types AND {visible('b')} "
            "RETURN a.bead_id, type(r), startNode(r).bead_id, endNode(r).bead_id, properties(r)",
            {"caller": caller, "bead_id": bead_id, "types": types or ALL_TYPES},
        )
        if not rows:
            return None
        return [
            relationship_from_props(rel_type, start, end, props)
            for _, rel_type, start, end, props in rows
            if rel_type is not None
        ]

    async def edges_of(self, caller: str, bead_ids: list[str], types: list[str]) -> list[Relationship]:
        """The outgoing edges of the visible beads among ``bead_ids`` to visible beads (each edge once)."""
        rows = await self.graph.values(
            MY_GROUPS + f"UNWIND $ids AS id MATCH (a:Bead {{bead_id: id}}) WHERE {visible('a')} "
            f"MATCH (a)-[r]->(b:Bead) WHERE type(r) IN $types AND {visible('b')} "
            "RETURN type(r), a.bead_id, b.bead_id, properties(r)",
            {"caller": caller, "ids": bead_ids, "types": types or ALL_TYPES},
        )
        return [relationship_from_props(rel_type, start, end, props) for rel_type, start, end, props in rows]

    async def hop(
        self, caller: str, frontier: list[str], types: list[str], direction: Direction
    ) -> list[tuple[str, Relationship]]:
        """One breadth-first step: ``(neighbour id, edge)`` for each edge from ``frontier`` to a visible bead."""
        rows = await self.graph.values(
            MY_GROUPS + f"MATCH (a:Bead) WHERE a.bead_id IN $frontier MATCH {_pattern(direction)} "
            f"WHERE type(r) IN $types AND {visible('b')} "
            "RETURN b.bead_id, type(r), startNode(r).bead_id, endNode(r).bead_id, properties(r)",
            {"caller": caller, "frontier": frontier, "types": types or ALL_TYPES},
        )
        return [
            (bead_id, relationship_from_props(rel_type, start_id, end_id, props))
            for bead_id, rel_type, start_id, end_id, props in rows
        ]
