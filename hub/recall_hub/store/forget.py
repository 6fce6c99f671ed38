"""Tombstones and the deny-list of forgotten content, in the graph (erasing what the servers keep besides:
:mod:`recall_hub.store.erasure`).

Forgetting is one atomic query per batch of beads: each bead the caller may modify is replaced by a
``(:Tombstone)`` (its id, content hash, scope, who, when, why; never its title, content, tags or
metadata), its edges go with it, and an outbox entry of kind ``forgotten`` names the follow-up work
(vector and keyword entries removed, the change log told). A tombstone that still ``denied`` keeps
content with the same hash, or an embedding close to its ``deny_vector``, out of the scope the bead
lived in (``deny_scope``: ``global``, ``group:<g>`` or ``private:<creator>``).

The tombstones are also the forget ledger a restore re-applies (:meth:`ForgetStore.system_apply`).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis

from recall_hub.store.as_of import versions_of
from recall_hub.store.graph import GraphStore
from recall_hub.store.keys import Keys
from recall_hub.store.outbox import record, record_params, vector_scope_of
from recall_hub.store.sessions import BRIDGE_CHAIN, chain_around
from recall_hub.store.visibility import MY_GROUPS, may_modify, visible

log = logging.getLogger(__name__)

Props = dict[str, Any]

TOMBSTONE_FIELDS = (
    "bead_id", "content_hash", "visibility", "group_id", "created_by", "forgotten_by", "forgotten_at", "reason",
    "denied",
)
SEEN_BY = "(t.forgotten_by = $caller OR (t.visibility = 'group' AND t.group_id IN my_ops_groups))"
"""Cypher predicate: ``$caller`` may see (and lift) the tombstone ``t``: who forgot it, or the group's ops."""
_RETURN_TOMBSTONE = "RETURN " + ", ".join(f"t.{f}" for f in TOMBSTONE_FIELDS)
PAGE = 1000


def _tombstone(row: Sequence[Any]) -> Props:
    return dict(zip(TOMBSTONE_FIELDS, row, strict=True))


class CheckFirst:
    """Scopes where a create's write lately stored nothing at first (most often: a deny-list that holds a vector
    the text must be compared with first). A create there checks the deny-list before its write, as one that
    found it so would next (two queries, not three). Only a hint, kept for ``ttl_s`` and ``size`` scopes: the write
    checks the deny-list itself either way."""

    def __init__(self, size: int = 1024, ttl_s: float = 300.0) -> None:
        self.size = size
        self.ttl_s = ttl_s
        self._since: OrderedDict[str, float] = OrderedDict()

    def __contains__(self, scope: str) -> bool:
        since = self._since.get(scope)
        return since is not None and time.monotonic() - since < self.ttl_s

    def add(self, scope: str) -> None:
        self._since.pop(scope, None)
        self._since[scope] = time.monotonic()
        while len(self._since) > self.size:
            self._since.popitem(last=False)


class ForgetStore:
    def __init__(self, graph: GraphStore, redis: Redis, keys: Keys) -> None:
        self.graph = graph
        self.redis = redis
        self.keys = keys

    # --- reads, as a caller -------------------------------------------------------------------

    async def authored(self, caller: str, author: str, limit: int) -> list[Props]:
        """Beads of ``author`` the caller may forget (all of its own; a group's as its ops), with the text
        their deny vector is made from."""
        rows = await self.graph.values(
            MY_GROUPS + f"MATCH (b:Bead {{created_by: $author}}) WHERE {visible('b')} AND {may_modify('b')} "
            "RETURN b.bead_id, b.title, b.content ORDER BY b.bead_id LIMIT $limit",
            {"caller": caller, "author": author, "limit": limit},
        )
        return [{"bead_id": r[0], "title": r[1], "content": r[2]} for r in rows]

    async def forgettable(self, caller: str, bead_id: str) -> Props | None:
        """The bead's text if the caller can see it, and whether it may forget it (:meth:`forget` checks
        again, atomically)."""
        rows = await self.graph.values(
            MY_GROUPS + f"MATCH (b:Bead {{bead_id: $bead_id}}) WHERE {visible('b')} "
            f"RETURN b.bead_id, b.title, b.content, {may_modify('b')}",
            {"caller": caller, "bead_id": bead_id},
        )
        if not rows:
            return None
        bead_id, title, content, may = rows[0]
        return {"bead_id": bead_id, "title": title, "content": content, "may": bool(may)}

    async def listing(self, caller: str, group_id: str | None, limit: int) -> list[Props]:
        where = " AND t.group_id = $group_id" if group_id is not None else ""
        rows = await self.graph.values(
            MY_GROUPS + f"MATCH (t:Tombstone) WHERE {SEEN_BY}{where} "
            + _RETURN_TOMBSTONE + " ORDER BY t.forgotten_at DESC, t.bead_id LIMIT $limit",
            {"caller": caller, "group_id": group_id, "limit": limit},
        )
        return [_tombstone(row) for row in rows]

    async def denials(
        self, caller: str, scopes: Sequence[str], hashes: Sequence[str], idems: Sequence[str] = ()
    ) -> tuple[set[str], int, set[str]]:
        """For creates by ``caller`` into ``scopes``: the ``scope hash`` pairs among ``hashes`` that are
        denied, how many denying tombstones of those scopes carry a vector, and which of the idempotency keys
        ``idems`` already name a bead (a replay, which returns that bead and stores nothing). A group scope
        counts only where the caller is a member, so the deny-list tells nothing to someone who could not
        write there."""
        rows = await self.graph.values(
            MY_GROUPS + "OPTIONAL MATCH (t:Tombstone) WHERE t.denied AND t.deny_scope IN $scopes "
            "AND (t.visibility <> 'group' OR t.group_id IN my_groups) "
            "AND (t.visibility <> 'private' OR t.created_by = $caller) "
            "WITH collect(CASE WHEN t.content_hash IN $hashes THEN t.deny_scope + ' ' + t.content_hash END) AS exact, "
            "sum(CASE WHEN t.deny_vector IS NULL THEN 0 ELSE 1 END) AS with_vectors "
            "OPTIONAL MATCH (b:Bead) WHERE b.idem IN $idems "
            "RETURN exact, with_vectors, collect(b.idem)",
            {"caller": caller, "scopes": list(scopes), "hashes": list(hashes), "idems": list(idems)},
        )
        if not rows:
            return set(), 0, set()
        return set(rows[0][0] or []), int(rows[0][1] or 0), set(rows[0][2] or [])

    async def deny_vectors(self, caller: str, scopes: Sequence[str], model: str) -> list[tuple[str, str]]:
        """``(scope, base64 float32 vector)`` of the denying tombstones of ``scopes`` embedded by ``model``."""
        rows = await self.graph.values(
            MY_GROUPS + "MATCH (t:Tombstone) WHERE t.denied AND t.deny_scope IN $scopes AND t.vec_model = $model "
            "AND (t.visibility <> 'group' OR t.group_id IN my_groups) "
            "AND (t.visibility <> 'private' OR t.created_by = $caller) "
            "RETURN t.deny_scope, t.deny_vector",
            {"caller": caller, "scopes": list(scopes), "model": model},
        )
        return [(str(r[0]), str(r[1])) for r in rows]

    # --- writes, as a caller --------------------------------------------------------------------

    async def forget(
        self, caller: str, rows: Sequence[Props], *, reason: str, denied: bool, now: int
    ) -> dict[str, tuple[bool, Props]]:
        """Replace each bead of ``rows`` (``{id, vector, model}``; vector and model may be null) that the
        caller may modify by a tombstone, in one atomic query. Returns, by bead id, whether it was
        forgotten and the tombstone (or the bead's scope fields, when refused); beads the caller cannot
        see are missing."""
        result = await self.graph.values(
            MY_GROUPS + f"UNWIND $rows AS row MATCH (b:Bead {{bead_id: row.id}}) WHERE {visible('b')} "
            f"WITH row, b, {may_modify('b')} AS may, properties(b) AS before "
            + versions_of("b", carry="row, may, before")
            + chain_around("b", carry="row, may, before, versions")
            + "FOREACH (_ IN CASE WHEN may THEN [1] ELSE [] END | " + BRIDGE_CHAIN
            + "CREATE (:Tombstone {bead_id: before.bead_id, content_hash: before.content_hash, "
            "visibility: before.visibility, group_id: before.group_id, created_by: before.created_by, "
            f"deny_scope: {vector_scope_of('before')}, forgotten_by: $caller, forgotten_at: $now, changed_at: $now, "
            "reason: $reason, denied: $denied, deny_vector: row.vector, vec_model: row.model}) "
            "FOREACH (v IN versions | DETACH DELETE v) DETACH DELETE b "
            + record("forgotten", after=None, before="before") + ") "
            "RETURN before.bead_id, may, before.content_hash, before.visibility, before.group_id, before.created_by",
            {"caller": caller, "rows": list(rows), "reason": reason, "denied": denied, "now": now, **record_params()},
            read_only=False,
        )
        out: dict[str, tuple[bool, Props]] = {}
        for bead_id, may, content_hash, visibility, group_id, created_by in result:
            out[bead_id] = (bool(may), {
                "bead_id": bead_id, "content_hash": content_hash, "visibility": visibility, "group_id": group_id,
                "created_by": created_by, "forgotten_by": caller, "forgotten_at": now, "reason": reason,
                "denied": denied,
            })
        return out

    async def allow(self, caller: str, bead_id: str, now: int) -> Props | None:
        """Lift the deny of a tombstone the caller may see; the tombstone, or None when it may not."""
        rows = await self.graph.values(
            MY_GROUPS + f"MATCH (t:Tombstone {{bead_id: $bead_id}}) WHERE {SEEN_BY} "
            "SET t.denied = false, t.changed_at = $now " + _RETURN_TOMBSTONE,
            {"caller": caller, "bead_id": bead_id, "now": now},
            read_only=False,
        )
        return _tombstone(rows[0]) if rows else None

    # --- the ledger (backup and restore) --------------------------------------------------------

    async def system_tombstones(self) -> list[Props]:
        """Every tombstone with every property: the forget ledger a restore carries over."""
        rows = await self.graph.values("MATCH (t:Tombstone) RETURN properties(t) ORDER BY t.bead_id")
        return [dict(row[0]) for row in rows]

    async def system_write_tombstones(self, tombstones: Sequence[Props]) -> None:
        """Merge tombstones by bead id; the one changed last wins."""
        if not tombstones:
            return
        await self.graph.query(
            "UNWIND $rows AS row MERGE (t:Tombstone {bead_id: row.bead_id}) "
            "ON CREATE SET t = row "
            "ON MATCH SET t += CASE WHEN coalesce(row.changed_at, 0) >= coalesce(t.changed_at, 0) THEN row ELSE {} END",
            {"rows": list(tombstones)},
        )

    async def system_apply(self) -> list[str]:
        """Make the graph agree with its tombstones: one tombstone per bead id (the one changed last), and
        no bead, edge or pending outbox entry of a forgotten bead. Returns the forgotten beads' ids."""
        await self.graph.query(
            "MATCH (t:Tombstone) WITH t.bead_id AS id, t ORDER BY coalesce(t.changed_at, 0) DESC "
            "WITH id, collect(t) AS ts WHERE size(ts) > 1 UNWIND ts[1..] AS extra DELETE extra"
        )
        ids = [str(row[0]) for row in await self.graph.query("MATCH (t:Tombstone) RETURN t.bead_id")]
        if ids:
            await self.graph.query(
                "UNWIND $ids AS id MATCH (b:Bead {bead_id: id}) " + versions_of("b", carry="id")
                + chain_around("b", carry="id, versions") + BRIDGE_CHAIN
                + "FOREACH (v IN versions | DETACH DELETE v) DETACH DELETE b",
                {"ids": ids},
            )
            await self.graph.query("UNWIND $ids AS id MATCH (o:Outbox {bead_id: id}) DELETE o", {"ids": ids})
        return ids
