"""Keeping the vector sets in step with the graph (the source of truth).

The graph records on each bead which model embedded it and into which scope (``vec_model``,
``vec_scope``). A bead whose vector write failed keeps no ``vec_model``; :func:`repair` finds and
embeds those (run at start-up), :func:`reindex` re-embeds everything for a new model.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from recall_schemas import RecallError

from recall_hub.context import HubContext
from recall_hub.embedders import EmbedderError
from recall_hub.store.vectors import ATTRIBUTE_FIELDS, scope_of

log = logging.getLogger(__name__)


def bead_text(props: Mapping[str, Any]) -> str:
    title = props.get("title") or ""
    content = props.get("content") or ""
    return f"{title}\n{content}" if content and content != title else title


def attributes(props: Mapping[str, Any]) -> dict[str, Any]:
    return {k: props.get(k) for k in ATTRIBUTE_FIELDS}


async def embed_texts(ctx: HubContext, texts: Sequence[str]) -> np.ndarray:
    try:
        return await ctx.embedder.embed(list(texts))
    except EmbedderError as exc:
        from recall_schemas import Unavailable

        raise Unavailable(f"embedder failed: {exc}") from exc


async def index_beads(ctx: HubContext, beads: Sequence[Mapping[str, Any]], vectors: np.ndarray | None = None) -> int:
    """Embed (unless given) and store the vectors of ``beads``, then mark them in the graph.

    Returns how many were indexed; failures are logged and left for :func:`repair`.
    """
    if not beads:
        return 0
    try:
        if vectors is None:
            vectors = await embed_texts(ctx, [bead_text(p) for p in beads])
        for props, vector in zip(beads, vectors, strict=True):
            old_scope = props.get("vec_scope")
            scope = scope_of(props)
            if old_scope and (old_scope != scope or props.get("vec_model") != ctx.vectors.model_id):
                await ctx.vectors.remove(props["bead_id"], old_scope)
            await ctx.vectors.add(props["bead_id"], scope, vector, attributes(props))
        await ctx.graph.query(
            "UNWIND $rows AS row MATCH (b:Bead {bead_id: row.id}) SET b.vec_model = $model, b.vec_scope = row.scope",
            {"rows": [{"id": p["bead_id"], "scope": scope_of(p)} for p in beads], "model": ctx.vectors.model_id},
        )
    except RecallError as exc:
        log.warning("could not index %d bead(s), left for repair: %s", len(beads), exc)
        return 0
    return len(beads)


async def refresh_attributes(ctx: HubContext, props: Mapping[str, Any]) -> None:
    scope = props.get("vec_scope")
    if scope and props.get("vec_model") == ctx.vectors.model_id:
        try:
            await ctx.vectors.set_attributes(props["bead_id"], scope, attributes(props))
        except Exception as exc:  # attributes only steer filters; the graph re-checks every hit
            log.warning("could not refresh vector attributes of %s: %s", props["bead_id"], exc)


async def unindex(ctx: HubContext, props: Mapping[str, Any]) -> None:
    scope = props.get("vec_scope")
    if scope:
        try:
            await ctx.vectors.remove(props["bead_id"], scope)
        except RecallError as exc:
            log.warning("could not remove the vector of %s: %s", props["bead_id"], exc)


async def repair(ctx: HubContext, batch: int = 256, progress: Callable[[int, int], None] | None = None) -> int:
    """Embed every bead that has no vector of the current model. Returns how many were indexed."""
    model = ctx.vectors.model_id
    rows = await ctx.graph.ro_query(
        "MATCH (b:Bead) WHERE b.vec_model IS NULL OR b.vec_model <> $model RETURN count(b)", {"model": model}
    )
    total = int(rows[0][0]) if rows else 0
    done = 0
    failed_ids: set[str] = set()
    while done < total:
        rows = await ctx.graph.ro_query(
            "MATCH (b:Bead) WHERE (b.vec_model IS NULL OR b.vec_model <> $model) AND NOT b.bead_id IN $failed "
            "RETURN b LIMIT $batch",
            {"model": model, "batch": batch, "failed": sorted(failed_ids)},
        )
        if not rows:
            break
        beads = [row[0].properties for row in rows]
        indexed = await index_beads(ctx, beads)
        if indexed == 0:
            failed_ids.update(p["bead_id"] for p in beads)
        done += len(beads)
        if progress:
            progress(done, total)
    if total:
        log.info("vector repair: %d of %d bead(s) embedded with %s", done - len(failed_ids), total, model)
    return done - len(failed_ids)


async def reindex(ctx: HubContext, progress: Callable[[int, int], None] | None = None) -> int:
    """Re-embed every bead with the current model and drop every other model's vector sets."""
    await ctx.graph.query("MATCH (b:Bead) SET b.vec_model = NULL")
    await ctx.vectors.drop_model_sets(keep_current=False)
    return await repair(ctx, progress=progress)
