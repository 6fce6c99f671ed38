"""`recall bench --suite keyword`: the keyword index on its own, without the bus or the graph.

Synthetic beads (60 words each, drawn from the bench's English vocabulary with a Zipf law, spread over
one global, 4 group and 12 private scopes) are loaded into a :class:`KeywordIndex`; queries of 1–3 words
from the same law are asked as a caller who sees 4 scopes, top 100 — what one hybrid or keyword search
asks of the index. Prints p50/p99 per store size.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from random import Random
from typing import cast

from recall_schemas import BeadFilters

from recall_hub.bench.corpus import english_words
from recall_hub.store.beads import BeadStore
from recall_hub.store.index_log import IndexLog
from recall_hub.store.keyword_index import KeywordIndex

SCOPES = ["global"] + [f"group:g{i}" for i in range(4)] + [f"private:a{i}" for i in range(12)]
CALLER_SCOPES = ["global", "group:g1", "group:g2", "private:a1"]


@dataclass
class KeywordRow:
    beads: int
    load_s: float
    p50_ms: float
    p99_ms: float
    queries: int
    hits: float
    """Mean hits per query (at most 100)."""


async def run_keyword_study(sizes: list[int], queries: int = 500, seed: int = 7) -> list[KeywordRow]:
    words = english_words()[150:6150] or [f"w{i}" for i in range(6000)]
    weights = [1.0 / (rank + 1) for rank in range(len(words))]
    rows = []
    for size in sizes:
        rng = Random(seed)
        # Measured on its own: no graph to rebuild from and no log to follow.
        index = KeywordIndex(cast(BeadStore, None), cast(IndexLog, None))
        beads = []
        for i in range(size):
            scope = rng.choice(SCOPES)
            kind, _, owner = scope.partition(":")
            text = rng.choices(words, weights, k=60)
            beads.append({
                "bead_id": f"b_{i:016x}", "title": " ".join(text[:8]), "content": " ".join(text[8:]),
                "visibility": kind, "group_id": owner if kind == "group" else None,
                "created_by": owner if kind == "private" else "a0", "importance": 5, "created_at": i,
            })
        started = time.perf_counter()
        await index.load(beads)
        load_s = time.perf_counter() - started
        latencies = []
        found = 0
        for _ in range(queries):
            terms = list(dict.fromkeys(rng.choices(words, weights, k=rng.choice((1, 1, 2, 2, 3)))))
            t0 = time.perf_counter()
            found += len(index.search(CALLER_SCOPES, terms, BeadFilters(), 100))
            latencies.append((time.perf_counter() - t0) * 1000)
        latencies.sort()
        rows.append(KeywordRow(size, load_s, statistics.median(latencies),
                               latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))], queries,
                               found / max(queries, 1)))
    return rows


def render_keyword_study(rows: list[KeywordRow]) -> str:
    out = [
        "Keyword index alone (tantivy, in memory): 60-word synthetic beads over 17 scopes, queries of 1-3 Zipf",
        "words as a caller who sees 4 scopes, top 100, one at a time on one thread.",
        "",
        f"{'beads':>8}  {'load s':>7}  {'p50 ms':>7}  {'p99 ms':>7}  {'queries':>7}  {'hits':>5}",
    ]
    out += [
        f"{r.beads:>8,}  {r.load_s:>7.1f}  {r.p50_ms:>7.2f}  {r.p99_ms:>7.2f}  {r.queries:>7}  {r.hits:>5.1f}"
        for r in rows
    ]
    return "\n".join(out)
