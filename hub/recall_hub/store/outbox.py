"""The durable outbox: after-commit work recorded in the same atomic query as the write it follows.

A mutation of a bead adds an ``(:Outbox)`` node in the very query that changes the bead, so the
graph holds the write and the promise of its follow-up work (vector, keyword index, auto-links,
change-feed entry, notifications) together, or neither. :mod:`recall_hub.ops.after_commit` carries
the work out and deletes the entry; an entry left by a crash or a failed step is found again by
:meth:`OutboxStore.system_due` and retried.

An entry records what the work needs to know about the state *before* the write (the bead's feed
scope and vector scope then); the state after is read fresh when the work runs, under a per-bead
lock, so concurrent writes of one bead are worked off one at a time, in commit order.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from recall_hub.store.graph import GraphStore
from recall_hub.store.keys import Keys
from recall_hub.store.locks import Locks
from recall_hub.store.presence import gone, running_hubs
from recall_hub.timeutil import now_ms

FEED_SCOPE = (
    "CASE WHEN {v}.visibility = 'global' THEN 'global' "
    "WHEN {v}.visibility = 'group' THEN {v}.group_id ELSE null END"
)
VECTOR_SCOPE = (
    "CASE WHEN {v}.visibility = 'global' THEN 'global' "
    "WHEN {v}.visibility = 'group' THEN 'group:' + {v}.group_id ELSE 'private:' + {v}.created_by END"
)


def feed_scope_of(var: str) -> str:
    """Cypher: the change-feed scope of the bead (or property map) bound to ``var``; null for private beads."""
    return FEED_SCOPE.format(v=var)


def vector_scope_of(var: str) -> str:
    """Cypher: the vector-set scope of the bead (or property map) bound to ``var``."""
    return VECTOR_SCOPE.format(v=var)


def record(kind: str, *, after: str | None, before: str | None, text_changed: str = "true") -> str:
    """A Cypher ``CREATE`` of one outbox entry, to splice into the write it follows.

    ``after`` is the variable holding the bead after the write (None for a delete), ``before`` the
    property map before it (None for a create). Parameters ``$ob_at``, ``$ob_id`` and ``$caller`` must be
    bound (:func:`record_params`). The entry id is the query's ``$ob_id`` with the kind and the bead: unique
    without a random function in the query, which a replay (a restart from the AOF, a replica) would draw again.
    """
    bead = after or before
    assert bead is not None
    old_feed = feed_scope_of(before) if before else "null"
    new_feed = feed_scope_of(after) if after else "null"
    old_vec = f"{before}.vec_scope" if before else "null"
    old_scope = vector_scope_of(before) if before else "null"
    return (
        f"CREATE (:Outbox {{entry_id: $ob_id + ':{kind}:' + {bead}.bead_id, at: $ob_at, kind: '{kind}', "
        f"bead_id: {bead}.bead_id, by: $caller, old_feed: {old_feed}, new_feed: {new_feed}, "
        f"old_vec: {old_vec}, old_scope: {old_scope}, text_changed: {text_changed}, attempts: 0, retry_at: 0, "
        "error: ''})"
    )


_MARK_HANDED_OFF = """
local t = redis.call('TIME')
local at = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZADD', KEYS[1], at, ARGV[1])
return at
"""
_CLEAR_HANDED_OFF = """
local removed = 0
for _, member in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local bead = string.match(member, '^[^ ]+')
  for i = 1, #ARGV do
    if bead == ARGV[i] then
      removed = removed + redis.call('ZREM', KEYS[1], member)
      break
    end
  end
end
return removed
"""
_HANDED_OFF_BEFORE = """
local upto = tonumber(ARGV[1])
if upto < 0 then
  local t = redis.call('TIME')
  upto = t[1] * 1000 + math.floor(t[2] / 1000)
end
return {upto, redis.call('ZRANGEBYSCORE', KEYS[1], upto - tonumber(ARGV[2]), upto)}
"""
HANDED_OFF_HORIZON_MS = 60_000
"""A hand-off mark older than this is not waited for (its hub died before clearing it) and is pruned."""
RUNNING_FRESH_S = 0.2
"""Which hubs run is asked of Redis (``CLIENT LIST``) at most this often by one hub, however many reads wait."""


def record_params() -> dict[str, Any]:
    return {"ob_at": now_ms(), "ob_id": uuid.uuid4().hex}


@dataclass(frozen=True)
class OutboxEntry:
    entry_id: str
    at: int
    kind: str
    """``created``, ``updated``, ``deleted`` (a bead) or ``attributes`` (only its filter attributes changed)."""
    bead_id: str
    by: str
    old_feed: str | None
    new_feed: str | None
    old_vec: str | None
    """Where the bead's vectors were marked as stored when the write committed (``vec_scope``; None: not yet)."""
    old_scope: str | None
    """The bead's scope before the write. Not always ``old_vec``: an earlier entry's work may be storing the
    vectors there right now, not marked yet (it read the bead before this write) — this entry's work removes both."""
    text_changed: bool
    attempts: int

    @property
    def old_vector_scopes(self) -> list[str | None]:
        """Every scope the bead's vectors may sit in as this entry's write left them."""
        return [self.old_vec, self.old_scope]


_FIELDS = (
    "o.entry_id, o.at, o.kind, o.bead_id, o.by, o.old_feed, o.new_feed, o.old_vec, o.old_scope, o.text_changed, "
    "o.attempts"
)


def _entry(row: list[Any]) -> OutboxEntry:
    entry_id, at, kind, bead_id, by, old_feed, new_feed, old_vec, old_scope, text_changed, attempts = row
    return OutboxEntry(
        entry_id, int(at), kind, bead_id, by, old_feed, new_feed, old_vec, old_scope, bool(text_changed),
        int(attempts or 0),
    )


class OutboxStore:
    """System reads and writes of the outbox (the work runs for no caller: it was authorised at commit)."""

    def __init__(self, graph: GraphStore, redis: Redis, keys: Keys, hub_id: str = "") -> None:
        self.graph = graph
        self.redis = redis
        self.keys = keys
        self.hub_id = hub_id
        """The hub whose work this is: its marks and locks name it (store/presence.py)."""
        self.locks = Locks(redis, keys, owner=hub_id)
        self._running: tuple[float, frozenset[str] | None] = (-RUNNING_FRESH_S, None)

    async def system_pending(self, bead_id: str) -> list[OutboxEntry]:
        """Every unfinished entry of one bead, oldest first."""
        rows = await self.graph.ro_query(
            f"MATCH (o:Outbox {{bead_id: $bead_id}}) RETURN {_FIELDS} ORDER BY o.at, o.entry_id",
            {"bead_id": bead_id},
        )
        return [_entry(row) for row in rows]

    async def system_pending_many(self, bead_ids: list[str]) -> dict[str, list[OutboxEntry]]:
        """:meth:`system_pending` for many beads in one query."""
        rows = await self.graph.ro_query(
            f"UNWIND $ids AS id MATCH (o:Outbox {{bead_id: id}}) RETURN {_FIELDS} ORDER BY o.at, o.entry_id",
            {"ids": bead_ids},
        )
        pending: dict[str, list[OutboxEntry]] = {b: [] for b in bead_ids}
        for row in rows:
            entry = _entry(row)
            pending[entry.bead_id].append(entry)
        return pending

    async def system_done_many(self, entry_ids: list[str]) -> None:
        await self.graph.query("UNWIND $ids AS id MATCH (o:Outbox {entry_id: id}) DELETE o", {"ids": entry_ids})

    async def system_due(self, older_than_ms: int, limit: int) -> list[str]:
        """Beads with an entry older than ``older_than_ms`` whose retry time has come, oldest first."""
        rows = await self.graph.ro_query(
            "MATCH (o:Outbox) WHERE o.at <= $older AND o.retry_at <= $now "
            "WITH o.bead_id AS bead_id, min(o.at) AS first ORDER BY first LIMIT $limit RETURN bead_id",
            {"older": older_than_ms, "now": now_ms(), "limit": limit},
        )
        return [row[0] for row in rows]

    async def system_depth(self) -> int:
        rows = await self.graph.ro_query("MATCH (o:Outbox) RETURN count(o)")
        return int(rows[0][0]) if rows else 0

    async def system_done(self, entry_id: str, bead_id: str) -> list[OutboxEntry]:
        """Delete a finished entry; the bead's entries still pending after it (:meth:`system_pending`), read in
        the same query."""
        rows = await self.graph.query(
            "OPTIONAL MATCH (done:Outbox {entry_id: $id}) DELETE done WITH count(*) AS _ "
            f"MATCH (o:Outbox {{bead_id: $bead_id}}) RETURN {_FIELDS} ORDER BY o.at, o.entry_id",
            {"id": entry_id, "bead_id": bead_id},
        )
        return [_entry(row) for row in rows]

    async def system_failed(self, entry_id: str, error: str, retry_at: int) -> None:
        await self.graph.query(
            "MATCH (o:Outbox {entry_id: $id}) SET o.attempts = coalesce(o.attempts, 0) + 1, "
            "o.error = $error, o.retry_at = $retry_at",
            {"id": entry_id, "error": error[:500], "retry_at": retry_at},
        )

    # --- creates whose work follows the reply (create_settle = background) ---------------------------------
    # Marked on Redis's clock before the reply, cleared when the work is done: a read that starts after a
    # create's reply, at any hub, finds the mark and waits for the work (retrieval/freshness.py). A mark is
    # "<bead id> <vector scope> <hub id>": a read waits only for the creates in the scopes it may read, and has
    # the work of a hub that is gone taken over (ops/after_commit.take_over).

    async def mark_handed_off(self, bead_id: str, scope: str) -> int:
        """Mark a create into ``scope`` as handed off; the mark's time (epoch ms on Redis's clock)."""
        mark = f"{bead_id} {scope} {self.hub_id}".rstrip()
        return int(await self.redis.eval(_MARK_HANDED_OFF, 1, self.keys.handed_off(), mark))

    async def clear_handed_off(self, *bead_ids: str) -> None:
        await self.redis.eval(_CLEAR_HANDED_OFF, 1, self.keys.handed_off(), *bead_ids)

    async def handed_off_before(
        self, until: int | None = None, scopes: Collection[str] | None = None
    ) -> tuple[int, list[str]]:
        """``(until, beads)``: the creates marked at or before ``until`` (epoch ms on Redis's clock; None: Redis's
        now) whose marks are still there, of the last :data:`HANDED_OFF_HORIZON_MS`; with ``scopes``, only those
        into one of them (and any whose mark names no scope)."""
        until, marks = await self._marks(until)
        return until, [bead for bead, scope, _ in marks if scopes is None or not scope or scope in scopes]

    async def handed_off_by_gone_hubs(self) -> list[str]:
        """The creates marked as handed off by a hub that is gone (store/presence.py) whose marks are still
        there: their work may never be done but by another hub."""
        _, marks = await self._marks()
        if not any(hub for _, _, hub in marks):
            return []
        asked, running = self._running
        if time.monotonic() - asked >= RUNNING_FRESH_S or any(gone(hub, running) for _, _, hub in marks):
            # A hub missing from what was asked a moment ago may have started since: asked again before it is
            # taken for gone; one that is there still runs.
            running = await running_hubs(self.redis)
            self._running = (time.monotonic(), running)
        return [bead for bead, _, hub in marks if gone(hub, running)]

    async def _marks(self, until: int | None = None) -> tuple[int, list[tuple[str, str, str]]]:
        """``(until, marks)`` as :meth:`handed_off_before`, each mark ``(bead, scope, hub)`` (a mark made before
        marks named their hub has an empty one)."""
        reply = await self.redis.eval(
            _HANDED_OFF_BEFORE, 1, self.keys.handed_off(), -1 if until is None else until, HANDED_OFF_HORIZON_MS
        )
        marks = []
        for member in reply[1]:
            bead, _, rest = (member.decode() if isinstance(member, bytes) else str(member)).partition(" ")
            scope, _, hub = rest.partition(" ")
            marks.append((bead, scope, hub))
        return int(reply[0]), marks

    async def system_first_tries(self, bead_ids: list[str]) -> set[str]:
        """Those of ``bead_ids`` whose create's work is on its first try (a hand-off's mark that outlived its work
        — the work done or failed while Redis was away, its hub dead — names none)."""
        rows = await self.graph.ro_query(
            "UNWIND $ids AS id MATCH (o:Outbox {bead_id: id}) WHERE o.kind = 'created' AND o.attempts = 0 "
            "RETURN DISTINCT o.bead_id",
            {"ids": bead_ids},
        )
        return {str(row[0]) for row in rows}

    async def prune_handed_off(self) -> None:
        """Drop the marks of work whose hub died before clearing them (the sweep does that work)."""
        until, _ = await self.handed_off_before()
        await self.redis.zremrangebyscore(self.keys.handed_off(), "-inf", until - HANDED_OFF_HORIZON_MS)

    @contextlib.asynccontextmanager
    async def bead_locks(self, bead_ids: list[str]) -> AsyncIterator[list[str]]:
        """Try every bead's work lock at once, without waiting; yields the beads whose lock is held."""
        async with self.locks.try_many([f"bead:{b}" for b in bead_ids]) as held:
            yield [name.removeprefix("bead:") for name in held]

    @contextlib.asynccontextmanager
    async def bead_lock(self, bead_id: str, wait_s: float = 30.0) -> AsyncIterator[bool]:
        """Hold the bead's work lock (shared by every hub on this Redis); yields False if it stays busy
        for ``wait_s``. A lock whose holder died frees within its time to live."""
        async with self.locks.hold(f"bead:{bead_id}", wait_s) as locked:
            yield locked
