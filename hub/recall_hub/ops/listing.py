"""Listings of visible beads: by session, group, tag, and the most recent."""

from __future__ import annotations

from typing import Any

from recall_schemas import BeadList, GetByGroup, GetBySession, GetByTag, GetRecent, NotFound

from recall_hub.context import HubContext
from recall_hub.ops.groups import role_in
from recall_hub.store.records import bead_from_node
from recall_hub.store.visibility import MY_GROUPS, visible
from recall_hub.timeutil import to_ms


async def _list(ctx: HubContext, caller: str, where: str, order: str, params: dict[str, Any]) -> BeadList:
    rows = await ctx.graph.ro_query(
        MY_GROUPS + f"MATCH (b:Bead) WHERE {where} AND {visible('b')} "
        f"RETURN b ORDER BY {order} LIMIT $limit",
        {"caller": caller, **params},
    )
    return BeadList(beads=[bead_from_node(row[0]) for row in rows])


async def get_by_session(ctx: HubContext, caller: str, req: GetBySession) -> BeadList:
    return await _list(
        ctx,
        caller,
        "b.session_id = $session_id",
        "b.created_at ASC, b.bead_id ASC",
        {"session_id": req.session_id, "limit": req.limit},
    )


async def get_by_group(ctx: HubContext, caller: str, req: GetByGroup) -> BeadList:
    # A non-member learns nothing about the group, not even that it exists.
    if await role_in(ctx, caller, req.group_id) is None:
        raise NotFound(f"group {req.group_id} not found")
    return await _list(
        ctx,
        caller,
        "b.group_id = $group_id",
        "b.created_at DESC, b.bead_id DESC",
        {"group_id": req.group_id, "limit": req.limit},
    )


async def get_by_tag(ctx: HubContext, caller: str, req: GetByTag) -> BeadList:
    return await _list(
        ctx, caller, "$tag IN b.tags", "b.created_at DESC, b.bead_id DESC", {"tag": req.tag, "limit": req.limit}
    )


async def get_recent(ctx: HubContext, caller: str, req: GetRecent) -> BeadList:
    since = to_ms(req.since) if req.since is not None else 0
    return await _list(
        ctx, caller, "b.created_at >= $since", "b.created_at DESC, b.bead_id DESC", {"since": since, "limit": req.limit}
    )
