"""`recall bench`: latency and throughput of the hub through the bus, beside the physical floor.

One run builds a realistic synthetic memory (identities, groups, sessions, beads and edges), ingests
it through the client library with ``concurrency`` requests in flight, then times each operation one
request at a time and, in the same run, a bare NATS request/reply of the same size through the same
nats-server (the floor). Results are ratios to that floor as well as absolute times.

This module wires one run: the servers and the in-process hub, the data (:mod:`.corpus`), ingest
(:mod:`.ingest`), the operations timed (:mod:`.workload`) by the latency harness (:mod:`.latency`) with
its probes (:mod:`.probes`), and the report (:mod:`.results`, :mod:`.report`), whose entry points it
re-exports.

Usage (what ``recall bench --beads 1000`` does)::

    report = asyncio.run(run_bench(BenchConfig(beads=1000)))
    print(render(report))
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import secrets
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import nats
from nats.aio.client import Client as NATS
from recall_client import RecallClient
from recall_schemas.subjects import inbox_prefix

from recall_hub.bench.config import BenchConfig
from recall_hub.bench.corpus import bench_queries, build_dataset, summarize
from recall_hub.bench.ingest import ingest_beads, ingest_long, publish_events
from recall_hub.bench.latency import get_sizes, measure
from recall_hub.bench.machine import code_version, describe_machine, load_average
from recall_hub.bench.probes import GcWatch, HubProbe, SizeTap
from recall_hub.bench.report import markdown, render, to_json
from recall_hub.bench.results import BenchReport
from recall_hub.bench.workload import FLOORS, LATENCY_OPS, ProgressFn, Workload
from recall_hub.config import HubSettings
from recall_hub.service.server import running_hub
from recall_hub.tooling.stack import DURABILITY, EmbeddedStack

__all__ = ["BenchConfig", "BenchReport", "markdown", "render", "run_bench", "to_json"]

log = logging.getLogger(__name__)


async def _connect(url: str, ai_id: str) -> NATS:
    return await nats.connect(
        url, name=f"recall-bench:{ai_id}", inbox_prefix=inbox_prefix(ai_id).encode(), max_reconnect_attempts=3
    )


async def _servers(
    config: BenchConfig, cleanup: contextlib.AsyncExitStack, say: ProgressFn
) -> tuple[str, str | None, str | None, str]:
    """The NATS, FalkorDB and Redis URLs of the run and the setup line saying what serves them: an embedded
    stack started here (stopped by ``cleanup``) when the configuration names no server."""
    nats_url, falkordb_url, redis_url = config.nats_url, config.falkordb_url, config.redis_url
    if nats_url is None and falkordb_url is None and redis_url is None:
        if config.data_dir is not None:
            data_dir = config.data_dir
        else:
            tmp = tempfile.TemporaryDirectory(prefix="recall-bench-")
            cleanup.callback(tmp.cleanup)
            data_dir = Path(tmp.name)
        say(f"starting the embedded stack in {data_dir}")
        stack = EmbeddedStack(data_dir, **DURABILITY[config.durability])
        await asyncio.to_thread(stack.start)
        cleanup.push_async_callback(asyncio.to_thread, stack.stop)
        setup = (
            "embedded stack (nats-server + redis-server/FalkorDB from their wheels, loopback); durability "
            f"{config.durability}: Redis appendfsync {stack.redis_appendfsync}, "
            f"JetStream sync {stack.jetstream_sync}"
        )
        return stack.nats_url, stack.redis_url, stack.redis_url, setup
    if nats_url is None or (config.in_process_hub and falkordb_url is None):
        raise ValueError("give nats_url (and falkordb_url for an in-process hub), or no URL at all")
    falkordb_url = falkordb_url or redis_url
    redis_url = redis_url or falkordb_url
    return nats_url, falkordb_url, redis_url, "external servers"


async def run_bench(config: BenchConfig, progress: ProgressFn | None = None) -> BenchReport:
    """Build the data, ingest it, time every operation and the floor; tear down what it started."""
    started_at = datetime.now(UTC)
    t_start = time.perf_counter()
    load_start = load_average()
    code = await asyncio.to_thread(code_version)  # at the start: the code this run imported
    tag = secrets.token_hex(3)
    graph_name = config.graph_name or f"bench_{tag}"
    loads = [load_start]

    def say(message: str) -> None:
        loads.append(load_average())
        if progress is not None:
            progress(message)

    async with contextlib.AsyncExitStack() as cleanup:
        nats_url, falkordb_url, redis_url, setup = await _servers(config, cleanup, say)
        probe: HubProbe | None = None
        if config.in_process_hub:
            assert falkordb_url is not None and redis_url is not None
            settings = HubSettings(
                nats_url=nats_url, falkordb_url=falkordb_url, redis_url=redis_url, graph_name=graph_name
            )
            if config.embedder is not None:
                settings.embedder = settings.embedder.model_copy(update={"kind": config.embedder})
            settings.create_settle = config.create_settle  # type: ignore[assignment]
            service = await cleanup.enter_async_context(running_hub(settings))
            if config.graph_name is None and config.nats_url is not None:
                cleanup.push_async_callback(_delete_graph, falkordb_url, graph_name)
            probe = HubProbe.attach(service.ctx)
            cleanup.callback(probe.detach)
            setup += f"; hub in-process (same process and event loop as the client), graph {graph_name}"
            setup += f"; embedder {settings.embedder.kind} ({service.ctx.embedder.model_id})"
            setup += f"; sentence vectors {'on' if settings.sentence_vectors else 'off'}"
            setup += f"; late interaction {'on' if settings.late_interaction else 'off'}"
            setup += f"; creates settled {settings.create_settle}"
        else:
            setup += "; external hub"

        say(f"planning {config.beads} beads (seed {config.seed})")
        data = await asyncio.to_thread(build_dataset, config.beads, config.seed, tag, config.related_per_bead)
        clients: dict[str, RecallClient] = {}
        caller = data.agents[0]
        tap: SizeTap | None = None
        for ai in data.identities:
            nc = await _connect(nats_url, ai)
            cleanup.push_async_callback(nc.drain)
            if ai == caller:
                tap = SizeTap(nc)
            clients[ai] = RecallClient(ai, nats_url, nc=nc, timeout=config.timeout, retries=0)
        assert tap is not None
        queries = bench_queries(data, config.seed, config.samples)
        w = Workload(
            config=config, data=data, clients=clients, caller=caller, tap=tap, queries=queries, nats_url=nats_url,
            cleanup=cleanup, redis_url=redis_url, embedder=service.ctx.embedder if config.in_process_hub else None,
        )

        ingest = await ingest_beads(w, say)
        ingest += await ingest_long(w, say)
        events, event_ids = await publish_events(w, say)
        ingest.append(events)
        if config.in_process_hub:
            for event_id in event_ids:  # applied before latency is timed, so the consumer is idle then
                await service.events.wait_for(event_id, within=300)
        edge_counts = await _edge_counts(falkordb_url, graph_name) if config.in_process_hub else None
        visible_plans = data.visible_to(caller)
        w.visible = [w.bead_ids[i] for i in visible_plans if i in w.bead_ids]
        if not w.visible:
            raise RuntimeError("no bead was ingested; see the log")
        w.get_sizes = await get_sizes(w)
        summary = summarize(data, caller, len(visible_plans), queries, edge_counts)
        # The plan of every bead is no longer needed: dropped, so the bench's own objects do not
        # lengthen the garbage collections of the hub it shares a process with.
        data.beads = []
        w.bead_ids.clear()
        gc.collect()
        say("timing operations one request at a time")
        with GcWatch() as gc_watch:
            measured = await measure(w, FLOORS + LATENCY_OPS, probe, say)
        machine = await describe_machine(clients[caller].nc, falkordb_url)
        machine.code = code
        machine.load = (*loads, load_average())
    return BenchReport(
        config=config,
        machine=machine,
        dataset=summary,
        setup=setup,
        started_at=started_at,
        duration_s=time.perf_counter() - t_start,
        ingest=ingest,
        floor=measured[0],
        ops=measured[1:],
        command=config.command(),
        gc_pauses=gc_watch.pauses,
    )


async def _edge_counts(url: str | None, graph_name: str) -> dict[str, int] | None:
    """Edges between beads by type, as stored; hub-made ones (auto-links) counted apart."""
    if url is None:
        return None
    from recall_hub.store.beads import BeadStore
    from recall_hub.store.graph import GraphStore

    try:
        graph = GraphStore(url, graph_name)  # connects at once
    except Exception as exc:
        log.warning("could not count the edges of %s: %s", graph_name, exc)
        return None
    try:
        return await BeadStore(graph).system_edge_counts()
    except Exception as exc:
        log.warning("could not count the edges of %s: %s", graph_name, exc)
        return None
    finally:
        await graph.aclose()


async def _delete_graph(url: str, graph_name: str) -> None:
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(url)
    try:
        await client.execute_command("GRAPH.DELETE", graph_name)  # type: ignore[no-untyped-call]
    except Exception as exc:
        log.warning("could not delete bench graph %s: %s", graph_name, exc)
    finally:
        await client.aclose()
