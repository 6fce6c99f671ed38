"""Search beside the MCP reference memory server, on the same memory, in the same run.

    python scripts/peer_mcp_memory.py --beads 10000 --samples 300

The peer is `@modelcontextprotocol/server-memory`, the reference "memory" server of the Model Context Protocol
(a knowledge graph kept as a JSON-lines file, searched by substring): ``--server`` is the command that starts it
on stdio (default ``npx -y @modelcontextprotocol/server-memory``, which needs the npm registry once). The run:

1. ``recall bench --beads N --samples S`` (in this process, the hub's defaults): our keyword and hybrid search
   p50 over the bench's queries (1–3 words of the corpus);
2. the same N beads written into the peer's memory file, one entity a bead (its title the name, its type the
   entity type, its content the observation), as ``create_entities`` writes them;
3. the peer started over stdio with that file and asked ``search_nodes`` with the same queries, one at a time
   through the MCP Python client, after ``--warmup`` calls: its p50 and p99.

It prints the method, both sides' figures and the ratios (peer p50 / ours); ``--save DIR`` keeps them as a
results file (suite ``peers``; ``<!-- results:peers -->`` shows the newest sitting, the target judged on the
ratio to our hybrid search: ≥ 3×). The peer reads and parses its whole
file on every call, so its time grows with N; ours does not read what a query does not match.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client
from recall_hub.bench.config import BenchConfig
from recall_hub.bench.corpus import Dataset, bench_queries, build_dataset
from recall_hub.bench.records import new_record, save
from recall_hub.bench.run import run_bench
from recall_hub.bench.stats import percentile

DEFAULT_SERVER = "npx -y @modelcontextprotocol/server-memory"


def write_memory_file(path: Path, data: Dataset) -> None:
    """The bench's corpus as the peer's JSON-lines graph."""
    with path.open("w") as out:
        for i, bead in enumerate(data.beads):
            entity = {"type": "entity", "name": f"{bead.title} #{i}", "entityType": bead.bead_type,
                      "observations": [bead.content]}
            out.write(json.dumps(entity) + "\n")


async def time_peer(command: str, memory: Path, queries: list[str], warmup: int) -> list[float]:
    argv = shlex.split(command)
    env = {**get_default_environment(), "MEMORY_FILE_PATH": str(memory)}
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for query in queries[:warmup]:
            await session.call_tool("search_nodes", {"query": query})
        samples = []
        for query in queries:
            started = time.perf_counter()
            result = await session.call_tool("search_nodes", {"query": query})
            samples.append((time.perf_counter() - started) * 1000)
            if result.is_error:
                raise RuntimeError(f"search_nodes failed: {result.content}")
        return samples


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--beads", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--server", default=DEFAULT_SERVER, help="the command that serves the peer on stdio")
    parser.add_argument("--save", type=Path, metavar="DIR", help="write a results file (suite peers) into DIR")
    args = parser.parse_args()

    report = await run_bench(BenchConfig(beads=args.beads, samples=args.samples, seed=args.seed))
    ours = {op.name: op.p(50) for op in report.ops if op.name in ("search keyword", "search hybrid")}
    data = build_dataset(args.beads, args.seed, "peer")  # the same texts for the seed (the tag names only ids)
    queries = bench_queries(data, args.seed, args.samples)
    with tempfile.TemporaryDirectory(prefix="recall-peer-") as tmp:
        memory = Path(tmp) / "memory.jsonl"
        write_memory_file(memory, data)
        size_mb = memory.stat().st_size / 1e6
        peer = await time_peer(args.server, memory, queries, args.warmup)
    peer_p50, peer_p99 = statistics.median(peer), percentile(sorted(peer), 99)
    print(f"method: {args.beads} beads (the bench corpus, seed {args.seed}); {len(queries)} queries of 1-3 words, "
          f"one at a time; ours through NATS ({report.setup}); the peer `{args.server}` over stdio (MCP), its "
          f"memory file {size_mb:.1f} MB, {args.warmup} warm-up calls")
    print(f"peer search_nodes: p50 {peer_p50:.2f} ms, p99 {peer_p99:.2f} ms")
    for name, p50 in ours.items():
        print(f"ours {name}: p50 {p50:.2f} ms; peer / ours {peer_p50 / p50:.1f}x")
    if args.save:
        figures = {"beads": args.beads, "samples": len(queries), "server": args.server, "memory_mb": round(size_mb, 2),
                   "peer": {"p50_ms": peer_p50, "p99_ms": peer_p99}, "ours": ours, "setup": report.setup}
        command = shlex.join(["python", "scripts/peer_mcp_memory.py", *sys.argv[1:]])
        print(f"results: {save(new_record('peers', figures, command=command), args.save)}")


if __name__ == "__main__":
    asyncio.run(main())
