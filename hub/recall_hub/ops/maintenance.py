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

from recall_hub.context import HubContext
from recall_hub.ops.after_commit import settle_quietly
from recall_hub.store.records import bead_from_props
from recall_hub.store.vectors import caller_scopes
from recall_hub.timeutil import DAY_MS, now_ms

MAX_DEDUP_SCAN = 5000


async def deduplicate_beads(ctx: HubContext, caller: str, req: DeduplicateBeads) -> DuplicateReport:
    """Clusters of visible beads with equal content hash and, with ``similarity_threshold``, of
    near-duplicates by vector similarity. With ``merge``, each cluster keeps its oldest bead, which
    records every author (``corroborated_by``); the others are archived and superseded by it.

    A merge changes every bead of the cluster, so it happens only when the caller may modify each of
    them (the creator, or the group's ops for group beads); otherwise the cluster is reported and
    left as it is (``merged_into`` stays empty).
    """
    around: tuple[str, list[str], str] | None = None
    if req.bead_id is not None:
        # Only this bead's cluster: beads with its hash, and its vector neighbours (not a capped scan).
        props = await ctx.beads.get(caller, req.bead_id)
        if props is None:
            raise NotFound(f"bead {req.bead_id} not found")
        near: list[str] = []
        scope, model = props.get("vec_scope"), props.get("vec_model")
        if req.similarity_threshold is not None and scope and model == ctx.vectors.model_id:
            vector = await ctx.vectors.vector(req.bead_id, scope)
            if vector is not None:
                scopes = caller_scopes(caller, await ctx.memberships.groups_of(caller))
                near = [h.bead_id for h in await ctx.vectors.search(scopes, vector, 50)]
        around = (props["content_hash"], near, req.bead_id)
    rows = await ctx.beads.duplicate_candidates(caller, group_id=req.group_id, around=around, cap=MAX_DEDUP_SCAN)
    beads = {r["bead_id"]: r for r in rows}
    if req.bead_id is not None and req.bead_id not in beads:
        return DuplicateReport(clusters=[])  # archived: it already belongs to no active cluster
    parent = {b: b for b in beads}

    def order(i: str) -> tuple[int, str]:
        return int(beads[i]["created_at"]), i

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb, key=order)] = min(ra, rb, key=order)

    first_by_hash: dict[str, str] = {}
    for bead_id, row in beads.items():
        first_by_hash.setdefault(row["content_hash"], bead_id)
        union(first_by_hash[row["content_hash"]], bead_id)
    similarities: dict[tuple[str, str], float] = {}
    if req.similarity_threshold is not None:
        probes = [req.bead_id] if req.bead_id else list(beads)
        scopes = caller_scopes(caller, await ctx.memberships.groups_of(caller))
        for bead_id in probes:
            row = beads[bead_id]
            if not row["vec_scope"] or row["vec_model"] != ctx.vectors.model_id:
                continue
            vector = await ctx.vectors.vector(bead_id, row["vec_scope"])
            if vector is None:
                continue
            for hit in await ctx.vectors.search(scopes, vector, 10):
                if hit.bead_id != bead_id and hit.bead_id in beads and hit.similarity >= req.similarity_threshold:
                    a, b = sorted((bead_id, hit.bead_id))
                    similarities[(a, b)] = hit.similarity
                    union(bead_id, hit.bead_id)
    members: dict[str, list[str]] = {}
    for bead_id in beads:
        members.setdefault(find(bead_id), []).append(bead_id)
    clusters = []
    for root, ids in sorted(members.items()):
        if len(ids) < 2 or (req.bead_id is not None and req.bead_id not in ids):
            continue
        ids.sort(key=order)
        exact = len({beads[i]["content_hash"] for i in ids}) == 1
        sims = [v for (a, b), v in similarities.items() if a in ids and b in ids]
        authors = sorted(
            {beads[i]["created_by"] for i in ids} | {a for i in ids for a in (beads[i]["corroborated_by"] or [])}
        )
        cluster = DuplicateCluster(
            content_hash=beads[root]["content_hash"],
            bead_ids=ids,
            kind="exact" if exact else "near",
            min_similarity=round(min(sims), 4) if sims and not exact else None,
            authors=authors,
        )
        if req.merge and all(beads[i]["_may"] for i in ids):
            merged = await ctx.beads.merge_duplicates(caller, ids[0], ids[1:], authors, now_ms())
            if merged == len(ids) - 1:
                cluster.merged_into = ids[0]
                for bead_id in ids:
                    await settle_quietly(ctx, bead_id)
        clusters.append(cluster)
    return DuplicateReport(clusters=clusters)


async def rank_by_importance(ctx: HubContext, caller: str, req: RankByImportance) -> BeadList:
    """The visible beads among ``bead_ids``, most important first (newest first on ties)."""
    return BeadList(beads=[bead_from_props(p) for p in await ctx.beads.ranked_by_importance(caller, req.bead_ids)])


async def decay_old_memories(ctx: HubContext, caller: str, req: DecayOldMemories) -> DecayReport:
    """Archive (never delete) active beads the caller may change that nobody touched for the threshold.

    A bead counts as touched when it was read (accessed_at) or changed (updated_at).
    """
    await ctx.accessed.flush()  # reads this hub has noted count as touches
    cutoff = now_ms() - int(req.threshold_days * DAY_MS)
    archived = await ctx.beads.archive_untouched(caller, cutoff, dry_run=req.dry_run)
    if not req.dry_run:
        for bead_id in archived:
            await settle_quietly(ctx, bead_id)
    return DecayReport(archived=archived)
