"""``recall backup`` and ``recall restore``: a point-in-time export of one graph's source data to a
file (:mod:`recall_hub.tooling.backup_file`), and its restore into an empty graph with the derived
indexes rebuilt. What is kept and how one instant is read: :mod:`recall_hub.store.backup`.

Restore checks the whole file first (format, version, checksum), so a damaged file changes nothing;
then writes the graph in batches (nodes, then edges), then the Redis keys, then re-embeds every bead
with the configured embedder (:func:`recall_hub.ops.indexing.reindex`, which also tells every hub to
rebuild its keyword index from the graph).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from redis.asyncio import Redis

from recall_hub.config import HubSettings
from recall_hub.context import HubContext
from recall_hub.embedders import Embedder
from recall_hub.ops.indexing import reindex
from recall_hub.store.backup import RestoreTarget, SnapshotReader
from recall_hub.store.backup_records import (
    Counts,
    EdgeRecord,
    HashRecord,
    Header,
    KeyRecord,
    NodeRecord,
    StreamRecord,
    StringRecord,
)
from recall_hub.store.forget import ForgetStore
from recall_hub.store.keys import Keys
from recall_hub.tooling.backup_file import BackupWriter, read_records, verify
from recall_hub.tooling.forget_ledger import ledger_from_backup, reapply

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]
"""``progress(stage, done, total)``; stages: nodes, edges, keys (backup and restore), vectors (restore)."""

NODE_BATCH = 500
EDGE_BATCH = 1000
KEY_BATCH = 50
"""Key records per round trip (a record holds up to a page of a hash or stream)."""
_EVERY = 1000


class TargetNotEmpty(RuntimeError):
    """The target graph already holds data, and ``force`` was not given."""


@dataclass(frozen=True)
class BackupReport:
    path: Path
    header: Header
    records: int
    bytes: int
    seconds: float
    transaction_ms: float
    """The round trip of the point-in-time transaction, reply included: an upper bound on how long the
    server held other clients."""


@dataclass(frozen=True)
class RestoreReport:
    header: Header
    nodes: int
    edges: int
    keys: int
    embedded: int
    model_id: str
    seconds: float


async def backup(settings: HubSettings, out: Path, progress: Progress | None = None) -> BackupReport:
    """Write graph ``settings.graph_name`` and its backed-up keys, as of one instant, to ``out``."""
    started = time.perf_counter()
    graph_redis = Redis.from_url(settings.falkordb_url)
    redis = graph_redis if settings.redis_url == settings.falkordb_url else Redis.from_url(settings.redis_url)
    reader = SnapshotReader(graph_redis, redis, Keys(settings.graph_name))
    try:
        taken = time.perf_counter()
        snapshot = await reader.take()
        transaction_ms = (time.perf_counter() - taken) * 1000
        if snapshot.consistency != "one-transaction":
            log.warning("FalkorDB and Redis are separate servers: the graph and the keys are read one after the other")
        try:
            header = Header(
                graph=settings.graph_name,
                created_at=datetime.now(UTC),
                consistency=snapshot.consistency,
                embedder_models=snapshot.embedder_models(),
                counts=Counts(
                    nodes=_count(label for n in snapshot.nodes for label in n.labels),
                    edges=_count(e.type for e in snapshot.edges),
                    keys=snapshot.key_counts(),
                ),
            )
            with BackupWriter(out) as writer:
                writer.write(header)
                for done, node in enumerate(snapshot.nodes, start=1):
                    writer.write(node)
                    _tick(progress, "nodes", done, len(snapshot.nodes))
                _finish(progress, "nodes", len(snapshot.nodes))
                for done, edge in enumerate(snapshot.edges, start=1):
                    writer.write(edge)
                    _tick(progress, "edges", done, len(snapshot.edges))
                _finish(progress, "edges", len(snapshot.edges))
                done = 0
                async for key_record in reader.key_records(snapshot):
                    writer.write(key_record)
                    done += 1
                    _tick(progress, "keys", done, len(snapshot.keys))
                _finish(progress, "keys", len(snapshot.keys))
                written = writer.records
        finally:
            await reader.drop(snapshot)
    finally:
        await graph_redis.aclose()
        if redis is not graph_redis:
            await redis.aclose()
    size = await asyncio.to_thread(lambda: out.stat().st_size)
    return BackupReport(out, header, written, size, time.perf_counter() - started, transaction_ms)


async def restore(
    settings: HubSettings,
    path: Path,
    *,
    force: bool = False,
    progress: Progress | None = None,
    embedder: Embedder | None = None,
    forget_ledger: Path | None = None,
) -> RestoreReport:
    """Restore the backup at ``path`` into graph ``settings.graph_name`` (any name) and rebuild what is
    derived. Raises :class:`~recall_hub.tooling.backup_file.BackupFileError` for a damaged file and
    :class:`TargetNotEmpty` for a graph that holds data (unless ``force``: then it is replaced);
    neither changes anything.

    Forgotten beads stay forgotten (:mod:`recall_hub.tooling.forget_ledger`): the tombstones of the
    target (when replaced), of the backup and of the backup file ``forget_ledger`` are written before
    anything else, and every bead they name is removed again once the records are in."""
    started = time.perf_counter()
    header = await asyncio.to_thread(verify, path)
    carried = await asyncio.to_thread(ledger_from_backup, forget_ledger) if forget_ledger is not None else []
    ctx = await HubContext.connect(settings, embedder)
    try:
        target = RestoreTarget(ctx.graph, ctx.redis, ctx.keys)
        ledger = ForgetStore(ctx.graph, ctx.redis, ctx.keys)
        if await target.holds_data():
            if not force:
                raise TargetNotEmpty(
                    f"graph {settings.graph_name} already holds data: restore into an empty graph "
                    "(--graph NAME) or pass --force to replace everything in it"
                )
            carried += await ledger.system_tombstones()
            await target.clear()
        await ledger.system_write_tombstones(carried)
        writer = _RecordWriter(target, header, progress)
        for record in read_records(path):
            if isinstance(record, NodeRecord):
                await writer.node(record)
            elif isinstance(record, EdgeRecord):
                await writer.edge(record)
            elif isinstance(record, HashRecord | StreamRecord | StringRecord):
                await writer.key(record)
        await writer.flush_all()
        await reapply(ledger)
        await ctx.memberships.changed()
        embedded = await reindex(ctx, progress=(lambda d, t: progress("vectors", d, t)) if progress else None)
        model_id = ctx.embedder.model_id
    finally:
        await ctx.aclose()
    return RestoreReport(
        header, writer.nodes, writer.edges, writer.keys, embedded, model_id, time.perf_counter() - started
    )


class _RecordWriter:
    """Batches records and writes them in file order: nodes in the order of their ids in the backup (so
    the restored ids keep that order, and with it the order of every query that follows node ids),
    edges a type at a time, every node before the first edge, every edge before the first key."""

    def __init__(self, target: RestoreTarget, header: Header, progress: Progress | None) -> None:
        self.target = target
        self.progress = progress
        self.totals = {
            "nodes": sum(header.counts.nodes.values()),  # a node with two labels counts twice here
            "edges": sum(header.counts.edges.values()),
            "keys": sum(header.counts.keys.values()),
        }
        self.ids: dict[int, int] = {}
        self._nodes: list[NodeRecord] = []
        self._edges: dict[str, list[EdgeRecord]] = {}
        self._keys: list[KeyRecord] = []
        self._key_names: set[str] = set()
        self.nodes = self.edges = self.keys = 0
        self._finished: list[str] = []

    async def node(self, record: NodeRecord) -> None:
        self._nodes.append(record)
        if len(self._nodes) >= NODE_BATCH:
            await self._flush_nodes()

    async def edge(self, record: EdgeRecord) -> None:
        await self._flush_nodes()
        self._finish_before("edges")
        batch = self._edges.setdefault(record.type, [])
        batch.append(record)
        if len(batch) >= EDGE_BATCH:
            await self._flush_edges(record.type)

    async def key(self, record: KeyRecord) -> None:
        await self._flush_nodes()
        await self._flush_all_edges()
        self._finish_before("keys")
        self._keys.append(record)
        if len(self._keys) >= KEY_BATCH:
            await self._flush_keys()

    async def flush_all(self) -> None:
        await self._flush_nodes()
        await self._flush_all_edges()
        await self._flush_keys()
        self._finish_before("vectors")

    def _finish_before(self, stage: str) -> None:
        """Show the stages before ``stage`` as done, once each."""
        for earlier in ("nodes", "edges", "keys")[: ("nodes", "edges", "keys", "vectors").index(stage)]:
            if earlier not in self._finished:
                self._finished.append(earlier)
                _finish(self.progress, earlier, getattr(self, earlier))

    async def _flush_nodes(self) -> None:
        batch, self._nodes = self._nodes, []
        if batch:
            self.ids.update(await self.target.write_nodes(batch))
            self.nodes += len(batch)
            _tick(self.progress, "nodes", self.nodes, self.totals["nodes"], every=1)

    async def _flush_edges(self, rel_type: str) -> None:
        batch = self._edges.pop(rel_type, [])
        if batch:
            await self.target.write_edges(rel_type, batch, self.ids)
            self.edges += len(batch)
            _tick(self.progress, "edges", self.edges, self.totals["edges"], every=1)

    async def _flush_all_edges(self) -> None:
        for rel_type in list(self._edges):
            await self._flush_edges(rel_type)

    async def _flush_keys(self) -> None:
        if self._keys:
            await self.target.write_keys(self._keys)
            self._key_names.update(r.name for r in self._keys)
            self.keys = len(self._key_names)
            self._keys = []
            _tick(self.progress, "keys", self.keys, self.totals["keys"], every=1)


def _count(names: Iterable[str]) -> dict[str, int]:
    return dict(Counter(names))


def _tick(progress: Progress | None, stage: str, done: int, total: int, every: int = _EVERY) -> None:
    if progress is not None and done % every == 0:
        progress(stage, done, total)


def _finish(progress: Progress | None, stage: str, total: int) -> None:
    if progress is not None:
        progress(stage, total, total)


def stage_progress_bar(out: TextIO = sys.stderr, width: int = 40) -> Progress:
    """A progress bar per stage, on one line each (for the CLI)."""
    shown: list[str] = []
    started = time.perf_counter()

    def show(stage: str, done: int, total: int) -> None:
        nonlocal started
        if not shown or shown[-1] != stage:
            if shown:
                out.write("\n")
            shown.append(stage)
            started = time.perf_counter()
        filled = width * min(done, total) // max(total, 1)
        rate = done / max(time.perf_counter() - started, 1e-9)
        out.write(f"\r{stage:<8} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}, {rate:.0f}/s")
        out.flush()

    return show
