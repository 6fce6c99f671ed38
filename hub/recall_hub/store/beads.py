"""Beads in the graph. Every read takes the caller and applies visibility inside its query; the few
reads without a caller are named ``system_*`` and serve work that was authorised when it was
committed (the outbox) or maintenance of derived indexes.

Every write is one atomic query that checks what the caller may do, changes the bead and records
its after-commit work in the outbox (:func:`recall_hub.store.outbox.record`), or changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from recall_schemas import MAX_TAGS, BeadFilters, Conflict, Forbidden, InvalidRequest, NotFound

from recall_hub.store import bead_cache
from recall_hub.store.as_of import keep_version, versions_of
from recall_hub.store.bead_cache import BeadCache, check_unchanged, held_properties_or_none
from recall_hub.store.filters import filter_clause, listing_clause
from recall_hub.store.graph import GraphStore
from recall_hub.store.outbox import record, record_params
from recall_hub.store.sessions import BRIDGE_CHAIN, STAMPED_BEFORE, chain_around, follows_link
from recall_hub.store.validity import interval_after_change, interval_params
from recall_hub.store.vectors import scope_of
from recall_hub.store.visibility import MY_GROUPS, may_modify, visible

Props = dict[str, Any]
PRECEDING_MAX = 3
"""Beads a bead follows whose words its keyword document holds as context."""


def joined(rows: str) -> str:
    """Cypher returning the list of strings ``rows`` as one string, rows separated by commas.

    The async FalkorDB client decodes every returned value in a coroutine of its own (10-25 µs each),
    and ranking reads hundreds of small values per query, so they travel as one string. Only ids,
    numbers and enum words go through it, and none of them holds a comma or a space.
    """
    return f"RETURN string.join({rows}, ',')"  # not reduce(): FalkorDB 4.x cuts its strings at 512 bytes


def split_joined(result: list[list[object]]) -> list[list[str]]:
    """The rows of a :func:`joined` result, each split at its spaces."""
    if not result or not result[0][0]:
        return []
    return [row.split(" ") for row in str(result[0][0]).split(",") if row]


# A newer bead supersedes only as far as the caller can see it: an invisible one is no evidence.
_SUPERSEDED = f"OPTIONAL MATCH (newer:Bead)-[:UPDATES]->(b) WHERE {visible('newer')} "




NOT_FORGOTTEN = (
    "OPTIONAL MATCH (t:Tombstone {{deny_scope: {scope}}}) "
    "WHERE t.denied AND (t.content_hash = {props}.content_hash OR {unchecked} AND t.deny_vector IS NOT NULL) "
    "WITH {keep}, count(t) AS forgotten "
    "OPTIONAL MATCH (replayed:Bead {{idem: {idem}}}) "
    "WITH {keep}, forgotten, count(replayed) AS replays WHERE forgotten = 0 OR replays > 0 "
)
"""Cypher: keep ``keep`` only when no denying tombstone of the scope holds the same content (exact hash) — nor,
while ``unchecked`` is true, any that carries a vector (the text's similarity to it not yet compared) — unless
the idempotency key already names a stored bead (a replay: it returns that bead and stores nothing)."""


@dataclass(frozen=True)
class BeadEdit:
    """Changes relative to a bead's current state (:meth:`BeadStore.edit`)."""

    now: int
    add_tags: list[str] = field(default_factory=list)
    remove_tags: list[str] = field(default_factory=list)
    add_importance: int = 0
    metadata_before: str | None = None
    """The metadata text the new metadata was computed from; None: the metadata is left alone."""
    metadata_after: str | None = None


@dataclass
class Preceding:
    """Of some beads, the beads each ``FOLLOWS_FROM`` (the turn before it: the question an answer replies to)."""

    follows: dict[str, list[str]] = field(default_factory=dict)
    """Every one, whoever may see it (the keyword index's map of session edges; searches screen both ends)."""
    context: dict[str, dict[str, str]] = field(default_factory=dict)
    """The newest ``PRECEDING_MAX`` that everyone who sees the bead may see (the same scope, or global), by id,
    with title and content: the keyword index finds the bead by these words too."""


_LINK_TO_PREDECESSOR = (
    # After a WITH binding b (a bead of the session $session_id) and fresh (link only then): b FOLLOWS_FROM the
    # author's bead of the session stamped just before it, and the one stamped just after it (usually none: it
    # committed first) follows b and nothing else of the chain — what it followed before b came is b's predecessor
    # now, or nothing was there. One query, so no other write to the chain lands between its reads and its writes.
    # Binds moved (the beads re-linked); b and fresh are kept.
    "OPTIONAL MATCH (p:Bead) WHERE fresh AND p.session_id = $session_id AND p.created_by = b.created_by "
    f"AND p.bead_id <> b.bead_id AND {STAMPED_BEFORE.format('p', 'b')} "
    "WITH b, fresh, p ORDER BY p.created_at DESC, p.bead_id DESC LIMIT 1 "
    f"FOREACH (x IN CASE WHEN p IS NULL THEN [] ELSE [p] END | {follows_link('b', 'x')}) "
    "WITH b, fresh "
    "OPTIONAL MATCH (n:Bead) WHERE fresh AND n.session_id = $session_id AND n.created_by = b.created_by "
    f"AND n.bead_id <> b.bead_id AND {STAMPED_BEFORE.format('b', 'n')} "
    "WITH b, fresh, n ORDER BY n.created_at, n.bead_id LIMIT 1 "
    "OPTIONAL MATCH (n)-[old:FOLLOWS_FROM]->(e:Bead) WHERE old.metadata = $meta AND e.session_id = $session_id "
    "AND e.created_by = b.created_by AND e.bead_id <> b.bead_id "
    "WITH b, fresh, n, collect(old) AS stale "
    "FOREACH (o IN stale | DELETE o) "
    f"FOREACH (x IN CASE WHEN n IS NULL THEN [] ELSE [n] END | {follows_link('x', 'b')}) "
    "WITH b, fresh, CASE WHEN n IS NULL THEN [] ELSE [n.bead_id] END AS moved "
)


@dataclass(frozen=True)
class Stored:
    """What :meth:`BeadStore.create` stored: the bead, whether this call created it (False: a replay of an earlier
    create), and — when it was linked into its session's chain in the same query — the beads re-linked to follow
    it (their keyword documents hold its words; None: not linked there)."""

    props: Props
    created: bool
    relinked: list[str] | None = None


class BeadStore:
    def __init__(self, graph: GraphStore, cache_size: int = 0) -> None:
        self.graph = graph
        self.cache = BeadCache(cache_size)
        """Properties of beads read last, which :meth:`many` need not read again (:mod:`.bead_cache`)."""

    # --- reads, as a caller -------------------------------------------------------------------

    async def get(self, caller: str, bead_id: str) -> Props | None:
        """The bead if the caller may see it."""
        rows = await self.graph.values(
            MY_GROUPS + f"MATCH (b:Bead {{bead_id: $bead_id}}) WHERE {visible('b')} RETURN properties(b)",
            {"caller": caller, "bead_id": bead_id},
        )
        if not rows:
            return None
        self.cache.keep([rows[0][0]])
        return dict(rows[0][0])

    async def many(
        self, caller: str, ids: Sequence[str], filters: BeadFilters | None = None
    ) -> dict[str, tuple[Props, bool]]:
        """The visible beads among ``ids`` that pass ``filters``, each with whether it is superseded."""
        if not ids:
            return {}
        clause, params = filter_clause("b", filters or BeadFilters())
        held = self.cache.held(ids)
        # The number of UPDATES edges in is free to read; walking them to check who may see the newer bead
        # is not (most of the query's time for 20 beads), so only the few beads that have one are walked.
        rows = await self.graph.values(
            MY_GROUPS + f"MATCH (b:Bead) WHERE b.bead_id IN $ids AND {visible('b')}{clause} "
            f"RETURN b.bead_id, {held_properties_or_none('b')}, b.accessed_at, indegree(b, 'UPDATES')",
            {"caller": caller, "ids": list(ids), "held": {b: entry.stamp for b, entry in held.items()}, **params},
        )
        found: dict[str, Props] = {}
        used: dict[str, Props] = {}
        for bead_id, props, accessed_at, _ in rows:
            if props is None:
                props = used[bead_id] = {**held[bead_id].props, "accessed_at": accessed_at}
            found[bead_id] = props
        self.cache.keep(props for bead_id, props in found.items() if bead_id not in used)
        self.cache.hits += len(used)
        self.cache.misses += len(found) - len(used)
        if used and bead_cache.VERIFY:
            check_unchanged(used, {p["bead_id"]: p for p in await self.system_many(list(used))})
        updated = [row[0] for row in rows if row[3]]
        superseded = await self._superseded_among(caller, updated) if updated else set()
        return {bead_id: (props, bead_id in superseded) for bead_id, props in found.items()}

    async def _superseded_among(self, caller: str, ids: Sequence[str]) -> set[str]:
        """The beads of ``ids`` that a bead the caller may see ``UPDATES``."""
        rows = await self.graph.values(
            MY_GROUPS + "MATCH (b:Bead) WHERE b.bead_id IN $ids "
            + _SUPERSEDED + "WITH b, count(newer) AS newer WHERE newer > 0 RETURN b.bead_id",
            {"caller": caller, "ids": list(ids)},
        )
        return {row[0] for row in rows}

    async def visible_ids(self, caller: str, ids: Sequence[str]) -> set[str]:
        if not ids:
            return set()
        rows = await self.graph.ro_query(
            MY_GROUPS + f"MATCH (b:Bead) WHERE b.bead_id IN $ids AND {visible('b')} RETURN b.bead_id",
            {"caller": caller, "ids": list(ids)},
        )
        return {row[0] for row in rows}

    async def written_by(self, author: str, ids: Sequence[str]) -> set[str]:
        """Of ``ids`` (beads already screened for the caller), those ``author`` created."""
        if not ids:
            return set()
        rows = await self.graph.ro_query(
            "MATCH (b:Bead) WHERE b.bead_id IN $ids AND b.created_by = $author RETURN b.bead_id",
            {"author": author, "ids": list(ids)},
        )
        return {row[0] for row in rows}

    async def screen(self, caller: str, ids: Sequence[str], filters: BeadFilters) -> dict[str, Props]:
        """What ranking reads (importance, created_at, provenance, status, trust verdicts, bead type, valid_from,
        author) of the visible beads among ``ids`` that pass ``filters``, read compactly. Whether a bead is
        superseded is left to :meth:`many`: the walk to newer beads is half the cost of screening, and few beads
        have one.
        Searches screen on the keyword index (:meth:`~recall_hub.store.keyword_index.KeywordIndex.screen`)
        and come here only for beads it does not hold yet."""
        if not ids:
            return {}
        clause, params = filter_clause("b", filters)
        rows = await self.graph.values(
            MY_GROUPS + f"MATCH (b:Bead) WHERE b.bead_id IN $ids AND {visible('b')}{clause} "
            "WITH collect(b.bead_id + ' ' + toString(coalesce(b.importance, 5)) + ' ' "
            "+ toString(coalesce(b.created_at, 0)) + ' ' + coalesce(b.provenance, 'authored') + ' ' "
            "+ coalesce(b.status, 'active') + ' ' + b.bead_type + ' ' + coalesce(toString(b.valid_from), '-') + ' ' "
            "+ b.created_by + ' ' + string.join(coalesce(b.trust_verdicts, []), '|')) AS rows " + joined("rows"),
            {"caller": caller, "ids": list(ids), **params},
        )
        return {
            bead_id: {
                "importance": int(importance), "created_at": int(created), "provenance": provenance, "status": status,
                "trust_verdicts": [verdict for verdict in verdicts.split("|") if verdict], "bead_type": bead_type,
                "valid_from": None if valid_from == "-" else int(valid_from), "created_by": author,
            }
            for bead_id, importance, created, provenance, status, bead_type, valid_from, author, verdicts
            in split_joined(rows)
        }

    async def session_edges(self, caller: str, ids: Sequence[str], around: Sequence[str]) -> list[tuple[str, str]]:
        """``(later, earlier)`` for every ``FOLLOWS_FROM`` edge between two visible beads that either joins two
        beads of ``ids`` or touches one of ``around`` (a subset of ``ids``), in one query."""
        # Every visible edge of the candidates comes back and is kept here: a membership test against the
        # list of ids inside the query costs FalkorDB more (a scan of the list per edge) than the extra rows.
        rows = await self.graph.values(
            MY_GROUPS + f"MATCH (a:Bead) WHERE a.bead_id IN $ids AND {visible('a')} "
            f"MATCH (a)-[r:FOLLOWS_FROM]-(n:Bead) WHERE {visible('n')} "
            "WITH DISTINCT r WITH collect(startNode(r).bead_id + ' ' + endNode(r).bead_id) AS rows " + joined("rows"),
            {"caller": caller, "ids": list(ids)},
        )
        among, near = set(ids), set(around)
        return [
            (later, earlier) for later, earlier in split_joined(rows)
            if (later in among and earlier in among) or later in near or earlier in near
        ]

    async def my_groups(self, caller: str) -> list[str]:
        rows = await self.graph.values(
            "MATCH (:AI {ai_id: $caller})-[:MEMBER_OF]->(g:Group) RETURN g.group_id", {"caller": caller}
        )
        return [row[0] for row in rows]

    async def listing(
        self, caller: str, by: str, value: Any, *, ascending: bool, limit: int, after: tuple[int, str] | None
    ) -> list[Props]:
        """Visible beads by ``session`` (``[session_id, owner]``), ``group``, ``tag`` or ``since`` (created
        at or after), ordered by ``(created_at, bead_id)``, strictly after the position ``after``."""
        params: dict[str, Any] = {"caller": caller, "value": value, "limit": limit}
        where, order = listing_clause("b", by, ascending, after, params)
        rows = await self.graph.values(
            MY_GROUPS + f"MATCH (b:Bead) WHERE {where} AND {visible('b')} "
            f"RETURN properties(b) ORDER BY {order} LIMIT $limit",
            params,
        )
        return [row[0] for row in rows]

    async def ranked_by_importance(self, caller: str, ids: Sequence[str]) -> list[Props]:
        rows = await self.graph.values(
            MY_GROUPS + f"MATCH (b:Bead) WHERE b.bead_id IN $ids AND {visible('b')} "
            "RETURN properties(b) ORDER BY b.importance DESC, b.created_at DESC, b.bead_id",
            {"caller": caller, "ids": list(ids)},
        )
        return [row[0] for row in rows]

    async def duplicate_candidates(
        self, caller: str, *, group_id: str | None, around: tuple[str, list[str], str] | None, cap: int
    ) -> list[Props]:
        """Active visible beads (of ``group_id``) oldest first; with ``around = (content_hash, near_ids,
        bead_id)`` only those with that hash, among ``near_ids``, or the bead itself. Each row also
        says whether the caller may modify the bead (``_may``)."""
        where = ""
        params: dict[str, Any] = {"caller": caller, "cap": cap}
        if group_id is not None:
            where += " AND b.group_id = $group_id"
            params["group_id"] = group_id
        if around is not None:
            where += " AND (b.content_hash = $hash OR b.bead_id IN $near OR b.bead_id = $bead_id)"
            params.update(hash=around[0], near=around[1], bead_id=around[2])
        rows = await self.graph.ro_query(
            MY_GROUPS + f"MATCH (b:Bead) WHERE {visible('b')}{where} AND b.status = 'active' "
            f"RETURN b.bead_id, b.content_hash, b.created_at, b.created_by, b.corroborated_by, b.vec_scope, "
            f"b.vec_model, {may_modify('b')} ORDER BY b.created_at, b.bead_id LIMIT $cap",
            params,
        )
        keys = (
            "bead_id", "content_hash", "created_at", "created_by", "corroborated_by", "vec_scope", "vec_model", "_may"
        )
        return [dict(zip(keys, row, strict=True)) for row in rows]

    # --- writes, as a caller --------------------------------------------------------------------

    async def create(
        self, caller: str, props: Props, *, idem: str, similar_checked: bool = True, follows: str | None = None
    ) -> Stored | None:
        """Store a bead, checking the caller's membership of its group and ownership of its session
        in the same query, merged on the idempotency key. None when the caller is not in the bead's group or
        the same content was forgotten in its scope (the deny-list, checked inside the write so a forget
        that lands just before it still counts). Unless ``similar_checked`` (the text compared with the
        scope's forgotten vectors already), a scope whose deny-list holds a vector stores nothing either.

        ``follows`` (a link note): a new bead of a session is linked into its session's chain in the same query
        (:meth:`system_link_session_predecessor`; its reply's path holds one write instead of two)."""
        group_id, session_id = props.get("group_id"), props.get("session_id")
        cypher = "MERGE (me:AI {ai_id: $caller}) WITH me "
        if group_id is not None:
            cypher += "MATCH (me)-[:MEMBER_OF]->(:Group {group_id: $group_id}) WITH me "
        cypher += NOT_FORGOTTEN.format(
            props="$props", scope="$deny_scope", keep="me", idem="$idem", unchecked="$unchecked"
        )
        if session_id is not None:
            cypher += (  # the caller's own session of that id (sessions are per owner)
                "MERGE (s:Session {session_id: $session_id, owner: $caller}) "
                "ON CREATE SET s.created_at = $now, s.group_id = $group_id, s.state = 'active' WITH me "
            )
        cypher += (
            "MERGE (b:Bead {idem: $idem}) ON CREATE SET b += $props "
            "WITH b, b.bead_id = $props.bead_id AS fresh "
            "FOREACH (_ IN CASE WHEN fresh THEN [1] ELSE [] END | " + record("created", after="b", before=None) + ") "
        )
        linking = follows is not None and session_id is not None
        if linking:
            cypher += "WITH b, fresh " + _LINK_TO_PREDECESSOR + "RETURN properties(b), fresh, moved"
        else:
            cypher += "RETURN properties(b), fresh"
        params = {
            "caller": caller, "group_id": group_id, "session_id": session_id, "now": props["created_at"],
            "idem": idem, "props": props, "deny_scope": scope_of(props), "unchecked": not similar_checked,
            "meta": follows, **record_params(),
        }
        rows = await self.graph.values(cypher, params, read_only=False)  # a map is read faster than a node
        if not rows:
            return None
        stored, fresh = dict(rows[0][0]), bool(rows[0][1])
        if not linking or not fresh:
            return Stored(stored, fresh)
        return Stored(stored, fresh, [str(b) for b in rows[0][2] or []])

    async def create_many(self, caller: str, items: Sequence[tuple[Props, str]]) -> dict[int, tuple[Props, bool]]:
        """:meth:`create` for many beads in one query: ``items`` are ``(props, idempotency key)``. Returns,
        by position in ``items``, ``(bead, created)`` for each bead stored or replayed; a position is
        missing when the caller is not in that bead's group (nothing of it was written)."""
        rows = await self.graph.values(
            "MERGE (me:AI {ai_id: $caller}) "
            "WITH me OPTIONAL MATCH (me)-[:MEMBER_OF]->(g:Group) WITH collect(g.group_id) AS my_groups "
            "UNWIND $items AS item "
            "WITH item WHERE item.props.group_id IS NULL OR item.props.group_id IN my_groups "
            + NOT_FORGOTTEN.format(
                props="item.props", scope="item.deny_scope", keep="item", idem="item.idem", unchecked="false"
            ) +
            "FOREACH (_ IN CASE WHEN item.props.session_id IS NULL THEN [] ELSE [1] END | "
            "MERGE (s:Session {session_id: item.props.session_id, owner: $caller}) "
            "ON CREATE SET s.created_at = item.props.created_at, s.group_id = item.props.group_id, "
            "s.state = 'active') "
            "MERGE (b:Bead {idem: item.idem}) ON CREATE SET b += item.props "
            "WITH item, b, b.bead_id = item.props.bead_id AS fresh "
            "FOREACH (_ IN CASE WHEN fresh THEN [1] ELSE [] END | " + record("created", after="b", before=None) + ") "
            "RETURN item.i, properties(b), fresh",
            {
                "caller": caller,
                "items": [
                    {"i": i, "props": props, "idem": idem, "deny_scope": scope_of(props)}
                    for i, (props, idem) in enumerate(items)
                ],
                **record_params(),
            },
            read_only=False,
        )
        return {int(i): (dict(props), bool(fresh)) for i, props, fresh in rows}

    async def update(
        self, caller: str, bead_id: str, changes: Props, *, if_version: int | None, text_changed: bool
    ) -> tuple[Props, Props]:
        """Apply ``changes`` if the caller may; ``(before, after)``. The bead's scope after the change
        is checked in the same query: a group bead needs a group the caller belongs to, and its validity
        interval must stay in order. The version it replaces is kept (:func:`keep_version`)."""
        scope_ok = (
            "(new_visibility <> 'group' OR new_group IS NOT NULL) AND "
            "(new_group IS NULL OR new_group IN my_groups OR (NOT $group_changed AND new_visibility <> 'group'))"
        )
        rows = await self.graph.query(
            MY_GROUPS + f"MATCH (b:Bead {{bead_id: $bead_id}}) WHERE {visible('b')} "
            f"WITH b, my_groups, {may_modify('b')} AS may, "
            "coalesce($changes.visibility, b.visibility) AS new_visibility, "
            "CASE WHEN $group_changed THEN $changes.group_id ELSE b.group_id END AS new_group "
            f"WITH b, may, {scope_ok} AS scope_ok, properties(b) AS before, new_visibility, new_group, "
            "($if_version IS NULL OR coalesce(b.version, 1) = $if_version) AS current, "
            f"{interval_after_change('b')} AS interval_ok "
            "FOREACH (_ IN CASE WHEN may AND scope_ok AND current AND interval_ok THEN [1] ELSE [] END | "
            + keep_version("b", "before", "$changes.updated_at")
            + "SET b += $changes, b.version = coalesce(b.version, 1) + 1 "
            + record("updated", after="b", before="before", text_changed="$text_changed") + ") "
            "RETURN b, may, scope_ok, current, before, new_visibility, new_group, interval_ok",
            {
                "caller": caller, "bead_id": bead_id, "changes": changes, "group_changed": "group_id" in changes,
                "if_version": if_version, "text_changed": text_changed, **interval_params(changes), **record_params(),
            },
        )
        if not rows:
            raise NotFound(f"bead {bead_id} not found")
        node, may, scope_ok, current, before, new_visibility, new_group, interval_ok = rows[0]
        if not may:
            raise Forbidden(f"only the creator (or the group's ops) may change bead {bead_id}")
        if not interval_ok:
            raise InvalidRequest(f"valid_to would be before valid_from on bead {bead_id}")
        if not scope_ok:
            if new_visibility == "group" and new_group is None:
                raise InvalidRequest("visibility 'group' needs a group_id")
            raise NotFound(f"group {new_group} not found")
        if not current:
            raise Conflict(
                f"bead {bead_id} is at version {before.get('version') or 1}, not {if_version}: read it again",
                {"version": before.get("version") or 1},
            )
        return dict(before), dict(node.properties)

    async def edit(self, caller: str, bead_id: str, edit: BeadEdit, *, if_version: int | None) -> Props | None:
        """Apply ``edit`` to the bead as it is now, in one atomic query: tags removed then added (still at most
        ``MAX_TAGS``), importance moved within 0..10, and — only while the metadata is still
        ``edit.metadata_before`` — the metadata replaced by ``edit.metadata_after``. An edit that changes nothing
        leaves the bead (and its version) alone. Returns the bead after, or None when the metadata moved since
        it was read (read it again and retry)."""
        importance = "coalesce(b.importance, 5) + $add_importance"
        rows = await self.graph.query(
            MY_GROUPS + f"MATCH (b:Bead {{bead_id: $bead_id}}) WHERE {visible('b')} "
            f"WITH b, {may_modify('b')} AS may, properties(b) AS before, "
            "($if_version IS NULL OR coalesce(b.version, 1) = $if_version) AS current, "
            "($metadata_before IS NULL OR coalesce(b.metadata, '{}') = $metadata_before) AS metadata_current, "
            "[t IN coalesce(b.tags, []) WHERE NOT t IN $remove_tags] AS kept "
            "WITH b, may, before, current, metadata_current, kept + [t IN $add_tags WHERE NOT t IN kept] AS tags, "
            f"CASE WHEN {importance} > 10 THEN 10 WHEN {importance} < 0 THEN 0 ELSE {importance} END AS importance, "
            "coalesce($metadata_after, b.metadata) AS metadata "
            "WITH b, may, before, current, metadata_current, tags, importance, metadata, "
            "size(tags) <= $max_tags AS fits, "
            "(tags <> coalesce(b.tags, []) OR importance <> coalesce(b.importance, 5) "
            "OR coalesce(metadata, '{}') <> coalesce(b.metadata, '{}')) AS changes "
            "FOREACH (_ IN CASE WHEN may AND current AND metadata_current AND fits AND changes THEN [1] ELSE [] END | "
            + keep_version("b", "before", "$now")
            + "SET b.tags = tags, b.importance = importance, b.metadata = metadata, b.updated_at = $now, "
            "b.version = coalesce(b.version, 1) + 1 "
            + record("updated", after="b", before="before", text_changed="false") + ") "
            "RETURN properties(b), may, current, metadata_current, fits, before",
            {
                "caller": caller, "bead_id": bead_id, "if_version": if_version, "now": edit.now,
                "add_tags": edit.add_tags, "remove_tags": edit.remove_tags, "add_importance": edit.add_importance,
                "metadata_before": edit.metadata_before, "metadata_after": edit.metadata_after,
                "max_tags": MAX_TAGS, **record_params(),
            },
        )
        if not rows:
            raise NotFound(f"bead {bead_id} not found")
        after, may, current, metadata_current, fits, before = rows[0]
        if not may:
            raise Forbidden(f"only the creator (or the group's ops) may change bead {bead_id}")
        if not current:
            raise Conflict(
                f"bead {bead_id} is at version {before.get('version') or 1}, not {if_version}: read it again",
                {"version": before.get("version") or 1},
            )
        if not fits:
            raise InvalidRequest(f"bead {bead_id} would carry more than {MAX_TAGS} tags")
        return dict(after) if metadata_current else None

    async def delete(self, caller: str, bead_id: str, *, if_version: int | None) -> Props:
        """Delete the bead and its edges if the caller may; its properties before."""
        rows = await self.graph.query(
            MY_GROUPS + f"MATCH (b:Bead {{bead_id: $bead_id}}) WHERE {visible('b')} "
            f"WITH b, {may_modify('b')} AS may, properties(b) AS before, "
            "($if_version IS NULL OR coalesce(b.version, 1) = $if_version) AS current "
            + versions_of("b", carry="may, before, current")
            + chain_around("b", carry="may, before, current, versions")
            + "FOREACH (_ IN CASE WHEN may AND current THEN [1] ELSE [] END | " + BRIDGE_CHAIN
            + "FOREACH (v IN versions | DETACH DELETE v) DETACH DELETE b "
            + record("deleted", after=None, before="before") + ") "
            "RETURN may, current, before",
            {"caller": caller, "bead_id": bead_id, "if_version": if_version, **record_params()},
        )
        if not rows:
            raise NotFound(f"bead {bead_id} not found")
        may, current, before = rows[0]
        if not may:
            raise Forbidden(f"only the creator (or the group's ops) may delete bead {bead_id}")
        if not current:
            raise Conflict(
                f"bead {bead_id} is at version {before.get('version') or 1}, not {if_version}: read it again",
                {"version": before.get("version") or 1},
            )
        return dict(before)

    async def merge_duplicates(
        self, caller: str, keeper: str, duplicates: list[str], authors: list[str], now: int
    ) -> int:
        """One atomic query: archive the duplicates, supersede them by the keeper and record every author
        on the keeper — only if the caller may modify the keeper and every duplicate. Returns how many
        duplicates were merged (0 when any of them is out of the caller's reach)."""
        rows = await self.graph.query(
            MY_GROUPS + f"MATCH (k:Bead {{bead_id: $keeper}}) WHERE {visible('k')} AND {may_modify('k')} "
            f"OPTIONAL MATCH (d:Bead) WHERE d.bead_id IN $duplicates AND {visible('d')} AND {may_modify('d')} "
            "AND d.status = 'active' "
            "WITH k, collect(d) AS dups WHERE size(dups) = size($duplicates) "
            "WITH k, dups, properties(k) AS k_before "
            "FOREACH (d IN dups | "
            "MERGE (k)-[r:UPDATES]->(d) ON CREATE SET r.created_at = $now, r.created_by = $caller, r.replaces = true, "
            "r.metadata = '{\"merged_duplicate\": true}' "
            "SET d.status = 'archived', d.updated_at = $now, d.version = coalesce(d.version, 1) + 1 "
            + record("updated", after="d", before="d", text_changed="false") + ") "
            "SET k.corroborated_by = [a IN $authors WHERE a <> k.created_by], k.updated_at = $now, "
            "k.version = coalesce(k.version, 1) + 1 "
            + record("updated", after="k", before="k_before", text_changed="false") + " "
            "RETURN size(dups)",
            {"caller": caller, "keeper": keeper, "duplicates": duplicates, "authors": authors, "now": now,
             **record_params()},
        )
        return int(rows[0][0]) if rows else 0

    async def archive_untouched(self, caller: str, cutoff: int, *, dry_run: bool) -> list[str]:
        """Active beads the caller may change, neither read nor changed since ``cutoff``: archived
        (unless ``dry_run``); their ids."""
        match = (
            MY_GROUPS + f"MATCH (b:Bead) WHERE b.status = 'active' AND {visible('b')} AND {may_modify('b')} "
            "AND b.accessed_at < $cutoff AND b.updated_at < $cutoff "
        )
        if dry_run:
            rows = await self.graph.ro_query(
                match + "RETURN b.bead_id ORDER BY b.bead_id", {"caller": caller, "cutoff": cutoff}
            )
        else:
            rows = await self.graph.query(
                match + "SET b.status = 'archived', b.version = coalesce(b.version, 1) + 1 "
                + record("updated", after="b", before="b", text_changed="false")
                + " RETURN b.bead_id ORDER BY b.bead_id",
                {"caller": caller, "cutoff": cutoff, **record_params()},
            )
        return [row[0] for row in rows]

    # --- system reads and writes (after-commit work, derived indexes) ---------------------------

    async def system_get(self, bead_id: str) -> Props | None:
        """The bead as stored, for after-commit work whose caller was authorised at commit time."""
        rows = await self.graph.values("MATCH (b:Bead {bead_id: $bead_id}) RETURN properties(b)", {"bead_id": bead_id})
        return rows[0][0] if rows else None

    async def system_many(self, bead_ids: Sequence[str]) -> list[Props]:
        """The beads of ``bead_ids`` that exist, as stored (derived indexes read what is there now)."""
        rows = await self.graph.values(
            "UNWIND $ids AS id MATCH (b:Bead {bead_id: id}) RETURN properties(b)", {"ids": list(bead_ids)}
        )
        found = [row[0] for row in rows]
        self.cache.keep(found)
        self.cache.drop(set(bead_ids) - {str(p["bead_id"]) for p in found})
        return found

    async def system_preceding(self, bead_ids: Sequence[str]) -> Preceding:
        """What the keyword index keeps of the beads each of ``bead_ids`` ``FOLLOWS_FROM``, in one read: see
        :class:`Preceding`."""
        rows = await self.graph.values(
            "UNWIND $ids AS id MATCH (b:Bead {bead_id: id})-[:FOLLOWS_FROM]->(p:Bead) "
            "RETURN id, p.bead_id, p.visibility = 'global' OR (p.visibility = b.visibility AND CASE b.visibility "
            "WHEN 'group' THEN p.group_id = b.group_id WHEN 'private' THEN p.created_by = b.created_by "
            "ELSE false END), coalesce(p.created_at, 0), p.title, p.content",
            {"ids": list(bead_ids)},
        )
        preceding = Preceding()
        newest_first = sorted(rows, key=lambda row: (-int(row[3]), str(row[1])))
        for bead_id, before_id, shared, _, title, content in newest_first:
            preceding.follows.setdefault(bead_id, []).append(before_id)
            context = preceding.context.setdefault(bead_id, {})
            if shared and len(context) < PRECEDING_MAX:
                context[before_id] = "\n".join(t for t in (title, content) if t)
        preceding.context = {bead_id: words for bead_id, words in preceding.context.items() if words}
        return preceding

    async def system_count(self) -> int:
        rows = await self.graph.ro_query("MATCH (b:Bead) RETURN count(b)")
        return int(rows[0][0]) if rows else 0

    async def system_page(self, after: str, limit: int) -> list[Props]:
        """Every bead in ``bead_id`` order, a page at a time (rebuilding a derived index)."""
        rows = await self.graph.values(
            "MATCH (b:Bead) WHERE b.bead_id > $after RETURN properties(b) ORDER BY b.bead_id LIMIT $limit",
            {"after": after, "limit": limit},
        )
        return [row[0] for row in rows]

    async def system_edge_counts(self) -> dict[str, int]:
        """Edges between beads by type, hub-made ones (auto-links) counted apart (for ``recall bench``)."""
        rows = await self.graph.ro_query(
            "MATCH (:Bead)-[r]->(:Bead) "
            "RETURN type(r) + CASE WHEN r.metadata CONTAINS '\"auto\"' THEN ' (auto)' ELSE '' END, count(r)"
        )
        return {str(kind): int(count) for kind, count in rows}

    async def system_mark_indexed(self, bead_id: str, model: str, scope: str) -> None:
        await self.graph.query(
            "MATCH (b:Bead {bead_id: $bead_id}) SET b.vec_model = $model, b.vec_scope = $scope",
            {"bead_id": bead_id, "model": model, "scope": scope},
        )

    async def system_mark_indexed_many(self, rows: list[dict[str, str]], model: str) -> None:
        await self.graph.query(
            "UNWIND $rows AS row MATCH (b:Bead {bead_id: row.id}) SET b.vec_model = $model, b.vec_scope = row.scope",
            {"rows": rows, "model": model},
        )

    async def system_count_unindexed(self, model: str) -> int:
        rows = await self.graph.ro_query(
            "MATCH (b:Bead) WHERE b.vec_model IS NULL OR b.vec_model <> $model RETURN count(b)", {"model": model}
        )
        return int(rows[0][0]) if rows else 0

    async def system_unindexed(self, model: str, skip: Sequence[str], limit: int) -> list[Props]:
        """Beads without a vector of ``model`` (not among ``skip``), for the repair pass."""
        rows = await self.graph.ro_query(
            "MATCH (b:Bead) WHERE (b.vec_model IS NULL OR b.vec_model <> $model) AND NOT b.bead_id IN $skip "
            "RETURN properties(b) LIMIT $limit",
            {"model": model, "skip": list(skip), "limit": limit},
        )
        return [row[0] for row in rows]

    async def system_forget_vectors(self) -> None:
        """Mark every bead as not embedded (``recall reindex``)."""
        await self.graph.query("MATCH (b:Bead) SET b.vec_model = NULL")

    async def system_link_session_predecessor(self, bead_id: str, session_id: str, note: str) -> list[str]:
        """``FOLLOWS_FROM`` the previous bead of the same session — the author's (idempotent). A bead stamped after
        it that committed first (two connections of one author, or two hubs) and so follows what came before it,
        or nothing, follows it instead: the chain keeps the order of the stamps whatever order the creates commit
        in. Returns the beads re-linked so (their keyword documents hold the words of the bead they follow). The
        session is a parameter: matched on ``b.session_id`` FalkorDB scans every bead instead of using the index."""
        rows = await self.graph.query(
            "MATCH (b:Bead {bead_id: $bead_id}) WHERE b.session_id = $session_id WITH b, true AS fresh "
            + _LINK_TO_PREDECESSOR + "RETURN moved",
            {"bead_id": bead_id, "session_id": session_id, "meta": note},
        )
        return [str(b) for b in rows[0][0] or []] if rows else []

    async def system_rechain_session(self, session_id: str, author: str, note: str) -> list[str]:
        """Link ``author``'s beads of the session in the order of their stamps — each ``FOLLOWS_FROM`` the one
        stamped before it — and remove the hub's own links among them that no longer say so: after beads moved in
        from another session (a migration into one that already held some). One query: a delete, forget or create
        in the session lands before it or after it, never between its read and its writes. Returns the beads whose
        link changed (their keyword documents hold the words of the bead they follow)."""
        rows = await self.graph.query(
            "MATCH (b:Bead) WHERE b.session_id = $session_id AND b.created_by = $author "
            "WITH b ORDER BY b.created_at, b.bead_id WITH collect(b) AS chain "
            "UNWIND range(0, size(chain) - 1) AS i "
            "WITH chain[i] AS b, CASE WHEN i = 0 THEN NULL ELSE chain[i - 1] END AS wanted "
            "OPTIONAL MATCH (b)-[old:FOLLOWS_FROM]->(e:Bead) WHERE old.metadata = $meta AND e.session_id = $session_id "
            "AND e.created_by = $author "
            "WITH b, wanted, collect(CASE WHEN e.bead_id = wanted.bead_id THEN NULL ELSE old END) AS stale, "
            "collect(CASE WHEN e.bead_id = wanted.bead_id THEN e ELSE NULL END) AS kept "
            "FOREACH (o IN stale | DELETE o) "
            "FOREACH (x IN CASE WHEN wanted IS NULL OR size(kept) > 0 THEN [] ELSE [wanted] END | "
            + follows_link("b", "x") + ") "
            "WITH b, size(stale) > 0 OR (wanted IS NOT NULL AND size(kept) = 0) AS changed WHERE changed "
            "RETURN b.bead_id ORDER BY b.bead_id",
            {"session_id": session_id, "author": author, "meta": note},
        )
        return [str(row[0]) for row in rows]

    async def system_link_related_many(self, links: list[dict[str, Any]], note: str) -> None:
        """``RELATED_TO`` edges ``{"from", "id", "sim"}``, idempotent, in one query."""
        await self.graph.query(
            "UNWIND $rows AS row MATCH (b:Bead {bead_id: row.from}) MATCH (o:Bead {bead_id: row.id}) "
            "MERGE (b)-[r:RELATED_TO]->(o) "
            "ON CREATE SET r.created_at = b.created_at, r.created_by = b.created_by, r.similarity = row.sim, "
            "r.metadata = $meta",
            {"rows": links, "meta": note},
        )

    async def system_link_related(self, bead_id: str, similar: list[dict[str, Any]], note: str) -> None:
        """``RELATED_TO`` each of ``similar`` (``{"id", "sim"}``), idempotent."""
        await self.system_link_related_many([{"from": bead_id, **row} for row in similar], note)
