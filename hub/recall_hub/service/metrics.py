"""What one hub process measures, in Prometheus form (``/metrics``, see :mod:`.status_server`).

Every instrument lives in the process's own :class:`~prometheus_client.CollectorRegistry`, so several hubs
in one Python process (tests, benchmarks) never share or clash. Request metrics are counted as requests are
answered (:meth:`HubMetrics.request_done`, called from the endpoint's bookkeeping); the backlogs — events
the hub's consumer has not settled, outbox entries, index-log entries the keyword index has not applied —
live in NATS, the graph and Redis, and are sampled when ``/metrics`` is read (:class:`BacklogSampler`).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Iterable

from nats.aio.client import Client as NATS
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from recall_schemas.subjects import EVENTS_STREAM, HUB_EVENTS_CONSUMER

from recall_hub.context import HubContext
from recall_hub.timeutil import now_ms

log = logging.getLogger(__name__)

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Seconds: a cached get answers in about a millisecond, a large batch create in seconds."""
REJECTION_REASONS = ("busy", "deadline")
DROP_REASONS = ("slow_consumer", "foreign_inbox")
INDEX_LAG_COUNT_MAX = 10_000
"""Index-log entries counted behind the keyword index at most (a scrape never reads the whole log)."""
SAMPLE_TIMEOUT_S = 2.0


class HubMetrics:
    """The instruments of one hub process."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.request_seconds = Histogram(
            "recall_request_duration_seconds",
            "Time from a request's arrival to its reply (or refusal), by operation",
            ["op"], buckets=LATENCY_BUCKETS, registry=r,
        )
        self.errors = Counter(
            "recall_request_errors",
            "Requests answered with an error, by operation and error code (reply_failed: no reply could be sent)",
            ["op", "code"], registry=r,
        )
        self.in_flight = Gauge(
            "recall_requests_in_flight", "Requests admitted and not yet answered (running or waiting for a slot)",
            ["op"], registry=r,
        )
        self.rejections = Counter(
            "recall_limiter_rejections",
            "Requests not run: busy (over the caller's per-identity limits) or deadline (the caller had given up)",
            ["reason"], registry=r,
        )
        self.dropped = Counter(
            "recall_requests_dropped",
            "Requests never answered: slow_consumer (over an endpoint's pending limits) or foreign_inbox "
            "(a reply subject outside the caller's inbox, under auth)",
            ["reason"], registry=r,
        )
        self.event_pending = Gauge(
            "recall_event_consumer_pending", "Events in RECALL_EVENTS not yet delivered to the hubs' consumer",
            registry=r,
        )
        self.event_ack_pending = Gauge(
            "recall_event_consumer_ack_pending", "Events delivered to a hub and not yet settled (ack, nak or term)",
            registry=r,
        )
        self.outbox_depth = Gauge(
            "recall_outbox_depth", "After-commit work entries waiting in the outbox (all hubs of the graph)",
            registry=r,
        )
        self.index_lag_entries = Gauge(
            "recall_keyword_index_lag_entries",
            f"Index-log entries this process's keyword index has not applied (counted up to {INDEX_LAG_COUNT_MAX})",
            registry=r,
        )
        self.index_lag_seconds = Gauge(
            "recall_keyword_index_lag_seconds",
            "Age of the oldest index-log entry this process's keyword index has not applied (0: up to date)",
            registry=r,
        )
        self.index_commits = Gauge(
            "recall_keyword_index_commits",
            "Commits of this process's keyword index since it started (a counter; each commit costs a segment "
            "merge soon after)",
            registry=r,
        )
        self.sample_failures = Counter(
            "recall_sample_failures", "Backlog samples that failed or timed out (the gauge reads NaN then)",
            ["source"], registry=r,
        )
        for reason in REJECTION_REASONS:
            self.rejections.labels(reason)
        for reason in DROP_REASONS:
            self.dropped.labels(reason)

    def know_operations(self, ops: Iterable[str]) -> None:
        """Export every operation's series from the start, so a rate over them is 0 rather than absent."""
        for op in ops:
            self.request_seconds.labels(op)
            self.in_flight.labels(op)

    def request_done(self, op: str, seconds: float, error_code: str | None) -> None:
        self.request_seconds.labels(op).observe(seconds)
        if error_code is not None:
            self.errors.labels(op, error_code).inc()

    def rejected(self, reason: str) -> None:
        self.rejections.labels(reason).inc()

    def drop(self, reason: str) -> None:
        self.dropped.labels(reason).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class BacklogSampler:
    """Reads the backlogs into their gauges: the hubs' event consumer, the outbox, the keyword index."""

    def __init__(self, metrics: HubMetrics, ctx: HubContext, nc: NATS) -> None:
        self.metrics = metrics
        self.ctx = ctx
        self.nc = nc

    async def sample(self) -> None:
        """Refresh every backlog gauge, each bounded by :data:`SAMPLE_TIMEOUT_S`; never raises."""
        await asyncio.gather(
            self._bounded("events", self._events),
            self._bounded("outbox", self._outbox),
            self._bounded("keyword_index", self._keyword_index),
        )

    async def _bounded(self, source: str, read: Callable[[], Awaitable[None]]) -> None:
        try:
            async with asyncio.timeout(SAMPLE_TIMEOUT_S):
                await read()
        except Exception as exc:
            log.debug("sampling %s failed: %s", source, exc)
            self.metrics.sample_failures.labels(source).inc()
            for gauge in self._gauges_of(source):
                gauge.set(math.nan)

    def _gauges_of(self, source: str) -> tuple[Gauge, ...]:
        m = self.metrics
        return {
            "events": (m.event_pending, m.event_ack_pending),
            "outbox": (m.outbox_depth,),
            "keyword_index": (m.index_lag_entries, m.index_lag_seconds),
        }[source]

    async def _events(self) -> None:
        info = await self.nc.jetstream().consumer_info(EVENTS_STREAM, HUB_EVENTS_CONSUMER)
        self.metrics.event_pending.set(info.num_pending or 0)
        self.metrics.event_ack_pending.set(info.num_ack_pending or 0)

    async def _outbox(self) -> None:
        self.metrics.outbox_depth.set(await self.ctx.outbox.system_depth())

    async def _keyword_index(self) -> None:
        behind, oldest_ms = await self.ctx.index_log.backlog(self.ctx.keywords.applied, INDEX_LAG_COUNT_MAX)
        self.metrics.index_lag_entries.set(behind)
        self.metrics.index_commits.set(self.ctx.keywords.commits)
        self.metrics.index_lag_seconds.set(0.0 if oldest_ms is None else max(0, now_ms() - oldest_ms) / 1000)
