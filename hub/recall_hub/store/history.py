"""Versions: a newer bead supersedes an older one by an ``UPDATES`` edge newer → older.

There is no "superseded" property on the older bead: whether a bead is superseded depends on who
asks (only a newer bead the caller can see supersedes it, store/beads.py), so a flag stored on the
bead would tell someone who sees only the old bead that an invisible newer one exists. The edge is
the mark; ranking demotes by it, and ``get_history`` walks it (ops/history.py).
"""

from __future__ import annotations

from typing import Any

from recall_schemas import Conflict, Forbidden, NotFound

from recall_hub.store.graph import GraphStore
from recall_hub.store.visibility import MY_GROUPS, may_modify, visible

Props = dict[str, Any]


class HistoryStore:
    def __init__(self, graph: GraphStore) -> None:
        self.graph = graph

    async def supersede(self, caller: str, old_id: str, new_id: str, metadata: str, now: int) -> tuple[Props, bool]:
        """Link ``new_id`` -[:UPDATES]-> ``old_id`` in one atomic query: both visible, the caller may modify
        the old bead, and no chain of visible beads already leads from old to new (that would close a cycle).
        Returns the edge's properties and whether this call made it (False: it was there already)."""
        rows = await self.graph.query(
            MY_GROUPS + f"MATCH (old:Bead {{bead_id: $old_id}}) WHERE {visible('old')} "
            f"MATCH (new:Bead {{bead_id: $new_id}}) WHERE {visible('new')} "
            "OPTIONAL MATCH chain = (old)-[:UPDATES*1..]->(new) "
            f"WHERE all(n IN nodes(chain) WHERE {visible('n')}) "
            "WITH old, new, my_groups, my_ops_groups, count(chain) > 0 AS cycle "
            "OPTIONAL MATCH (new)-[existing:UPDATES]->(old) "
            f"WITH old, new, cycle, existing, {may_modify('old')} AS may "
            "FOREACH (_ IN CASE WHEN may AND NOT cycle AND existing IS NULL THEN [1] ELSE [] END | "
            "MERGE (new)-[r:UPDATES]->(old) ON CREATE SET r.created_at = $now, r.created_by = $caller, "
            "r.replaces = true, r.metadata = $metadata) "
            "RETURN may, cycle, properties(existing)",
            {"caller": caller, "old_id": old_id, "new_id": new_id, "metadata": metadata, "now": now},
        )
        if not rows:
            raise NotFound(f"bead {old_id} or {new_id} not found")
        may, cycle, existing = rows[0]
        if not may:
            raise Forbidden(f"only the creator (or the group's ops) may supersede bead {old_id}")
        if existing is not None:
            return dict(existing), False
        if cycle:
            raise Conflict(f"bead {old_id} already leads to {new_id} through newer versions: that would be a cycle")
        return {"created_at": now, "created_by": caller, "replaces": True, "metadata": metadata}, True
