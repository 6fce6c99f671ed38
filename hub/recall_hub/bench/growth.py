"""`recall bench --suite growth`: how one graph grows — memory and query times at 10k, 100k, 1M beads.

Method. A private redis-server with FalkorDB (from the wheel, persistence off) gets the hub's indexes,
then synthetic beads are bulk-loaded by ``UNWIND`` batches (:class:`recall_hub.store.bulk.BulkLoader`) with
the node shape the store writes: every property of a created bead (a 300-character text), 40% private,
40% group, 20% global, 200 identities each in 3 of 50 groups, sessions of 50 beads chained by
``FOLLOWS_FROM``, and one ``RELATED_TO`` per bead to an earlier bead. At each size it records ``INFO memory``
``used_memory`` and ``GRAPH.MEMORY USAGE``, then times, through the store's own queries (round trip
included), as a random identity: ``get`` (one bead by id, visibility-checked), a group listing (newest 20),
the screening of 100 candidate ids (what every search does before ranking) and ``create`` (the full
create query: membership and session checks, merge on the idempotency key, the outbox entry) and then the
session link of each bead it created (the author's previous bead of the session found and linked
``FOLLOWS_FROM``: in a create's reply path, and per bead of a batch). Last, with the
append-only file turned on, the time the server takes to rewrite its files after a forget (what
:meth:`recall_hub.store.erasure.ErasureStore.compact_files` waits for: ``BGREWRITEAOF``, done).

Vector sets are measured apart (``--vector-max``, default 100k): random 384-dimension vectors, Q8, in one
set, with ``used_memory`` before and after and the time of a VSIM top-20.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from random import Random
from typing import Any

import numpy as np
from redis.asyncio import Redis

from recall_hub.store.beads import BeadStore
from recall_hub.store.bulk import BulkLoader
from recall_hub.store.erasure import ErasureStore
from recall_hub.store.graph import GraphStore
from recall_hub.store.keys import Keys
from recall_hub.store.records import content_hash
from recall_hub.store.sessions import AUTO_LINK_NOTE
from recall_hub.store.vectors import VectorStore
from recall_hub.tooling.replica import RedisNode

GRAPH = "recall_growth"
AIS, GROUPS, GROUPS_PER_AI, SESSION_BEADS, BATCH = 200, 50, 3, 50, 5_000
WORDS = (
    "deploy retry payment queue cache index latency schema migration rollback token budget review "
    "incident alert metric trace shard replica backup restore session group member handoff summary"
).split()


@dataclass
class GrowthRow:
    beads: int
    load_s: float
    used_memory_mb: float
    graph_memory_mb: float | None
    timings_ms: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Query name -> (p50, p99) in ms."""
    visible_share: float = 0.0
    """Of the ids screened, the share the caller could see (visibility filtered the rest)."""
    rewrite_s: float = 0.0
    """Seconds the server took to rewrite its append-only file (what an erasure after a forget waits for)."""

    @property
    def bytes_per_bead(self) -> float:
        return self.used_memory_mb * 1024 * 1024 / self.beads


@dataclass
class VectorRow:
    vectors: int
    used_memory_mb: float
    bytes_per_vector: float
    vsim_ms: tuple[float, float]


@dataclass
class GrowthReport:
    rows: list[GrowthRow]
    vectors: list[VectorRow]
    baseline_mb: float


class _Synthetic:
    """Deterministic synthetic beads, created in order (ids b_00000001, …)."""

    def __init__(self, seed: int = 7) -> None:
        self.random = Random(seed)
        self.memberships = {
            f"a_{i:04d}": self.random.sample(range(GROUPS), GROUPS_PER_AI) for i in range(AIS)
        }
        self.made = 0
        self.start_ms = 1_700_000_000_000

    def bead(self, n: int) -> dict[str, Any]:
        session = n // SESSION_BEADS
        owner = f"a_{session % AIS:04d}"
        roll = self.random.random()
        visibility = "private" if roll < 0.4 else "group" if roll < 0.8 else "global"
        group = f"g_{self.random.choice(self.memberships[owner]):03d}" if visibility == "group" else None
        text = " ".join(self.random.choice(WORDS) for _ in range(40))[:300]
        at = self.start_ms + n * 1000
        bead_id = f"b_{n:08d}"
        return {
            "bead_id": bead_id, "idem": f"{owner}:{bead_id}", "title": text[:60], "content": text,
            "content_hash": content_hash(text), "bead_type": "observation", "importance": 1 + n % 10,
            "tags": [self.random.choice(WORDS), f"t{n % 500}"], "created_at": at, "updated_at": at,
            "accessed_at": at, "created_by": owner, "session_id": f"s_{session:07d}", "subsession_id": None,
            "group_id": group, "visibility": visibility, "metadata": "{}", "status": "active",
            "provenance": "authored", "corroborated_by": [], "version": 1,
            "vec_model": "growth", "vec_scope": "global" if visibility == "global" else (
                f"group:{group}" if group else f"private:{owner}"),
        }


async def _load(bulk: BulkLoader, synthetic: _Synthetic, upto: int) -> None:
    while synthetic.made < upto:
        first, last = synthetic.made, min(upto, synthetic.made + BATCH)
        beads = [synthetic.bead(n) for n in range(first, last)]
        sessions = [
            {"session_id": b["session_id"], "owner": b["created_by"], "group_id": b["group_id"],
             "created_at": b["created_at"]}
            for n, b in zip(range(first, last), beads, strict=True) if n % SESSION_BEADS == 0
        ]
        if sessions:
            await bulk.sessions(sessions)
        await bulk.beads(beads)
        follows = [
            (b["bead_id"], f"b_{n - 1:08d}", b["created_at"])
            for n, b in zip(range(first, last), beads, strict=True) if n % SESSION_BEADS
        ]
        related = [
            (b["bead_id"], f"b_{synthetic.random.randrange(n):08d}", b["created_at"])
            for n, b in zip(range(first, last), beads, strict=True) if n
        ]
        await bulk.edges("FOLLOWS_FROM", follows)
        await bulk.edges("RELATED_TO", related)
        synthetic.made = last


async def _timed(runs: int, call: Callable[[int], Awaitable[object]]) -> tuple[float, float]:
    took = []
    for i in range(runs):
        began = time.perf_counter()
        await call(i)
        took.append((time.perf_counter() - began) * 1000)
    took.sort()
    return statistics.median(took), took[min(len(took) - 1, int(len(took) * 0.99))]


async def _measure(store: BeadStore, synthetic: _Synthetic, runs: int, row: GrowthRow) -> None:
    rnd = Random(11)
    ais = list(synthetic.memberships)
    total = synthetic.made

    def who(_: int) -> str:
        return rnd.choice(ais)

    async def get(i: int) -> object:
        return await store.get(who(i), f"b_{rnd.randrange(total):08d}")

    async def group_listing(i: int) -> object:
        caller = who(i)
        group = f"g_{rnd.choice(synthetic.memberships[caller]):03d}"
        return await store.listing(caller, "group", group, ascending=False, limit=20, after=None)

    screened: list[int] = []

    async def screen(i: int) -> object:
        ids = [f"b_{rnd.randrange(total):08d}" for _ in range(100)]
        found = await store.many(who(i), ids)
        screened.append(len(found))
        return found

    created: list[tuple[str, str]] = []

    async def create(i: int) -> object:
        caller = who(i)
        props = synthetic.bead(total + 10_000_000 + len(created))  # ids apart from the loaded ones
        props.update(created_by=caller, session_id=f"s_bench_{caller}", group_id=None, visibility="private")
        created.append((props["bead_id"], props["session_id"]))
        idem = props.pop("idem")
        return await store.create(caller, props, idem=idem)

    async def session_link(i: int) -> object:
        bead_id, session_id = created[i]
        return await store.system_link_session_predecessor(bead_id, session_id, AUTO_LINK_NOTE)

    row.timings_ms = {
        "get": await _timed(runs, get),
        "group listing (20)": await _timed(runs, group_listing),
        "screen 100 ids": await _timed(runs, screen),
        "create": await _timed(runs, create),
        "session link": await _timed(runs, session_link),
    }
    row.visible_share = sum(screened) / (100 * len(screened))


async def _rewrite_s(graph: GraphStore, redis: Redis) -> float:
    erasure = ErasureStore(graph, redis, Keys(GRAPH))
    if not (await redis.info("persistence")).get("aof_enabled"):
        await redis.config_set("appendonly", "yes")  # its first rewrite starts now: not the one timed
        await erasure.compact_files()
    began = time.perf_counter()
    await erasure.compact_files()
    return time.perf_counter() - began


async def _used_memory_mb(redis: Redis) -> float:
    return int((await redis.info("memory"))["used_memory"]) / (1024 * 1024)


async def _vector_rows(redis: Redis, sizes: list[int], dim: int = 384) -> list[VectorRow]:
    rows: list[VectorRow] = []
    store = VectorStore(redis, Keys(GRAPH), "growth")
    rng = np.random.default_rng(3)
    await redis.delete(store.key("global"))
    before = await _used_memory_mb(redis)
    made = 0
    for size in sizes:
        while made < size:
            chunk = min(2_000, size - made)
            vectors = rng.standard_normal((chunk, dim)).astype(np.float32)
            await store.add_many([
                (f"b_{made + i:08d}", "global", vectors[i], {"importance": 5}) for i in range(chunk)
            ])
            made += chunk
        used = await _used_memory_mb(redis) - before
        queries = rng.standard_normal((50, dim)).astype(np.float32)

        async def vsim_top20(i: int, queries: np.ndarray = queries) -> object:
            return await store.search(["global"], queries[i], 20)

        vsim = await _timed(50, vsim_top20)
        rows.append(VectorRow(size, used, used * 1024 * 1024 / size, vsim))
    await redis.delete(store.key("global"))
    return rows


async def run_growth(
    sizes: list[int], *, runs: int = 200, vector_max: int = 100_000,
    progress: Callable[[str], None] = lambda _: None,
) -> GrowthReport:
    with tempfile.TemporaryDirectory(prefix="recall-growth-") as tmp:
        node = RedisNode(Path(tmp), appendonly=False).start()
        graph = GraphStore(node.url, GRAPH)
        redis = Redis.from_url(node.url)
        try:
            baseline = await _used_memory_mb(redis)
            await graph.ensure_schema()
            bulk = BulkLoader(graph)
            synthetic = _Synthetic()
            await bulk.members([
                {"ai_id": ai, "group_id": f"g_{g:03d}", "role": "ops" if g % 7 == 0 else "member"}
                for ai, groups in synthetic.memberships.items() for g in groups
            ])
            rows = []
            for size in sorted(sizes):
                began = time.perf_counter()
                await _load(bulk, synthetic, size)
                load_s = time.perf_counter() - began
                used = await _used_memory_mb(redis) - baseline
                usage = await bulk.memory_mb()
                graph_mb = usage.get("total_graph_sz_mb")
                row = GrowthRow(size, load_s, used, float(graph_mb) if graph_mb is not None else None)
                progress(f"{size:,} beads loaded in {load_s:.0f} s, {used:,.0f} MB; timing…")
                await _measure(BeadStore(graph), synthetic, runs, row)
                row.rewrite_s = await _rewrite_s(graph, redis)
                rows.append(row)
            vector_sizes = [s for s in sorted(sizes) if s <= vector_max]
            progress(f"vector sets at {vector_sizes}…")
            vectors = await _vector_rows(redis, vector_sizes) if vector_sizes else []
        finally:
            await redis.aclose()
            await graph.aclose()
            node.stop()
    return GrowthReport(rows, vectors, baseline)


def render_growth(report: GrowthReport) -> str:
    names = list(report.rows[0].timings_ms) if report.rows else []
    head = "| beads | load s | used_memory MB | bytes/bead | GRAPH.MEMORY MB | " + " | ".join(
        f"{n} p50 / p99 ms" for n in names) + " | files rewritten after a forget s |"
    lines = [
        "Graph growth (one FalkorDB graph, synthetic beads of the store's shape; times are round trips "
        "through the store's queries, as a random identity)",
        "",
        head,
        "|" + "---|" * (6 + len(names)),
    ]
    for row in report.rows:
        graph_mb = "n/a" if row.graph_memory_mb is None else f"{row.graph_memory_mb:,.0f}"
        cells = " | ".join(f"{p50:.2f} / {p99:.2f}" for p50, p99 in row.timings_ms.values())
        lines.append(
            f"| {row.beads:,} | {row.load_s:.0f} | {row.used_memory_mb:,.0f} | {row.bytes_per_bead:,.0f} | "
            f"{graph_mb} | {cells} | {row.rewrite_s:.1f} |"
        )
    if report.vectors:
        lines += [
            "", "Vector set (384 dimensions, Q8, one set)", "",
            "| vectors | used_memory MB | bytes/vector | VSIM top-20 p50 / p99 ms |", "|---|---|---|---|",
        ]
        lines += [
            f"| {v.vectors:,} | {v.used_memory_mb:,.0f} | {v.bytes_per_vector:,.0f} | "
            f"{v.vsim_ms[0]:.2f} / {v.vsim_ms[1]:.2f} |"
            for v in report.vectors
        ]
    return "\n".join(lines)
