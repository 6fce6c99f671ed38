"""Applying events: transport-free. Each handler is idempotent, so redelivered or replayed events
change nothing twice; an event that can never apply raises a RecallError naming the reason."""

from __future__ import annotations

import hashlib
import re

from recall_schemas import AddMember, Conflict, CreateGroup, Forbidden, InvalidRequest, RemoveMember
from recall_schemas.coordination import MigrateSession
from recall_schemas.events import (
    Event,
    GroupCreated,
    MemberAdded,
    MemberRemoved,
    OpsTransferred,
    SessionContinued,
    SessionEnded,
    SessionMigrated,
    SessionStarted,
)
from recall_schemas.ids import AI_ID_PATTERN, SERVICE_ID_PATTERN

from recall_hub.context import HubContext
from recall_hub.ops import groups, handoff, sessions

_AI = re.compile(AI_ID_PATTERN)
_SERVICE = re.compile(SERVICE_ID_PATTERN)


def _acting_ai(publisher: str, named: str | None) -> str:
    """Whose session an event is about: an AI speaks for itself; a service may speak for any AI."""
    if _AI.fullmatch(publisher):
        if named is not None and named != publisher:
            raise Forbidden(f"{publisher} may not publish session events of {named}")
        return publisher
    if _SERVICE.fullmatch(publisher):
        if named is None:
            raise InvalidRequest("a service's session event must name ai_id")
        return named
    raise Forbidden(f"{publisher!r} is not an identity that may publish events")


def _require_ai(publisher: str, kind: str) -> str:
    if not _AI.fullmatch(publisher):
        raise Forbidden(f"{kind} events may only come from an AI identity, not {publisher!r}")
    return publisher


async def apply_event(ctx: HubContext, publisher: str, event: Event) -> None:
    if isinstance(event, SessionStarted | SessionContinued | SessionEnded):
        ai = _acting_ai(publisher, event.ai_id)
        group_id = event.group_id if isinstance(event, SessionStarted) else None
        state = "ended" if isinstance(event, SessionEnded) else "active"
        await sessions.register_session(ctx, ai, event.session_id, group_id, state)
    elif isinstance(event, SessionMigrated):
        ai = _acting_ai(publisher, event.ai_id)
        current = await ctx.sessions.get(ai, event.old_session_id)
        if current is not None and (current.state, current.migrated_to) == ("migrated", event.new_session_id):
            return  # already applied
        await sessions.migrate_session_with_memories(
            ctx, ai, MigrateSession(old_session_id=event.old_session_id, new_session_id=event.new_session_id)
        )
    elif isinstance(event, GroupCreated):
        ai = _require_ai(publisher, event.kind)
        try:
            await groups.create_group(ctx, ai, CreateGroup(name=event.name, group_id=event.group_id))
        except Conflict:
            if not await ctx.groups.created(ai, event.group_id):
                raise
    elif isinstance(event, MemberAdded):
        ai = _require_ai(publisher, event.kind)
        await groups.add_member(ctx, ai, AddMember(group_id=event.group_id, ai_id=event.ai_id, role=event.role))
    elif isinstance(event, MemberRemoved):
        ai = _require_ai(publisher, event.kind)
        if event.ai_id == ai and await ctx.groups.role_in(ai, event.group_id) is None:
            return  # already left
        await groups.remove_member(ctx, ai, RemoveMember(group_id=event.group_id, ai_id=event.ai_id))
    elif isinstance(event, OpsTransferred):
        ai = _require_ai(publisher, event.kind)
        transfer = event.transfer
        if transfer.handoff_id is None:
            digest = hashlib.sha1(event.event_id.encode()).hexdigest()[:20]
            transfer = transfer.model_copy(update={"handoff_id": f"h_{digest}"})
        await handoff.transfer_ops(ctx, ai, transfer)
    else:  # pragma: no cover - the discriminated union is closed
        raise InvalidRequest(f"unknown event {event!r}")
