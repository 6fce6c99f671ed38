"""Ingest as the bench does it, timed: the planned beads in batches with many requests in flight, their
RELATED_TO edges, the long-content corpus and session events. Beside the beads and the long content, when
the hub runs in-process, its embedder alone on the same texts: the floor of ingest.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from random import Random

from recall_schemas import CreateBead

from recall_hub.bench.corpus import LONG_WORDS, long_beads
from recall_hub.bench.results import Throughput
from recall_hub.bench.workload import ProgressFn, Workload
from recall_hub.retrieval.embedding import bead_chunks

log = logging.getLogger(__name__)

INGEST_BATCH = 64
"""Beads per create_beads request when the bench ingests."""
INGEST_BATCHES_IN_FLIGHT = 3
LONG_BATCH = 8
"""Long beads per create_beads request."""


async def pool(
    count: int,
    concurrency: int,
    call: Callable[[int], Awaitable[None]],
    progress: ProgressFn | None,
    label: str,
) -> Throughput:
    """Run ``call(0..count-1)`` with ``concurrency`` in flight; the per-request latencies too."""
    indexes = iter(range(count))
    latencies: list[float] = []
    errors = 0
    done = 0
    step = max(1, count // 10)

    async def worker() -> None:
        nonlocal errors, done
        for i in indexes:
            t0 = time.perf_counter_ns()
            try:
                await call(i)
            except Exception as exc:
                errors += 1
                if errors <= 5:
                    log.warning("%s #%d failed: %s: %s", label, i, type(exc).__name__, exc)
                continue
            latencies.append((time.perf_counter_ns() - t0) / 1e6)
            done += 1
            if progress is not None and done % step == 0:
                progress(f"{label}: {done}/{count}")

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, count)))))
    seconds = time.perf_counter() - start
    return Throughput(label, count - errors, seconds, errors, latencies)


async def ingest_beads(w: Workload, progress: ProgressFn | None) -> list[Throughput]:
    """The groups, then the planned beads and their RELATED_TO edges, after the embedder alone on their texts."""
    data, config = w.data, w.config
    for group_id, (ops, agents) in data.groups.items():
        await w.clients[ops].create_group(f"bench group {group_id}", group_id=group_id)
        for agent in agents:
            await w.clients[ops].add_member(group_id, agent)
    # Every identity writes at once, each session in its own order: round-robin over the sessions in
    # a shuffled order, so two beads of one session are never in flight together and the hub's
    # automatic FOLLOWS_FROM chains follow the planned order.
    runs: dict[str | int, list[int]] = {}
    for i, plan in enumerate(data.beads):
        runs.setdefault(plan.session_id if plan.session_id is not None else i, []).append(i)
    queues = list(runs.values())
    Random(config.seed + 4).shuffle(queues)
    order = [q[k] for k in range(max(map(len, queues), default=0)) for q in queues if k < len(q)]

    # Each identity sends its beads in batches (create_beads), in plan order, so its sessions keep
    # their order; identities write at once, up to the configured concurrency.
    by_creator: dict[str, list[int]] = {}
    for i in order:
        by_creator.setdefault(data.beads[i].creator, []).append(i)
    batches = [
        (creator, indexes[k : k + INGEST_BATCH])
        for creator, indexes in by_creator.items()
        for k in range(0, len(indexes), INGEST_BATCH)
    ]
    locks = {creator: asyncio.Lock() for creator in by_creator}
    errors = 0

    async def create(k: int) -> None:
        nonlocal errors
        creator, indexes = batches[k]
        async with locks[creator]:  # one batch of an identity at a time: its order is kept
            items = await w.clients[creator].create_beads(
                [CreateBead(title=data.beads[i].title, content=data.beads[i].content, **data.beads[i].fields())
                 for i in indexes],
                batch_size=INGEST_BATCH,
            )
        for i, item in zip(indexes, items, strict=True):
            if item.bead_id is not None:
                w.bead_ids[i] = item.bead_id
            else:
                errors += 1

    embedder_alone = await _embedder_alone(w, [f"{p.title}\n{p.content}" for p in data.beads])
    # A batch is many requests' worth of work: a few at a time keep the hub busy without queueing.
    batched = await pool(len(batches), min(config.concurrency, INGEST_BATCHES_IN_FLIGHT), create, progress,
                         "ingest beads")
    beads = Throughput(
        f"beads (create_beads, batches of {INGEST_BATCH})", len(w.bead_ids), batched.seconds, errors,
        batched.latencies_ms,
    )
    # FOLLOWS_FROM is the hub's own automatic link on create; the bench adds the RELATED_TO edges.
    edges = [(a, b) for a, b in data.related_to if a in w.bead_ids and b in w.bead_ids]

    async def link(k: int) -> None:
        a, b = edges[k]
        strength = round(0.3 + 0.7 * ((a * 7919 + b) % 100) / 100, 2)
        await w.clients[data.beads[a].creator].add_relationship(
            w.bead_ids[a], w.bead_ids[b], "RELATED_TO", strength=strength
        )

    links = await pool(len(edges), config.concurrency, link, progress, "ingest edges")
    links.name = "edges (add_relationship, RELATED_TO)"
    return [t for t in (embedder_alone, beads, links) if t is not None]


async def _embedder_alone(w: Workload, texts: list[str]) -> Throughput | None:
    """The in-process hub's embedder on the beads' texts, batched, nothing else: the floor of ingest."""
    if w.embedder is None or not texts:
        return None
    sample = texts[: min(len(texts), 512)]
    latencies = []
    start = time.perf_counter()
    for k in range(0, len(sample), 32):
        t0 = time.perf_counter_ns()
        await w.embedder.embed(sample[k : k + 32])
        latencies.append((time.perf_counter_ns() - t0) / 1e6)
    seconds = time.perf_counter() - start
    return Throughput("embedder alone (batches of 32, same texts)", len(sample), seconds, 0, latencies)


async def ingest_long(w: Workload, progress: ProgressFn | None) -> list[Throughput]:
    """Long beads written by the caller (``create_beads``), counted in chunks, beside the embedder alone on the
    same chunks: the floor of long-content ingest."""
    beads = long_beads(w.data, w.config.seed + 11)
    window = w.embedder.window_tokens if w.embedder is not None else None
    chunks = [text for bead in beads for text in bead_chunks(bead.model_dump(), window)]
    alone = None
    if w.embedder is not None:
        started = time.perf_counter()
        for k in range(0, len(chunks), 32):
            await w.embedder.embed(chunks[k : k + 32])
        alone = Throughput(
            f"embedder alone on their chunks ({window} tokens each)", len(chunks), time.perf_counter() - started, 0, []
        )
    started = time.perf_counter()
    errors = 0
    for k in range(0, len(beads), LONG_BATCH):
        items = await w.client.create_beads(beads[k : k + LONG_BATCH], batch_size=LONG_BATCH)
        errors += sum(1 for item in items if item.bead_id is None)
        if progress is not None:
            progress(f"ingest long beads: {min(k + LONG_BATCH, len(beads))}/{len(beads)}")
    long = Throughput(
        f"long beads ({LONG_WORDS} words, {len(chunks) / len(beads):.1f} chunks each; counted in chunks)",
        len(chunks), time.perf_counter() - started, errors, [],
    )
    return [t for t in (alone, long) if t is not None]


async def publish_events(w: Workload, progress: ProgressFn | None) -> tuple[Throughput, list[str]]:
    """``session.continued`` events through JetStream, each acknowledged once stored: the path the
    JetStream sync policy is on (``--durability``)."""
    sessions = list(w.data.sessions.items())
    count = min(w.config.samples, 1000) if sessions else 0
    event_ids = [f"bench{secrets.token_hex(4)}{k}" for k in range(count)]

    async def publish(k: int) -> None:
        session_id, (owner, _) = sessions[k % len(sessions)]
        await w.clients[owner].events.session_continued(session_id, event_id=event_ids[k])

    result = await pool(count, w.config.concurrency, publish, progress, "ingest events")
    result.name = "events (session.continued, JetStream publish)"
    return result, event_ids
