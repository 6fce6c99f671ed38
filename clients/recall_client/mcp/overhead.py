"""What the MCP sidecar costs an agent: the size of its tool list, and the time it adds over the client
library for a search and a create.

    python -m recall_client.mcp.overhead --tool-list                        # bytes and tokens per profile
    python -m recall_client.mcp.overhead --nats nats://127.0.0.1:4222 [--rounds 200] [--creds FILE]

The tool list is what every agent carries in its context on every turn: measured as the JSON of the
``tools/list`` result, in bytes and in tokens of OpenAI's ``o200k_base`` encoding when ``bpe-openai``
is installed (``pip install bpe-openai``; else bytes / 4, marked as an estimate).

The timing needs a running hub (``recall up`` or ``make demo``; on a secure stack give ``--creds`` of
one agent, whose AI id it then acts as). Four paths make the same calls as one agent:
the client library directly; the sidecar in process through the SDK's in-memory client; and the
``recall-mcp`` sidecar as a subprocess over stdio and over streamable HTTP, each driven by the SDK's
client. Every round times one call per path in turn, so drift hits every path alike; p50/p90 are of
the wall time around each awaited call in this process. Overhead = the path's p50 minus the library's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from mcp import Client, StdioServerParameters

from recall_client.client import RecallClient, creds_identity

from .link import HubLink
from .server import build_server

QUERIES = [
    "payments retry backoff",
    "which graph store did we choose",
    "flaky integration test on the gateway",
    "release schedule",
    "how to rotate the NATS credentials",
    "vector index recall",
    "deploy rollback procedure",
    "why did the nightly build fail",
]
SEARCH_LIMIT = 10
METHOD = (
    "Method: one agent id; four paths make the same calls (the client library; the sidecar in process via the "
    "SDK's in-memory client; recall-mcp over stdio; recall-mcp over streamable HTTP). Each round times one call "
    "per path in turn after a warm-up; wall time around each awaited call in this process; "
    "overhead = path p50 - library p50. CPU per call, which does not depend on how busy the machine is: 'client' "
    "is this process (library or MCP client; for in-process also the sidecar), 'sidecar' the recall-mcp "
    "subprocess (Linux /proc)."
)


@dataclass
class ListSize:
    profile: str
    tools: int
    bytes: int
    tokens: int
    exact: bool
    """``tokens`` counted with o200k_base; False: estimated as bytes / 4."""


def _token_counter() -> tuple[Callable[[str], int], bool]:
    try:
        import bpe_openai  # type: ignore[import-not-found,unused-ignore]  # optional: only for this measurement
    except ImportError:
        return (lambda text: len(text.encode()) // 4), False
    encoding = bpe_openai.get_encoding("o200k_base")
    return (lambda text: len(encoding.encode(text))), True


async def tool_list_sizes(profiles: list[str]) -> list[ListSize]:
    """The ``tools/list`` result of a sidecar offering each of ``profiles``, measured as an agent receives it."""
    count, exact = _token_counter()
    rows = []
    for profile in profiles:
        async with Client(build_server(HubLink("a_size0000", "nats://127.0.0.1:1"), tools=profile)) as client:
            listing = await client.list_tools()
        text = json.dumps(listing.model_dump(mode="json", by_alias=True, exclude_none=True), separators=(",", ":"))
        rows.append(ListSize(profile, len(listing.tools), len(text.encode()), count(text), exact))
    return rows


def render_sizes(rows: list[ListSize]) -> str:
    unit = "tokens (o200k_base)" if all(r.exact for r in rows) else "tokens (estimated: bytes / 4)"
    lines = [f"{'profile':<10}{'tools':>6}{'bytes':>9}  {unit}"]
    lines += [f"{r.profile:<10}{r.tools:>6}{r.bytes:>9}  {r.tokens}" for r in rows]
    return "\n".join(lines)


@dataclass
class Row:
    operation: str
    path: str
    p50_ms: float
    p90_ms: float
    overhead_ms: float | None
    client_cpu_ms: float
    sidecar_cpu_ms: float | None


Call = Callable[[int], Awaitable[Any]]


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process (Linux), or None where /proc is not available."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _stdio_sidecar_pid() -> int | None:
    """The stdio sidecar this process started (a child running recall_client.mcp without --http)."""
    me = str(os.getpid())
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            with contextlib.suppress(OSError, IndexError):
                with open(f"/proc/{entry}/stat") as f:
                    ppid = f.read().rsplit(")", 1)[1].split()[1]
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmdline = f.read().split(b"\0")
                if ppid == me and b"recall_client.mcp" in cmdline and b"--http" not in cmdline:
                    return int(entry)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _mcp_call(client: Client, tool: str, arguments: dict[str, Any]) -> Any:
    result = await client.call_tool(tool, arguments)
    if result.is_error:
        raise RuntimeError(f"{tool}: {result.content}")
    return result


@contextlib.asynccontextmanager
async def _http_sidecar(flags: list[str]) -> AsyncIterator[tuple[Client, int]]:
    port = _free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "recall_client.mcp", "--http", "--port", str(port), *flags,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                if proc.returncode is not None or time.monotonic() > deadline:
                    raise RuntimeError("the HTTP sidecar did not start") from None
                await asyncio.sleep(0.05)
                continue
            writer.close()
            await writer.wait_closed()
            break
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            yield client, proc.pid
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()


async def measure(nats_url: str, rounds: int = 200, warmup: int = 20, creds: str | None = None) -> list[Row]:
    """p50/p90 per operation and path, and each path's p50 overhead over the library."""
    ai_id = creds_identity(creds) if creds else f"a_ovh{secrets.token_hex(4)}"
    flags = ["--ai-id", ai_id, "--nats", nats_url, "--tools", "all", *(["--creds", creds] if creds else [])]
    stdio = StdioServerParameters(command=sys.executable, args=["-m", "recall_client.mcp", *flags])
    async with contextlib.AsyncExitStack() as stack:
        library = await stack.enter_async_context(RecallClient(ai_id, nats_url, creds=creds))
        in_process = await stack.enter_async_context(Client(build_server(HubLink(ai_id, nats_url, creds=creds))))
        over_stdio = await stack.enter_async_context(Client(stdio))
        over_http, http_pid = await stack.enter_async_context(_http_sidecar(flags))
        sidecars = {"mcp in-process": in_process, "mcp stdio": over_stdio, "mcp http": over_http}
        sidecar_pids = {"mcp stdio": _stdio_sidecar_pid(), "mcp http": http_pid}

        for i in range(30):  # something to search
            await library.create_bead(f"Seed memory {i}: {QUERIES[i % len(QUERIES)]}", f"detail {i}", tags=["ovh"])

        def search_calls() -> dict[str, Call]:
            def via(client: Client) -> Call:
                return lambda i: _mcp_call(
                    client, "search_beads", {"query": QUERIES[i % len(QUERIES)], "limit": SEARCH_LIMIT}
                )

            calls: dict[str, Call] = {
                "library": lambda i: library.search_beads(QUERIES[i % len(QUERIES)], limit=SEARCH_LIMIT)
            }
            return calls | {name: via(client) for name, client in sidecars.items()}

        def create_calls() -> dict[str, Call]:
            def via(client: Client, name: str) -> Call:
                return lambda i: _mcp_call(
                    client, "create_bead", {"title": f"{name} create {i}", "content": "overhead probe"}
                )

            calls: dict[str, Call] = {"library": lambda i: library.create_bead(f"library create {i}", "overhead probe")}
            return calls | {name: via(client, name) for name, client in sidecars.items()}

        rows: list[Row] = []
        for operation, calls in (("search_beads", search_calls()), ("create_bead", create_calls())):
            times: dict[str, list[float]] = {path: [] for path in calls}
            cpu = dict.fromkeys(calls, 0.0)
            remote_start: dict[str, float | None] = {}
            for i in range(warmup + rounds):
                if i == warmup:
                    remote_start = {path: _cpu_seconds(pid) if pid else None for path, pid in sidecar_pids.items()}
                for path, fn in calls.items():
                    started, cpu_started = time.perf_counter(), time.process_time()
                    await fn(i)
                    if i >= warmup:
                        times[path].append((time.perf_counter() - started) * 1000)
                        cpu[path] += time.process_time() - cpu_started
            remote: dict[str, float | None] = {}
            for path, pid in sidecar_pids.items():
                end, start = (_cpu_seconds(pid) if pid else None), remote_start.get(path)
                remote[path] = (end - start) * 1000 / rounds if end is not None and start is not None else None
            base = statistics.median(times["library"])
            for path, samples in times.items():
                p50 = statistics.median(samples)
                p90 = statistics.quantiles(samples, n=10)[-1]
                overhead = None if path == "library" else p50 - base
                rows.append(Row(operation, path, p50, p90, overhead, cpu[path] * 1000 / rounds, remote.get(path)))
        return rows


def render(rows: list[Row], nats_url: str, rounds: int) -> str:
    lines = [
        f"MCP sidecar overhead over the client library ({rounds} interleaved rounds per path, hub via {nats_url})",
        "",
        f"{'operation':<14}{'path':<16}{'p50 ms':>9}{'p90 ms':>9}{'overhead p50':>14}"
        f"{'client CPU ms':>15}{'sidecar CPU ms':>16}",
    ]
    for row in rows:
        overhead = "" if row.overhead_ms is None else f"{row.overhead_ms:+.2f} ms"
        sidecar = "" if row.sidecar_cpu_ms is None else f"{row.sidecar_cpu_ms:.2f}"
        lines.append(
            f"{row.operation:<14}{row.path:<16}{row.p50_ms:>9.2f}{row.p90_ms:>9.2f}{overhead:>14}"
            f"{row.client_cpu_ms:>15.2f}{sidecar:>16}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m recall_client.mcp.overhead", description=METHOD)
    parser.add_argument("--nats", default=os.environ.get("RECALL_NATS_URL", "nats://127.0.0.1:4222"))
    parser.add_argument(
        "--creds", default=os.environ.get("RECALL_NATS_CREDS"), help="an agent's creds file (secure stack)"
    )
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--tool-list", action="store_true", help="only measure the tool list of each profile")
    args = parser.parse_args(argv)
    if args.tool_list:
        print(render_sizes(asyncio.run(tool_list_sizes(["core", "all"]))))
        return 0
    rows = asyncio.run(measure(args.nats, args.rounds, args.warmup, args.creds))
    print(METHOD, end="\n\n")
    print(render(rows, args.nats, args.rounds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
