"""CPU a request by operation: what each operation of the load suite's mix costs the machine, and the ceiling on
requests a second that cost puts on its cores (docs/benchmarks.md, "Where a team's CPU goes").

Builds the bus bench's memory (`recall bench`'s data, ingest and in-process hub) at ``--beads``, then runs each
operation of :data:`recall_hub.bench.load.MIX` ``--requests`` times, one request at a time, as the load suite
sends it (:class:`recall_hub.bench.load.Team`; fresh words each time, so a query's embedding is seldom cached), as
the bench's caller on the bench's memory, and reads from ``/proc`` the CPU each process spent over them: this
process (the hub and its one client; its main thread apart, where the hub's Python and the client's run),
redis-server with FalkorDB, and nats-server. The background work of a create (its vector, links and feed entry)
is waited for before the reading ends. Last, the mix's mean: each operation's CPU weighed by its share of the
load suite's requests, and the requests a second the machine's cores would serve if nothing else ran.

    python scripts/op_cpu.py --beads 10000 --requests 300
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from recall_hub.bench import run
from recall_hub.bench.config import BenchConfig
from recall_hub.bench.cpu import cpu_seconds
from recall_hub.bench.load import MIX, Agent, Team


class _Printed(Exception):
    """Raised once the figures are printed: the bench's own report is not wanted."""


def _descendants(pid: int) -> dict[str, list[int]]:
    """This process's descendants by command name."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name, rest = stat.split("(", 1)[1].rsplit(")", 1)
        parents[int(entry.name)], names[int(entry.name)] = int(rest.split()[1]), name
    found: dict[str, list[int]] = {}
    for child, name in names.items():
        ancestor = parents.get(child)
        while ancestor is not None and ancestor != pid:
            ancestor = parents.get(ancestor)
        if ancestor == pid:
            found.setdefault(name, []).append(child)
    return found


async def _settled(hub: Any, agent: Agent) -> None:
    """Until the creates' background work and the events published so far are done (the consumer takes them in
    order: one more, waited for, comes after them)."""
    await hub.ctx.background.wait_for_earlier()
    last = uuid.uuid4().hex
    await agent.client.events.session_continued(agent.session_id, event_id=last)
    await hub.events.wait_for(last, within=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--beads", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--embedder", choices=["local", "hash"], default=None)
    args = parser.parse_args()

    services: list[Any] = []
    running_hub = run.running_hub  # type: ignore[attr-defined]

    @contextlib.asynccontextmanager
    async def kept(settings: Any) -> AsyncIterator[Any]:
        async with running_hub(settings) as service:
            services.append(service)
            yield service

    async def by_operation(w: Any, *_args: Any) -> None:
        me = os.getpid()
        servers = _descendants(me)
        kinds = {"redis-server": servers.get("redis-server", []), "nats-server": servers.get("nats-server", [])}
        hub, vocabulary = services[0], " ".join(w.queries).split()
        agent = Agent(w.client, w.data.groups_of(w.caller)[0], f"s_{uuid.uuid4().hex[:16]}", list(w.visible),
                      random.Random(w.config.seed))
        team = Team([agent], lambda rng, n: " ".join(rng.choice(vocabulary) for _ in range(n)))
        mean = 0.0
        print(f"CPU ms a request, {args.requests} requests of each one at a time, {args.beads} beads")
        print(f"{'operation':10s} {'share':>6s} {'wall':>7s} {'hub+client':>11s} {'(main)':>7s} "
              f"{'redis':>6s} {'nats':>6s} {'total':>6s}")
        for op, share in MIX:
            for _warm in range(20):
                await team.do(agent, op)
            await _settled(hub, agent)
            before = {k: sum(cpu_seconds(p) or 0.0 for p in pids) for k, pids in kinds.items()}
            process, main_thread = cpu_seconds(me) or 0.0, cpu_seconds(me, me) or 0.0
            loop = asyncio.get_running_loop()
            started = loop.time()
            for _timed in range(args.requests):
                await team.do(agent, op)
            wall = loop.time() - started
            await _settled(hub, agent)
            spent = {k: sum(cpu_seconds(p) or 0.0 for p in pids) - before[k] for k, pids in kinds.items()}
            spent["hub+client"] = (cpu_seconds(me) or 0.0) - process
            main = (cpu_seconds(me, me) or 0.0) - main_thread
            per = 1000 / args.requests
            total = (spent["hub+client"] + spent["redis-server"] + spent["nats-server"]) * per
            mean += share / 100 * total
            print(f"{op:10s} {share:5d}% {wall * per:7.2f} {spent['hub+client'] * per:11.2f} {main * per:7.2f} "
                  f"{spent['redis-server'] * per:6.2f} {spent['nats-server'] * per:6.2f} {total:6.2f}")
        cores = os.cpu_count() or 1
        print(f"the mix: {mean:.2f} ms of CPU a request; {cores} cores: at most {cores * 1000 / mean:.0f} requests/s")
        raise _Printed

    run.measure = by_operation  # type: ignore[attr-defined,assignment]
    run.running_hub = kept  # type: ignore[attr-defined]
    try:
        asyncio.run(run.run_bench(BenchConfig(beads=args.beads, samples=60, embedder=args.embedder)))
    except _Printed:
        pass


if __name__ == "__main__":
    main()
