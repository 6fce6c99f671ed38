"""Trust: another identity verifies or rejects a bead, and the list of beads due for a re-check.

Who may mark a bead: any identity that can see it except its creator — for a group bead a current
member of its group (its ops included), for a global bead anyone; a private bead is seen by its
creator only, so to everyone else it does not exist. A verified bead ranks a little higher, a rejected
one is demoted like a superseded one (retrieval/ranking.py), and a search hit's explanation says so.
"""

from __future__ import annotations

import logging
from typing import Any

from recall_schemas import (
    ListStale,
    MemoryBead,
    NotFound,
    RejectBead,
    StaleBead,
    StaleCause,
    StaleList,
    StaleReason,
    TrustVerdict,
    VerifyBead,
)

from recall_hub.context import HubContext
from recall_hub.ops.after_commit import settle_quietly
from recall_hub.ops.groups import role_in
from recall_hub.ops.listing import cursor_after
from recall_hub.store.records import bead_from_props
from recall_hub.store.trust import WEAK_PROVENANCE, TrustStore, source_ids_of
from recall_hub.timeutil import DAY_MS, now_ms

log = logging.getLogger(__name__)

STALE_PAGE = 200
"""Candidates read per query while looking for stale beads."""
STALE_EXAMINED_MAX = 5_000
"""Candidates one request examines at most; beyond, the reply's ``next_cursor`` continues."""


async def _mark(ctx: HubContext, caller: str, bead_id: str, verdict: TrustVerdict, note: str | None) -> MemoryBead:
    props = await TrustStore(ctx.graph).mark(caller, bead_id, verdict, note, now_ms())
    await settle_quietly(ctx, bead_id)
    return bead_from_props(props)


async def verify_bead(ctx: HubContext, caller: str, req: VerifyBead) -> MemoryBead:
    return await _mark(ctx, caller, req.bead_id, TrustVerdict.VERIFIED, req.note)


async def reject_bead(ctx: HubContext, caller: str, req: RejectBead) -> MemoryBead:
    return await _mark(ctx, caller, req.bead_id, TrustVerdict.REJECTED, req.reason)


def _causes(props: dict[str, Any], cutoff: int, sources: dict[str, list[str]]) -> list[StaleCause]:
    causes = []
    if (
        props.get("provenance") in WEAK_PROVENANCE
        and int(props.get("created_at", 0)) < cutoff
        and not props.get("trust_by")
    ):
        causes.append(StaleCause(reason=StaleReason.UNVERIFIED))
    for source_id in source_ids_of(props):
        if source_id == props["bead_id"]:
            continue
        if source_id not in sources:  # deleted, forgotten, or out of the caller's view: the same to the caller
            causes.append(StaleCause(reason=StaleReason.SOURCE_GONE, source_id=source_id))
        elif sources[source_id]:
            causes.append(
                StaleCause(reason=StaleReason.SOURCE_SUPERSEDED, source_id=source_id, newer_id=sources[source_id][0])
            )
    return causes


async def list_stale(ctx: HubContext, caller: str, req: ListStale) -> StaleList:
    """Visible active beads, oldest first, that are due for a re-check, each with why."""
    if req.group_id is not None and await role_in(ctx, caller, req.group_id) is None:
        raise NotFound(f"group {req.group_id} not found")
    store = TrustStore(ctx.graph)
    cutoff = now_ms() - int(req.older_than_days * DAY_MS)
    after: tuple[int, str] | None = None
    if req.cursor is not None:
        at, _, bead_id = req.cursor.partition(":")
        after = (int(at), bead_id)
    items: list[StaleBead] = []
    examined = 0
    more = False
    while len(items) < req.limit and not more:
        rows = await store.stale_candidates(caller, group_id=req.group_id, cutoff=cutoff, after=after, limit=STALE_PAGE)
        sources = await store.sources(caller, sorted({s for props in rows for s in source_ids_of(props)}))
        for position, props in enumerate(rows):
            examined += 1
            after = (int(props["created_at"]), str(props["bead_id"]))
            causes = _causes(props, cutoff, sources)
            if causes:
                items.append(StaleBead(bead=bead_from_props(props), causes=causes))
            if len(items) >= req.limit or examined >= STALE_EXAMINED_MAX:
                more = position + 1 < len(rows) or len(rows) == STALE_PAGE
                break
        if len(rows) < STALE_PAGE:
            break
    next_cursor = f"{after[0]}:{after[1]}" if more and after is not None else None
    return StaleList(items=items, next_cursor=next_cursor)


def cut_stale(op: str, reply: StaleList, n: int) -> StaleList:
    """The stale list cut to its first ``n`` items (to fit the bus), continuing after the last one kept."""
    items = reply.items[:n]
    cursor = cursor_after(items[-1].bead) if items else reply.next_cursor
    return reply.model_copy(update={"items": items, "next_cursor": cursor, "truncated": True})
