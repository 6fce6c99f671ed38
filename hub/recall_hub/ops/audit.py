"""The audit trail of a group for its ops: entries about the group's beads (group visibility) by its
current members, or about one of its beads by anyone. Entries name only the group's beads; an entry
that names none of them (what a member did elsewhere) is never shown."""

from __future__ import annotations

import logging

from recall_schemas import AuditRecord, AuditTrail, Forbidden, GetAuditLog, NotFound

from recall_hub.context import HubContext
from recall_hub.store.audit import AuditEntry

log = logging.getLogger(__name__)

SCAN_PER_STREAM = 2_000
"""Newest entries read from each member's (or the bead's) stream before filtering to the group's beads."""


async def audit_log(ctx: HubContext, caller: str, req: GetAuditLog) -> AuditTrail:
    role = await ctx.groups.role_in(caller, req.group_id)
    if role is None:
        raise NotFound(f"group {req.group_id} not found")
    if role != "ops":
        raise Forbidden(f"only the ops of {req.group_id} may read its audit trail")
    if req.bead_id is not None:
        if not await ctx.audit.group_beads(caller, req.group_id, [req.bead_id]):
            raise NotFound(f"bead {req.bead_id} not found in {req.group_id}")
        found = await ctx.audit.entries(bead_id=req.bead_id, limit=SCAN_PER_STREAM)
        if req.member is not None:
            found = [e for e in found if e.ai_id == req.member]
    else:
        group = await ctx.groups.get(caller, req.group_id)
        members = [m.ai_id for m in group.members] if group is not None else []
        if req.member is not None:
            if req.member not in members:
                raise NotFound(f"{req.member} is not a member of {req.group_id}")
            members = [req.member]
        found = [e for ai_id in members for e in await ctx.audit.entries(ai_id=ai_id, limit=SCAN_PER_STREAM)]
    ours = await ctx.audit.group_beads(caller, req.group_id, (b for e in found for b in e.bead_ids))
    records = [_record(e, ours) for e in found if any(b in ours for b in e.bead_ids)]
    records.sort(key=lambda r: r.at, reverse=True)
    return AuditTrail(group_id=req.group_id, entries=records[: req.limit])


def _record(entry: AuditEntry, ours: set[str]) -> AuditRecord:
    return AuditRecord(
        at=entry.at, ai_id=entry.ai_id, op=entry.op, allowed=entry.allowed, code=entry.code,
        bead_ids=[b for b in entry.bead_ids if b in ours],
    )
