"""Listings of visible beads: by session, group, tag, and the most recent.

Each listing is ordered by ``(created_at, bead_id)`` — oldest first for a session, newest first
otherwise — and pages by keyset: a reply with more beads after it carries ``next_cursor``, the position
of its last bead, and a request with ``cursor`` continues strictly after that position. Beads created
meanwhile never shift a page, and no bead is returned twice.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from recall_schemas import BeadList, GetByGroup, GetBySession, GetByTag, GetRecent, InvalidRequest, MemoryBead, NotFound

from recall_hub.context import HubContext
from recall_hub.ops.groups import role_in
from recall_hub.store.records import bead_from_node
from recall_hub.store.visibility import MY_GROUPS, visible
from recall_hub.timeutil import to_ms

PAGED_OPERATIONS = frozenset({"get_by_session", "get_by_group", "get_by_tag", "get_recent"})
"""The operations whose :class:`BeadList` pages with ``cursor`` / ``next_cursor``."""


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def cursor_after(bead: MemoryBead) -> str:
    """The cursor that continues a listing after ``bead`` (opaque to callers)."""
    at = bead.created_at if bead.created_at.tzinfo else bead.created_at.replace(tzinfo=UTC)
    return f"{(at - _EPOCH) // timedelta(milliseconds=1)}:{bead.bead_id}"  # exact: no float on the way


def _position(cursor: str) -> tuple[int, str]:
    at, _, bead_id = cursor.partition(":")
    try:
        return int(at), bead_id
    except ValueError:  # the request model's pattern makes this unreachable from the wire
        raise InvalidRequest(f"not a listing cursor: {cursor!r}") from None


async def _list(
    ctx: HubContext, caller: str, where: str, ascending: bool, limit: int, cursor: str | None, params: dict[str, Any]
) -> BeadList:
    direction, onward, back = ("ASC", ">=", "<=") if ascending else ("DESC", "<=", ">=")
    if cursor is not None:
        at, bead_id = _position(cursor)
        # Strictly after (created_at, bead_id) in the listing's order. Not written as
        # "created_at < $at OR (created_at = $at AND bead_id < $id)": FalkorDB returns rows for which that
        # OR is false (the cursor's own bead among them).
        where += (
            f" AND b.created_at {onward} $cursor_at"
            f" AND NOT (b.created_at = $cursor_at AND b.bead_id {back} $cursor_id)"
        )
        params = {**params, "cursor_at": at, "cursor_id": bead_id}
    rows = await ctx.graph.ro_query(
        MY_GROUPS + f"MATCH (b:Bead) WHERE {where} AND {visible('b')} "
        f"RETURN b ORDER BY b.created_at {direction}, b.bead_id {direction} LIMIT $limit",
        {"caller": caller, **params, "limit": limit + 1},  # one more: is there a next page?
    )
    beads = [bead_from_node(row[0]) for row in rows[:limit]]
    more = len(rows) > limit
    return BeadList(beads=beads, next_cursor=cursor_after(beads[-1]) if more and beads else None)


async def get_by_session(ctx: HubContext, caller: str, req: GetBySession) -> BeadList:
    return await _list(
        ctx, caller, "b.session_id = $session_id", True, req.limit, req.cursor, {"session_id": req.session_id}
    )


async def get_by_group(ctx: HubContext, caller: str, req: GetByGroup) -> BeadList:
    # A non-member learns nothing about the group, not even that it exists.
    if await role_in(ctx, caller, req.group_id) is None:
        raise NotFound(f"group {req.group_id} not found")
    return await _list(ctx, caller, "b.group_id = $group_id", False, req.limit, req.cursor, {"group_id": req.group_id})


async def get_by_tag(ctx: HubContext, caller: str, req: GetByTag) -> BeadList:
    return await _list(ctx, caller, "$tag IN b.tags", False, req.limit, req.cursor, {"tag": req.tag})


async def get_recent(ctx: HubContext, caller: str, req: GetRecent) -> BeadList:
    since = to_ms(req.since) if req.since is not None else 0
    return await _list(ctx, caller, "b.created_at >= $since", False, req.limit, req.cursor, {"since": since})
