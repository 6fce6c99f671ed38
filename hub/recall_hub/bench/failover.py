"""`recall bench --suite failover`: node loss under load, on a real cluster from the wheels.

A 3-node JetStream cluster (streams replicated on 3), one Redis with FalkorDB and two hub processes
in one queue group. Writers (one identity each) create beads in sessions and publish a
``session.started`` event for every new session, one request at a time, as fast as they can. The run
has three phases of equal length:

- **before**: everything up;
- **fault**: the node leading the events stream and one hub are killed with SIGKILL and stay down;
- **after**: both are started again on the same data and ports.

Clients use the library's bounded retry (``timeout`` per attempt, ``retries`` more attempts). At the end
every writer reads back, through the public API, each session it wrote to: every acknowledged create
must be stored exactly once, no title twice (acknowledged or not), and every acknowledged event's
session must exist. The report gives requests, errors and latency per phase, and the longest time a
writer went without a successful reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import nats
from recall_client import RecallClient
from recall_schemas import RecallError, new_id
from recall_schemas.subjects import EVENTS_STREAM

from recall_hub.bench.stats import percentile
from recall_hub.tooling.stack import EmbeddedStack

log = logging.getLogger(__name__)

T = TypeVar("T")
PHASES = ("before", "fault", "after")
SESSION_BEADS = 10
"""Beads a writer creates in one session before it starts the next (and publishes its event)."""


@dataclass
class FailoverConfig:
    writers: int = 4
    phase_s: float = 10.0
    """Each phase lasts this long under load, and at least until ``phase_creates`` creates were acknowledged."""
    phase_creates: int = 20
    nats_nodes: int = 3
    hubs: int = 2
    timeout_s: float = 2.0
    """Seconds one attempt of a request waits for its reply."""
    retries: int = 3
    """Further attempts after a timeout or no responder (creates keep their idempotency key)."""
    embedder: str = "hash"


@dataclass
class Call:
    started: float
    op: str
    ms: float
    error: str | None = None


@dataclass
class PhaseFigures:
    phase: str
    seconds: float
    requests: int
    errors: int
    p50_ms: float
    p99_ms: float
    max_ms: float


@dataclass
class FailoverReport:
    config: FailoverConfig
    killed: list[str]
    phases: list[PhaseFigures]
    creates_acknowledged: int
    creates_missing: list[str]
    titles_stored_twice: list[str]
    events_acknowledged: int
    events_missing: list[str]
    longest_gap_s: float
    """The longest time any writer went without a successful reply (the failover as callers feel it)."""
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.creates_missing or self.titles_stored_twice or self.events_missing)


@dataclass
class _Writer:
    ai_id: str
    calls: list[Call] = field(default_factory=list)
    acked: dict[str, str] = field(default_factory=dict)
    """title -> bead id of every acknowledged create."""
    sessions: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    """Sessions whose ``session.started`` was acknowledged by JetStream."""

    async def run(self, client: RecallClient, stop: asyncio.Event) -> None:
        i = 0
        while not stop.is_set():
            if i % SESSION_BEADS == 0:
                session = new_id("s")
                self.sessions.append(session)
                if await self._timed("session.started", client.events.session_started(session)):
                    self.events.append(session)
            title = f"failover {self.ai_id} {i}"
            bead = await self._timed("create_bead", client.create_bead(title, f"number {i}", session_id=session))
            if bead is not None:
                self.acked[title] = bead.bead_id
            i += 1

    async def _timed(self, op: str, call: Awaitable[T]) -> T | None:
        started = time.monotonic()
        try:
            result = await call
        except RecallError as exc:
            self.calls.append(Call(started, op, (time.monotonic() - started) * 1000, f"{exc.code}: {exc}"))
            await asyncio.sleep(0.05)  # the cluster answered with an error: do not spin on it
            return None
        self.calls.append(Call(started, op, (time.monotonic() - started) * 1000))
        return result


async def run_failover(
    config: FailoverConfig, data_dir: Path | None = None, progress: Callable[[str], None] | None = None
) -> FailoverReport:
    say = progress or (lambda _: None)
    with contextlib.ExitStack() as scope:
        directory = data_dir or Path(scope.enter_context(tempfile.TemporaryDirectory(prefix="recall-failover-")))
        stack = EmbeddedStack(
            directory, nats_nodes=config.nats_nodes, hubs=config.hubs,
            hub_env={"RECALL_EMBEDDER__KIND": config.embedder},
        )
        say(f"starting {config.nats_nodes} NATS nodes, FalkorDB and {config.hubs} hub processes")
        await asyncio.to_thread(stack.start)
        scope.callback(stack.stop)
        return await _drive(stack, config, say)
    raise AssertionError("unreachable")


async def _drive(stack: EmbeddedStack, config: FailoverConfig, say: Callable[[str], None]) -> FailoverReport:
    tag = secrets.token_hex(3)
    writers = [_Writer(f"a_fo{tag}{n}") for n in range(config.writers)]
    stop = asyncio.Event()
    async with contextlib.AsyncExitStack() as clients:
        connected = [
            await clients.enter_async_context(
                RecallClient(w.ai_id, stack.nats_url, timeout=config.timeout_s, retries=config.retries)
            )
            for w in writers
        ]
        started = time.monotonic()
        tasks = [asyncio.create_task(w.run(c, stop)) for w, c in zip(writers, connected, strict=True)]
        say(f"before: {config.writers} writers for {config.phase_s:.0f} s")
        await _phase(writers, config)
        victims = [await _events_leader(stack), "hub-1"]
        fault_at = time.monotonic()
        for name in victims:
            stack.kill(name)
        say(f"fault: killed {', '.join(victims)} (SIGKILL); down for {config.phase_s:.0f} s")
        await _phase(writers, config)
        for name in victims:
            await asyncio.to_thread(stack.respawn, name)
        back_at = time.monotonic()
        say(f"after: {', '.join(victims)} back; {config.phase_s:.0f} s more")
        await _phase(writers, config)
        stop.set()
        await asyncio.gather(*tasks)
        ended = time.monotonic()
        say("checking every acknowledged create and event through the API")
        missing, twice, events_missing = await _check(writers, connected)
    bounds = {"before": (started, fault_at), "fault": (fault_at, back_at), "after": (back_at, ended)}
    calls = [c for w in writers for c in w.calls]
    return FailoverReport(
        config=config,
        killed=victims,
        phases=[_figures(phase, calls, *bounds[phase]) for phase in PHASES],
        creates_acknowledged=sum(len(w.acked) for w in writers),
        creates_missing=missing,
        titles_stored_twice=twice,
        events_acknowledged=sum(len(w.events) for w in writers),
        events_missing=events_missing,
        longest_gap_s=max(_longest_gap(w.calls, started, ended) for w in writers),
        errors=sorted({c.error for c in calls if c.error})[:20],
    )


async def _phase(writers: list[_Writer], config: FailoverConfig, within_s: float = 120.0) -> None:
    """Let the load run for ``phase_s`` and until ``phase_creates`` more creates were acknowledged."""
    def acked() -> int:
        return sum(len(w.acked) for w in writers)

    began, target = time.monotonic(), acked() + config.phase_creates
    while time.monotonic() - began < config.phase_s or acked() < target:
        if time.monotonic() - began > within_s:
            raise RuntimeError(f"only {acked() - target + config.phase_creates} creates acknowledged in {within_s} s")
        await asyncio.sleep(0.05)


async def _events_leader(stack: EmbeddedStack) -> str:
    """The stack's name of the NATS node leading the events stream (the hardest one to lose)."""
    nc = await nats.connect(servers=stack.nats_url.split(","))
    try:
        info = await nc.jetstream().stream_info(EVENTS_STREAM)
    finally:
        await nc.close()
    leader = info.cluster.leader if info.cluster else None
    # Nodes are named recall-<n> on the server and nats-<n> in the stack.
    return f"nats-{leader.rsplit('-', 1)[1]}" if leader else "nats-1"


async def _check(writers: list[_Writer], clients: list[RecallClient]) -> tuple[list[str], list[str], list[str]]:
    missing: list[str] = []
    twice: list[str] = []
    events_missing: list[str] = []
    for writer, client in zip(writers, clients, strict=True):
        stored: dict[str, int] = {}
        for session in writer.sessions:
            for bead in await client.get_by_session(session, limit=SESSION_BEADS * 4):
                stored[bead.title] = stored.get(bead.title, 0) + 1
        missing += [t for t in writer.acked if t not in stored]
        twice += [t for t, n in stored.items() if n > 1]
        for session in writer.events:
            if not await _applied(client, session):
                events_missing.append(f"{writer.ai_id} {session}")
    return missing, twice, events_missing


async def _applied(client: RecallClient, session: str, within_s: float = 30.0) -> bool:
    """Whether the session of an acknowledged ``session.started`` exists (the hubs may still be applying)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            await client.get_session(session)
            return True
        except RecallError:
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.2)


def _figures(phase: str, calls: list[Call], start: float, end: float) -> PhaseFigures:
    inside = [c for c in calls if start <= c.started < end]
    latencies = [c.ms for c in inside]
    return PhaseFigures(
        phase=phase, seconds=end - start, requests=len(inside), errors=sum(1 for c in inside if c.error),
        p50_ms=percentile(latencies, 50), p99_ms=percentile(latencies, 99), max_ms=max(latencies, default=0.0),
    )


def _longest_gap(calls: list[Call], start: float, end: float) -> float:
    """Longest span between successful replies (a call's success counts at its end)."""
    done = sorted(c.started + c.ms / 1000 for c in calls if c.error is None)
    edges = [start, *done, end]
    return max(b - a for a, b in itertools.pairwise(edges))


def render(report: FailoverReport) -> str:
    c = report.config
    lines = [
        "Failover under load (recall bench --suite failover)",
        f"  cluster: {c.nats_nodes} NATS nodes (JetStream, streams on {min(3, c.nats_nodes)}), FalkorDB, "
        f"{c.hubs} hub processes; {c.writers} writers, one request at a time each; embedder {c.embedder}",
        f"  clients: {c.timeout_s:g} s per attempt, {c.retries} retries; killed with SIGKILL: "
        f"{', '.join(report.killed)} (down for the fault phase)",
        "",
        f"  {'phase':<8} {'seconds':>7} {'requests':>9} {'errors':>7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}",
    ]
    for p in report.phases:
        lines.append(f"  {p.phase:<8} {p.seconds:>7.1f} {p.requests:>9} {p.errors:>7} {p.p50_ms:>8.1f} "
                     f"{p.p99_ms:>8.1f} {p.max_ms:>8.1f}")
    lines += [
        "",
        f"  longest time a writer went without a reply: {report.longest_gap_s:.2f} s",
        f"  creates acknowledged {report.creates_acknowledged}: missing {len(report.creates_missing)}, "
        f"titles stored twice {len(report.titles_stored_twice)}",
        f"  events acknowledged {report.events_acknowledged}: not applied {len(report.events_missing)}",
        f"  {'OK' if report.ok else 'FAILED'}",
    ]
    lines += [f"  error seen: {e}" for e in report.errors]
    return "\n".join(lines)
