"""The bench's report as text (``recall bench``), as Markdown (the sections of docs/benchmarks.md) and as
data (``recall bench --json``): the method (machine, code, setup, data, how each figure was taken), then the
ingest and latency tables and where the in-process hub's time went.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from recall_hub.bench.ingest import INGEST_BATCH, INGEST_BATCHES_IN_FLIGHT
from recall_hub.bench.results import BenchReport, OpResult, Throughput
from recall_hub.bench.stats import percentile


def _ms(value: float) -> str:
    if math.isnan(value):
        return "-"
    return f"{value:.2f}" if value < 100 else f"{value:.0f}"


def _header_lines(report: BenchReport) -> list[str]:
    m, d, c = report.machine, report.dataset, report.config
    vis = ", ".join(
        f"{d.visibility.get(v, 0) * 100 / max(1, d.beads):.0f}% {v}" for v in ("group", "private", "global")
    )
    libs = ", ".join(f"{k} {v}" for k, v in m.libraries.items())
    edges = ", ".join(f"{n:,} {t}" for t, n in sorted(d.edges.items()))
    floor = report.floor
    load = ""
    if m.load:
        start, peak, end = m.load[0], max(m.load), m.load[-1]
        load = f"; load average {start:.2f} at the start, {peak:.2f} at most, {end:.2f} at the end"
    return [
        f"Machine: {m.cores} cores, {m.cpu_model}, {m.memory_gb:.0f} GB RAM, {m.os}{load}",
        f"Code: {m.code}",
        f"Software: {m.python}; nats-server {m.nats_server}; redis {m.redis} + FalkorDB {m.falkordb}; {libs}",
        f"Setup: {report.setup}",
        f"Data: {d.beads:,} beads by {d.identities} identities in {d.groups} groups and "
        f"{d.sessions} sessions ({vis}); {sum(d.edges.values()):,} edges ({edges}); "
        f"title+content {d.bead_bytes[0]}-{d.bead_bytes[2]} B "
        f"(median {d.bead_bytes[1]} B, {d.tokens[0]} embedder tokens, p90 {d.tokens[1]}) "
        f"from a {d.vocabulary:,}-word Zipf vocabulary; seed {c.seed}",
        f"Queries: 1-3 words; median {d.query_matches[0]:,} beads of the store match one (p90 "
        f"{d.query_matches[1]:,}); the caller {d.caller} may see {d.caller_visible:,} beads",
        f"Ingest: beads in create_beads batches of {INGEST_BATCH}, {min(c.concurrency, INGEST_BATCHES_IN_FLIGHT)} "
        f"batches in flight (one identity's batches in order); edges and events {c.concurrency} requests in "
        "flight; one connection per identity; 'embedder alone' = the hub's embedder on the first 512 bead texts, "
        "batches of 32, before ingest",
        f"Latency: one request at a time, {c.samples} samples per operation in {c.rounds} interleaved rounds "
        f"after {c.warmup} warm-up calls; time.perf_counter_ns around the client call",
        f"Floor: bare NATS request/reply to a plain nats-py echo responder through the same nats-server and "
        f"client connection; request {floor.request_bytes} B, reply {floor.reply_bytes} B "
        "(the median get_bead request and reply)",
        _gc_line(report.gc_pauses),
        f"Run: {report.started_at:%Y-%m-%d %H:%M} UTC, {report.duration_s:.0f} s; command: {report.command}",
    ]


def _gc_line(pauses: list[tuple[int, float]]) -> str:
    if not pauses:
        return "Python GC while timing: no collection recorded"
    oldest = sum(1 for gen, _ in pauses if gen == 2)
    longest = max(ms for _, ms in pauses)
    total = sum(ms for _, ms in pauses)
    return (
        f"Python GC while timing (client and hub share it): {len(pauses)} collections ({oldest} of "
        f"generation 2), longest {longest:.1f} ms, {total:.0f} ms in all"
    )


_LATENCY_COLUMNS = [
    "operation", "n", "p50 ms", "p95 ms", "p99 ms", "x floor", "req B", "reply B", "result", "seed target",
    "errors",
]
_BREAKDOWN_COLUMNS = [
    "operation", "mean ms", "queries", "graph ms", "falkordb exec", "client parse", "embed ms", "vectors ms",
    "rest ms",
]
_INGEST_COLUMNS = ["ingest", "count", "seconds", "per second", "p50 ms", "p99 ms", "errors"]


def _latency_rows(report: BenchReport) -> list[list[str]]:
    base = report.floor.p(50)
    rows = []
    for r in [report.floor, *report.ops]:
        target = "-"
        if r.target_ms is not None:
            verdict = "no samples" if not r.n else "met" if r.p(99) < r.target_ms else "MISSED"
            target = f"< {r.target_ms:.0f} ms: {verdict}"
        result = f"{r.result_size:.1f} {r.result_unit}".strip() if r.result_unit else "-"
        rows.append([
            r.name,
            str(r.n),
            _ms(r.p(50)),
            _ms(r.p(95)),
            _ms(r.p(99)),
            f"{r.p(50) / base:.1f}x" if base > 0 and r.n else "-",
            str(r.request_bytes),
            str(r.reply_bytes),
            result,
            target,
            str(r.errors),
        ])
    return rows


def _breakdown_rows(report: BenchReport) -> list[list[str]]:
    rows = []
    for r in report.ops:
        hub = r.hub_time()
        if hub is None:
            continue
        rows.append([
            r.name,
            _ms(hub.mean_ms),
            f"{hub.graph_queries:.1f}",
            _ms(hub.graph_ms),
            _ms(hub.falkordb_exec_ms),
            _ms(hub.client_parse_ms),
            _ms(hub.embed_ms),
            _ms(hub.vectors_ms),
            _ms(hub.rest_ms),
        ])
    return rows


def _ingest_rows(report: BenchReport) -> list[list[str]]:
    return [
        [
            t.name,
            f"{t.count:,}",
            f"{t.seconds:.1f}",
            f"{t.per_second:,.0f}/s",
            _ms(percentile(t.latencies_ms, 50)),
            _ms(percentile(t.latencies_ms, 99)),
            str(t.errors),
        ]
        for t in report.ingest
    ]


def _table(columns: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(columns[i]), *(len(row[i]) for row in rows)) for i in range(len(columns))]

    def line(cells: list[str]) -> str:
        pairs = enumerate(zip(cells, widths, strict=True))
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in pairs)

    return [line(columns), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def _named(report: BenchReport, prefix: str) -> Throughput | None:
    return next((t for t in report.ingest if t.name.startswith(prefix)), None)


def ingest_ratios(report: BenchReport) -> dict[str, float]:
    """Ingest against the embedder alone on the same texts in the same run: ``beads`` (beads/s over texts/s)
    and ``long_chunks`` (long content's chunks/s over the embedder's on the same chunks), where measured."""
    ratios = {}
    pairs = {"beads": ("beads", "embedder alone ("), "long_chunks": ("long beads", "embedder alone on their chunks")}
    for key, (ingested, alone) in pairs.items():
        done, bare = _named(report, ingested), _named(report, alone)
        if done is not None and bare is not None and bare.per_second > 0:
            ratios[key] = done.per_second / bare.per_second
    return ratios


def ingest_ratio(report: BenchReport) -> str | None:
    """Bead ingest against the embedder alone, on the same texts in the same run, as a line."""
    ratios = ingest_ratios(report)
    if "beads" not in ratios:
        return None
    beads, alone = _named(report, "beads"), _named(report, "embedder alone (")
    assert beads is not None and alone is not None
    line = (f"ingest {beads.per_second:,.0f} beads/s = {ratios['beads']:.0%} of the "
            f"embedder alone ({alone.per_second:,.0f} texts/s)")
    if "long_chunks" in ratios:
        long, chunks = _named(report, "long beads"), _named(report, "embedder alone on their chunks")
        assert long is not None and chunks is not None
        line += (f"; long content {long.per_second:,.0f} chunks/s = {ratios['long_chunks']:.0%} of the "
                 f"embedder alone on the same chunks ({chunks.per_second:,.0f} chunks/s)")
    return line


def to_json(report: BenchReport) -> dict[str, Any]:
    """The report as data (``recall bench --json``): the same figures as the tables, in ms; an operation's
    ``breakdown`` is its row of the where-the-time-goes table (None without an in-process hub)."""

    def op(r: OpResult) -> dict[str, Any]:
        base = report.floor.p(50)
        return {
            "name": r.name, "op": r.op, "n": r.n, "p50_ms": r.p(50), "p95_ms": r.p(95), "p99_ms": r.p(99),
            "x_floor": r.p(50) / base if base > 0 and r.n else None, "request_bytes": r.request_bytes,
            "reply_bytes": r.reply_bytes, "errors": r.errors, "target_ms": r.target_ms,
            "breakdown": asdict(hub) if (hub := r.hub_time()) is not None else None,
        }

    return {
        "beads": report.dataset.beads,
        "started_at": report.started_at.isoformat(),
        "duration_s": report.duration_s,
        "command": report.command,
        "setup": report.setup,
        "method": _header_lines(report),
        "ingest": [
            {"name": t.name, "count": t.count, "seconds": t.seconds, "per_second": t.per_second,
             "p50_ms": percentile(t.latencies_ms, 50), "p99_ms": percentile(t.latencies_ms, 99), "errors": t.errors}
            for t in report.ingest
        ],
        "ingest_vs_embedder": ingest_ratio(report),
        "ingest_ratios": ingest_ratios(report),
        "floor": op(report.floor),
        "ops": [op(r) for r in report.ops],
    }


BREAKDOWN_NOTE = [
    "graph = FalkorDB calls as the hub sees them (round trip + parsing), of which falkordb exec is the",
    "server's own execution time and client parse the reading of the reply; rest = the total minus",
    "graph, embed and vectors: NATS, pydantic (de)serialisation, visibility/ranking code and the event loop.",
]
"""Printed under the where-the-time-goes table: what its columns hold."""


def render(report: BenchReport) -> str:
    """The report as plain text: the method, then the ingest and latency tables and where the time goes."""
    out = [f"Nexus Recall benchmark at {report.dataset.beads:,} beads", ""]
    out += _header_lines(report)
    out += ["", *_table(_INGEST_COLUMNS, _ingest_rows(report))]
    ratio = ingest_ratio(report)
    out += [ratio] if ratio else []
    out += ["", *_table(_LATENCY_COLUMNS, _latency_rows(report))]
    out += ["", "x floor = the operation's p50 / the floor's p50; seed target is judged on p99."]
    breakdown = _breakdown_rows(report)
    if breakdown:
        out += ["", "Where the time goes (in-process hub; means per request):"]
        out += ["", *_table(_BREAKDOWN_COLUMNS, breakdown), "", *BREAKDOWN_NOTE]
    return "\n".join(out)


def _md_table(columns: list[str], rows: list[list[str]]) -> list[str]:
    align = ["---"] + ["---:"] * (len(columns) - 1)
    return [
        "| " + " | ".join(columns) + " |",
        "| " + " | ".join(align) + " |",
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


def markdown(report: BenchReport) -> str:
    """The report as a Markdown section for docs/benchmarks.md."""
    out = [f"### {report.dataset.beads:,} beads, {report.started_at:%Y-%m-%d}", ""]
    out += [f"- {line}" for line in _header_lines(report)]
    out += ["", *_md_table(_INGEST_COLUMNS, _ingest_rows(report))]
    ratio = ingest_ratio(report)
    out += ["", ratio] if ratio else []
    out += ["", *_md_table(_LATENCY_COLUMNS, _latency_rows(report))]
    out += ["", "x floor = the operation's p50 / the floor's p50; seed target is judged on p99."]
    breakdown = _breakdown_rows(report)
    if breakdown:
        out += ["", "Where the time goes (in-process hub; means per request):"]
        out += ["", *_md_table(_BREAKDOWN_COLUMNS, breakdown), "", " ".join(BREAKDOWN_NOTE)]
    return "\n".join(out) + "\n"
