"""`recall bench --suite flood`: one identity floods the hub with large writes; does another notice?

A stack from the wheels with one hub in a process of its own (as `recall up` runs it). A *victim* identity
reads one of its beads over and over (``get_bead``, a 5 ms pause between reads) for a quiet phase, then
while a *flooder* identity sends ``--flood-requests`` creates of ``--flood-bytes`` each at once, with a
1 s timeout, as raw NATS requests: an agent that ignores the client library's in-flight budget (a
`RecallClient` never sends such a burst), the worst case for the hub. The flooder is a process of its
own at the lowest CPU priority: on a 2-core machine its own sending would otherwise take a core from
the servers, which a flood from another machine does not.

Reported per run: the victim's reads (p50/p99, errors) quiet and during the flood (from its first request
until its last answer, plus a second for the work admitted meanwhile), the ratio of the two p99s, how
the flooder's requests were answered (stored, refused ``busy``, timed out, no responders), and what
nats-server counted as slow consumers (a hub connection cut off). The target (docs/operations.md, "Fair
admission"): no victim error, no slow consumer, victim p99 during the flood within 2x its quiet p99 —
by the median of the runs.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
from nats.aio.msg import Msg
from recall_client import RecallClient
from recall_schemas import RecallError
from recall_schemas.subjects import inbox_prefix, request_subject

from recall_hub.bench.stats import percentile
from recall_hub.tooling.stack import EmbeddedStack, free_port

VICTIM, FLOODER = "a_victim01", "a_flooder01"
SINK_SUBJECT = "bench.flood.sink"
"""Where the floor's flood goes: a subscriber that is not the hub."""
PAUSE_S = 0.005
"""Between two reads of the victim."""
FLOOD_TIMEOUT_S = 1.0
AFTER_S = 1.0
"""The flood phase lasts until the flooder's last answer and this much longer (the work it got admitted)."""


@dataclass
class FloodConfig:
    runs: int = 3
    quiet_s: float = 3.0
    flood_requests: int = 200
    flood_bytes: int = 500_000
    embedder: str = "hash"


@dataclass
class FloodRun:
    quiet_ms: list[float]
    floor_ms: list[float]
    """The victim's reads while the same burst goes to a process that only refuses it: the cost of carrying
    the burst through this machine, without the hub."""
    flood_ms: list[float]
    victim_errors: Counter[str]
    flood_outcomes: Counter[str]
    flood_s: float
    slow_consumers: int

    @property
    def ratio(self) -> float:
        return percentile(self.flood_ms, 99) / max(percentile(self.quiet_ms, 99), 1e-9)

    @property
    def floor_ratio(self) -> float:
        return percentile(self.floor_ms, 99) / max(percentile(self.quiet_ms, 99), 1e-9)

    @property
    def met(self) -> bool:
        return not self.victim_errors and self.slow_consumers == 0 and self.ratio <= 2.0


@dataclass
class FloodReport:
    config: FloodConfig
    runs: list[FloodRun] = field(default_factory=list)

    @property
    def median_ratio(self) -> float:
        return statistics.median(r.ratio for r in self.runs)

    @property
    def met(self) -> bool:
        return (
            self.median_ratio <= 2.0
            and all(not r.victim_errors for r in self.runs)
            and all(r.slow_consumers == 0 for r in self.runs)
        )


async def run_flood(config: FloodConfig) -> FloodReport:
    report = FloodReport(config)
    for _ in range(config.runs):
        with tempfile.TemporaryDirectory(prefix="recall-flood-") as tmp:
            monitor = free_port("127.0.0.1")
            env = {"RECALL_EMBEDDER__KIND": config.embedder}
            with EmbeddedStack(Path(tmp), hubs=1, monitor_port=monitor, hub_env=env) as stack:
                report.runs.append(await _one_run(config, stack.nats_url, monitor))
    return report


async def _one_run(config: FloodConfig, url: str, monitor: int) -> FloodRun:
    async with RecallClient(VICTIM, url) as victim:
        bead = await victim.create_bead("the victim's note", "small and often read")
        quiet, quiet_errors = await _reads(victim, bead.bead_id, _after(config.quiet_s))
        sink = await _start(sys.executable, "-m", "recall_hub.bench.flood", "refuse", url)
        floor, floor_errors, _ = await _flooded(config, url, victim, bead.bead_id, "sink")
        await _finish(sink)
        flood, flood_errors, result = await _flooded(config, url, victim, bead.bead_id, "hub")
    return FloodRun(
        quiet_ms=quiet, floor_ms=floor, flood_ms=flood, victim_errors=quiet_errors + floor_errors + flood_errors,
        flood_outcomes=Counter(result["outcomes"]), flood_s=float(result["seconds"]),
        slow_consumers=_slow_consumers(monitor),
    )


async def _flooded(
    config: FloodConfig, url: str, victim: RecallClient, bead_id: str, target: str
) -> tuple[list[float], Counter[str], dict[str, Any]]:
    """The victim's reads while the flooding agent sends its burst to ``target`` (``hub`` or ``sink``)."""
    flooder = await _start(
        "nice", "-n", "19", sys.executable, "-m", "recall_hub.bench.flood", target, url,
        str(config.flood_requests), str(config.flood_bytes),
    )
    done = asyncio.Event()
    reading = asyncio.create_task(_reads(victim, bead_id, done.wait))
    assert flooder.stdin is not None and flooder.stdout is not None
    flooder.stdin.write(b"go\n")
    await flooder.stdin.drain()
    result = json.loads(await flooder.stdout.readline())
    await flooder.wait()
    await asyncio.sleep(AFTER_S)  # the window ends a fixed time after the flooder's last answer
    done.set()
    times, errors = await reading
    return times, errors, result


async def _start(*command: str) -> asyncio.subprocess.Process:
    """A helper process that prints ``ready`` once set up and acts on a line on its stdin."""
    process = await asyncio.create_subprocess_exec(
        *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    assert process.stdout is not None
    if not (await process.stdout.readline()).startswith(b"ready"):
        raise RuntimeError(f"{' '.join(command)} did not start")
    return process


async def _finish(process: asyncio.subprocess.Process) -> None:
    assert process.stdin is not None
    process.stdin.write(b"stop\n")
    await process.stdin.drain()
    await process.wait()


def _after(seconds: float) -> object:
    async def wait() -> None:
        await asyncio.sleep(seconds)

    return wait


async def _reads(client: RecallClient, bead_id: str, until: object) -> tuple[list[float], Counter[str]]:
    """Read the bead, one request at a time, until the awaitable ``until()`` finishes."""
    stop = asyncio.ensure_future(until())  # type: ignore[operator]
    times: list[float] = []
    errors: Counter[str] = Counter()
    while not stop.done():
        started = time.perf_counter()
        try:
            await client.get_bead(bead_id)
            times.append((time.perf_counter() - started) * 1000)
        except RecallError as exc:
            errors[exc.code.value] += 1
        await asyncio.sleep(PAUSE_S)
    return times, errors


def _slow_consumers(monitor: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{monitor}/varz", timeout=5) as reply:
        return int(json.load(reply).get("slow_consumers", 0))


def render_flood(report: FloodReport) -> str:
    c = report.config
    lines = [
        f"flood: {c.flood_requests} creates of {c.flood_bytes // 1000} KB at once from one identity (raw NATS, "
        f"{FLOOD_TIMEOUT_S:.0f} s timeout, lowest CPU priority), while another reads a bead every "
        f"{PAUSE_S * 1000:.0f} ms; one hub process, embedder {c.embedder}; {len(report.runs)} runs. Floor: the "
        "same burst sent to a process that only refuses it (the cost of carrying it through this machine).",
        "",
        "| run | quiet p50 / p99 ms | floor p99 ms (x quiet) | flood p50 / p99 ms (x quiet) | victim errors | "
        "flood answers | slow consumers |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for i, run in enumerate(report.runs, 1):
        answers = ", ".join(f"{k} {v}" for k, v in run.flood_outcomes.most_common())
        lines.append(
            f"| {i} | {percentile(run.quiet_ms, 50):.2f} / {percentile(run.quiet_ms, 99):.2f} (n={len(run.quiet_ms)}) "
            f"| {percentile(run.floor_ms, 99):.2f} ({run.floor_ratio:.2f}) "
            f"| {percentile(run.flood_ms, 50):.2f} / {percentile(run.flood_ms, 99):.2f} ({run.ratio:.2f}; "
            f"n={len(run.flood_ms)}) | {sum(run.victim_errors.values())} | {answers} ({run.flood_s:.1f} s) "
            f"| {run.slow_consumers} |"
        )
    floor = statistics.median(r.floor_ratio for r in report.runs)
    lines += [
        "",
        f"median p99 ratio to quiet: flood {report.median_ratio:.2f} "
        f"(target 2.00: {'met' if report.met else 'NOT met'}), floor {floor:.2f}",
    ]
    return "\n".join(lines)


# --- the flooding agent (a process of its own) ----------------------------------------------------------


async def _flood(url: str, target: str, requests: int, size: int) -> None:
    nc = await nats.connect(url, inbox_prefix=inbox_prefix(FLOODER))
    text = "x" * (size // 2)
    blob = "y" * (size // 2 - 2000)
    bodies = [
        json.dumps({"title": f"flood {i}", "content": text[: len(text) - i], "metadata": {"blob": blob}}).encode()
        for i in range(requests)
    ]
    subject = request_subject(FLOODER, "create_bead") if target == "hub" else SINK_SUBJECT
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)

    async def one(body: bytes) -> str:
        try:
            reply = await nc.request(subject, body, timeout=FLOOD_TIMEOUT_S)
        except Exception as exc:  # timeouts and "no responders" are what is counted
            return type(exc).__name__
        if reply.headers and reply.headers.get("Nats-Service-Error"):
            error = json.loads(reply.data)["error"]
            return f"{error['code']} ({error.get('details', {}).get('reason', '')})"
        return "stored"

    started = time.perf_counter()
    outcomes = Counter(await asyncio.gather(*(one(body) for body in bodies)))
    print(json.dumps({"outcomes": outcomes, "seconds": time.perf_counter() - started}), flush=True)
    await nc.close()


async def _sink(url: str) -> None:
    """The floor: a subscriber that refuses every request at once (what a hub does with a flood at best)."""
    nc = await nats.connect(url)
    refusal = json.dumps({"error": {"code": "unavailable", "message": "busy", "details": {"reason": "busy"}}})

    async def refuse(msg: Msg) -> None:
        await nc.publish(msg.reply, refusal.encode(), headers={"Nats-Service-Error": "unavailable"})

    await nc.subscribe(SINK_SUBJECT, cb=refuse, pending_bytes_limit=1 << 30)
    await nc.flush()
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    await nc.close()


if __name__ == "__main__":
    if sys.argv[1] == "refuse":
        asyncio.run(_sink(sys.argv[2]))
    else:
        asyncio.run(_flood(sys.argv[2], sys.argv[1], int(sys.argv[3]), int(sys.argv[4])))
