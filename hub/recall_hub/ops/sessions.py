"""The session registry: who owns a session, its group and state; migration and integrity."""

from __future__ import annotations

from typing import Any

from recall_schemas import Conflict, Forbidden, NotFound
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
from recall_hub.ops.indexing import refresh_attributes
from recall_hub.timeutil import from_ms, now_ms


def _session(node: Any) -> Session:
    p = node.properties
    return Session(
        session_id=p["session_id"],
        owner=p["owner"],
        group_id=p.get("group_id"),
        state=p.get("state", "active"),
        created_at=from_ms(p["created_at"]),
        migrated_to=p.get("migrated_to"),
    )


async def register_session(
    ctx: HubContext, owner: str, session_id: str, group_id: str | None = None, state: str = "active"
) -> Session:
    """Create the session for ``owner`` or update its state; a session of another owner is refused."""
    rows = await ctx.graph.query(
        "MERGE (s:Session {session_id: $session_id}) "
        "ON CREATE SET s.owner = $owner, s.created_at = $now, s.group_id = $group_id, s.state = $state "
        "WITH s, s.owner = $owner AS mine "
        "FOREACH (_ IN CASE WHEN mine THEN [1] ELSE [] END | SET s.state = $state, "
        "s.group_id = coalesce($group_id, s.group_id)) "
        "RETURN s, mine",
        {"session_id": session_id, "owner": owner, "group_id": group_id, "state": state, "now": now_ms()},
    )
    node, mine = rows[0]
    if not mine:
        raise Forbidden(f"session {session_id} belongs to another identity")
    return _session(node)


async def get_session(ctx: HubContext, caller: str, req: GetSession) -> Session:
    rows = await ctx.graph.ro_query(
        "MATCH (s:Session {session_id: $session_id}) "
        "OPTIONAL MATCH (:AI {ai_id: $caller})-[:MEMBER_OF]->(g:Group {group_id: s.group_id}) "
        "WITH s, count(g) AS shared WHERE s.owner = $caller OR shared > 0 RETURN s",
        {"session_id": req.session_id, "caller": caller},
    )
    if not rows:
        raise NotFound(f"session {req.session_id} not found")
    return _session(rows[0][0])


async def migrate_session_with_memories(ctx: HubContext, caller: str, req: MigrateSession) -> MigrationResult:
    """One atomic query: the old session is marked migrated and every bead moves to the new one.
    Beads keep their ids and edges, so FOLLOWS_FROM chains stay whole."""
    if req.old_session_id == req.new_session_id:
        raise Conflict("a session cannot migrate to itself")
    rows = await ctx.graph.query(
        "MATCH (old:Session {session_id: $old}) WHERE old.owner = $caller "
        "MERGE (new:Session {session_id: $new}) "
        "ON CREATE SET new.owner = $caller, new.created_at = $now, new.group_id = old.group_id, new.state = 'active' "
        "WITH old, new WHERE new.owner = $caller "
        "SET old.state = 'migrated', old.migrated_to = $new "
        "WITH old, new OPTIONAL MATCH (b:Bead {session_id: $old}) "
        "WITH old, collect(b) AS beads "
        "FOREACH (x IN beads | SET x.session_id = $new, x.updated_at = $now) "
        "RETURN size(beads), [x IN beads | x]",
        {"old": req.old_session_id, "new": req.new_session_id, "caller": caller, "now": now_ms()},
    )
    if not rows:
        owner = await ctx.graph.ro_query(
            "MATCH (s:Session {session_id: $id}) RETURN s.owner", {"id": req.old_session_id}
        )
        if not owner or owner[0][0] != caller:
            raise NotFound(f"session {req.old_session_id} not found")
        raise Forbidden(f"session {req.new_session_id} belongs to another identity")
    count, nodes = rows[0]
    for node in nodes:
        await refresh_attributes(ctx, node.properties)
    return MigrationResult(old_session_id=req.old_session_id, new_session_id=req.new_session_id, migrated_beads=count)


async def check_session(ctx: HubContext, caller: str, req: CheckSession) -> IntegrityReport:
    """Beads of the session whose session, group or author is missing or inconsistent, whose vector
    is missing, or whose FOLLOWS_FROM chain is broken."""
    session = await get_session(ctx, caller, GetSession(session_id=req.session_id))
    rows = await ctx.graph.ro_query(
        "MATCH (b:Bead {session_id: $session_id}) "
        "OPTIONAL MATCH (author:AI {ai_id: b.created_by}) "
        "OPTIONAL MATCH (g:Group {group_id: b.group_id}) "
        "OPTIONAL MATCH (b)-[:FOLLOWS_FROM]->(prev:Bead) "
        "WITH b, count(DISTINCT author) AS has_author, count(DISTINCT g) AS has_group, "
        "count(DISTINCT prev) AS has_prev ORDER BY b.created_at, b.bead_id "
        "RETURN b.bead_id, b.created_by, b.group_id, b.vec_model, has_author, has_group, has_prev",
        {"session_id": req.session_id},
    )
    problems: list[IntegrityProblem] = []
    for index, (bead_id, author, group_id, vec_model, has_author, has_group, has_prev) in enumerate(rows):
        def flag(text: str, bead: str = bead_id) -> None:
            problems.append(IntegrityProblem(bead_id=bead, problem=text))

        if author != session.owner:
            flag(f"written by {author}, but the session belongs to {session.owner}")
        if not has_author:
            flag(f"author {author} is unknown to the hub")
        if group_id is not None and not has_group:
            flag(f"group {group_id} does not exist")
        if group_id is not None and session.group_id is not None and group_id != session.group_id:
            flag(f"group {group_id} differs from the session's group {session.group_id}")
        if vec_model != ctx.vectors.model_id:
            flag("no vector with the current embedding model (run `recall reindex`)")
        if index > 0 and not has_prev:
            flag("not linked FOLLOWS_FROM to an earlier bead of the session")
    return IntegrityReport(session_id=req.session_id, beads=len(rows), problems=problems)
