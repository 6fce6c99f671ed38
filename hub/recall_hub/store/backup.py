"""Reading one graph's source data at a single point in time, and writing it into an empty graph.

What a backup holds is the source data: every node and edge of the graph (beads, identities with
their agent state, groups and memberships, sessions, handoffs, unfinished outbox entries, and every
edge between them, with all properties), and the Redis key families of :data:`BACKED_UP` (key-value
memory, change logs, audit streams, and the step markers of unfinished outbox entries). What is derived
is rebuilt instead: vector sets, the keyword index (each hub's, from the graph), the index log; and
what is operational is not kept at all: applied event ids, locks, the membership counter.

**One instant.** FalkorDB lives in the Redis server, and a graph query inside MULTI/EXEC runs on the
server's main thread (``GRAPH.COPY`` cannot: it forks later, from a thread of its own; inside a
transaction it answers an error and still copies afterwards). So :meth:`SnapshotReader.take` is one
transaction: it reads every node, every edge and copies every backed-up key under a scratch prefix (a
Lua script: SCAN and COPY), and nothing else runs on the server meanwhile — no write of any hub lands
between the graph and the keys. The copies are then read page by page while hubs keep writing, and
deleted. The server is held for the transaction's duration (measured in docs/operations.md). When
FalkorDB and Redis are separate servers, each is read at its own instant and the backup says so
(``graph-then-redis``).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from recall_hub.store.backup_records import (
    Consistency,
    EdgeRecord,
    HashRecord,
    KeyRecord,
    NodeRecord,
    StreamRecord,
    StringRecord,
)
from recall_hub.store.erasure import carries_snapshot
from recall_hub.store.graph import GraphStore, compact_rows
from recall_hub.store.keys import BACKED_UP, Keys, backed_up_family

log = logging.getLogger(__name__)

NODES = "MATCH (n) RETURN ID(n), labels(n), properties(n) ORDER BY ID(n)"
EDGES = "MATCH (a)-[r]->(b) RETURN ID(a), ID(b), type(r), properties(r) ORDER BY ID(r)"
"""In id order: nodes restored in that order keep the order of their ids, and with it the order of every
query that follows node ids. (Edge order within one node's edges also follows FalkorDB's internal
relationship-type numbering, which a restore cannot reproduce.)"""
COPY_TTL_MS = 24 * 3600 * 1000
"""Copies a backup that died before deleting them expire by themselves."""
PAGE = 1000
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
"""Labels and edge types are spliced into Cypher (they cannot be parameters): only plain identifiers."""

# ARGV[1] the graph's key namespace, ARGV[2] where the copies go, ARGV[3] their ttl in ms,
# ARGV[4..] the families to copy. One SCAN pass over the namespace (SCAN may repeat a key: each is
# copied once). Returns {relative name, type, pttl of the original} per key copied.
_COPY_KEYS = """
local root, copies, ttl = ARGV[1], ARGV[2], ARGV[3]
local found, seen = {}, {}
local cursor = '0'
repeat
  local page = redis.call('SCAN', cursor, 'MATCH', root .. ':*', 'COUNT', 1000)
  cursor = page[1]
  for _, key in ipairs(page[2]) do
    local name = string.sub(key, #root + 2)
    local wanted = false
    for i = 4, #ARGV do
      if string.sub(name, 1, #ARGV[i] + 1) == ARGV[i] .. ':' then wanted = true end
    end
    if wanted and not seen[key] then
      seen[key] = true
      redis.call('COPY', key, copies .. ':' .. name)
      redis.call('PEXPIRE', copies .. ':' .. name, ttl)
      found[#found + 1] = {name, redis.call('TYPE', key)['ok'], redis.call('PTTL', key)}
    end
  end
until cursor == '0'
return found
"""


class BackupError(RuntimeError):
    """The store holds something a backup cannot represent, or a restore cannot write what it read."""


@dataclass(frozen=True)
class CopiedKey:
    name: str
    """Relative to the graph's namespace (``kv:a_x``)."""
    type: str
    ttl_ms: int | None
    """What was left of the original's time to live; None: it had none."""


@dataclass
class Snapshot:
    """The graph and the backed-up keys at one instant; the keys as copies still to be read."""

    token: str
    consistency: Consistency
    nodes: list[NodeRecord]
    edges: list[EdgeRecord]
    keys: list[CopiedKey]
    """The copies to read: step markers of outbox entries that were finished are left out (nothing will
    read them again)."""
    all_copies: list[str] = field(default_factory=list)
    """Every copy made, to delete."""

    def embedder_models(self) -> dict[str, int]:
        """Beads by the embedding model their vector was made with."""
        return dict(Counter(n.props.get("vec_model") or "none" for n in self.nodes if "Bead" in n.labels))

    def key_counts(self) -> dict[str, int]:
        return dict(Counter(backed_up_family(k.name) or "other" for k in self.keys))


class SnapshotReader:
    """Takes a :class:`Snapshot` of one graph and reads its copied keys.

    ``graph_redis`` is a client of the server holding the graph, ``redis`` of the one holding the
    graph's keys (the same client when they are one server)."""

    def __init__(self, graph_redis: Redis, redis: Redis, keys: Keys) -> None:
        self.graph_redis = graph_redis
        self.redis = redis
        self.keys = keys

    async def take(self) -> Snapshot:
        token = uuid.uuid4().hex
        copy_args = (self.keys.root, self.keys.backup_copies(token), COPY_TTL_MS, *BACKED_UP)
        graph = self.keys.graph_name
        pipe = self.graph_redis.pipeline(transaction=True)
        pipe.execute_command("GRAPH.RO_QUERY", graph, NODES, "--compact")
        pipe.execute_command("GRAPH.RO_QUERY", graph, EDGES, "--compact")
        one_server = self.redis is self.graph_redis
        if one_server:
            pipe.eval(_COPY_KEYS, 0, *copy_args)
        replies = await pipe.execute(raise_on_error=False)
        if not one_server:
            replies.append(await self.redis.eval(_COPY_KEYS, 0, *copy_args))
        node_rows, edge_rows, copied = replies
        if isinstance(copied, Exception):
            raise copied
        keys = [CopiedKey(_text(name), _text(kind), int(ttl) if int(ttl) >= 0 else None) for name, kind, ttl in copied]
        snapshot = Snapshot(
            token=token,
            consistency="one-transaction" if one_server else "graph-then-redis",
            nodes=[_node(row) for row in _rows(node_rows)],
            edges=[_edge(row) for row in _rows(edge_rows)],
            keys=[],
            all_copies=[k.name for k in keys],
        )
        unfinished = {n.props.get("entry_id") for n in snapshot.nodes if "Outbox" in n.labels}
        for key in keys:
            entry = Keys.outbox_entry_of(key.name)
            if entry is None or entry in unfinished:
                snapshot.keys.append(key)
        return snapshot

    async def key_records(self, snapshot: Snapshot, page: int = PAGE) -> AsyncIterator[KeyRecord]:
        """The copied keys as records, a page at a time (a large hash or stream gives several). A change-log
        entry holding a snapshot of a forgotten bead is left out, whether or not its erasure is done yet."""
        forgotten = {str(n.props.get("bead_id")) for n in snapshot.nodes if "Tombstone" in n.labels}
        for key in snapshot.keys:
            copy = self.keys.backup_copy(snapshot.token, key.name)
            if key.type == "hash":
                cursor = 0
                while True:
                    reply: Any = await self.redis.hscan(copy, cursor, count=page)
                    cursor, fields = reply
                    if fields:
                        yield HashRecord(
                            name=key.name, ttl_ms=key.ttl_ms, fields={_text(k): _text(v) for k, v in fields.items()}
                        )
                    if cursor == 0:
                        break
            elif key.type == "stream":
                after = "-"
                while True:
                    entries: Any = await self.redis.xrange(copy, min=after, max="+", count=page)
                    if not entries:
                        break
                    kept = [(i, f) for i, f in entries if not (forgotten and carries_snapshot(f, forgotten))]
                    yield StreamRecord(
                        name=key.name, ttl_ms=key.ttl_ms,
                        entries=[(_text(i), {_text(k): _text(v) for k, v in f.items()}) for i, f in kept],
                    )
                    after = f"({_text(entries[-1][0])}"
            elif key.type == "string":
                value: Any = await self.redis.get(copy)
                if value is not None:
                    yield StringRecord(name=key.name, ttl_ms=key.ttl_ms, value=_text(value))
            else:
                raise BackupError(f"key {key.name} is a {key.type}: a backup holds hashes, streams and strings")

    async def drop(self, snapshot: Snapshot) -> None:
        """Delete the snapshot's copies."""
        names = [self.keys.backup_copy(snapshot.token, name) for name in snapshot.all_copies]
        for start in range(0, len(names), PAGE):
            await self.redis.unlink(*names[start : start + PAGE])


class RestoreTarget:
    """Writes a backup's records into one graph and its key namespace."""

    def __init__(self, graph: GraphStore, redis: Redis, keys: Keys) -> None:
        self.graph = graph
        self.redis = redis
        self.keys = keys

    async def holds_data(self) -> bool:
        """Whether the graph has a node or the namespace a key of a backed-up family."""
        rows = await self.graph.ro_query("MATCH (n) RETURN count(n)")
        if rows and int(rows[0][0]) > 0:
            return True
        for family in BACKED_UP:
            async for _ in self.redis.scan_iter(match=self.keys.family_pattern(family), count=1000):
                return True
        return False

    async def clear(self) -> None:
        """Delete the graph (its indexes made again) and every key of the graph's namespace."""
        log.warning("deleting graph %s and every key of %s before restoring", self.keys.graph_name, self.keys.root)
        await self.graph.graph.delete()
        await self.graph.ensure_schema()
        doomed: list[Any] = []
        async for key in self.redis.scan_iter(match=self.keys.pattern(), count=1000):
            doomed.append(key)
            if len(doomed) >= PAGE:
                await self.redis.unlink(*doomed)
                doomed.clear()
        if doomed:
            await self.redis.unlink(*doomed)

    async def write_nodes(self, nodes: Sequence[NodeRecord]) -> dict[int, int]:
        """Create nodes with their labels and properties, in the order given (a fresh graph numbers them
        in that order); their new ids by their ids in the backup. Made without labels in one query,
        labelled one label at a time: a label cannot be a parameter."""
        rows = await self.graph.values(
            "UNWIND $rows AS row CREATE (n) SET n = row.props RETURN row.id, ID(n)",
            {"rows": [{"id": n.id, "props": n.props} for n in nodes]},
            read_only=False,
        )
        ids = {int(old): int(new) for old, new in rows}
        by_label: dict[str, list[int]] = {}
        for node in nodes:
            for label in node.labels:
                by_label.setdefault(label, []).append(ids[node.id])
        for label, new_ids in by_label.items():
            await self.graph.values(
                f"UNWIND $ids AS id MATCH (n) WHERE ID(n) = id SET n:{_identifier(label)}",
                {"ids": new_ids},
                read_only=False,
            )
        return ids

    async def write_edges(self, rel_type: str, edges: Sequence[EdgeRecord], ids: dict[int, int]) -> None:
        """Create edges of one type between nodes already written (``ids`` maps backup ids to new ones)."""
        try:
            rows = [{"s": ids[e.start], "e": ids[e.end], "props": e.props} for e in edges]
        except KeyError as exc:
            raise BackupError(f"a {rel_type} edge names node {exc.args[0]}, which the backup does not hold") from None
        created = await self.graph.values(
            # Ids bound to plain variables first: FalkorDB seeks a node by id only then (`row.s` scans).
            "UNWIND $rows AS row WITH row, row.s AS s, row.e AS e "
            "MATCH (a) WHERE ID(a) = s MATCH (b) WHERE ID(b) = e "
            f"CREATE (a)-[r:{_identifier(rel_type)}]->(b) SET r = row.props RETURN count(r)",
            {"rows": rows},
            read_only=False,
        )
        if not created or int(created[0][0]) != len(rows):
            raise BackupError(f"{len(rows)} {rel_type} edge(s) to write, {created[0][0] if created else 0} written")

    async def write_keys(self, records: Sequence[KeyRecord]) -> None:
        """Write key records (pages of a hash or a stream add to what earlier pages wrote), in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for record in records:
            key = self.keys.absolute(record.name)
            if isinstance(record, HashRecord):
                if record.fields:
                    pipe.hset(key, mapping=record.fields)  # type: ignore[arg-type]
            elif isinstance(record, StreamRecord):
                for entry_id, fields in record.entries:
                    pipe.xadd(key, fields, id=entry_id)  # type: ignore[arg-type]
            else:
                pipe.set(key, record.value)
            if record.ttl_ms is not None:
                pipe.pexpire(key, max(record.ttl_ms, 1))
        await pipe.execute()


def _identifier(name: str) -> str:
    if not IDENTIFIER.fullmatch(name):
        raise BackupError(f"{name!r} is not a label or edge type a backup can write")
    return name


def _rows(reply: Any) -> list[list[Any]]:
    """The rows of a compact GRAPH.RO_QUERY reply inside a transaction; none when the graph does not exist."""
    if isinstance(reply, Exception):
        if "empty key" in str(reply):
            return []
        raise reply
    return compact_rows(reply)


def _node(row: list[Any]) -> NodeRecord:
    node_id, labels, props = row
    for label in labels:
        _identifier(label)
    return NodeRecord(id=node_id, labels=labels, props=props)


def _edge(row: list[Any]) -> EdgeRecord:
    start, end, rel_type, props = row
    return EdgeRecord(type=_identifier(rel_type), start=start, end=end, props=props)


def _text(value: bytes | str | int) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
