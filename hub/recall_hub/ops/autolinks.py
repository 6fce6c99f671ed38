"""Relationships the hub adds by itself when a bead is created (both idempotent MERGEs):

- FOLLOWS_FROM the previous bead of the same session;
- RELATED_TO (with the cosine ``similarity``) the most similar beads of the same scope above
  ``related_threshold`` — same scope, so a link never reveals a bead to someone who could not see it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from recall_hub.context import HubContext
from recall_hub.store.vectors import scope_of

log = logging.getLogger(__name__)
HUB_AUTHOR_NOTE = '{"auto": true}'


async def link_session_predecessor(ctx: HubContext, props: Mapping[str, Any]) -> None:
    if not ctx.settings.auto_follows or not props.get("session_id"):
        return
    await ctx.graph.query(
        "MATCH (b:Bead {bead_id: $bead_id}) "
        "MATCH (prev:Bead {session_id: $session_id}) "
        "WHERE prev.bead_id <> $bead_id AND (prev.created_at < b.created_at OR "
        "(prev.created_at = b.created_at AND prev.bead_id < b.bead_id)) "
        "WITH b, prev ORDER BY prev.created_at DESC, prev.bead_id DESC LIMIT 1 "
        "MERGE (b)-[r:FOLLOWS_FROM]->(prev) "
        "ON CREATE SET r.created_at = b.created_at, r.created_by = b.created_by, r.strength = 1.0, "
        "r.metadata = $meta",
        {"bead_id": props["bead_id"], "session_id": props["session_id"], "meta": HUB_AUTHOR_NOTE},
    )


async def link_similar(ctx: HubContext, props: Mapping[str, Any], vector: np.ndarray) -> None:
    settings = ctx.settings
    if not settings.auto_related or settings.related_max == 0:
        return
    hits = await ctx.vectors.search([scope_of(props)], vector, settings.related_max + 1)
    rows = [
        {"id": h.bead_id, "sim": round(h.similarity, 4)}
        for h in hits
        if h.bead_id != props["bead_id"] and h.similarity >= settings.related_threshold
    ][: settings.related_max]
    if not rows:
        return
    await ctx.graph.query(
        "MATCH (b:Bead {bead_id: $bead_id}) UNWIND $rows AS row "
        "MATCH (o:Bead {bead_id: row.id}) "
        "MERGE (b)-[r:RELATED_TO]->(o) "
        "ON CREATE SET r.created_at = b.created_at, r.created_by = b.created_by, r.similarity = row.sim, "
        "r.metadata = $meta",
        {"bead_id": props["bead_id"], "rows": rows, "meta": HUB_AUTHOR_NOTE},
    )
