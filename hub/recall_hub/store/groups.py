"""Groups and membership in the graph.

Every read takes the caller and answers only about groups the caller belongs to, checked inside its
query. Every membership change is one atomic query that checks, in the same query, what the caller
may do and the group's invariant — at least one ops remains — so two concurrent changes can never
leave a group without ops (FalkorDB runs the writes of one graph one at a time).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from recall_schemas import Group, Member

from recall_hub.store.graph import GraphStore
from recall_hub.timeutil import from_ms


class Refusal(StrEnum):
    """Why a membership change changed nothing."""

    NOT_FOUND = "not_found"  # the caller is not in the group (or there is no such group)
    FORBIDDEN = "forbidden"  # the caller is in the group but may not make this change
    LAST_OPS = "last_ops"  # the change would leave the group without ops


# Binds ``g`` (null unless the caller is a member), ``my_role`` and ``ops`` (the group's ops count).
_CALLER_AND_OPS = (
    "OPTIONAL MATCH (:AI {ai_id: $caller})-[mine:MEMBER_OF]->(g:Group {group_id: $group_id}) "
    "WITH g, mine.role AS my_role "
    "OPTIONAL MATCH (:AI)-[o:MEMBER_OF {role: 'ops'}]->(g) "
    "WITH g, my_role, count(o) AS ops "
    "OPTIONAL MATCH (:AI {ai_id: $ai_id})-[t:MEMBER_OF]->(g) "
)
# The group bound to ``g`` with its members, read in the same query (after any change it made).
_RETURN_GROUP = (
    "WITH g, status OPTIONAL MATCH (m:AI)-[mm:MEMBER_OF]->(g) "
    "RETURN status, CASE WHEN status = 'ok' THEN properties(g) END, collect([m.ai_id, mm.role, mm.joined_at])"
)


def _group(props: Mapping[str, Any], members: list[list[Any]]) -> Group:
    return Group(
        group_id=props["group_id"],
        name=props["name"],
        created_at=from_ms(props["created_at"]),
        created_by=props["created_by"],
        members=sorted(
            (Member(ai_id=a, role=role, joined_at=from_ms(at)) for a, role, at in members if a is not None),
            key=lambda m: (m.role != "ops", m.ai_id),
        ),
    )


def _outcome(rows: list[list[Any]]) -> Group | Refusal:
    status, props, members = rows[0]
    return _group(props, members) if status == "ok" else Refusal(status)


class GroupStore:
    def __init__(self, graph: GraphStore) -> None:
        self.graph = graph

    # --- reads, as a caller -------------------------------------------------------------------

    async def role_in(self, caller: str, group_id: str) -> str | None:
        """The caller's role in the group; None when it is not a member (or there is no such group)."""
        rows = await self.graph.ro_query(
            "MATCH (:AI {ai_id: $caller})-[m:MEMBER_OF]->(:Group {group_id: $group_id}) RETURN m.role",
            {"caller": caller, "group_id": group_id},
        )
        return rows[0][0] if rows else None

    async def member_role(self, caller: str, group_id: str, ai_id: str) -> str | None:
        """The role of ``ai_id`` in a group the caller belongs to; None when either is not a member."""
        rows = await self.graph.ro_query(
            "MATCH (:AI {ai_id: $caller})-[:MEMBER_OF]->(g:Group {group_id: $group_id}) "
            "MATCH (:AI {ai_id: $ai_id})-[m:MEMBER_OF]->(g) RETURN m.role",
            {"caller": caller, "group_id": group_id, "ai_id": ai_id},
        )
        return rows[0][0] if rows else None

    async def get(self, caller: str, group_id: str) -> Group | None:
        """The group with its members, if the caller is one of them."""
        rows = await self.graph.ro_query(
            "MATCH (:AI {ai_id: $caller})-[:MEMBER_OF]->(g:Group {group_id: $group_id}) "
            "OPTIONAL MATCH (m:AI)-[mm:MEMBER_OF]->(g) "
            "RETURN properties(g), collect([m.ai_id, mm.role, mm.joined_at])",
            {"caller": caller, "group_id": group_id},
        )
        return _group(rows[0][0], rows[0][1]) if rows else None

    async def mine(self, caller: str) -> list[Group]:
        """The caller's groups with their members, ordered by id."""
        rows = await self.graph.ro_query(
            "MATCH (:AI {ai_id: $caller})-[:MEMBER_OF]->(g:Group) "
            "OPTIONAL MATCH (m:AI)-[mm:MEMBER_OF]->(g) "
            "RETURN g.group_id AS id, properties(g), collect([m.ai_id, mm.role, mm.joined_at]) ORDER BY id",
            {"caller": caller},
        )
        return [_group(props, members) for _, props, members in rows]

    async def created(self, caller: str, group_id: str) -> bool:
        """Whether the caller created this group (a replayed create). Tells the caller nothing about
        groups created by others."""
        rows = await self.graph.ro_query(
            "MATCH (g:Group {group_id: $group_id}) WHERE g.created_by = $caller RETURN count(g)",
            {"caller": caller, "group_id": group_id},
        )
        return bool(rows and rows[0][0])

    # --- writes, as a caller --------------------------------------------------------------------

    async def create(self, caller: str, group_id: str, name: str, now: int) -> Group | None:
        """Create the group with the caller as its ops; None (and no change) when the id is taken."""
        rows = await self.graph.query(
            # FalkorDB 4.16: a leading OPTIONAL MATCH followed by `WITH taken WHERE taken IS NULL` does not
            # filter (the create ran for an existing id, making a duplicate group); counting does.
            "OPTIONAL MATCH (taken:Group {group_id: $group_id}) WITH count(taken) AS taken WHERE taken = 0 "
            "MERGE (me:AI {ai_id: $caller}) "
            "CREATE (g:Group {group_id: $group_id, name: $name, created_at: $now, created_by: $caller}) "
            "CREATE (me)-[m:MEMBER_OF {role: 'ops', joined_at: $now}]->(g) "
            "RETURN properties(g), [[me.ai_id, m.role, m.joined_at]]",
            {"caller": caller, "group_id": group_id, "name": name, "now": now},
        )
        return _group(rows[0][0], rows[0][1]) if rows else None

    async def set_member(
        self, caller: str, group_id: str, ai_id: str, role: str, now: int
    ) -> Group | Refusal:
        """Add ``ai_id`` with ``role`` or change its role, if the caller is the group's ops and the
        group keeps an ops. The group as the same query left it, or why nothing changed."""
        rows = await self.graph.query(
            _CALLER_AND_OPS
            + "WITH g, my_role, ops, t.role AS was "
            "WITH g, CASE WHEN my_role IS NULL THEN 'not_found' WHEN my_role <> 'ops' THEN 'forbidden' "
            "WHEN ops - CASE WHEN was = 'ops' THEN 1 ELSE 0 END + CASE WHEN $role = 'ops' THEN 1 ELSE 0 END < 1 "
            "THEN 'last_ops' ELSE 'ok' END AS status "
            "FOREACH (_ IN CASE WHEN status = 'ok' THEN [1] ELSE [] END | "
            "MERGE (a:AI {ai_id: $ai_id}) MERGE (a)-[m:MEMBER_OF]->(g) ON CREATE SET m.joined_at = $now "
            "SET m.role = $role) "
            + _RETURN_GROUP,
            {"caller": caller, "group_id": group_id, "ai_id": ai_id, "role": role, "now": now},
        )
        return _outcome(rows)

    async def remove_member(self, caller: str, group_id: str, ai_id: str) -> Group | Refusal:
        """Remove ``ai_id`` (the caller itself, or anyone if the caller is the group's ops) unless that
        leaves the group without ops; removing a non-member changes nothing. The group as the same
        query left it (the caller may have just left it), or why nothing changed."""
        rows = await self.graph.query(
            _CALLER_AND_OPS
            + "WITH g, t, CASE WHEN my_role IS NULL THEN 'not_found' "
            "WHEN $ai_id <> $caller AND my_role <> 'ops' THEN 'forbidden' "
            "WHEN t.role = 'ops' AND ops <= 1 THEN 'last_ops' ELSE 'ok' END AS status "
            "FOREACH (_ IN CASE WHEN status = 'ok' AND t IS NOT NULL THEN [1] ELSE [] END | DELETE t) "
            + _RETURN_GROUP,
            {"caller": caller, "group_id": group_id, "ai_id": ai_id},
        )
        return _outcome(rows)
