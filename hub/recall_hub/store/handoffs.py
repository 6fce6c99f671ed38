"""Ops handoffs in the graph: the atomic transfer, acknowledgement, and what a brief reads.

A handoff is seen by its sender (a retry returns it) and its receiver (who acknowledges it); a group's
latest handoff and the beads a brief reads are seen by the group's current members, checked inside
each query.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from recall_schemas import MemoryBead
from recall_schemas.coordination import AIState, Handoff

from recall_hub.store.agents import state_json
from recall_hub.store.graph import GraphStore
from recall_hub.store.outbox import record, record_params
from recall_hub.store.records import bead_from_props
from recall_hub.store.visibility import MY_GROUPS, visible
from recall_hub.timeutil import from_ms

Props = dict[str, Any]

# The group's active group beads as the caller may see them (none unless it is a member), most
# important and most recent first.
_GROUP_MEMORY = (
    MY_GROUPS + "MATCH (b:Bead {group_id: $group_id}) "
    f"WHERE b.visibility = 'group' AND b.status = 'active' AND {visible('b')} "
)


def _handoff(p: Mapping[str, Any]) -> Handoff:
    return Handoff(
        handoff_id=p["handoff_id"],
        group_id=p["group_id"],
        from_ops=p["from_ops"],
        to_ops=p["to_ops"],
        handoff_bead_id=p["handoff_bead_id"],
        status=p["status"],
        created_at=from_ms(p["created_at"]),
        acknowledged_at=from_ms(p["acknowledged_at"]) if p.get("acknowledged_at") else None,
    )


class HandoffStore:
    def __init__(self, graph: GraphStore) -> None:
        self.graph = graph

    # --- reads, as a caller -------------------------------------------------------------------

    async def sent(self, caller: str, handoff_id: str) -> tuple[Handoff | None, bool]:
        """``(the caller's handoff with this id, whether another identity's handoff holds the id)``.
        A handoff id names one handoff, so a sender's retry finds its own and a clash is refused."""
        rows = await self.graph.ro_query(
            "MATCH (h:Handoff {handoff_id: $handoff_id}) "
            "RETURN CASE WHEN h.from_ops = $caller THEN properties(h) END",
            {"caller": caller, "handoff_id": handoff_id},
        )
        if not rows:
            return None, False
        return (_handoff(rows[0][0]), False) if rows[0][0] is not None else (None, True)

    async def latest(self, caller: str, group_id: str) -> Handoff | None:
        """The group's most recent handoff, if the caller is a member of the group."""
        rows = await self.graph.ro_query(
            "MATCH (:AI {ai_id: $caller})-[:MEMBER_OF]->(:Group {group_id: $group_id}) "
            "MATCH (h:Handoff {group_id: $group_id}) RETURN properties(h) ORDER BY h.created_at DESC LIMIT 1",
            {"caller": caller, "group_id": group_id},
        )
        return _handoff(rows[0][0]) if rows else None

    async def in_group(self, caller: str, group_id: str, limit: int) -> list[Handoff] | None:
        """The group's handoffs, newest first; None when the caller is not a member of the group."""
        rows = await self.graph.values(
            "MATCH (:AI {ai_id: $caller})-[:MEMBER_OF]->(:Group {group_id: $group_id}) "
            "OPTIONAL MATCH (h:Handoff {group_id: $group_id}) "
            "WITH h ORDER BY h.created_at DESC, h.handoff_id LIMIT $limit RETURN properties(h)",
            {"caller": caller, "group_id": group_id, "limit": limit},
        )
        if not rows:
            return None
        return [_handoff(row[0]) for row in rows if row[0] is not None]

    async def group_memory(self, caller: str, group_id: str, limit: int) -> list[MemoryBead]:
        """The group's active group beads (the caller must be a member), most important and recent first."""
        rows = await self.graph.ro_query(
            _GROUP_MEMORY + "RETURN properties(b) ORDER BY b.importance DESC, b.created_at DESC LIMIT $n",
            {"caller": caller, "group_id": group_id, "n": limit},
        )
        return [bead_from_props(row[0]) for row in rows]

    async def group_memory_ids(self, caller: str, group_id: str, limit: int) -> list[str]:
        """The ids of :meth:`group_memory`."""
        rows = await self.graph.ro_query(
            _GROUP_MEMORY + "RETURN b.bead_id ORDER BY b.importance DESC, b.created_at DESC LIMIT $n",
            {"caller": caller, "group_id": group_id, "n": limit},
        )
        return [row[0] for row in rows]

    # --- writes, as a caller --------------------------------------------------------------------

    async def transfer(
        self,
        caller: str,
        *,
        to: str,
        group_id: str,
        handoff_id: str,
        bead: Props,
        summarised: Sequence[str],
        to_state: AIState,
        to_version: int,
        now: int,
    ) -> tuple[Handoff, Props] | None:
        """One atomic query: the caller (who must be the group's ops) becomes an agent and ``to`` (a
        member) the ops, the handoff bead is written and linked ``RELATED_TO`` the summarised group
        beads, the handoff is recorded as pending and ``to``'s state becomes ``to_state`` — if
        ``handoff_id`` is free and ``to``'s state is still at ``to_version``. ``(handoff, handoff
        bead)``, or None when any of that does not hold; nothing changes then."""
        rows = await self.graph.query(
            "MATCH (from:AI {ai_id: $caller})-[fr:MEMBER_OF {role: 'ops'}]->(g:Group {group_id: $group_id}) "
            "MATCH (to:AI {ai_id: $to})-[tr:MEMBER_OF]->(g) "
            "OPTIONAL MATCH (taken:Handoff {handoff_id: $handoff_id}) "
            "WITH fr, to, tr, taken WHERE taken IS NULL AND coalesce(to.state_version, 0) = $to_version "
            "SET fr.role = 'agent', tr.role = 'ops', "
            "to.state = $to_state, to.state_updated_at = $now, to.state_version = $to_version + 1 "
            "CREATE (h:Bead) SET h = $bead " + record("created", after="h", before=None) + " "
            "CREATE (ho:Handoff {handoff_id: $handoff_id, group_id: $group_id, from_ops: $caller, to_ops: $to, "
            "handoff_bead_id: $bead_id, status: 'pending', created_at: $now}) "
            "WITH h, ho OPTIONAL MATCH (s:Bead) WHERE s.bead_id IN $summarised AND s.group_id = $group_id "
            "AND s.visibility = 'group' "
            "WITH h, ho, collect(s) AS covered "
            "FOREACH (x IN covered | MERGE (h)-[r:RELATED_TO]->(x) ON CREATE SET r.created_at = $now, "
            "r.created_by = $caller, r.metadata = '{\"summarises\": true}') "
            "RETURN properties(ho), properties(h)",
            {
                "caller": caller, "to": to, "group_id": group_id, "handoff_id": handoff_id,
                "bead_id": bead["bead_id"], "bead": bead, "now": now, "summarised": list(summarised),
                "to_version": to_version, "to_state": state_json(to_state), **record_params(),
            },
        )
        if not rows:
            return None
        return _handoff(rows[0][0]), dict(rows[0][1])

    async def acknowledge(self, caller: str, handoff_id: str, now: int) -> Handoff | None:
        """Mark the handoff acknowledged, if the caller is its receiver (the first time counts)."""
        rows = await self.graph.query(
            "MATCH (h:Handoff {handoff_id: $handoff_id}) WHERE h.to_ops = $caller "
            "SET h.status = 'acknowledged', h.acknowledged_at = coalesce(h.acknowledged_at, $now) "
            "RETURN properties(h)",
            {"handoff_id": handoff_id, "caller": caller, "now": now},
        )
        return _handoff(rows[0][0]) if rows else None
