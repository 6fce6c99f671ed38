"""Measure an embedder's throughput, one text per call and in batches. Prints nothing."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from recall_hub.embedders.base import Embedder

__all__ = ["EmbedThroughput", "measure"]


@dataclass(frozen=True, slots=True)
class EmbedThroughput:
    single_per_s: float  # texts/s embedding one text per embed() call, calls one after another
    batched_per_s: float  # texts/s embedding batch_size texts per embed() call
    single_p50_ms: float  # median latency of one single-text embed() call
    n: int  # number of texts in each pass
    single_p99_ms: float = 0.0
    batch_size: int = 0
    model_id: str = ""


async def measure(embedder: Embedder, texts: Sequence[str], batch_size: int = 32) -> EmbedThroughput:
    """Embed ``texts`` twice (one per call, then ``batch_size`` per call) after one warm-up call.

    The warm-up loads the model (local) or opens the connection (HTTP); it is not counted.
    """
    items = list(texts)
    if not items:
        raise ValueError("measure() needs at least one text")
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    await embedder.embed(items[:1])

    latencies: list[float] = []
    started = time.perf_counter()
    for text in items:
        t0 = time.perf_counter()
        await embedder.embed([text])
        latencies.append(time.perf_counter() - t0)
    single_s = time.perf_counter() - started

    started = time.perf_counter()
    for i in range(0, len(items), batch_size):
        await embedder.embed(items[i:i + batch_size])
    batched_s = time.perf_counter() - started

    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))]
    return EmbedThroughput(
        single_per_s=len(items) / single_s,
        batched_per_s=len(items) / batched_s,
        single_p50_ms=statistics.median(latencies) * 1000.0,
        n=len(items),
        single_p99_ms=p99 * 1000.0,
        batch_size=batch_size,
        model_id=embedder.model_id,
    )
