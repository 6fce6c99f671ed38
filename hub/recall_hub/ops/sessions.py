"""The session registry: who owns a session, its group and state; migration and integrity.

A session is seen by its owner and the current members of its group; what it holds is counted,
named and moved only as far as the caller may see it.
"""

from __future__ import annotations

from recall_schemas import Conflict, NotFound
from recall_schemas.coordination import (
    CheckSession,
    GetSession,
    IntegrityProblem,
    IntegrityReport,
    MigrateSession,
    MigrationResult,
    Session,
)

from recall_hub.context import HubContext
from recall_hub.ops.after_commit import settle_quietly
from recall_hub.store.sessions import AUTO_LINK_NOTE
from recall_hub.timeutil import now_ms


async def register_session(
    ctx: HubContext, owner: str, session_id: str, group_id: str | None = None, state: str = "active"
) -> Session:
    """Create ``owner``'s session of that id or update its state (sessions are per owner); a group the
    owner is not in now is ``not_found``, like one that does not exist."""
    session = await ctx.sessions.register(owner, session_id, group_id, state, now_ms())
    if session is None:
        raise NotFound(f"group {group_id} not found")
    return session


async def get_session(ctx: HubContext, caller: str, req: GetSession) -> Session:
    session = await ctx.sessions.get(caller, req.session_id)
    if session is None:
        raise NotFound(f"session {req.session_id} not found")
    return session


async def migrate_session_with_memories(ctx: HubContext, caller: str, req: MigrateSession) -> MigrationResult:
    """One atomic query: the old session is marked migrated and every bead of it the caller may see
    moves to the new one. Beads keep their ids and edges, so FOLLOWS_FROM chains stay whole. The new
    session (made in the old one's group, or found) must be of no group or of one the caller is a member
    of now, checked in the same query; else the group is ``not_found`` and nothing changes."""
    if req.old_session_id == req.new_session_id:
        raise Conflict("a session cannot migrate to itself")
    moved = await ctx.sessions.migrate(caller, req.old_session_id, req.new_session_id, now_ms())
    if moved is None:
        raise NotFound(f"session {req.old_session_id} not found")
    if moved.refused_group is not None:  # a group the caller has left, or never was in: not for it to see
        raise NotFound(f"group {moved.refused_group} not found")
    if moved.count and ctx.settings.auto_follows:  # one chain in the order of the stamps, with what was there
        relinked = await ctx.beads.system_rechain_session(req.new_session_id, caller, AUTO_LINK_NOTE)
        await ctx.index_log.append_many(relinked)
    for props in moved.beads:
        await settle_quietly(ctx, props["bead_id"])
    return MigrationResult(
        old_session_id=req.old_session_id, new_session_id=req.new_session_id, migrated_beads=moved.count
    )


async def check_session(ctx: HubContext, caller: str, req: CheckSession) -> IntegrityReport:
    """Beads of the session (those the caller may see) whose session, group or author is missing or
    inconsistent, whose vector is missing, or whose FOLLOWS_FROM chain is broken."""
    session = await get_session(ctx, caller, GetSession(session_id=req.session_id))
    beads = await ctx.sessions.held_beads(caller, req.session_id, session.owner)
    problems: list[IntegrityProblem] = []
    for index, bead in enumerate(beads):
        def flag(text: str, bead_id: str = bead.bead_id) -> None:
            problems.append(IntegrityProblem(bead_id=bead_id, problem=text))

        if not bead.author_known:
            flag(f"author {bead.created_by} is unknown to the hub")
        if bead.group_id is not None and not bead.in_my_groups:
            # Whether a group the caller is not in exists is not the caller's to learn.
            flag(f"group {bead.group_id} does not exist or you are not a member")
        if bead.group_id is not None and session.group_id is not None and bead.group_id != session.group_id:
            flag(f"group {bead.group_id} differs from the session's group {session.group_id}")
        if bead.vec_model != ctx.vectors.model_id:
            flag("no vector with the current embedding model (run `recall reindex`)")
        if index > 0 and not bead.follows_visible:
            flag("not linked FOLLOWS_FROM to an earlier bead of the session")
    return IntegrityReport(session_id=req.session_id, beads=len(beads), problems=problems)
