"""Where bulk ingest's CPU goes: the bus bench's bead ingest alone, with each process's CPU and Redis's counters.

    python scripts/ingest_cpu.py --beads 10000
    python scripts/ingest_cpu.py --beads 3000 --embedder hash      # what the hub does beside the model

Builds the bench's memory as ``recall bench`` does (its corpus, its in-process hub, ``create_beads`` in batches of
64, a few batches in flight) but stops after the beads: no RELATED_TO edges, no long content, no timing rounds.
Prints the beads a second beside the embedder alone on the same texts (``recall bench``'s ingest figures), the
CPU seconds each process spent over the ingest (this process: the hub, its model and the clients; its main
thread apart; redis-server with FalkorDB, its main thread apart; nats-server), and Redis's own per-command counters
(``INFO commandstats``: calls and microseconds; a command Redis runs on other threads, VSIM or a graph query,
counts its wait there too). Runs of two versions in turn compare them (docs/benchmarks.md, "What the
measurements taught").
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import Any

import redis.asyncio as redis
from recall_hub.bench import run
from recall_hub.bench.config import BenchConfig
from recall_hub.bench.cpu import MAIN_THREAD, CpuMeter
from recall_hub.bench.ingest import ingest_beads
from recall_hub.bench.workload import ProgressFn, Workload

COMMANDS_SHOWN = 8


class _Done(Exception):
    """Raised once the figures are printed: the rest of the bench is not wanted."""


def server_pids(name: str, port: int) -> list[int]:
    """The processes named ``name`` whose command line holds ``port``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and name.encode() in argv[0] and any(str(port).encode() in arg for arg in argv):
            found.append(int(entry.name))
    return found


async def ingest_only(w: Workload, progress: ProgressFn | None) -> Any:
    w.data.related_to.clear()  # the beads only
    assert w.redis_url is not None, "the bench's own stack"
    store = redis.from_url(w.redis_url)
    redis_pids = server_pids("redis-server", int(w.redis_url.rsplit(":", 1)[1]))
    meter = CpuMeter({
        "bench process (hub, model, clients)": [os.getpid()], f"bench process{MAIN_THREAD}": [os.getpid()],
        "redis-server + FalkorDB": redis_pids, f"redis-server{MAIN_THREAD}": redis_pids,
        "nats-server": server_pids("nats-server", int(w.nats_url.rsplit(":", 1)[1])),
    })
    await store.config_resetstat()
    before = meter.read()
    figures = await ingest_beads(w, None)
    spent = CpuMeter.spent(before, meter.read())
    commands = await store.info("commandstats")
    await store.aclose()
    for row in figures[:2]:  # the embedder alone, the beads
        print(f"{row.name}: {row.count} in {row.seconds:.1f} s, {row.count / row.seconds:.1f}/s")
    alone, beads = figures[0], figures[1]
    print(f"ingest / embedder alone: {beads.count / beads.seconds / (alone.count / alone.seconds):.0%}")
    print("CPU seconds over the ingest (the embedder alone's few seconds included):")
    for kind, seconds in spent.items():
        print(f"  {kind:44s} {seconds:7.1f}  ({seconds / beads.count * 1000:.2f} ms a bead)")
    print("Redis commands, by microseconds:")
    for name, row in sorted(commands.items(), key=lambda kv: -kv[1]["usec"])[:COMMANDS_SHOWN]:
        print(f"  {name.removeprefix('cmdstat_'):20s} calls {row['calls']:8d}  {row['usec'] / 1e6:8.2f} s  "
              f"{row['usec_per_call']:8.1f} µs a call")
    raise _Done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--beads", type=int, default=10_000)
    parser.add_argument("--embedder", choices=["local", "hash"], default=None)
    args = parser.parse_args()
    run.ingest_beads = ingest_only  # type: ignore[attr-defined]
    try:
        asyncio.run(run.run_bench(BenchConfig(beads=args.beads, samples=10, embedder=args.embedder)))
    except _Done:
        pass  # the stack is torn down by then


if __name__ == "__main__":
    main()
