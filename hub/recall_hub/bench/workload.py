"""What the bench times: the operations (:data:`LATENCY_OPS`) and the floors they are compared with
(:data:`FLOORS`), and the :class:`Workload` (clients, ingested beads, queries) they draw on.

Each entry is a name and a coroutine factory that, given the :class:`Workload`, returns the coroutine
function timed per sample; adding an operation means adding one entry.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from random import Random
from typing import Any

import nats
from nats.aio.msg import Msg
from recall_client import RecallClient
from recall_schemas.subjects import request_subject

from recall_hub.bench.config import BenchConfig
from recall_hub.bench.corpus import Dataset
from recall_hub.bench.probes import SizeTap

ProgressFn = Callable[[str], None]
SampleFn = Callable[[int], Awaitable[int]]
"""One timed call for sample ``i``; returns the size of its result (hits, nodes, ...)."""
Factory = Callable[["Workload"], Awaitable[SampleFn]]


@dataclass
class Workload:
    """Everything an operation factory may use."""

    config: BenchConfig
    data: Dataset
    clients: dict[str, RecallClient]
    caller: str
    tap: SizeTap
    queries: list[str]
    nats_url: str
    cleanup: contextlib.AsyncExitStack
    bead_ids: dict[int, str] = field(default_factory=dict)
    """Plan index -> bead id, for the beads ingested."""
    visible: list[str] = field(default_factory=list)
    """Bead ids the caller may see."""
    get_sizes: tuple[int, int] = (0, 0)
    """Median request and reply bytes of the caller's get_bead calls: the NATS floor's payloads."""
    redis_url: str | None = None
    embedder: Any = None
    """The in-process hub's embedder (None with an external hub): timed alone for the ingest floor."""

    @property
    def client(self) -> RecallClient:
        return self.clients[self.caller]


@dataclass(frozen=True)
class LatencyOp:
    name: str
    op: str
    description: str
    """What one sample does, for whoever reads the entry (the report does not print it)."""
    make: Factory
    target_ms: float | None = None
    unit: str = ""


async def _make_create(w: Workload) -> SampleFn:
    mine: list[str | None] = [s for s, (owner, _) in w.data.sessions.items() if owner == w.caller] or [None]
    rng = Random(w.config.seed + 1)
    plans = []
    for _ in range(w.config.samples + w.config.warmup):  # planned ahead: only the call is timed
        session = rng.choice(mine)
        group = w.data.sessions[session][1] if session is not None else None
        plans.append(w.data.plan_bead(rng, w.caller, session, group))

    async def create(i: int) -> int:
        plan = plans[i % len(plans)]
        await w.client.create_bead(plan.title, plan.content, **plan.fields())
        return 1

    return create


async def _make_create_then_find(w: Workload) -> SampleFn:
    """A new bead, then at once a vector search for its own title: what a writer that reads its own write
    pays (with ``--create-settle background`` the search waits for the handed-off embedding)."""
    rng = Random(w.config.seed + 11)

    async def create_then_find(i: int) -> int:
        title = f"{w.data.text(w.data.draw_words(rng, 6))} {secrets.token_hex(4)}"
        bead = await w.client.create_bead(title, "")
        hits = (await w.client.search_beads(title, mode="vector", limit=5)).hits
        return int(any(h.bead.bead_id == bead.bead_id for h in hits))

    return create_then_find


async def _make_get(w: Workload) -> SampleFn:
    rng = Random(w.config.seed + 2)

    async def get(i: int) -> int:
        await w.client.get_bead(rng.choice(w.visible))
        return 1

    return get


def _searching(**options: Any) -> Factory:
    """A search factory: the bench's queries, limit 20, with these request options."""

    async def make(w: Workload) -> SampleFn:
        async def search(i: int) -> int:
            result = await w.client.search_beads(w.queries[i % len(w.queries)], limit=20, **options)
            return len(result.hits)

        return search

    return make


async def _make_traverse(w: Workload) -> SampleFn:
    rng = Random(w.config.seed + 3)

    async def traverse(i: int) -> int:
        graph = await w.client.traverse_graph(rng.choice(w.visible), max_depth=3, limit=200)
        return len(graph.nodes)

    return traverse


async def _make_nats_floor(w: Workload) -> SampleFn:
    """A plain nats-py echo responder (no micro) on its own connection, like the hub's; the request
    goes over the caller's own connection, with the median size of a real get_bead request and reply."""
    request_size, reply_size = w.get_sizes
    responder = await nats.connect(w.nats_url, name="recall-bench-floor")
    w.cleanup.push_async_callback(responder.drain)
    body = b"x" * reply_size
    subject = request_subject(w.caller, "bench_floor")

    async def echo(msg: Msg) -> None:
        await msg.respond(body)

    await responder.subscribe(subject, cb=echo)
    await responder.flush()
    payload = b"x" * request_size
    nc = w.client.nc

    async def floor(i: int) -> int:
        await nc.request(subject, payload, timeout=w.config.timeout)
        return 1

    return floor


async def _make_find_similar(w: Workload) -> SampleFn:
    rng = Random(w.config.seed + 4)

    async def similar(i: int) -> int:
        result = await w.client.find_similar(rng.choice(w.visible), threshold=0.0, limit=10)
        return len(result.hits)

    return similar


async def _make_why(w: Workload) -> SampleFn:
    async def why(i: int) -> int:
        result = await w.client.why(w.queries[i % len(w.queries)], hops=2)
        return len(result.graph.nodes)

    return why


async def _make_vsim_floor(w: Workload) -> SampleFn:
    """A bare VSIM (k=20) straight to Redis on the largest vector set the caller may read, with real
    query embeddings: what the hybrid search's vector list costs at the store, nothing else."""
    import numpy as np
    import redis.asyncio

    from recall_hub.embedders import EmbedderConfig, make_embedder
    from recall_hub.store.keys import Keys

    client = redis.asyncio.Redis.from_url(w.redis_url or "redis://127.0.0.1:6379")
    w.cleanup.push_async_callback(client.aclose)
    groups = [g.group_id for g in await w.client.list_groups()]
    scopes = ("global", f"private:{w.caller}", *(f"group:{g}" for g in groups))
    best, size = "", -1
    async for raw in client.scan_iter(match=Keys.vector_sets_pattern(w.config.graph_name or "*")):
        key = raw.decode()
        if Keys.scope_of_vector_set(key) in scopes and (n := int(await client.execute_command("VCARD", key))) > size:  # type: ignore[no-untyped-call]
            best, size = key, n
    embedder = make_embedder(EmbedderConfig(kind=w.config.embedder or "local"))
    try:
        vectors = await embedder.embed_queries(list(dict.fromkeys(w.queries))[:100])
    finally:
        await embedder.aclose()
    blobs = [np.asarray(v, dtype=np.float32).tobytes() for v in vectors]

    async def vsim(i: int) -> int:
        reply = await client.execute_command("VSIM", best, "FP32", blobs[i % len(blobs)], "COUNT", 20)  # type: ignore[no-untyped-call]
        return len(reply)

    return vsim


FLOORS: list[LatencyOp] = [
    LatencyOp(
        "floor: NATS echo",
        "-",
        "bare request/reply through the same nats-server, get-sized payloads",
        _make_nats_floor,
    ),
    LatencyOp(
        "floor: bare VSIM",
        "-",
        "VSIM k=20 straight to Redis on the caller's largest vector set, real query embeddings",
        _make_vsim_floor,
        unit="hits",
    ),
]
"""The first entry is the reference of every ratio."""

LATENCY_OPS: list[LatencyOp] = [
    LatencyOp("create", "create_bead", "a new bead in one of the caller's sessions", _make_create, 100.0),
    LatencyOp(
        "create, then find it",
        "create_bead",
        "a new private bead, then a vector search for its title (read your own write)",
        _make_create_then_find,
        None,
        "found",
    ),
    LatencyOp("get", "get_bead", "a random bead the caller may see", _make_get, 10.0),
    LatencyOp(
        "search keyword",
        "search_beads",
        "1-3 vocabulary words, mode keyword, limit 20",
        _searching(mode="keyword"),
        500.0,
        "hits",
    ),
    LatencyOp(
        "search hybrid",
        "search_beads",
        "the same queries, default request (hybrid, priors), limit 20",
        _searching(),
        500.0,
        "hits",
    ),
    LatencyOp(
        "find_similar",
        "find_similar",
        "a random visible bead, threshold 0, limit 10",
        _make_find_similar,
        None,
        "hits",
    ),
    LatencyOp(
        "why (2 hops)",
        "why",
        "the same queries, 3 seeds, 2 hops, limit 50",
        _make_why,
        None,
        "nodes",
    ),
    LatencyOp(
        "traverse depth 3",
        "traverse_graph",
        "from a random visible bead, both directions, limit 200",
        _make_traverse,
        200.0,
        "nodes",
    ),
]
"""Timed one request at a time, in the same rounds as the floors."""
