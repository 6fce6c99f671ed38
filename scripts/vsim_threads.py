"""A search's VSIMs on Redis's main thread (``NOTHREAD``) against on its threads, at a store size (the numbers
behind ``MAIN_THREAD_UP_TO`` in ``store/vectors.py``; docs/benchmarks.md, "Where a hybrid search's milliseconds go").

Builds the bus bench's memory (`recall bench`'s data, ingest and in-process hub) at ``--beads``, then, instead of
the bench's timing rounds: the caller's sets and their sizes; the four VSIMs of a search (the bench's queries,
k 50) sent ``--samples`` times each way in alternation; and whole hybrid searches through the bus, half with the
VSIMs on the main thread and half on Redis's threads, in alternation. p50 and mean in ms.

    python scripts/vsim_threads.py --beads 30000
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import numpy as np
from recall_hub.bench import run
from recall_hub.bench.config import BenchConfig
from recall_hub.context import HubContext
from recall_hub.retrieval.scopes import searchable_scopes
from recall_hub.store import vectors
from recall_schemas import BeadFilters

hub: list[HubContext] = []


class _Printed(Exception):
    """Raised once the figures are printed: the bench's own report is not wanted."""


def _line(label: str, values: list[float]) -> str:
    return f"{label:34s} p50 {statistics.median(values):7.3f}  mean {statistics.mean(values):7.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--beads", type=int, default=30_000)
    parser.add_argument("--samples", type=int, default=600)
    args = parser.parse_args()
    attach = run.HubProbe.attach

    def kept(ctx: HubContext) -> Any:
        hub.append(ctx)
        return attach(ctx)

    run.HubProbe.attach = staticmethod(kept)  # type: ignore[method-assign]

    async def compared(w: Any, *_: Any) -> None:
        ctx = hub[-1]
        keys = [ctx.vectors.key(s) for s in await searchable_scopes(ctx, w.caller, BeadFilters())]
        sizes = [int(await ctx.vectors.redis.execute_command("VCARD", key)) for key in keys]
        print(f"{args.beads} beads; the caller's {len(keys)} sets hold {sum(sizes):,} vectors ({sizes})")
        queries = [np.asarray(await ctx.query_vectors.vector(q), dtype=np.float32) for q in w.queries[:100]]
        vsims: dict[bool, list[float]] = {False: [], True: []}
        for i in range(2 * args.samples):
            main_thread = bool(i % 2)
            vsim_args = vectors._vsim_args(queries[i % len(queries)], 50, None, main_thread=main_thread)
            started = time.perf_counter()
            await ctx.vectors._vsim(ctx.vectors.redis, keys, vsim_args)
            vsims[main_thread].append((time.perf_counter() - started) * 1000)
        print(_line("four VSIMs, Redis's threads", vsims[False]))
        print(_line("four VSIMs, main thread", vsims[True]))
        searches: dict[bool, list[float]] = {False: [], True: []}
        up_to = vectors.MAIN_THREAD_UP_TO
        try:
            for i in range(args.samples):
                main_thread = bool(i % 2)
                vectors.MAIN_THREAD_UP_TO = 10**12 if main_thread else -1
                started = time.perf_counter()
                await w.client.search_beads(w.queries[i % len(w.queries)], limit=20)
                searches[main_thread].append((time.perf_counter() - started) * 1000)
        finally:
            vectors.MAIN_THREAD_UP_TO = up_to
        print(_line("hybrid search, Redis's threads", searches[False]))
        print(_line("hybrid search, main thread", searches[True]))
        raise _Printed

    run.measure = compared  # type: ignore[attr-defined,assignment]
    try:
        asyncio.run(run.run_bench(BenchConfig(beads=args.beads, samples=args.samples)))
    except _Printed:
        pass  # the stack is torn down by then


if __name__ == "__main__":
    main()
