"""Deduplication by content hash, importance ranking, and temporal decay."""

from __future__ import annotations

from typing import Any

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

from recall_hub.context import HubContext
from recall_hub.retrieval.search import my_groups
from recall_hub.store.records import bead_from_node
from recall_hub.store.vectors import caller_scopes
from recall_hub.store.visibility import MY_GROUPS, may_modify, visible
from recall_hub.timeutil import now_ms

DAY_MS = 86_400_000


MAX_DEDUP_SCAN = 5000


async def deduplicate_beads(ctx: HubContext, caller: str, req: DeduplicateBeads) -> DuplicateReport:
    """Clusters of visible beads with equal content hash and, with ``similarity_threshold``, of
    near-duplicates by vector similarity. With ``merge``, each cluster keeps its oldest bead, which
    records every author (``corroborated_by``); the others are archived and superseded by it."""
    where = ""
    params: dict[str, Any] = {"caller": caller, "cap": MAX_DEDUP_SCAN}
    if req.group_id is not None:
        where += " AND b.group_id = $group_id"
        params["group_id"] = req.group_id
    if req.bead_id is not None:
        # Only this bead's cluster: beads with its hash, and its vector neighbours (not a capped scan).
        rows = await ctx.graph.ro_query(
            MY_GROUPS + f"MATCH (b:Bead {{bead_id: $bead_id}}) WHERE {visible('b')} "
            "RETURN b.content_hash, b.vec_scope, b.vec_model",
            {"caller": caller, "bead_id": req.bead_id},
        )
        if not rows:
            raise NotFound(f"bead {req.bead_id} not found")
        content_hash_, scope, model = rows[0]
        near: list[str] = []
        if req.similarity_threshold is not None and scope and model == ctx.vectors.model_id:
            vector = await ctx.vectors.vector(req.bead_id, scope)
            if vector is not None:
                scopes = caller_scopes(caller, await my_groups(ctx, caller))
                near = [h.bead_id for h in await ctx.vectors.search(scopes, vector, 50)]
        where += " AND (b.content_hash = $hash OR b.bead_id IN $near OR b.bead_id = $bead_id)"
        params.update(hash=content_hash_, near=near, bead_id=req.bead_id)
    rows = await ctx.graph.ro_query(
        MY_GROUPS + f"MATCH (b:Bead) WHERE {visible('b')}{where} AND b.status = 'active' "
        "RETURN b.bead_id, b.content_hash, b.created_at, b.created_by, b.corroborated_by, b.vec_scope, b.vec_model "
        "ORDER BY b.created_at, b.bead_id LIMIT $cap",
        params,
    )
    beads = {r[0]: r for r in rows}
    if req.bead_id is not None and req.bead_id not in beads:
        return DuplicateReport(clusters=[])  # archived: it already belongs to no active cluster
    parent = {b: b for b in beads}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb, key=lambda i: (beads[i][2], i))] = min(ra, rb, key=lambda i: (beads[i][2], i))

    first_by_hash: dict[str, str] = {}
    for bead_id, row in beads.items():
        first_by_hash.setdefault(row[1], bead_id)
        union(first_by_hash[row[1]], bead_id)
    similarities: dict[tuple[str, str], float] = {}
    if req.similarity_threshold is not None:
        probes = [req.bead_id] if req.bead_id else list(beads)
        scopes = caller_scopes(caller, await my_groups(ctx, caller))
        for bead_id in probes:
            row = beads[bead_id]
            if not row[5] or row[6] != ctx.vectors.model_id:
                continue
            vector = await ctx.vectors.vector(bead_id, row[5])
            if vector is None:
                continue
            for hit in await ctx.vectors.search(scopes, vector, 10):
                if hit.bead_id != bead_id and hit.bead_id in beads and hit.similarity >= req.similarity_threshold:
                    similarities[tuple(sorted((bead_id, hit.bead_id)))] = hit.similarity  # type: ignore[index]
                    union(bead_id, hit.bead_id)
    members: dict[str, list[str]] = {}
    for bead_id in beads:
        members.setdefault(find(bead_id), []).append(bead_id)
    clusters = []
    for root, ids in sorted(members.items()):
        if len(ids) < 2 or (req.bead_id is not None and req.bead_id not in ids):
            continue
        ids.sort(key=lambda i: (beads[i][2], i))
        exact = len({beads[i][1] for i in ids}) == 1
        sims = [v for (a, b), v in similarities.items() if a in ids and b in ids]
        authors = sorted({beads[i][3] for i in ids} | {a for i in ids for a in (beads[i][4] or [])})
        cluster = DuplicateCluster(
            content_hash=beads[root][1],
            bead_ids=ids,
            kind="exact" if exact else "near",
            min_similarity=round(min(sims), 4) if sims and not exact else None,
            authors=authors,
        )
        if req.merge:
            cluster.merged_into = await _merge(ctx, caller, ids[0], ids[1:], authors)
        clusters.append(cluster)
    return DuplicateReport(clusters=clusters)


async def _merge(ctx: HubContext, caller: str, keeper: str, duplicates: list[str], authors: list[str]) -> str | None:
    """One atomic query: archive the duplicates the caller may change, supersede them by the keeper,
    and record every author on the keeper. Returns the keeper if every duplicate was merged."""
    rows = await ctx.graph.query(
        MY_GROUPS + f"MATCH (k:Bead {{bead_id: $keeper}}) WHERE {visible('k')} "
        f"MATCH (d:Bead) WHERE d.bead_id IN $duplicates AND {visible('d')} AND {may_modify('d')} "
        "SET d.status = 'archived', d.updated_at = $now "
        "MERGE (k)-[r:UPDATES]->(d) ON CREATE SET r.created_at = $now, r.created_by = $caller, r.replaces = true, "
        "r.metadata = '{\"merged_duplicate\": true}' "
        "WITH k, count(d) AS merged "
        "SET k.corroborated_by = [a IN $authors WHERE a <> k.created_by], k.updated_at = $now "
        "RETURN merged",
        {"caller": caller, "keeper": keeper, "duplicates": duplicates, "authors": authors, "now": now_ms()},
    )
    merged = int(rows[0][0]) if rows else 0
    return keeper if merged == len(duplicates) else None


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
