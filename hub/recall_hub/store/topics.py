"""Topic hubs: facts stored ``PART_OF`` one hub bead per topic and scope, in one atomic query; the reads
that tell search which candidates are hubs and which facts hang off them.

A hub is a bead of type ``topic``. Its idempotency key names the scope and the topic (``topic:<scope>:
<digest of the topic name>``, never a caller's key, which starts with the caller's id), so every caller
storing facts about one topic into one scope finds the same hub.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from recall_hub.store.graph import GraphStore
from recall_hub.store.outbox import record, record_params
from recall_hub.store.visibility import MY_GROUPS, visible

HUB_TYPE = "topic"
PART_OF_NOTE = '{"topic": true}'


@dataclass(frozen=True)
class StoredRow:
    topic: str
    hub_id: str
    hub_title: str
    hub_created: bool
    position: int
    bead_id: str
    title: str
    created: bool
    updated: bool


@dataclass(frozen=True)
class ReplayedRow:
    idem: str
    bead_id: str
    title: str
    metadata: str
    hub_id: str | None
    hub_title: str | None


class TopicStore:
    def __init__(self, graph: GraphStore) -> None:
        self.graph = graph

    async def remember(
        self, caller: str, *, group_id: str | None, session_id: str | None, topics: list[dict[str, Any]], now: int
    ) -> list[StoredRow] | None:
        """Store every topic's hub (unless it exists) and facts, each fact ``PART_OF`` its hub, as one query.

        ``topics``: ``{"name", "hub_idem", "hub": props, "facts": [{"i", "idem", "props", "upsert"}]}``. A
        fact whose key exists is left as it is, unless ``upsert`` and its text differs: then the caller's bead
        takes the new text. None when the caller is not in ``group_id`` (nothing was written).
        """
        cypher = "MERGE (me:AI {ai_id: $caller}) WITH me "
        if group_id is not None:
            cypher += "MATCH (me)-[:MEMBER_OF]->(:Group {group_id: $group_id}) WITH me "
        if session_id is not None:
            cypher += (
                "MERGE (s:Session {session_id: $session_id, owner: $caller}) "
                "ON CREATE SET s.created_at = $now, s.group_id = $group_id, s.state = 'active' WITH me "
            )
        cypher += (
            "UNWIND $topics AS t "
            "MERGE (h:Bead {idem: t.hub_idem}) ON CREATE SET h += t.hub "
            "WITH t, h, h.bead_id = t.hub.bead_id AS hub_fresh "
            "FOREACH (_ IN CASE WHEN hub_fresh THEN [1] ELSE [] END | "
            + record("created", after="h", before=None) + ") "
            "WITH t, h, hub_fresh UNWIND t.facts AS f "
            "MERGE (b:Bead {idem: f.idem}) ON CREATE SET b += f.props "
            "WITH t, h, hub_fresh, f, b, b.bead_id = f.props.bead_id AS fresh, properties(b) AS before "
            "WITH t, h, hub_fresh, f, b, fresh, before, "
            "(NOT fresh AND f.upsert AND b.created_by = $caller AND b.content_hash <> f.props.content_hash) AS changed "
            "FOREACH (_ IN CASE WHEN fresh THEN [1] ELSE [] END | " + record("created", after="b", before=None) + ") "
            "FOREACH (_ IN CASE WHEN changed THEN [1] ELSE [] END | "
            "SET b.title = f.props.title, b.content = f.props.content, b.content_hash = f.props.content_hash, "
            "b.metadata = f.props.metadata, b.updated_at = $now, b.version = coalesce(b.version, 1) + 1 "
            + record("updated", after="b", before="before") + ") "
            "MERGE (b)-[r:PART_OF]->(h) "
            "ON CREATE SET r.created_at = $now, r.created_by = $caller, r.metadata = $note "
            "RETURN t.name, h.bead_id, h.title, hub_fresh, f.i, b.bead_id, b.title, fresh, changed"
        )
        rows = await self.graph.query(
            cypher,
            {
                "caller": caller, "group_id": group_id, "session_id": session_id, "now": now, "topics": topics,
                "note": PART_OF_NOTE, **record_params(),
            },
        )
        if not rows:
            return None
        return [
            StoredRow(str(name), hub_id, hub_title, bool(hub_fresh), int(i), bead_id, title, bool(fresh), bool(changed))
            for name, hub_id, hub_title, hub_fresh, i, bead_id, title, fresh, changed in rows
        ]

    async def replayed(self, caller: str, idems: Sequence[str]) -> list[ReplayedRow]:
        """The visible beads stored under ``idems``, each with its visible hub."""
        rows = await self.graph.values(
            MY_GROUPS + f"MATCH (b:Bead) WHERE b.idem IN $idems AND {visible('b')} "
            f"OPTIONAL MATCH (b)-[:PART_OF]->(h:Bead) WHERE h.bead_type = '{HUB_TYPE}' AND {visible('h')} "
            "RETURN b.idem, b.bead_id, b.title, b.metadata, h.bead_id, h.title",
            {"caller": caller, "idems": list(idems)},
        )
        return [ReplayedRow(*row) for row in rows]

    async def hubs_among(
        self, caller: str, ids: Sequence[str], expand: Sequence[str], per_hub: int
    ) -> dict[str, list[str]]:
        """The hubs among ``ids``; for those also in ``expand`` and visible, up to ``per_hub`` of their visible
        ``PART_OF`` children (most important, then newest, first); others map to ``[]``."""
        if not ids:
            return {}
        rows = await self.graph.values(
            MY_GROUPS + f"MATCH (h:Bead) WHERE h.bead_id IN $ids AND h.bead_type = '{HUB_TYPE}' "
            f"OPTIONAL MATCH (c:Bead)-[:PART_OF]->(h) WHERE h.bead_id IN $expand AND {visible('h')} "
            f"AND {visible('c')} AND c.bead_type <> '{HUB_TYPE}' "
            "WITH h, c ORDER BY c.importance DESC, c.created_at DESC "
            "RETURN h.bead_id, collect(c.bead_id)[0..$per_hub]",
            {"caller": caller, "ids": list(ids), "expand": list(expand), "per_hub": per_hub},
        )
        return {hub_id: [c for c in children if c] for hub_id, children in rows}
