"""Reads as the store knew them at a past moment (``as_of``, epoch ms), and the version history they read.

Every ``update_bead`` keeps the version it replaces: in the same query it copies the bead's properties
onto a ``(:BeadVersion)`` node linked ``(b)-[:HAD_VERSION]->(v)``, stamped ``replaced_at`` (see
:func:`keep_version`). The bead as of ``t`` is then the earliest version replaced after ``t``, or the
bead itself when none was (:data:`AS_OF_VIEW`); a bead created after ``t`` did not exist yet, and an
edge made after ``t`` (``created_at``) had not been made.

Visibility is decided now, never as of then: a bead is read as of ``t`` only if the caller may see it
now *and* may see (with its current groups) the version of then, so making a bead private hides its
past too, and leaving a group hides the group's past at once. Deleted beads are gone with their
versions (deletion is physical): no ``as_of`` brings them back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from recall_schemas import BeadFilters, Direction, Relationship

from recall_hub.store.filters import filter_clause, listing_clause
from recall_hub.store.graph import GraphStore
from recall_hub.store.records import relationship_from_props
from recall_hub.store.relationships import ALL_TYPES
from recall_hub.store.visibility import MY_GROUPS, visible

Props = dict[str, Any]

VERSION_EDGE = "HAD_VERSION"
VERSION_LABEL = "BeadVersion"


def keep_version(bead: str, before: str, at: str) -> str:
    """Cypher (inside a write): keep ``before`` (the bead's properties before the change) as a version
    of ``bead`` that was replaced at ``at``."""
    return (
        f"CREATE ({bead})-[:{VERSION_EDGE}]->(kept:{VERSION_LABEL}) "
        f"SET kept += {before}, kept.replaced_at = {at} "
    )


def versions_of(bead: str, carry: str, into: str = "versions") -> str:
    """Cypher: collect the kept versions of ``bead`` into the list ``into`` (``carry`` is passed on), so a
    write that removes the bead or its content removes them too (``FOREACH (v IN versions | DELETE v)``)."""
    return (
        f"OPTIONAL MATCH ({bead})-[:{VERSION_EDGE}]->(version:{VERSION_LABEL}) "
        f"WITH {carry}, {bead}, collect(version) AS {into} "
    )


def as_of_view(bead: str, props: str, carry: str = "my_groups, my_ops_groups") -> str:
    """Cypher: bind ``props`` to the properties of ``bead`` as of ``$as_of`` (``carry`` is passed on)."""
    return (
        f"OPTIONAL MATCH ({bead})-[:{VERSION_EDGE}]->(later:{VERSION_LABEL}) WHERE later.replaced_at > $as_of "
        f"WITH {carry}, {bead}, min(later.version) AS then_version "
        f"OPTIONAL MATCH ({bead})-[:{VERSION_EDGE}]->(then:{VERSION_LABEL}) WHERE then.version = then_version "
        f"WITH {carry}, {bead}, CASE WHEN then IS NULL THEN properties({bead}) ELSE properties(then) END AS {props} "
    )


def _existed(var: str) -> str:
    """Cypher predicate: the bead bound to ``var`` existed at ``$as_of`` and the caller may see it now."""
    return f"{var}.created_at <= $as_of AND {visible(var)}"


def _then_props(props: Mapping[str, Any]) -> Props:
    """A version's properties as a bead's (the bookkeeping of the version itself dropped)."""
    return {k: v for k, v in props.items() if k != "replaced_at"}




class AsOfReads:
    """The bead reads of :class:`~recall_hub.store.beads.BeadStore` that traversal, listings and search
    use, answered as of a past moment."""

    def __init__(self, graph: GraphStore) -> None:
        self.graph = graph

    async def get(self, caller: str, bead_id: str, as_of: int) -> Props | None:
        rows = await self.graph.values(
            MY_GROUPS + f"MATCH (b:Bead {{bead_id: $bead_id}}) WHERE {_existed('b')} "
            + as_of_view("b", "p") + f"WHERE {visible('p')} RETURN p",
            {"caller": caller, "bead_id": bead_id, "as_of": as_of},
        )
        return _then_props(rows[0][0]) if rows else None

    async def many(
        self, caller: str, ids: Sequence[str], as_of: int, filters: BeadFilters | None = None
    ) -> dict[str, tuple[Props, bool]]:
        """The beads among ``ids`` as of then that pass ``filters`` (on the version of then), each with
        whether a bead the caller can see had superseded it by then (an ``UPDATES`` edge made by then)."""
        if not ids:
            return {}
        clause, params = filter_clause("p", filters or BeadFilters())
        rows = await self.graph.values(
            MY_GROUPS + f"MATCH (b:Bead) WHERE b.bead_id IN $ids AND {_existed('b')} "
            + as_of_view("b", "p") + f"WITH my_groups, b, p WHERE {visible('p')}{clause} "
            "OPTIONAL MATCH (newer:Bead)-[u:UPDATES]->(b) "
            f"WHERE u.created_at <= $as_of AND {_existed('newer')} "
            "RETURN p, count(newer) > 0",
            {"caller": caller, "ids": list(ids), "as_of": as_of, **params},
        )
        return {row[0]["bead_id"]: (_then_props(row[0]), bool(row[1])) for row in rows}

    async def visible_ids(self, caller: str, ids: Sequence[str], as_of: int) -> set[str]:
        return set(await self.many(caller, ids, as_of))

    async def hop(
        self, caller: str, frontier: list[str], types: list[str], direction: Direction, as_of: int
    ) -> list[tuple[str, Relationship]]:
        """One breadth-first step as of then: edges made by then, from ``frontier`` to beads that existed
        then and whose version of then the caller may see."""
        pattern = {
            Direction.OUT: "(a)-[r]->(b:Bead)",
            Direction.IN: "(a)<-[r]-(b:Bead)",
            Direction.BOTH: "(a)-[r]-(b:Bead)",
        }[direction]
        rows = await self.graph.values(
            MY_GROUPS + f"MATCH (a:Bead) WHERE a.bead_id IN $frontier MATCH {pattern} "
            f"WHERE type(r) IN $types AND r.created_at <= $as_of AND {_existed('b')} "
            "WITH my_groups, my_ops_groups, b, collect(r) AS edges "
            + as_of_view("b", "p", carry="my_groups, my_ops_groups, edges")
            + f"WHERE {visible('p')} UNWIND edges AS r "
            "RETURN b.bead_id, type(r), startNode(r).bead_id, endNode(r).bead_id, properties(r)",
            {"caller": caller, "frontier": frontier, "types": types or ALL_TYPES, "as_of": as_of},
        )
        return [
            (bead_id, relationship_from_props(rel_type, start_id, end_id, props))
            for bead_id, rel_type, start_id, end_id, props in rows
        ]

    async def listing(
        self, caller: str, by: str, value: Any, *, ascending: bool, limit: int, after: tuple[int, str] | None,
        as_of: int,
    ) -> list[Props]:
        """:meth:`~recall_hub.store.beads.BeadStore.listing` as of then: what matched then (a tag the bead
        had then, the group it was in then), ordered and paged the same way (``created_at`` never changes)."""
        params: dict[str, Any] = {"caller": caller, "value": value, "limit": limit, "as_of": as_of}
        where, order = listing_clause("p", by, ascending, after, params)
        start = "MATCH (b:Bead) WHERE "
        if by == "session":  # a session's beads never change session: the index narrows the walk
            start += "b.session_id = $value[0] AND "
        rows = await self.graph.values(
            MY_GROUPS + start + _existed("b") + " " + as_of_view("b", "p")
            + f"WITH my_groups, p WHERE {where} AND {visible('p')} "
            f"RETURN p ORDER BY {order} LIMIT $limit",
            params,
        )
        return [_then_props(row[0]) for row in rows]
