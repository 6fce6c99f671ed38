"""Groups and membership. Only a group's ops changes membership; a member may leave on its own."""

from __future__ import annotations

from typing import Any

from recall_schemas import (
    AddMember,
    Conflict,
    CreateGroup,
    Forbidden,
    Group,
    GroupList,
    ListGroups,
    ListMembers,
    Member,
    NotFound,
    RemoveMember,
    new_id,
)

from recall_hub.context import HubContext
from recall_hub.timeutil import from_ms, now_ms

_GROUP_WITH_MEMBERS = (
    "MATCH (g:Group {group_id: $group_id}) "
    "OPTIONAL MATCH (m:AI)-[mm:MEMBER_OF]->(g) "
    "RETURN g, collect([m.ai_id, mm.role, mm.joined_at])"
)


def _group(node: Any, members: list[list[Any]]) -> Group:
    p = node.properties
    return Group(
        group_id=p["group_id"],
        name=p["name"],
        created_at=from_ms(p["created_at"]),
        created_by=p["created_by"],
        members=sorted(
            (Member(ai_id=a, role=role, joined_at=from_ms(at)) for a, role, at in members if a is not None),
            key=lambda m: (m.role != "ops", m.ai_id),
        ),
    )


async def _load(ctx: HubContext, group_id: str) -> Group:
    rows = await ctx.graph.ro_query(_GROUP_WITH_MEMBERS, {"group_id": group_id})
    if not rows:
        raise NotFound(f"group {group_id} not found")
    return _group(rows[0][0], rows[0][1])


async def role_in(ctx: HubContext, caller: str, group_id: str) -> str | None:
    rows = await ctx.graph.ro_query(
        "MATCH (:AI {ai_id: $caller})-[m:MEMBER_OF]->(:Group {group_id: $group_id}) RETURN m.role",
        {"caller": caller, "group_id": group_id},
    )
    return rows[0][0] if rows else None


async def _require_ops(ctx: HubContext, caller: str, group_id: str) -> None:
    role = await role_in(ctx, caller, group_id)
    if role is None:
        raise NotFound(f"group {group_id} not found")
    if role != "ops":
        raise Forbidden(f"only the ops of {group_id} may change its membership")


async def create_group(ctx: HubContext, caller: str, req: CreateGroup) -> Group:
    group_id = req.group_id or new_id("g")
    now = now_ms()
    rows = await ctx.graph.query(
        # FalkorDB 4.16: a leading OPTIONAL MATCH followed by `WITH taken WHERE taken IS NULL` does not
        # filter (the create ran for an existing id, making a duplicate group); counting does.
        "OPTIONAL MATCH (taken:Group {group_id: $group_id}) WITH count(taken) AS taken WHERE taken = 0 "
        "MERGE (me:AI {ai_id: $caller}) "
        "CREATE (g:Group {group_id: $group_id, name: $name, created_at: $now, created_by: $caller}) "
        "CREATE (me)-[:MEMBER_OF {role: 'ops', joined_at: $now}]->(g) RETURN g",
        {"caller": caller, "group_id": group_id, "name": req.name, "now": now},
    )
    if not rows:
        raise Conflict(f"group {group_id} already exists")
    return await _load(ctx, group_id)


async def add_member(ctx: HubContext, caller: str, req: AddMember) -> Group:
    await _require_ops(ctx, caller, req.group_id)
    if req.ai_id == caller and req.role.value != "ops" and await _ops_count(ctx, req.group_id) <= 1:
        raise Conflict(f"{caller} is the last ops of {req.group_id}; hand the role over first")
    await ctx.graph.query(
        "MATCH (:AI {ai_id: $caller})-[:MEMBER_OF {role: 'ops'}]->(g:Group {group_id: $group_id}) "
        "MERGE (a:AI {ai_id: $ai_id}) MERGE (a)-[m:MEMBER_OF]->(g) "
        "ON CREATE SET m.joined_at = $now SET m.role = $role",
        {"caller": caller, "group_id": req.group_id, "ai_id": req.ai_id, "role": req.role.value, "now": now_ms()},
    )
    return await _load(ctx, req.group_id)


async def _ops_count(ctx: HubContext, group_id: str) -> int:
    rows = await ctx.graph.ro_query(
        "MATCH (:AI)-[m:MEMBER_OF {role: 'ops'}]->(:Group {group_id: $group_id}) RETURN count(m)",
        {"group_id": group_id},
    )
    return int(rows[0][0]) if rows else 0


async def remove_member(ctx: HubContext, caller: str, req: RemoveMember) -> Group:
    if req.ai_id != caller:
        await _require_ops(ctx, caller, req.group_id)
    elif await role_in(ctx, caller, req.group_id) is None:
        raise NotFound(f"group {req.group_id} not found")
    # The last ops may not leave: the group would have nobody to manage it.
    rows = await ctx.graph.query(
        "MATCH (a:AI {ai_id: $ai_id})-[m:MEMBER_OF]->(g:Group {group_id: $group_id}) "
        "OPTIONAL MATCH (:AI)-[o:MEMBER_OF {role: 'ops'}]->(g) "
        "WITH m, m.role = 'ops' AND count(o) <= 1 AS last_ops "
        "FOREACH (_ IN CASE WHEN last_ops THEN [] ELSE [1] END | DELETE m) RETURN last_ops",
        {"ai_id": req.ai_id, "group_id": req.group_id},
    )
    if rows and rows[0][0]:
        raise Conflict(f"{req.ai_id} is the last ops of {req.group_id}; hand the role over first")
    return await _load(ctx, req.group_id)


async def list_members(ctx: HubContext, caller: str, req: ListMembers) -> Group:
    if await role_in(ctx, caller, req.group_id) is None:
        raise NotFound(f"group {req.group_id} not found")
    return await _load(ctx, req.group_id)


async def list_groups(ctx: HubContext, caller: str, req: ListGroups) -> GroupList:
    rows = await ctx.graph.ro_query(
        "MATCH (:AI {ai_id: $caller})-[:MEMBER_OF]->(g:Group) "
        "OPTIONAL MATCH (m:AI)-[mm:MEMBER_OF]->(g) "
        "RETURN g, collect([m.ai_id, mm.role, mm.joined_at]) ORDER BY g.group_id",
        {"caller": caller},
    )
    return GroupList(groups=[_group(row[0], row[1]) for row in rows])
