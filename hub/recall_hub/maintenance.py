"""Deduplication by content hash, importance ranking, and temporal decay."""

from __future__ import annotations

from recall_schemas import (
    BeadList,
    DecayOldMemories,
    DecayReport,
    DeduplicateBeads,
    DuplicateCluster,
    DuplicateReport,
    NotFound,
    RankByImportance,
)

from .context import HubContext
from .records import bead_from_node
from .timeutil import now_ms
from .visibility import MY_GROUPS, may_modify, visible

DAY_MS = 86_400_000


async def deduplicate_beads(ctx: HubContext, caller: str, req: DeduplicateBeads) -> DuplicateReport:
    """Clusters of visible beads with equal content hash, oldest first in each."""
    where = ""
    params: dict[str, object] = {"caller": caller}
    if req.bead_id is not None:
        rows = await ctx.graph.ro_query(
            MY_GROUPS + f"MATCH (b:Bead {{bead_id: $bead_id}}) WHERE {visible('b')} RETURN b.content_hash",
            {"caller": caller, "bead_id": req.bead_id},
        )
        if not rows:
            raise NotFound(f"bead {req.bead_id} not found")
        where += " AND b.content_hash = $hash"
        params["hash"] = rows[0][0]
    if req.group_id is not None:
        where += " AND b.group_id = $group_id"
        params["group_id"] = req.group_id
    rows = await ctx.graph.ro_query(
        MY_GROUPS + f"MATCH (b:Bead) WHERE {visible('b')}{where} "
        "WITH b ORDER BY b.created_at, b.bead_id "
        "WITH b.content_hash AS hash, collect(b.bead_id) AS ids WHERE size(ids) > 1 "
        "RETURN hash, ids ORDER BY hash",
        params,
    )
    return DuplicateReport(clusters=[DuplicateCluster(content_hash=h, bead_ids=ids) for h, ids in rows])


async def rank_by_importance(ctx: HubContext, caller: str, req: RankByImportance) -> BeadList:
    """The visible beads among ``bead_ids``, most important first (newest first on ties)."""
    rows = await ctx.graph.ro_query(
        MY_GROUPS + f"MATCH (b:Bead) WHERE b.bead_id IN $ids AND {visible('b')} "
        "RETURN b ORDER BY b.importance DESC, b.created_at DESC, b.bead_id",
        {"caller": caller, "ids": req.bead_ids},
    )
    return BeadList(beads=[bead_from_node(row[0]) for row in rows])


async def decay_old_memories(ctx: HubContext, caller: str, req: DecayOldMemories) -> DecayReport:
    """Archive (never delete) active beads the caller may change that nobody touched for the threshold.

    A bead counts as touched when it was read (accessed_at) or changed (updated_at).
    """
    cutoff = now_ms() - int(req.threshold_days * DAY_MS)
    match = (
        MY_GROUPS + f"MATCH (b:Bead) WHERE b.status = 'active' AND {visible('b')} AND {may_modify('b')} "
        "AND b.accessed_at < $cutoff AND b.updated_at < $cutoff "
    )
    action = "RETURN b.bead_id" if req.dry_run else "SET b.status = 'archived' RETURN b.bead_id"
    rows = await ctx.graph.query(match + action + " ORDER BY b.bead_id", {"caller": caller, "cutoff": cutoff})
    return DecayReport(archived=[row[0] for row in rows])
