"""Choosing the vector-set parameters by measurement: quantisation, HNSW M and search EF.

Real MiniLM embeddings of real text (LoCoMo turns, their sentences and answers as the indexed set;
LoCoMo questions, never indexed, as queries). For each configuration: insert rate (one writer,
pipelined), memory per vector, VSIM k=10 latency p50/p99 and recall@10 against an exact scan
(VSIM ... TRUTH) of the same set. Random vectors would give meaningless HNSW figures
(recall@10 about 0.12 where real ones give 0.98).

    recall bench --suite vectors [--data ../shared/data/locomo]
"""

from __future__ import annotations

import re
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from redis.asyncio import Redis

from recall_hub.bench.evalkit import json_records
from recall_hub.embedders import EmbedderConfig, make_embedder
from recall_hub.store.keys import Keys

CONFIGS: list[tuple[str, int]] = [("NOQUANT", 16), ("Q8", 16), ("Q8", 32), ("BIN", 16)]
SEARCH_EFS = (50, 100, 200, 400)
K = 10


@dataclass
class VectorRow:
    quantization: str
    m: int
    ef: int
    insert_per_s: float
    bytes_per_vector: float
    p50_ms: float
    p99_ms: float
    recall_at_10: float


@dataclass
class VectorStudy:
    indexed: int
    queries: int
    model: str
    rows: list[VectorRow] = field(default_factory=list)


def corpus(data_dir: Path) -> tuple[list[str], list[str]]:
    """(texts to index, query texts) from LoCoMo conversations (a folder or a file, as :func:`~recall_hub.bench.
    locomo.load_locomo` reads them)."""
    docs: list[str] = []
    queries: list[str] = []
    for _, data in json_records(data_dir, "LoCoMo conversation"):
        conv = data.get("conversation", data)
        for key, turns in conv.items():
            if not (key.startswith("session_") and isinstance(turns, list)):
                continue
            for turn in turns:
                text = f"{turn.get('speaker', '')}: {turn.get('text', '')}"
                docs.append(text)
                docs.extend(s for s in re.split(r"(?<=[.!?])\s+", turn.get("text", "")) if len(s.split()) >= 5)
        for qa in data.get("qa", []):
            if qa.get("question"):
                queries.append(str(qa["question"]))
            if isinstance(qa.get("answer"), str) and len(qa["answer"].split()) >= 3:
                docs.append(qa["answer"])
    return list(dict.fromkeys(docs)), list(dict.fromkeys(queries))


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run_vector_study(redis_url: str, data_dir: Path, max_queries: int = 300) -> VectorStudy:
    docs, questions = corpus(data_dir)
    questions = questions[:max_queries]
    embedder = make_embedder(EmbedderConfig())
    try:
        doc_vectors = await embedder.embed(docs)
        query_vectors = await embedder.embed_queries(questions)
        model = embedder.model_id
    finally:
        await embedder.aclose()
    redis = Redis.from_url(redis_url)
    study = VectorStudy(indexed=len(docs), queries=len(questions), model=model)
    keys = Keys("bench")
    try:
        for quantization, m in CONFIGS:
            key = keys.scratch(f"vectors:{quantization}:{m}")
            await redis.delete(key)
            start = time.perf_counter()
            for offset in range(0, len(docs), 500):
                pipe = redis.pipeline(transaction=False)
                for i in range(offset, min(offset + 500, len(docs))):
                    pipe.execute_command(
                        "VADD", key, "FP32", doc_vectors[i].astype(np.float32).tobytes(), f"d{i}", quantization, "M", m
                    )
                await pipe.execute()
            insert_rate = len(docs) / (time.perf_counter() - start)
            memory = int(await redis.memory_usage(key) or 0)
            truths = [await _ids(redis, key, q, truth=True) for q in query_vectors]
            for ef in SEARCH_EFS:
                latencies, recalls = [], []
                for query, truth in zip(query_vectors, truths, strict=True):
                    t0 = time.perf_counter()
                    found = await _ids(redis, key, query, ef=ef)
                    latencies.append((time.perf_counter() - t0) * 1000)
                    recalls.append(len(set(found) & set(truth)) / K)
                study.rows.append(
                    VectorRow(quantization, m, ef, insert_rate, memory / len(docs),
                              statistics.median(latencies), _pct(latencies, 0.99), statistics.mean(recalls))
                )
            await redis.delete(key)
    finally:
        await redis.aclose()
    return study


async def _ids(redis: Redis, key: str, vector: Any, ef: int = 200, truth: bool = False) -> list[str]:
    args: list[Any] = ["VSIM", key, "FP32", vector.astype(np.float32).tobytes(), "COUNT", K, "EF", ef]
    if truth:
        args.append("TRUTH")
    reply = await redis.execute_command(*args)  # type: ignore[no-untyped-call]
    return [r.decode() if isinstance(r, bytes) else str(r) for r in reply]


def render_study(study: VectorStudy) -> str:
    lines = [
        f"Vector-set parameters: {study.indexed:,} real {study.model} embeddings indexed, "
        f"{study.queries} held-out queries, k={K}; recall@10 against VSIM TRUTH (exact scan).",
        f"{'quant':<8}{'M':>4}{'EF':>6}{'insert/s':>10}{'B/vector':>10}{'p50 ms':>9}{'p99 ms':>9}{'recall@10':>11}",
    ]
    for r in study.rows:
        lines.append(
            f"{r.quantization:<8}{r.m:>4}{r.ef:>6}{r.insert_per_s:>10.0f}{r.bytes_per_vector:>10.0f}"
            f"{r.p50_ms:>9.2f}{r.p99_ms:>9.2f}{r.recall_at_10:>11.3f}"
        )
    return "\n".join(lines)
