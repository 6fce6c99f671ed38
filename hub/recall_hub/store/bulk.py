"""Bulk writes of synthetic beads for measurements (``recall bench --suite growth``), never used by a hub.

The nodes and edges have the shape :mod:`recall_hub.store.beads` writes — the same labels, properties and
indexes — but go in by ``UNWIND`` batches, without outbox entries (they would be settled and deleted).
"""

from __future__ import annotations

from typing import Any

from recall_hub.store.graph import GraphStore

Props = dict[str, Any]


class BulkLoader:
    def __init__(self, graph: GraphStore) -> None:
        self.graph = graph

    async def members(self, memberships: list[Props]) -> None:
        """``{ai_id, group_id, role}`` rows: the AI and group nodes (merged) and the membership edge."""
        await self.graph.query(
            "UNWIND $rows AS row MERGE (a:AI {ai_id: row.ai_id}) MERGE (g:Group {group_id: row.group_id}) "
            "MERGE (a)-[m:MEMBER_OF]->(g) SET m.role = row.role",
            {"rows": memberships},
        )

    async def sessions(self, sessions: list[Props]) -> None:
        """``{session_id, owner, group_id, created_at}`` rows."""
        await self.graph.query(
            "UNWIND $rows AS row CREATE (s:Session) SET s = row, s.state = 'active'", {"rows": sessions}
        )

    async def beads(self, beads: list[Props]) -> None:
        """Bead property maps, each complete (as :func:`recall_hub.ops.beads` builds them, plus ``idem``)."""
        await self.graph.query("UNWIND $rows AS row CREATE (b:Bead) SET b = row", {"rows": beads})

    async def edges(self, kind: str, pairs: list[tuple[str, str, int]]) -> None:
        """``(from bead, to bead, created_at)`` edges of ``kind`` (FOLLOWS_FROM or RELATED_TO)."""
        if kind not in ("FOLLOWS_FROM", "RELATED_TO"):
            raise ValueError(f"not a bulk edge kind: {kind}")
        await self.graph.query(
            "UNWIND $rows AS row MATCH (a:Bead {bead_id: row[0]}) MATCH (b:Bead {bead_id: row[1]}) "
            f"CREATE (a)-[r:{kind}]->(b) SET r.created_at = row[2], r.strength = 1.0, r.metadata = '{{}}'",
            {"rows": [list(p) for p in pairs]},
        )

    async def memory_mb(self) -> dict[str, Any]:
        """``GRAPH.MEMORY USAGE`` of the graph (MB by part), or an empty map where the module lacks it."""
        try:
            raw = await self.graph.graph.execute_command("GRAPH.MEMORY", "USAGE", self.graph.graph_name)
        except Exception:
            return {}
        pairs = raw.items() if isinstance(raw, dict) else zip(raw[::2], raw[1::2], strict=True)
        return {(k.decode() if isinstance(k, bytes) else str(k)): v for k, v in pairs}
