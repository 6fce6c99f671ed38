"""Versions of a bead: superseding a bead by a newer one, and the chain of versions through a bead.

``supersede_bead(old, new)`` links new -[:UPDATES]-> old (the direction ``add_relationship`` and
duplicate merging use): the old bead stays readable, and every ranking demotes it for a caller who can
see the new one. ``get_history`` walks those edges from the bead — to older versions along outgoing
edges, to newer ones along incoming edges — entering only beads the caller can see, so a hidden version
ends the walk on its side without a trace of its id.
"""

from __future__ import annotations

import json
import logging

from recall_schemas import (
    BeadHistory,
    Direction,
    GetHistory,
    HistoryVersion,
    NotFound,
    Relationship,
    RelType,
    SupersedeBead,
    VersionLink,
)

from recall_hub.context import HubContext
from recall_hub.retrieval.walk import expand
from recall_hub.store.history import HistoryStore
from recall_hub.store.records import relationship_from_props
from recall_hub.timeutil import now_ms

log = logging.getLogger(__name__)


async def supersede_bead(ctx: HubContext, caller: str, req: SupersedeBead) -> Relationship:
    """Idempotent: superseding again returns the existing link (with its first reason)."""
    metadata = json.dumps({"reason": req.reason} if req.reason else {}, sort_keys=True)
    props, created = await HistoryStore(ctx.graph).supersede(caller, req.old_id, req.new_id, metadata, now_ms())
    if created:
        log.info("%s superseded %s by %s", caller, req.old_id, req.new_id)
    return relationship_from_props(RelType.UPDATES.value, req.new_id, req.old_id, props)


def _link(edge: Relationship) -> VersionLink:
    reason = edge.properties.metadata.get("reason")
    return VersionLink(
        old_id=edge.to_id,
        new_id=edge.from_id,
        superseded_at=edge.created_at,
        superseded_by=edge.created_by,
        reason=reason if isinstance(reason, str) else None,
    )


async def get_history(ctx: HubContext, caller: str, req: GetHistory) -> BeadHistory:
    """The visible versions older and newer than the bead, oldest first, with the links between them."""
    # One more than the limit on each side tells whether the walk was cut.
    older = await expand(ctx, caller, [req.bead_id], req.limit, [RelType.UPDATES], Direction.OUT, req.limit + 1)
    if not older.nodes:
        raise NotFound(f"bead {req.bead_id} not found")
    newer = await expand(ctx, caller, [req.bead_id], req.limit, [RelType.UPDATES], Direction.IN, req.limit + 1)
    offsets = {node.bead.bead_id: -node.depth for node in older.nodes}
    offsets.update({node.bead.bead_id: node.depth for node in newer.nodes if node.depth > 0})
    beads = {node.bead.bead_id: node.bead for node in [*older.nodes, *newer.nodes]}
    nearest = sorted(offsets, key=lambda i: (abs(offsets[i]), beads[i].created_at, i))[: req.limit]
    kept = set(nearest)
    ordered = sorted(kept, key=lambda i: (offsets[i], beads[i].created_at, i))
    edges = {(e.from_id, e.to_id): e for e in [*older.edges, *newer.edges] if e.from_id in kept and e.to_id in kept}
    return BeadHistory(
        bead_id=req.bead_id,
        versions=[HistoryVersion(bead=beads[i], offset=offsets[i]) for i in ordered],
        links=[_link(e) for e in sorted(edges.values(), key=lambda e: (e.created_at, e.from_id, e.to_id))],
        truncated=len(offsets) > req.limit,
    )


def _nearest_first(reply: BeadHistory) -> list[HistoryVersion]:
    return sorted(reply.versions, key=lambda v: abs(v.offset))  # stable: oldest first among equals


def cut_history(op: str, reply: BeadHistory, n: int) -> BeadHistory:
    """The history cut to the ``n`` versions nearest the bead (to fit the bus), links between them only."""
    kept = {v.bead.bead_id for v in _nearest_first(reply)[:n]}
    return reply.model_copy(
        update={
            "versions": [v for v in reply.versions if v.bead.bead_id in kept],
            "links": [link for link in reply.links if link.old_id in kept and link.new_id in kept],
            "truncated": True,
        }
    )


def history_items(reply: BeadHistory) -> list[HistoryVersion]:
    """The versions in the order a cut keeps them."""
    return _nearest_first(reply)
