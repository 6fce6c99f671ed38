"""One hub process: connect to NATS and the stores, serve until told to stop."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import nats
import nats.errors
from nats.aio.client import Client as NATS
from recall_client.connections import close_nats
from recall_schemas.tasks import stop_tasks

from recall_hub.config import HubSettings
from recall_hub.context import HubContext
from recall_hub.ops.after_commit import sweep_forever, take_over_forever
from recall_hub.ops.erasure import erase_forever
from recall_hub.ops.indexing import repair, repair_token_signs
from recall_hub.service.endpoints import HubService
from recall_hub.service.events import EventConsumer
from recall_hub.service.health import Readiness
from recall_hub.service.metrics import BacklogSampler, HubMetrics
from recall_hub.service.status_server import StatusServer
from recall_hub.store.upgrade import legacy_keys_present

log = logging.getLogger(__name__)

GC_THRESHOLDS = (20_000, 50, 100)
"""The collector's thresholds in a hub process (Python's defaults: 700, 10, 10)."""


class _ConnectionLog:
    """The hub connection's callbacks: disconnects and reconnects are logged, and requests nats-py drops
    because an endpoint's subscription is over its pending limits (a local slow consumer) are counted and
    logged at most once a second, not once each with a traceback."""

    def __init__(self, on_drop: Callable[[], None] | None = None) -> None:
        self.dropped = 0
        self._on_drop = on_drop
        self._logged_at = 0.0

    async def error(self, exc: Exception) -> None:
        if isinstance(exc, nats.errors.SlowConsumerError):
            self.dropped += 1
            if self._on_drop is not None:
                self._on_drop()
            now = time.monotonic()
            if now - self._logged_at >= 1.0:
                self._logged_at = now
                log.warning("hub over its pending limits: dropped a request on %s (%d dropped so far)",
                            exc.subject, self.dropped)
            return
        log.warning("NATS: %s", exc or type(exc).__name__)

    async def disconnected(self) -> None:
        log.warning("NATS: disconnected")

    async def reconnected(self) -> None:
        log.warning("NATS: reconnected")


async def connect_nats(
    settings: HubSettings, name: str = "recall-hub", on_drop: Callable[[], None] | None = None
) -> NATS:
    """The hub's NATS connection; ``on_drop`` is told of each request dropped as a slow consumer."""
    events = _ConnectionLog(on_drop)
    options: dict[str, object] = {
        "servers": [url.strip() for url in settings.nats_url.split(",")],
        "name": name,
        "max_reconnect_attempts": -1,
        "reconnect_time_wait": 0.5,
        "error_cb": events.error,
        "disconnected_cb": events.disconnected,
        "reconnected_cb": events.reconnected,
    }
    if settings.nats_creds:
        from recall_hub.tooling.auth import connect_options

        options.update(connect_options(settings.nats_creds))  # checks the file first: nats-py loops on a bad one
    if settings.nats_user:
        options["user"] = settings.nats_user
        options["password"] = settings.nats_password
    return await nats.connect(**options)  # type: ignore[arg-type]


@asynccontextmanager
async def running_hub(settings: HubSettings) -> AsyncIterator[HubService]:
    """A serving hub for the duration of the block."""
    if not settings.auth_required and not settings.nats_creds and not settings.nats_user:
        log.warning(
            "NATS AUTH IS OFF: any client can claim any AI id. Use this only for local development."
        )
    ctx = await HubContext.connect(settings)
    metrics = HubMetrics()
    nc = await connect_nats(settings, on_drop=lambda: metrics.drop("slow_consumer"))
    ingest = await connect_nats(settings, "recall-hub-ingest", on_drop=lambda: metrics.drop("slow_consumer"))
    service = HubService(ctx, nc, metrics=metrics, ingest=ingest)
    consumer = EventConsumer(ctx, nc)
    service.events = consumer
    # Beads whose vector write failed (or that predate this model) are embedded in the background
    # while the hub already serves; `service.repaired` lets callers wait for it.
    service.repaired = asyncio.create_task(_repair(ctx))
    warnings = asyncio.create_task(_warn_the_operator(ctx))
    # Everything imported so far lives as long as the process: keep it out of the collector's
    # generations, so full collections stay short (they were the latency tail in `recall bench`).
    gc.freeze()
    # A search allocates tens of thousands of short-lived objects, which at the default threshold (700)
    # means several young collections per request: collected less often, a keyword search at 10k beads
    # took 4.74 -> 4.50 ms p50 and a hybrid one 12.4 -> 12.0 (the same run, alternating requests).
    gc.set_threshold(*GC_THRESHOLDS)
    sweeper: asyncio.Task[None] | None = None
    eraser: asyncio.Task[None] | None = None
    heir: asyncio.Task[None] | None = None
    follower: asyncio.Task[None] | None = None
    reads: asyncio.Task[None] | None = None
    status: StatusServer | None = None
    try:
        status = await _start_status_server(settings, service)  # /readyz says what is missing until the end
        # The keyword index lives in this process: built from the graph before the first request.
        began = time.perf_counter()
        indexed = await ctx.keywords.rebuild()
        log.info("keyword index: %d beads in %.1f s", indexed, time.perf_counter() - began)
        follower = asyncio.create_task(ctx.keywords.follow(), name="recall-keyword-index")
        await service.start()
        # After-commit work a crash or a failure left behind is finished first thing, then periodically.
        sweeper = asyncio.create_task(
            sweep_forever(ctx, settings.outbox_interval_s, settings.outbox_grace_ms), name="recall-outbox-sweep"
        )
        heir = asyncio.create_task(take_over_forever(ctx), name="recall-take-over")
        eraser = asyncio.create_task(erase_forever(ctx, settings.outbox_interval_s), name="recall-erasure")
        reads = asyncio.create_task(ctx.accessed.flush_forever(settings.access_flush_s), name="recall-read-times")
        await consumer.start()
        yield service
    finally:
        background = [
            t for t in (sweeper, heir, eraser, follower, reads, service.repaired, warnings) if t is not None
        ]
        # Finished before the stores close under them (a task left running would retry on closed pools).
        await stop_tasks(background)
        await consumer.stop()
        await service.stop()
        await ctx.finish_handed_off()  # its notifications still go out
        with contextlib.suppress(Exception):  # the graph may be down; a few read times are all it loses
            await ctx.accessed.flush()
        if status is not None:
            await status.stop()
        await close_nats(ingest)
        await close_nats(nc)
        await ctx.aclose()


async def _repair(ctx: HubContext) -> int:
    """The vectors a bead lacks, then the token signs (what ``service.repaired`` waits for)."""
    embedded = await repair(ctx)
    await repair_token_signs(ctx)
    return embedded


async def _start_status_server(settings: HubSettings, service: HubService) -> StatusServer | None:
    """``/metrics``, ``/healthz`` and ``/readyz`` on ``metrics_port``, when set; ``service.metrics_url``."""
    if settings.metrics_port is None:
        return None
    sampler = BacklogSampler(service.metrics, service.ctx, service.nc)

    async def exposition() -> bytes:
        await sampler.sample()
        return service.metrics.exposition()

    status = StatusServer(settings.metrics_host, settings.metrics_port, exposition, Readiness(service).problems)
    await status.start()
    service.metrics_url = status.url
    return status


_OPERATOR_WARNINGS = {
    "legacy keys": (
        "Redis holds keys of the first release's layout (key-value memory, change logs, audit, vectors outside any "
        "graph's namespace): this hub does not read them. Run `recall upgrade --graph %s` once to move them under "
        "this graph."
    ),
    "query telemetry": (
        "FalkorDB runs with CMD_INFO on: it keeps every query, with its parameters (the text of beads), in the "
        "stream telemetry{%s}. Start it with `CMD_INFO no` (the embedded stack does); meanwhile the hub deletes "
        "that stream after every forget."
    ),
}


async def _warn_the_operator(ctx: HubContext) -> None:
    """What an operator should hear of at start; a check that fails is never a reason to stop serving."""
    checks = {"legacy keys": lambda: legacy_keys_present(ctx.redis), "query telemetry": ctx.graph.records_telemetry}
    for name, check in checks.items():
        try:
            if await check():
                log.warning(_OPERATOR_WARNINGS[name], ctx.settings.graph_name)
        except Exception as exc:
            log.debug("%s check failed: %s", name, exc)


async def serve_forever(settings: HubSettings, stop: asyncio.Event) -> None:
    async with running_hub(settings):
        await stop.wait()
