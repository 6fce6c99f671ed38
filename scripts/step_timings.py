"""Where one operation's time goes, step by step, through the bus (the figures in docs/benchmarks.md,
"Where a keyword search's milliseconds go" and "What the measurements taught").

Builds the bus bench's memory (`recall bench`'s data, ingest and in-process hub) at ``--beads``, then instead of
the bench's timing rounds calls one operation ``--samples`` times, one request at a time, with the hub's steps
wrapped: per sample, each step's time (summed over its calls) and when it first started after the client's
call began. Prints the p50 and mean of each over the samples, slowest first. Wrapping adds a few microseconds
a step, and this machine's speed drifts between hours: compare runs made one after the other.

    python scripts/step_timings.py --op keyword --beads 10000 --embedder hash
    python scripts/step_timings.py --op create --beads 2000 --samples 150
    python scripts/step_timings.py --op create --settle inline --whole-only

``--settle``: the in-process hub's ``create_settle`` (background, the default, or inline); ``--whole-only``: no
step wrapped, only the whole call timed (what an A/B of a setting read from the environment, ``RECALL_…``,
compares). ``--alternate MODULE.ATTRIBUTE=JSON``: only the whole call, the samples alternating between the code
as it is and with that attribute set, on the same store in the same minutes (this machine's speed drifts
between runs more than many changes weigh):

    python scripts/step_timings.py --op hybrid --alternate recall_hub.retrieval.search.TOKEN_MATCHED=0
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import functools
import importlib
import json
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

from recall_hub.bench import run
from recall_hub.bench.config import BenchConfig
from recall_hub.bench.workload import LATENCY_OPS
from recall_hub.ops import after_commit, beads, indexing
from recall_hub.retrieval import search
from recall_hub.service import endpoints
from recall_hub.store import beads as bead_store
from recall_hub.store import bm25, feed, graph, keyword_index, outbox, vectors

OPERATIONS = {"create": "create", "keyword": "search keyword", "hybrid": "search hybrid", "get": "get"}
STEPS: list[tuple[Any, str]] = [
    (endpoints, "handle"), (endpoints, "dispatch"),
    (search, "searchable_scopes"), (search, "keyword_candidates"), (search, "_nearest_to"), (search, "_query_vector"),
    (search, "work_settled"), (search, "_nearest"), (vectors.VectorStore, "_vsim"), (search, "screen"),
    (search, "_match_tokens"), (vectors.VectorStore, "token_signs"), (vectors, "match_signs"),
    (search, "_admit"), (search, "_hydrate"), (bead_store.BeadStore, "many"), (graph.GraphStore, "_values"),
    (keyword_index.KeywordIndex, "search_screened"), (bm25.WordCounts, "scores"),
    (beads, "check_not_forgotten"), (bead_store.BeadStore, "create"), (beads, "settle_quietly"),
    (outbox.OutboxStore, "system_pending"), (bead_store.BeadStore, "system_get"),
    (bead_store.BeadStore, "system_link_session_predecessor"), (indexing, "embed_beads"),
    (vectors.VectorStore, "add"), (bead_store.BeadStore, "system_mark_indexed"), (after_commit, "_link_related"),
    (feed.ChangeFeed, "log_once"), (outbox.OutboxStore, "system_done"),
]

spent: dict[str, float] = collections.defaultdict(float)
started: dict[str, float] = {}
call_start = [0.0]


class _Printed(Exception):
    """Raised once the figures are printed: the bench's own report (its timing rounds) is not wanted."""


def wrap(owner: Any, name: str) -> None:
    original = getattr(owner, name)

    if asyncio.iscoroutinefunction(original):
        @functools.wraps(original)
        async def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            started.setdefault(name, t0 - call_start[0])
            try:
                return await original(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - t0
    else:
        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            started.setdefault(name, t0 - call_start[0])
            try:
                return original(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - t0

    setattr(owner, name, timed)


def _override(assignment: str) -> Callable[[bool], contextlib.AbstractContextManager[None]]:
    """``MODULE.ATTRIBUTE=JSON`` as a context manager factory: ``(on)`` sets the attribute for the block if on."""
    dotted, value = assignment.split("=", 1)
    module_name, attribute = dotted.rsplit(".", 1)
    module = importlib.import_module(module_name)

    @contextlib.contextmanager
    def setting(on: bool) -> Iterator[None]:
        saved = getattr(module, attribute)
        if on:
            setattr(module, attribute, json.loads(value))
        try:
            yield
        finally:
            setattr(module, attribute, saved)

    return setting


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--op", choices=sorted(OPERATIONS), default="keyword")
    parser.add_argument("--beads", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--embedder", choices=["local", "hash"], default=None)
    parser.add_argument("--settle", choices=["inline", "background"], default="background")
    parser.add_argument("--whole-only", action="store_true")
    parser.add_argument("--alternate", metavar="MODULE.ATTRIBUTE=JSON")
    args = parser.parse_args()
    alternate = _override(args.alternate) if args.alternate else None
    if not args.whole_only and alternate is None:
        for owner, name in STEPS:
            wrap(owner, name)

    async def timed_steps(w: Any, *_: Any) -> None:
        operation = next(op for op in LATENCY_OPS if op.name == OPERATIONS[args.op])
        call = await operation.make(w)
        for i in range(20):  # warm-up
            await call(-1 - i)
        rows: dict[str, list[float]] = collections.defaultdict(list)
        for i in range(args.samples):
            spent.clear()
            started.clear()
            with alternate(i % 2 == 1) if alternate is not None else contextlib.nullcontext():
                call_start[0] = time.perf_counter()
                await call(i)
                label = ("as it is", args.alternate)[i % 2]
                whole = "the whole call" if alternate is None else f"the whole call, {label}"
                rows[whole].append((time.perf_counter() - call_start[0]) * 1000)
            for name, seconds in spent.items():
                rows[name].append(seconds * 1000)
            for name, seconds in started.items():
                rows[f"  {name} starts at"].append(seconds * 1000)
        print(f"{OPERATIONS[args.op]} at {args.beads} beads, {args.samples} samples one at a time, ms")
        for name, values in sorted(rows.items(), key=lambda kv: -statistics.median(kv[1])):
            print(f"{name:44s} p50 {statistics.median(values):8.3f}  mean {statistics.mean(values):8.3f}")
        raise _Printed

    run.measure = timed_steps  # type: ignore[attr-defined,assignment]
    config = BenchConfig(beads=args.beads, samples=args.samples, embedder=args.embedder, create_settle=args.settle)
    try:
        asyncio.run(run.run_bench(config))
    except _Printed:
        pass  # the stack is torn down by then


if __name__ == "__main__":
    main()
