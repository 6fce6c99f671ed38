"""Sessions in the graph: who owns one, its group and state, and the beads it holds.

A session belongs to the identity that started it, and its id is that owner's name for it: a
session is the pair (owner, session_id). Another identity naming the same id names a session of
its own, so no create, event or migration can tell whether someone else uses an id, and nobody can
write into another's session.

A session is seen by its owner and by the current members of its group, checked inside each query.
What a session holds is read only as far as the caller may see it (:mod:`recall_hub.store.visibility`):
a bead the caller may not see is neither counted, named nor moved.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from recall_schemas.coordination import Session

from recall_hub.store.graph import GraphStore
from recall_hub.store.outbox import record, record_params
from recall_hub.store.visibility import MY_GROUPS, visible
from recall_hub.timeutil import from_ms

Props = dict[str, Any]

AUTO_LINK_NOTE = '{"auto": true}'
"""The metadata of the links the hub makes itself (a bead's session predecessor, its related beads)."""

STAMPED_BEFORE = (
    "({0}.created_at <= {1}.created_at AND NOT ({0}.created_at = {1}.created_at AND {0}.bead_id >= {1}.bead_id))"
)
"""Cypher: the bead ``{0}`` was stamped before ``{1}`` (a session's order: creation time, then id). Not written
as ``created_at < … OR (created_at = … AND bead_id < …)``: with the OR, FalkorDB plans the session's index scan
over every bead stamped before (~6 ms a link at 10k beads against ~0.1), and it returns rows for which the OR
is false (beads stamped in the same millisecond chained wrongly; :func:`recall_hub.store.filters.listing_clause`)."""


def follows_link(later: str, earlier: str, meta: str = "$meta") -> str:
    """Cypher: the hub's own ``FOLLOWS_FROM`` link of ``later`` to ``earlier`` in a session's chain (idempotent);
    ``meta``: the metadata, a parameter or a literal."""
    return (
        f"MERGE ({later})-[r:FOLLOWS_FROM]->({earlier}) ON CREATE SET r.created_at = {later}.created_at, "
        f"r.created_by = {later}.created_by, r.strength = 1.0, r.metadata = {meta} "
    )


def chain_around(bead: str, carry: str) -> str:
    """Cypher: what :data:`BRIDGE_CHAIN` needs before ``bead`` is removed — the beads of its session's chain (its
    author's beads of that session) that ``FOLLOWS_FROM`` it, ``later``, and the one it follows, ``earlier`` (an
    empty list or one bead); ``carry`` is passed on."""
    same_chain = "{0}.session_id = {1}.session_id AND {0}.created_by = {1}.created_by"
    return (
        f"OPTIONAL MATCH (l:Bead)-[:FOLLOWS_FROM]->({bead}) WHERE {same_chain.format('l', bead)} "
        f"WITH {carry}, {bead}, collect(DISTINCT l) AS later "
        f"OPTIONAL MATCH ({bead})-[:FOLLOWS_FROM]->(e:Bead) WHERE {same_chain.format('e', bead)} "
        f"WITH {carry}, {bead}, later, collect(DISTINCT e)[..1] AS earlier "
    )


BRIDGE_CHAIN = f"FOREACH (e IN earlier | FOREACH (l IN later | {follows_link('l', 'e', repr(AUTO_LINK_NOTE))})) "
"""Cypher, inside the update that removes a bead: what followed it in its session's chain now follows what it
followed, so removing a bead from the middle of a session leaves the chain whole (:func:`chain_around` binds
``earlier`` and ``later``)."""


def _session(p: Mapping[str, Any]) -> Session:
    return Session(
        session_id=p["session_id"],
        owner=p["owner"],
        group_id=p.get("group_id"),
        state=p.get("state", "active"),
        created_at=from_ms(p["created_at"]),
        migrated_to=p.get("migrated_to"),
    )


@dataclass(frozen=True)
class HeldBead:
    """What an integrity check reads of one bead of a session (one the caller may see)."""

    bead_id: str
    created_by: str
    group_id: str | None
    vec_model: str | None
    author_known: bool
    """The author has a node in the graph."""
    in_my_groups: bool
    """The bead's group is one of the caller's groups (so it exists)."""
    follows_visible: bool
    """The bead is linked ``FOLLOWS_FROM`` to a bead the caller may see."""


@dataclass(frozen=True)
class Migration:
    """What a migration did: the beads it moved (their properties after the move), or the group it refused."""

    count: int
    beads: list[Props]
    refused_group: str | None = None
    """The group the new session would be tied to, which the caller is not a member of (nothing changed)."""


class SessionStore:
    def __init__(self, graph: GraphStore) -> None:
        self.graph = graph

    # --- reads, as a caller -------------------------------------------------------------------

    async def get(self, caller: str, session_id: str) -> Session | None:
        """The session, if the caller owns it or is a member of its group (the caller's own first)."""
        rows = await self.graph.ro_query(
            MY_GROUPS + "MATCH (s:Session {session_id: $session_id}) "
            "WHERE s.owner = $caller OR s.group_id IN my_groups "
            "RETURN properties(s) ORDER BY s.owner = $caller DESC, s.created_at, s.owner LIMIT 1",
            {"session_id": session_id, "caller": caller},
        )
        return _session(rows[0][0]) if rows else None

    async def held_beads(self, caller: str, session_id: str, owner: str) -> list[HeldBead]:
        """The beads of ``owner``'s session the caller may see, oldest first, with what an integrity
        check needs; links and groups are judged as far as the caller may see them too."""
        rows = await self.graph.ro_query(
            MY_GROUPS + "MATCH (b:Bead {session_id: $session_id}) "
            f"WHERE b.created_by = $owner AND {visible('b')} "
            "OPTIONAL MATCH (author:AI {ai_id: b.created_by}) "
            f"OPTIONAL MATCH (b)-[:FOLLOWS_FROM]->(prev:Bead) WHERE {visible('prev')} "
            "WITH b, my_groups, count(DISTINCT author) AS has_author, count(DISTINCT prev) AS has_prev "
            "ORDER BY b.created_at, b.bead_id "
            "RETURN b.bead_id, b.created_by, b.group_id, b.vec_model, has_author > 0, "
            "b.group_id IS NOT NULL AND b.group_id IN my_groups, has_prev > 0",
            {"session_id": session_id, "caller": caller, "owner": owner},
        )
        return [
            HeldBead(bead_id, author, group_id, vec_model, bool(known), bool(mine), bool(linked))
            for bead_id, author, group_id, vec_model, known, mine, linked in rows
        ]

    # --- writes, as a caller --------------------------------------------------------------------

    async def register(
        self, owner: str, session_id: str, group_id: str | None, state: str, now: int
    ) -> Session | None:
        """Create the owner's session or update its state, in one query that also checks the owner is
        a member of ``group_id`` (when given). The session; None when the owner is not in the group."""
        rows = await self.graph.query(
            "OPTIONAL MATCH (:AI {ai_id: $owner})-[:MEMBER_OF]->(mg:Group {group_id: $group_id}) "
            "WITH count(mg) AS member WHERE $group_id IS NULL OR member > 0 "
            "MERGE (s:Session {session_id: $session_id, owner: $owner}) "
            "ON CREATE SET s.created_at = $now, s.group_id = $group_id, s.state = $state "
            "SET s.state = $state, s.group_id = coalesce($group_id, s.group_id) "
            "RETURN properties(s)",
            {"session_id": session_id, "owner": owner, "group_id": group_id, "state": state, "now": now},
        )
        return _session(rows[0][0]) if rows else None

    async def migrate(self, caller: str, old: str, new: str, now: int) -> Migration | None:
        """One atomic query: the caller's session ``old`` is marked migrated to ``new`` (created for the
        caller if needed, in ``old``'s group) and every bead of it the caller may see moves along, keeping
        its id and edges — if ``new`` is then of no group or of a group the caller is a member of now (a
        session is never tied to a group the caller has left). None when the caller has no session
        ``old``; nothing changes then, nor when the group is refused (:attr:`Migration.refused_group`)."""
        rows = await self.graph.query(
            MY_GROUPS + "MATCH (old:Session {session_id: $old, owner: $caller}) "
            "OPTIONAL MATCH (known:Session {session_id: $new, owner: $caller}) "
            "WITH my_groups, old, CASE WHEN known IS NULL THEN old.group_id ELSE known.group_id END AS group_id "
            "WITH my_groups, old, group_id, group_id IS NULL OR group_id IN my_groups AS allowed "
            "FOREACH (_ IN CASE WHEN allowed THEN [1] ELSE [] END | "
            "MERGE (new:Session {session_id: $new, owner: $caller}) "
            "ON CREATE SET new.created_at = $now, new.group_id = old.group_id, new.state = 'active' "
            "SET old.state = 'migrated', old.migrated_to = $new) "
            "WITH my_groups, old, group_id, allowed OPTIONAL MATCH (b:Bead {session_id: $old}) "
            f"WHERE allowed AND b.created_by = $caller AND {visible('b')} "
            "WITH old, group_id, allowed, collect(b) AS beads "  # grouped by old: no row when old was refused
            "FOREACH (x IN beads | SET x.session_id = $new, x.updated_at = $now "
            + record("attributes", after="x", before="x", text_changed="false") + ") "
            "RETURN allowed, group_id, size(beads), [x IN beads | properties(x)]",
            {"old": old, "new": new, "caller": caller, "now": now, **record_params()},
        )
        if not rows:
            return None
        allowed, group_id, count, moved = rows[0]
        if not allowed:
            return Migration(0, [], refused_group=group_id)
        return Migration(int(count), [dict(p) for p in moved])
