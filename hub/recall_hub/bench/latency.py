"""The latency harness: each operation timed one request at a time, after warm-up calls, in interleaved
rounds so drift affects every operation alike; per sample the client's round trip, the request and reply
sizes, and with an in-process hub the time it spent in each :class:`~recall_hub.bench.probes.HubProbe` bucket.
"""

from __future__ import annotations

import logging
import time
from random import Random

from recall_hub.bench.probes import HubProbe
from recall_hub.bench.results import OpResult
from recall_hub.bench.stats import median_int
from recall_hub.bench.workload import LatencyOp, ProgressFn, Workload

log = logging.getLogger(__name__)


async def measure(
    w: Workload, specs: list[LatencyOp], probe: HubProbe | None, progress: ProgressFn | None
) -> list[OpResult]:
    """The results of ``specs``, in their order: ``config.samples`` timed samples each."""
    config = w.config
    results = [OpResult(s.name, s.op, [], target_ms=s.target_ms, result_unit=s.unit) for s in specs]
    fns = [await s.make(w) for s in specs]
    sizes: list[list[tuple[int, int, int]]] = [[] for _ in specs]
    for fn, spec in zip(fns, specs, strict=True):
        for i in range(config.warmup):
            try:
                await fn(-1 - i)
            except Exception as exc:
                log.warning("%s warm-up failed: %s: %s", spec.name, type(exc).__name__, exc)
    rounds = max(1, min(config.rounds, config.samples))
    counter = [0] * len(specs)
    for r in range(rounds):
        share = config.samples // rounds + (1 if r < config.samples % rounds else 0)
        for k, (fn, spec) in enumerate(zip(fns, specs, strict=True)):
            res = results[k]
            for _ in range(share):
                i = counter[k]
                counter[k] += 1
                if probe is not None:
                    probe.reset()
                t0 = time.perf_counter_ns()
                try:
                    size = await fn(i)
                except Exception as exc:
                    res.errors += 1
                    if res.errors <= 5:
                        log.warning("%s sample %d failed: %s: %s", spec.name, i, type(exc).__name__, exc)
                    continue
                res.samples_ms.append((time.perf_counter_ns() - t0) / 1e6)
                sizes[k].append((w.tap.last_request, w.tap.last_reply, size))
                if probe is not None and probe.queries:
                    for bucket, ns in probe.ns.items():
                        res.hub_ms.setdefault(bucket, []).append(ns / 1e6)
                    res.graph_queries += probe.queries
        if progress is not None:
            progress(f"latency round {r + 1}/{rounds} done")
    for res, got in zip(results, sizes, strict=True):
        if got:
            res.request_bytes = median_int([g[0] for g in got])
            res.reply_bytes = median_int([g[1] for g in got])
            res.result_size = sum(g[2] for g in got) / len(got)
        if res.hub_ms:
            res.graph_queries /= len(res.hub_ms["graph"])
    return results


async def get_sizes(w: Workload) -> tuple[int, int]:
    """Median request and reply bytes of real get_bead calls by the caller."""
    rng = Random(w.config.seed + 6)
    requests: list[int] = []
    replies: list[int] = []
    for _ in range(50):
        await w.client.get_bead(rng.choice(w.visible))
        requests.append(w.tap.last_request)
        replies.append(w.tap.last_reply)
    return median_int(requests), median_int(replies)
