"""Search beside a peer memory system, on the same memory, in the same run.

    python scripts/peers.py --peer mcp-memory --beads 10000 --samples 300
    python scripts/peers.py --peer mem0 --beads 10000 --samples 300      # needs: pip install mem0ai

The run:

1. ``recall bench --beads N --samples S`` (in this process, the hub's defaults): our keyword and hybrid search
   p50 over the bench's queries (1–3 words of the corpus);
2. the same N beads written into the peer's memory;
3. the peer asked the same queries, one at a time, after ``--warmup`` calls: its p50 and p99.

The peers:

- ``mcp-memory``: ``@modelcontextprotocol/server-memory``, the reference "memory" server of the Model Context
  Protocol (a knowledge graph kept as a JSON-lines file, searched by substring). ``--server`` is the command that
  starts it on stdio (default ``npx -y @modelcontextprotocol/server-memory``, which needs the npm registry once).
  Each bead is one entity (its title the name, its type the entity type, its content the observation), as
  ``create_entities`` writes them; it is asked ``search_nodes`` through the MCP Python client. It reads and parses
  its whole file on every call, so its time grows with N; ours does not read what a query does not match.
- ``mem0``: mem0's ``Memory`` as ``pip install mem0ai`` gives it, in its default local configuration (Qdrant in
  local mode, its SQLite history), with no LLM: each bead added with ``infer=False`` (stored as it is written),
  asked ``Memory.search`` (``top_k`` 20, as ours). Its embedder is the hub's own local model (the same
  all-MiniLM-L6-v2 as ours, by default run the same way), so both sides embed each query with the same model:
  the documents' vectors are computed in one batch beforehand (its ingest is not what is compared), each query's
  when it is asked. mem0's optional spaCy step (lemmas, entities: ``mem0ai[nlp]``) is not installed, as in a
  plain install, which spares it work.

It prints the method, both sides' figures and the ratios (peer p50 / ours); ``--save DIR`` keeps them as a
results file (suite ``peers``; ``<!-- results:peers -->`` shows the newest sitting against the MCP server, judged
≥ 3× on our hybrid search, ``<!-- results:mem0 -->`` the newest against mem0, judged ≥ 8×).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from recall_hub.bench.config import BenchConfig
from recall_hub.bench.corpus import Dataset, bench_queries, build_dataset
from recall_hub.bench.records import new_record, save
from recall_hub.bench.run import run_bench
from recall_hub.bench.stats import percentile
from recall_hub.embedders import EmbedderConfig, make_embedder

DEFAULT_SERVER = "npx -y @modelcontextprotocol/server-memory"
SEARCH_LIMIT = 20
"""Results a search returns, ours (the bench's) and mem0's."""


def write_memory_file(path: Path, data: Dataset) -> None:
    """The bench's corpus as the MCP memory server's JSON-lines graph."""
    with path.open("w") as out:
        for i, bead in enumerate(data.beads):
            entity = {"type": "entity", "name": f"{bead.title} #{i}", "entityType": bead.bead_type,
                      "observations": [bead.content]}
            out.write(json.dumps(entity) + "\n")


async def timed(search: Callable[[str], Awaitable[Any]], queries: list[str], warmup: int) -> list[float]:
    """``search(query)`` for each query one at a time, after ``warmup`` calls: each call's milliseconds."""
    for query in queries[:warmup]:
        await search(query)
    samples = []
    for query in queries:
        started = time.perf_counter()
        await search(query)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


PeerRun = tuple[list[float], dict[str, Any]]
"""A peer's search times (ms) and what the results file says of it."""


async def time_mcp_memory(args: argparse.Namespace, data: Dataset, queries: list[str], tmp: Path) -> PeerRun:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import get_default_environment, stdio_client

    memory = tmp / "memory.jsonl"
    write_memory_file(memory, data)
    argv = shlex.split(args.server)
    env = {**get_default_environment(), "MEMORY_FILE_PATH": str(memory)}
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()

        async def search(query: str) -> None:
            result = await session.call_tool("search_nodes", {"query": query})
            if result.is_error:
                raise RuntimeError(f"search_nodes failed: {result.content}")

        samples = await timed(search, queries, args.warmup)
    size_mb = memory.stat().st_size / 1e6
    return samples, {"server": args.server, "memory_mb": round(size_mb, 2),
                     "about": f"`{args.server}` over stdio (MCP), its memory file {size_mb:.1f} MB, `search_nodes`"}


async def time_mem0(args: argparse.Namespace, data: Dataset, queries: list[str], tmp: Path) -> PeerRun:
    from importlib.metadata import version

    os.environ.setdefault("MEM0_TELEMETRY", "False")  # no usage reports from a benchmark
    from mem0 import Memory  # pip install mem0ai

    embedder = make_embedder(EmbedderConfig())
    loop = asyncio.get_running_loop()
    try:
        texts = [f"{bead.title}\n{bead.content}" for bead in data.beads]
        documents: dict[str, list[float]] = {
            text: row.tolist() for text, row in zip(texts, await embedder.embed(texts), strict=True)
        }

        class SameModel:
            """mem0's embedder interface over the hub's model: a document's vector computed beforehand, a query's
            when it is asked (on this event loop, from mem0's thread)."""

            def embed(self, text: str, memory_action: str | None = None) -> list[float]:
                if memory_action == "add" and text in documents:
                    return documents[text]
                vectors = asyncio.run_coroutine_threadsafe(embedder.embed_queries([text]), loop).result()
                return list(vectors[0].tolist())

        memory = Memory.from_config({
            "vector_store": {"provider": "qdrant", "config": {
                "collection_name": "bench", "embedding_model_dims": embedder.dim, "path": str(tmp / "qdrant")}},
            "history_db_path": str(tmp / "history.db"),
            # Neither is called: no add infers (no LLM), and the embedder is replaced below.
            "llm": {"provider": "openai", "config": {"api_key": "unused"}},
            "embedder": {"provider": "openai", "config": {"api_key": "unused"}},
        })
        memory.embedding_model = SameModel()

        def add_all() -> None:
            for text in texts:
                memory.add(text, user_id="bench", infer=False)

        await asyncio.to_thread(add_all)

        async def search(query: str) -> None:
            found = await asyncio.to_thread(memory.search, query, top_k=SEARCH_LIMIT, filters={"user_id": "bench"})
            if not isinstance(found, dict) or "results" not in found:
                raise RuntimeError(f"mem0 search answered {found!r:.200}")

        samples = await timed(search, queries, args.warmup)
    finally:
        await embedder.aclose()
    name = f"mem0 {version('mem0ai')} (qdrant-client {version('qdrant-client')})"
    return samples, {"server": name, "peer_kind": "mem0",
                     "about": f"{name} in this process, local Qdrant, `Memory.search` top_k {SEARCH_LIMIT}, the "
                              f"hub's model ({embedder!r}) as its embedder"}


PEERS = {"mcp-memory": time_mcp_memory, "mem0": time_mem0}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peer", choices=sorted(PEERS), default="mcp-memory")
    parser.add_argument("--beads", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--server", default=DEFAULT_SERVER, help="mcp-memory: the command that serves it on stdio")
    parser.add_argument("--save", type=Path, metavar="DIR", help="write a results file (suite peers) into DIR")
    args = parser.parse_args()

    report = await run_bench(BenchConfig(beads=args.beads, samples=args.samples, seed=args.seed))
    ours = {op.name: op.p(50) for op in report.ops if op.name in ("search keyword", "search hybrid")}
    data = build_dataset(args.beads, args.seed, "peer")  # the same texts for the seed (the tag names only ids)
    queries = bench_queries(data, args.seed, args.samples)
    with tempfile.TemporaryDirectory(prefix="recall-peer-") as tmp:
        peer, about = await PEERS[args.peer](args, data, queries, Path(tmp))
    peer_p50, peer_p99 = statistics.median(peer), percentile(sorted(peer), 99)
    print(f"method: {args.beads} beads (the bench corpus, seed {args.seed}); {len(queries)} queries of 1-3 words, "
          f"one at a time; ours through NATS ({report.setup}); the peer: {about.pop('about')}; {args.warmup} "
          "warm-up calls")
    print(f"peer search: p50 {peer_p50:.2f} ms, p99 {peer_p99:.2f} ms")
    for name, p50 in ours.items():
        print(f"ours {name}: p50 {p50:.2f} ms; peer / ours {peer_p50 / p50:.1f}x")
    if args.save:
        figures = {"beads": args.beads, "samples": len(queries), **about,
                   "peer": {"p50_ms": peer_p50, "p99_ms": peer_p99}, "ours": ours, "setup": report.setup}
        command = shlex.join(["python", "scripts/peers.py", *sys.argv[1:]])
        print(f"results: {save(new_record('peers', figures, command=command), args.save)}")


if __name__ == "__main__":
    asyncio.run(main())
