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
from recall_hub.ops.time_fields import as_of_ms
from recall_hub.store.as_of import AsOfReads
from recall_hub.store.records import bead_from_props
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
    ctx: HubContext, caller: str, by: str, value: Any, ascending: bool, limit: int, cursor: str | None,
    as_of: datetime | None = None,
) -> BeadList:
    after = _position(cursor) if cursor is not None else None
    # one more than asked: is there a next page?
    if as_of is None:
        rows = await ctx.beads.listing(caller, by, value, ascending=ascending, limit=limit + 1, after=after)
    else:
        rows = await AsOfReads(ctx.graph).listing(
            caller, by, value, ascending=ascending, limit=limit + 1, after=after, as_of=as_of_ms(as_of)
        )
    beads = [bead_from_props(p) for p in rows[:limit]]
    more = len(rows) > limit
    return BeadList(beads=beads, next_cursor=cursor_after(beads[-1]) if more and beads else None)


async def get_by_session(ctx: HubContext, caller: str, req: GetBySession) -> BeadList:
    """The beads of one session — the caller's own of that id, else a groupmate's it may see (as
    ``get_session`` resolves it) — never beads other identities wrote under the same session id."""
    session = await ctx.sessions.get(caller, req.session_id)
    owner = session.owner if session is not None else caller
    return await _list(ctx, caller, "session", [req.session_id, owner], True, req.limit, req.cursor, req.as_of)


async def get_by_group(ctx: HubContext, caller: str, req: GetByGroup) -> BeadList:
    # A non-member learns nothing about the group, not even that it exists.
    if await role_in(ctx, caller, req.group_id) is None:
        raise NotFound(f"group {req.group_id} not found")
    return await _list(ctx, caller, "group", req.group_id, False, req.limit, req.cursor, req.as_of)


async def get_by_tag(ctx: HubContext, caller: str, req: GetByTag) -> BeadList:
    return await _list(ctx, caller, "tag", req.tag, False, req.limit, req.cursor, req.as_of)


async def get_recent(ctx: HubContext, caller: str, req: GetRecent) -> BeadList:
    since = to_ms(req.since) if req.since is not None else 0
    return await _list(ctx, caller, "since", since, False, req.limit, req.cursor, req.as_of)
