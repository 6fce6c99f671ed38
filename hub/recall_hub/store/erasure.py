"""Erasing forgotten content from what the servers keep besides the graph and the derived indexes.

Forgetting a bead deletes it (and its kept versions and edges) from the graph and leaves a tombstone, in
one atomic query; its vector and keyword entries go with the outbox work of that query. What is left is
content the servers keep on their own:

- **change logs** (Redis streams): the snapshots earlier changes of the bead carried. ``XDEL`` only flags
  a stream entry as deleted — its bytes stay in the stream's node, in every RDB and AOF written from it,
  and in a ``DUMP`` — so a log holding such snapshots is *rewritten*: its entries copied with their ids,
  those changes without their snapshot (the change itself stays: who, what, when), into a new stream that
  replaces it, in one script for whatever was appended meanwhile;
- **FalkorDB's query telemetry** (the stream ``telemetry{<graph>}``, every query with its parameters,
  written while FalkorDB runs with ``CMD_INFO`` on — the embedded stack starts it off) and both servers'
  **slow logs** (``SLOWLOG``, ``GRAPH.SLOWLOG``: a slow query with its parameters): emptied;
- **the files on disk**: the append-only file still holds the commands that wrote the content and an RDB
  file the state of its last save, so both servers rewrite them (``BGREWRITEAOF``; ``BGSAVE`` where RDB
  snapshots are taken), and the erasure waits until they are written.

The tombstone is the durable record of the erasure still owed: it has no ``erased_at`` until all of this
is done (:mod:`recall_hub.ops.erasure` works them off, retrying on failure).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import redis.exceptions
from recall_schemas import Unavailable
from redis.asyncio import Redis

from recall_hub.store.graph import GraphStore
from recall_hub.store.keys import Keys
from recall_hub.store.replica import ReplicaRoute

log = logging.getLogger(__name__)

PAGE = 1000
TELEMETRY_FLUSH_MS = 4000
"""FalkorDB buffers the queries it ran and appends them to its telemetry stream every 0.25–3 s: an erasure
that finds the stream recording counts only forgets older than this as done (a later pass deletes it again)."""
COMPACTION_TIMEOUT_S = 600.0
"""How long an erasure waits for the servers to rewrite their files before it counts as failed (and retries)."""

# KEYS[1] the log, KEYS[2] its rewrite; ARGV[1] the last id already copied ('' for none), ARGV[2..] the
# beads whose snapshots go. Copies what was appended since (without those snapshots), gives the rewrite the
# log's id history (so new entries keep sorting after every cursor handed out) and its time to live, and puts
# it in the log's place.
_FINISH_REWRITE = """
local doomed = {}
for i = 2, #ARGV do doomed[ARGV[i]] = true end
local start = '-'
if ARGV[1] ~= '' then start = '(' .. ARGV[1] end
for _, entry in ipairs(redis.call('XRANGE', KEYS[1], start, '+')) do
  local fields = entry[2]
  for i = 1, #fields, 2 do
    if fields[i] == 'change' then
      local ok, change = pcall(cjson.decode, fields[i + 1])
      if ok and type(change) == 'table' and doomed[change['bead_id']] and type(change['bead']) == 'table' then
        change['bead'] = nil
        fields[i + 1] = cjson.encode(change)
      end
    end
  end
  redis.call('XADD', KEYS[2], entry[1], unpack(fields))
end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local fields = {}
for i = 1, #info, 2 do fields[info[i]] = info[i + 1] end
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('XADD', KEYS[2], 'MAXLEN', '0', '0-1', 'change', '{}')
end
local last = fields['last-generated-id']
redis.call('XSETID', KEYS[2], last, 'ENTRIESADDED', fields['entries-added'], 'MAXDELETEDID', last)
local ttl = redis.call('PTTL', KEYS[1])
redis.call('RENAME', KEYS[2], KEYS[1])
if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl) end
return 1
"""


@dataclass(frozen=True)
class PendingErasure:
    bead_id: str
    forgotten_at: int


_NAMED_BEAD = re.compile(rb'"bead_id"\s*:\s*"([^"]*)"')


def carries_snapshot(fields: dict[bytes, bytes], bead_ids: set[str]) -> bool:
    """Whether a change-log entry holds a snapshot (title, content, …) of one of ``bead_ids``."""
    raw = fields.get(b"change")
    if raw is None or not any(b"\\" in name or name.decode(errors="replace") in bead_ids
                              for name in _NAMED_BEAD.findall(raw)):
        return False  # most entries name none of them: a forget's pass reads whole logs without parsing each
    try:
        change = json.loads(raw)
    except ValueError:
        return False
    return isinstance(change, dict) and change.get("bead_id") in bead_ids and isinstance(change.get("bead"), dict)


class ErasureStore:
    def __init__(self, graph: GraphStore, redis: Redis, keys: Keys, replica: ReplicaRoute | None = None) -> None:
        """``replica``: the keys' read replica, if any (the graph's is the graph store's own)."""
        self.graph = graph
        self.redis = redis
        self.keys = keys
        self.replica = replica
        self._finish_rewrite = redis.register_script(_FINISH_REWRITE)

    # --- the record of erasures owed (tombstones) --------------------------------------------------

    async def system_pending(self, limit: int = 10_000) -> list[PendingErasure]:
        """Forgotten beads whose content may still be outside the graph, oldest first."""
        rows = await self.graph.values(
            "MATCH (t:Tombstone) WHERE t.erased_at IS NULL "
            "RETURN t.bead_id, t.forgotten_at ORDER BY t.forgotten_at, t.bead_id LIMIT $limit",
            {"limit": limit},
        )
        return [PendingErasure(str(bead_id), int(at or 0)) for bead_id, at in rows]

    async def system_mark_erased(self, bead_ids: Sequence[str], now: int) -> None:
        if bead_ids:
            await self.graph.query(
                "UNWIND $ids AS id MATCH (t:Tombstone {bead_id: id}) SET t.erased_at = $now",
                {"ids": list(bead_ids), "now": now},
            )

    async def system_mark_pending(self, bead_ids: Sequence[str]) -> None:
        """Owe the erasure of these forgotten beads again (a restore may have brought their content back)."""
        if bead_ids:
            await self.graph.query(
                "UNWIND $ids AS id MATCH (t:Tombstone {bead_id: id}) SET t.erased_at = null", {"ids": list(bead_ids)}
            )

    # --- change logs ---------------------------------------------------------------------------------

    async def erase_from_change_logs(self, bead_ids: Iterable[str]) -> int:
        """Rewrite every change log holding a snapshot of one of ``bead_ids`` without those snapshots (every
        entry stays, with its id). How many snapshots went."""
        doomed = set(bead_ids)
        if not doomed:
            return 0
        erased = 0
        async for key in self.redis.scan_iter(match=self.keys.family_pattern("changes"), count=PAGE):
            name = key.decode() if isinstance(key, bytes) else str(key)
            if await self._holds_snapshot(name, doomed):
                erased += await self._rewrite(name, doomed)
        return erased

    async def _holds_snapshot(self, key: str, doomed: set[str]) -> bool:
        after = "-"
        while entries := await self._page(key, after):
            if any(carries_snapshot(fields, doomed) for _, fields in entries):
                return True
            after = "(" + _text(entries[-1][0])
        return False

    async def _rewrite(self, key: str, doomed: set[str]) -> int:
        """Copy ``key``'s entries, the doomed snapshots left out, into a scratch stream, page by page while others
        keep appending, then finish in one script (what came meanwhile, the id history) and replace the log."""
        scratch = self.keys.scratch(f"rewrite:{uuid.uuid4().hex}")
        erased, last = 0, ""
        try:
            after = "-"
            while entries := await self._page(key, after):
                pipe = self.redis.pipeline(transaction=False)
                for entry_id, fields in entries:
                    if carries_snapshot(fields, doomed):
                        erased += 1
                        fields = {**fields, b"change": _without_snapshot(fields[b"change"])}
                    pipe.xadd(scratch, fields, id=entry_id)  # type: ignore[arg-type]
                await pipe.execute()
                last = _text(entries[-1][0])
                after = "(" + last
            await self._finish_rewrite(keys=[key, scratch], args=[last, *sorted(doomed)])
        finally:
            await self.redis.delete(scratch)
        log.info("change log %s rewritten without %d snapshot(s) of forgotten beads", key, erased)
        return erased

    async def _page(self, key: str, after: str) -> list[tuple[Any, dict[bytes, bytes]]]:
        entries: Any = await self.redis.xrange(key, min=after, max="+", count=PAGE)
        return list(entries)

    # --- the servers' own logs -----------------------------------------------------------------------

    async def scrub_server_logs(self) -> bool:
        """Empty FalkorDB's query telemetry of this graph and both servers' slow logs. Returns whether FalkorDB
        is recording telemetry (so queries of the last moments may still be appended)."""
        server = self.graph.server
        telemetry = f"telemetry{{{self.graph.graph_name}}}"  # FalkorDB's own key, outside the hub's namespace
        recording = bool(await server.delete(telemetry)) or await self.graph.records_telemetry()
        for client in self._servers():
            await client.slowlog_reset()
            with contextlib.suppress(redis.exceptions.ResponseError):  # a server without FalkorDB, or no such graph
                await client.execute_command(  # type: ignore[no-untyped-call]
                    "GRAPH.SLOWLOG", self.graph.graph_name, "RESET"
                )
        return recording

    # --- the files on disk -----------------------------------------------------------------------------

    async def compact_files(self, timeout_s: float = COMPACTION_TIMEOUT_S) -> None:
        """Have each server rewrite its append-only file (and take an RDB snapshot where it takes them), and
        wait until they are written. Raises :class:`Unavailable` if a rewrite fails or outlasts ``timeout_s``."""
        for client in self._servers():
            await _compact(client, timeout_s)

    def _servers(self) -> list[Redis]:
        """Every server holding the graph or the keys, read replicas included (each keeps files of its own)."""
        found: list[Redis] = []
        replicas = [route.replica for route in (self.graph.replica, self.replica) if route is not None]
        for client in (self.graph.server, self.redis, *replicas):
            if not any(_same_server(client, known) for known in found):
                found.append(client)
        return found


async def _compact(client: Redis, timeout_s: float) -> None:
    before = await client.info("persistence")
    config: Any = await client.config_get("save")
    snapshots = bool(config.get("save")) or int(before.get("rdb_saves", 0)) > 0
    if before.get("aof_enabled"):
        await _rewrite_aof(client, timeout_s)
    if snapshots:
        await client.bgsave(schedule=True)
    deadline = time.monotonic() + timeout_s
    while True:
        now = await client.info("persistence")
        aof_done = not before.get("aof_enabled") or (
            int(now.get("aof_rewrites", 0)) > int(before.get("aof_rewrites", 0))
            and not now.get("aof_rewrite_in_progress") and not now.get("aof_rewrite_scheduled")
        )
        rdb_done = not snapshots or (
            int(now.get("rdb_saves", 0)) > int(before.get("rdb_saves", 0)) and not now.get("rdb_bgsave_in_progress")
        )
        if aof_done and rdb_done:
            for status in ("aof_last_bgrewrite_status", "rdb_last_bgsave_status"):
                if now.get(status, "ok") != "ok":
                    raise Unavailable(f"the store could not rewrite its files after a forget ({status}: {now[status]})")
            return
        if time.monotonic() > deadline:
            raise Unavailable(f"the store did not rewrite its files within {timeout_s:.0f} s after a forget")
        await asyncio.sleep(0.05)


async def _rewrite_aof(client: Redis, timeout_s: float) -> None:
    """Start a rewrite of the append-only file; one already running (the server's own, started by the file's
    growth, may have begun before the erasure) is waited for first, then a new one is started."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await client.bgrewriteaof()
            return
        except redis.exceptions.ResponseError as exc:
            if "already in progress" not in str(exc) or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.05)


def _without_snapshot(raw: bytes) -> bytes:
    change = json.loads(raw)
    change["bead"] = None
    return json.dumps(change).encode()


def _same_server(a: Redis, b: Redis) -> bool:
    one, two = a.connection_pool.connection_kwargs, b.connection_pool.connection_kwargs
    keys = ("host", "port", "path", "db")
    return all(one.get(k) == two.get(k) for k in keys)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
