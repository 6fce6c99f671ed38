"""Trust marks on beads, and the reads behind the stale list.

How marks are stored: store/trust_marks.py. Ranking reads ``trust_verdicts`` (screening carries it
too, so a mark weighs the same whether a bead was screened or read in full).

A bead's *sources* are the beads it was made from, named in its metadata (``source_bead_id``: an id or
a list of ids). Metadata rather than an edge: edges go when their bead is deleted or forgotten, and a
source that has gone is exactly what the stale list must still tell.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from recall_schemas import Forbidden, NotFound, TrustVerdict

from recall_hub.store.as_of import keep_version
from recall_hub.store.graph import GraphStore
from recall_hub.store.outbox import record, record_params
from recall_hub.store.visibility import MY_GROUPS, visible

Props = dict[str, Any]

SOURCE_KEY = "source_bead_id"
"""The metadata key naming the bead (or list of beads) a bead was made from."""
WEAK_PROVENANCE = ("recorded", "derived")


def source_ids_of(props: Mapping[str, Any]) -> list[str]:
    """The ids named by the bead's ``metadata.source_bead_id`` (a string or a list of strings)."""
    try:
        metadata = json.loads(props.get("metadata") or "{}")
    except ValueError:
        return []
    named = metadata.get(SOURCE_KEY) if isinstance(metadata, dict) else None
    values = named if isinstance(named, list) else [named]
    return list(dict.fromkeys(v for v in values if isinstance(v, str) and v))


class TrustStore:
    def __init__(self, graph: GraphStore) -> None:
        self.graph = graph

    async def mark(self, caller: str, bead_id: str, verdict: TrustVerdict, note: str | None, now: int) -> Props:
        """Record the caller's verdict on a bead it can see and did not create, in one atomic query; the bead
        after. The same verdict again changes nothing (the first mark, its time and note stay)."""
        rows = await self.graph.query(
            MY_GROUPS + f"MATCH (b:Bead {{bead_id: $bead_id}}) WHERE {visible('b')} "
            "WITH b, properties(b) AS before, b.created_by = $caller AS own, coalesce(b.trust_by, []) AS by, "
            "coalesce(b.trust_verdicts, []) AS verdicts, coalesce(b.trust_at, []) AS ats, "
            "coalesce(b.trust_notes, []) AS notes "
            "WITH b, before, own, by, verdicts, ats, notes, "
            "size([i IN range(0, size(by) - 1) WHERE by[i] = $caller AND verdicts[i] = $verdict]) > 0 AS same, "
            "[i IN range(0, size(by) - 1) WHERE by[i] <> $caller] AS others "
            "FOREACH (_ IN CASE WHEN own OR same THEN [] ELSE [1] END | "
            + keep_version("b", "before", "$now")
            + "SET b.trust_by = [i IN others | by[i]] + [$caller], "
            "b.trust_verdicts = [i IN others | verdicts[i]] + [$verdict], "
            "b.trust_at = [i IN others | ats[i]] + [$now], "
            "b.trust_notes = [i IN others | notes[i]] + [$note], "
            "b.updated_at = $now, b.version = coalesce(b.version, 1) + 1 "
            + record("updated", after="b", before="before", text_changed="false") + ") "
            "RETURN b, own",
            {
                "caller": caller, "bead_id": bead_id, "verdict": verdict.value, "note": note or "", "now": now,
                **record_params(),
            },
        )
        if not rows:
            raise NotFound(f"bead {bead_id} not found")
        node, own = rows[0]
        if own:
            raise Forbidden(f"bead {bead_id} is your own: only another identity can verify or reject it")
        return dict(node.properties)

    async def stale_candidates(
        self, caller: str, *, group_id: str | None, cutoff: int, after: tuple[int, str] | None, limit: int
    ) -> list[Props]:
        """Active visible beads (of ``group_id``) that no visible newer bead supersedes and that are either
        of weak provenance, unmarked and created before ``cutoff``, or name a source in their metadata;
        ordered by ``(created_at, bead_id)``, strictly after ``after``."""
        where = ""
        params: dict[str, Any] = {
            "caller": caller, "cutoff": cutoff, "limit": limit, "weak": list(WEAK_PROVENANCE),
            "source_key": f'"{SOURCE_KEY}":',
        }
        if group_id is not None:
            where += " AND b.group_id = $group_id"
            params["group_id"] = group_id
        if after is not None:
            # As in the listings: FalkorDB mis-evaluates the OR form of this keyset condition.
            where += " AND b.created_at >= $after_at AND NOT (b.created_at = $after_at AND b.bead_id <= $after_id)"
            params.update(after_at=after[0], after_id=after[1])
        rows = await self.graph.values(
            MY_GROUPS + f"MATCH (b:Bead) WHERE b.status = 'active' AND {visible('b')}{where} "
            "AND ((b.provenance IN $weak AND b.created_at < $cutoff AND size(coalesce(b.trust_by, [])) = 0) "
            "OR b.metadata CONTAINS $source_key) "
            f"OPTIONAL MATCH (newer:Bead)-[:UPDATES]->(b) WHERE {visible('newer')} "
            "WITH b, count(newer) AS newer_count WHERE newer_count = 0 "
            "RETURN properties(b) ORDER BY b.created_at, b.bead_id LIMIT $limit",
            params,
        )
        return [row[0] for row in rows]

    async def sources(self, caller: str, ids: Sequence[str]) -> dict[str, list[str]]:
        """The visible beads among ``ids``, each with its visible newer versions (``UPDATES`` into it)."""
        if not ids:
            return {}
        rows = await self.graph.values(
            MY_GROUPS + f"MATCH (s:Bead) WHERE s.bead_id IN $ids AND {visible('s')} "
            f"OPTIONAL MATCH (newer:Bead)-[:UPDATES]->(s) WHERE {visible('newer')} "
            "RETURN s.bead_id, collect(newer.bead_id)",
            {"caller": caller, "ids": list(ids)},
        )
        return {bead_id: sorted(newer) for bead_id, newer in rows}
