"""Keeping the vector sets in step with the graph (the source of truth).

The graph records on each bead which model embedded it and into which scope (``vec_model``,
``vec_scope``). :func:`sync_bead_vector` brings one bead's vector in line with the bead as it is
now (run by the outbox worker under the bead's lock); :func:`repair` embeds every bead without a
vector of the current model (start-up), :func:`reindex` re-embeds everything for a new model.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from recall_schemas import RecallError

from recall_hub.context import HubContext
from recall_hub.embedders.base import TokenReading
from recall_hub.retrieval.embedding import bead_text, embed_beads, reads_tokens
from recall_hub.retrieval.keyword import STOPWORDS
from recall_hub.store.validity import validity_attributes
from recall_hub.store.vectors import ATTRIBUTE_FIELDS, BeadVectors, scope_of

log = logging.getLogger(__name__)


def attributes(props: Mapping[str, Any]) -> dict[str, Any]:
    return {k: props.get(k) for k in ATTRIBUTE_FIELDS} | validity_attributes(props)


async def sync_bead_vector(
    ctx: HubContext,
    bead_id: str,
    props: Mapping[str, Any] | None,
    old_scopes: Iterable[str | None],
    reembed: bool,
    alongside: Callable[[np.ndarray], Awaitable[None]] | None = None,
) -> np.ndarray | None:
    """Make the vector sets hold exactly the bead's vectors (one per chunk of its text), in the scope it has now.

    ``props`` is the bead as stored now (None: deleted); ``old_scopes`` every scope a vector of it
    may still sit in. Returns the vector of its whole text when it was (re-)embedded; ``alongside`` runs with
    that vector while it is being stored (its own round trips overlap the store's). Raises on failure,
    so the caller can retry; every step is idempotent.
    """
    stale = {s for s in old_scopes if s}
    if props is None:
        for scope in stale:
            await ctx.vectors.remove(bead_id, scope)
        return None
    target = scope_of(props)
    model = ctx.vectors.model_id
    if props.get("vec_scope"):
        stale.add(props["vec_scope"])
    stale.discard(target)
    current = props.get("vec_model") == model and props.get("vec_scope") == target
    vector = None
    if reembed or not current or not await ctx.vectors.set_attributes(bead_id, target, attributes(props)):
        (vectors,) = await embed_beads(ctx, [props])
        vector = vectors.rows[0]
        storing = ctx.vectors.add(bead_id, target, vectors, attributes(props))
        await (asyncio.gather(storing, alongside(vector)) if alongside is not None else storing)
    for scope in stale:
        await ctx.vectors.remove(bead_id, scope)
    if not current:
        await ctx.beads.system_mark_indexed(bead_id, model, target)
    return vector


async def index_beads(
    ctx: HubContext, beads: Sequence[Mapping[str, Any]], vectors: Sequence[np.ndarray | BeadVectors] | None = None
) -> int:
    """Embed (unless given: a :class:`BeadVectors` or an array a bead, a row a chunk) and store the vectors of
    ``beads`` in bulk, then mark them in the graph.

    For bulk work outside the outbox (repair, reindex, loading a corpus). Returns how many were
    indexed; failures are logged and left for :func:`repair`.
    """
    if not beads:
        return 0
    try:
        chunked = list(vectors) if vectors is not None else await embed_beads(ctx, beads)
        for props, bead_vectors in zip(beads, chunked, strict=True):
            old_scope = props.get("vec_scope")
            scope = scope_of(props)
            if old_scope and (old_scope != scope or props.get("vec_model") != ctx.vectors.model_id):
                await ctx.vectors.remove(props["bead_id"], old_scope)
            await ctx.vectors.add(props["bead_id"], scope, bead_vectors, attributes(props))
        await ctx.beads.system_mark_indexed_many(
            [{"id": p["bead_id"], "scope": scope_of(p)} for p in beads], ctx.vectors.model_id
        )
    except RecallError as exc:
        log.warning("could not index %d bead(s), left for repair: %s", len(beads), exc)
        return 0
    return len(beads)


async def repair(ctx: HubContext, batch: int = 256, progress: Callable[[int, int], None] | None = None) -> int:
    """Embed every bead that has no vector of the current model. Returns how many were indexed."""
    model = ctx.vectors.model_id
    total = await ctx.beads.system_count_unindexed(model)
    done = 0
    failed_ids: set[str] = set()
    while done < total:
        beads = await ctx.beads.system_unindexed(model, sorted(failed_ids), batch)
        if not beads:
            break
        indexed = await index_beads(ctx, beads)
        if indexed == 0:
            failed_ids.update(p["bead_id"] for p in beads)
        done += len(beads)
        if progress:
            progress(done, total)
    if total:
        log.info("vector repair: %d of %d bead(s) embedded with %s", done - len(failed_ids), total, model)
    return done - len(failed_ids)


async def repair_token_signs(ctx: HubContext, batch: int = 64) -> int:
    """Token signs for every bead that has vectors of the current model but none (embedded before
    ``late_interaction`` was on, or by a hub that had it off), read from the graph as the beads are now; run at
    start-up after :func:`repair`. Returns how many beads got them."""
    if not reads_tokens(ctx):
        return 0
    assert isinstance(ctx.embedder, TokenReading)
    done = 0
    for scope, bead_ids in (await ctx.vectors.beads_without_signs()).items():
        for start in range(0, len(bead_ids), batch):
            beads = await ctx.beads.system_many(bead_ids[start : start + batch])
            beads = [p for p in beads if scope_of(p) == scope]
            texts = [bead_text(p) for p in beads]
            read = await ctx.embedder.embed_spans_and_tokens(texts, [[]] * len(beads), STOPWORDS)
            await ctx.vectors.add_missing_signs(scope, {p["bead_id"]: t for p, (_, t) in zip(beads, read, strict=True)})
            done += len(beads)
    if done:
        log.info("token signs: %d bead(s) embedded before late interaction got theirs", done)
    return done


async def reindex(ctx: HubContext, progress: Callable[[int, int], None] | None = None) -> int:
    """Re-embed every bead with the current model and drop every other model's vector sets; every hub
    rebuilds its keyword index from the graph too (a marker in the index log tells them)."""
    await ctx.index_log.request_rebuild()
    await ctx.beads.system_forget_vectors()
    await ctx.vectors.drop_model_sets(keep_current=False)
    return await repair(ctx, progress=progress)
