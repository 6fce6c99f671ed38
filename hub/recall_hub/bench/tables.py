"""The tables of README and docs, generated from the results files (:mod:`recall_hub.bench.records`).

A doc marks where a table goes with ``<!-- results:NAME -->`` … ``<!-- /results:NAME -->``; what is between
is replaced by the table NAME renders from the results files (:data:`TABLES`). ``python -m
recall_hub.bench.tables`` rewrites them in README.md and docs/*.md; ``--check`` only says which differ (and
``tests/test_results_tables.py`` fails when one does).

A suite's current table is its newest *sitting*: the runs of the newest commit on one machine with the same
setup. Every run's figure is shown beside their median; a target counts as met when the median of at least
three runs meets it.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from recall_hub.bench.cpu import whole_processes
from recall_hub.bench.growth import GrowthReport, GrowthRow, VectorRow, render_growth
from recall_hub.bench.records import RESULTS_DIR, Record, load

MIN_RUNS_FOR_A_TARGET = 3
DEFAULT_BEADS = 10_000
"""The bus suite's size in ``<!-- results:bench -->`` (``recall bench --beads 10000``); other sizes have blocks of
their own (:data:`TABLES`)."""
LARGE_BEADS = 100_000
BENCH_TARGETS = {
    DEFAULT_BEADS: {"search hybrid": 15.0, "search keyword": 3.0, "create": 12.0},
    LARGE_BEADS: {"search hybrid": 12.0},
}
"""p50 targets (ms) of the open issues at each size, judged on the median of a sitting."""
INGEST_TARGET = 0.70
"""Long content's ingest against the embedder alone on the same chunks."""


def sittings(records: Sequence[Record], suite: str) -> list[list[Record]]:
    """The suite's records grouped by commit, machine and setup, oldest sitting first."""
    groups: dict[tuple[str, ...], list[Record]] = {}
    for record in records:
        if record.suite == suite:
            machine = record.machine
            key = (record.commit, str(machine.get("cpu_model")), str(machine.get("cores")), _setup(record))
            groups.setdefault(key, []).append(record)
    return sorted(groups.values(), key=lambda group: group[-1].date)


def _setup(record: Record) -> str:
    figures = record.figures
    if record.suite == "bench":
        setup = str(figures.get("setup", ""))
        embedder = re.search(r"embedder (\S+(?: \([^)]*\))?)", setup)  # the kind, then its model id if said
        durability = re.search(r"durability (\w+)", setup)
        settle = _create_settle(record)
        return (f"{figures.get('beads')} beads, embedder {embedder[1] if embedder else '?'}, "
                f"durability {durability[1] if durability else '?'}"
                + f", create settle {settle}")
    if record.suite == "locomo":
        return f"{len(figures.get('conversations', []))} conversations, plain={figures.get('plain')}"
    if record.suite == "peers":
        return f"{figures.get('beads')} beads, peer {figures.get('server')}"
    if record.suite == "load":
        c = figures.get("config", {})
        settle = c.get("create_settle", "inline")  # results files before it was said: the default then
        return (f"agents {c.get('agents')}, hubs {c.get('hubs')}, {c.get('seconds')} s, rate {c.get('rate')}, "
                f"embedder {c.get('embedder')}, create settle {settle}")
    return f"{figures.get('questions')} questions"


def _create_settle(record: Record) -> str:
    """How the bus suite's in-process hub settled creates: as its setup says, else as ``--create-settle`` said
    (results files before the setup said it), else inline (the hub's default then)."""
    found = (re.search(r"creates settled (\w+)", str(record.figures.get("setup", "")))
             or re.search(r"--create-settle[ =](\w+)", record.command or ""))
    return found[1] if found else "inline"


def _machine(run: Record) -> str:
    m = run.machine
    return f"{m.get('cores')} cores, {m.get('cpu_model')}, {m.get('python')}"


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _verdict(median: float, target: float, runs: int, lower_is_better: bool = True) -> str:
    if runs < MIN_RUNS_FOR_A_TARGET:
        return f"{runs} run(s): not judged"
    met = median <= target if lower_is_better else median >= target
    return "met" if met else "not met"


def _about(sitting: list[Record]) -> str:
    first = sitting[0]
    dates = sorted({r.date[:10] for r in sitting})
    command = first.command.split(" --note ", 1)[0]  # a tuning report's note is shown as its own sentence
    return f"Commit {first.commit}, {', '.join(dates)}, {len(sitting)} run(s) on {_machine(first)}; `{command}`."


def bench_table(sitting: list[Record]) -> list[str]:
    runs = len(sitting)
    header = "| p50 ms | " + " | ".join(f"run {i}" for i in range(1, runs + 1)) + " | median | target |"
    lines = [_about(sitting), "", header, "|---" * (runs + 3) + "|"]
    def ops(run: Record) -> list[dict[str, Any]]:
        return [run.figures["floor"], *run.figures["ops"]] if run.figures.get("floor") else run.figures["ops"]

    for name in [op["name"] for op in ops(sitting[0])]:
        values = [next((op["p50_ms"] for op in ops(r) if op["name"] == name), float("nan")) for r in sitting]
        median = _median(values)
        target = BENCH_TARGETS.get(int(sitting[0].figures.get("beads") or 0), {}).get(name)
        goal = f"≤ {target:g}: {_verdict(median, target, runs)}" if target is not None else ""
        lines.append(f"| {name} | " + " | ".join(f"{v:.2f}" for v in values) + f" | **{median:.2f}** | {goal} |")
    for prefix, label in (("beads", "ingest, beads/s"), ("embedder alone (", "embedder alone, texts/s")):
        rates = [_rate(r, prefix) for r in sitting]
        if any(v is not None for v in rates):
            cells = " | ".join("-" if v is None else f"{v:.0f}" for v in rates)
            lines.append(f"| {label} | {cells} | **{_median([v for v in rates if v is not None]):.0f}** |  |")
    for key, label, target in (("beads", "ingest / embedder alone", None),
                               ("long_chunks", "long content / embedder alone", INGEST_TARGET)):
        values = [r.figures.get("ingest_ratios", {}).get(key) for r in sitting]
        known = [v for v in values if v is not None]
        if not known:
            continue
        median = _median(known)
        goal = f"≥ {target:.0%}: {_verdict(median, target, len(known), False)}" if target is not None else ""
        cells = " | ".join("-" if v is None else f"{v:.0%}" for v in values)
        lines.append(f"| {label} | {cells} | **{median:.0%}** | {goal} |")
    return lines


PEER_TARGETS = {"mcp-memory": 3.0, "mem0": 8.0}
"""Each peer's search p50 over ours (hybrid), in the same run."""
PEER_SEARCH = {"mcp-memory": "search_nodes", "mem0": "Memory.search"}


def peer_kind(record: Record) -> str:
    """Which peer a ``peers`` record measured (the MCP memory server's records before mem0 did not say)."""
    return str(record.figures.get("peer_kind", "mcp-memory"))


def peers_table(sitting: list[Record]) -> list[str]:
    """``scripts/peers.py --save``: the peer's search and ours on the same memory, each run's ratio."""
    runs = len(sitting)
    figures = [r.figures for r in sitting]
    kind = peer_kind(sitting[0])
    lines = [_about(sitting) + f" {figures[0]['beads']} beads, {figures[0]['samples']} queries; the peer: "
             f"`{figures[0]['server']}`.", "",
             "| p50 ms | " + " | ".join(f"run {i}" for i in range(1, runs + 1)) + " | median | target |",
             "|---" * (runs + 3) + "|"]
    rows = [(f"peer {PEER_SEARCH[kind]}", [f["peer"]["p50_ms"] for f in figures]),
            *((f"ours {name}", [f["ours"][name] for f in figures]) for name in figures[0]["ours"])]
    for label, values in rows:
        lines.append(f"| {label} | " + " | ".join(f"{v:.2f}" for v in values) + f" | **{_median(values):.2f}** |  |")
    for name in figures[0]["ours"]:
        ratios = [f["peer"]["p50_ms"] / f["ours"][name] for f in figures]
        median = _median(ratios)
        target = PEER_TARGETS[kind]
        goal = f"≥ {target:g}×: {_verdict(median, target, runs, False)}" if name == "search hybrid" else ""
        lines.append(f"| peer / ours {name} | " + " | ".join(f"{v:.1f}×" for v in ratios)
                     + f" | **{median:.1f}×** | {goal} |")
    return lines


def _rate(run: Record, prefix: str) -> float | None:
    """The per-second rate of the run's ingest row whose name starts with ``prefix``."""
    return next((row["per_second"] for row in run.figures.get("ingest") or [] if row["name"].startswith(prefix)), None)


def _interval(pair: Sequence[float] | None) -> str:
    return f" [{pair[0]:.3f}, {pair[1]:.3f}]" if pair else ""


def locomo_table(sitting: list[Record]) -> list[str]:
    lines = [_about(sitting), "", "| run | mode | session Hit@1 | Recall@10 | p50 ms | n |", "|---" * 6 + "|"]
    for i, run in enumerate(sitting, start=1):
        for mode, row in run.figures["table"].items():
            overall, ci = row["all"], run.figures["intervals_95"].get(mode, {})
            lines.append(
                f"| {i} | {mode} | {overall['session_hit_at_1']:.3f}{_interval(ci.get('session_hit_at_1'))} | "
                f"{overall['recall_at_10']:.3f}{_interval(ci.get('recall_at_10'))} | {overall['p50_ms']:.1f} | "
                f"{overall['questions']} |"
            )
    return lines


LME_METRICS = ("any@1", "any@5", "any@10", "all@5", "turn R@10")


def longmemeval_table(sitting: list[Record]) -> list[str]:
    lines = [_about(sitting), "", "| run | mode | " + " | ".join(LME_METRICS) + " | p50 ms |",
             "|---" * (len(LME_METRICS) + 3) + "|"]
    for i, run in enumerate(sitting, start=1):
        for mode, row in run.figures["modes"].items():
            cells = [f"{row['all'][m]:.3f}{_interval(row['intervals_95'].get(m))}" for m in LME_METRICS]
            lines.append(f"| {i} | {mode} | " + " | ".join(cells) + f" | {row['all']['p50_ms']:.1f} |")
    return lines


def _headline(sitting: list[Record]) -> str:
    first = sitting[0]
    if first.suite == "bench":
        wanted = ("search hybrid", "search keyword", "create", "get")
        medians = {
            name: _median([op["p50_ms"] for r in sitting for op in r.figures["ops"] if op["name"] == name])
            for name in wanted
        }
        return ", ".join(f"{name} {value:.2f}" for name, value in medians.items()) + " ms p50"
    if first.suite == "locomo":
        default = first.figures["table"].get("hybrid+priors", {}).get("all")
        if not default:
            return ""
        return f"default sess@1 {default['session_hit_at_1']:.3f}, R@10 {default['recall_at_10']:.3f}"
    default = first.figures["modes"].get("hybrid+priors", {}).get("all")
    if not default:
        return ""
    return ", ".join(f"{m} {default[m]:.3f}" for m in LME_METRICS)


def history(records: Sequence[Record]) -> list[str]:
    lines = ["| date | commit | suite | setup | runs | figures (median of the runs, else the first) |",
             "|---|---|---|---|---|---|"]
    rows = [group for suite in ("bench", "locomo", "longmemeval") for group in sittings(records, suite)]
    for sitting in sorted(rows, key=lambda group: group[0].date):
        first = sitting[0]
        lines.append(f"| {first.date[:10]} | {first.commit} | {first.suite} | {_setup(first)} | {len(sitting)} | "
                     f"{_headline(sitting)} |")
    return lines


def tune_table(sitting: list[Record]) -> list[str]:
    """A ranking study (``scripts/tune_ranking.py --save``): each variant's mean, and its paired difference from
    ``base`` with the 95% interval; then the cross-validated choice."""
    run = sitting[0]
    report = run.figures
    metrics = report["metrics"]
    asked = report["questions"]
    lines = [_about(sitting) + f" LoCoMo {asked['locomo']} questions, LongMemEval {asked['lme']}. "
             + report.get("note", "")]
    lines += ["", "| variant | " + " | ".join(metrics) + " |", "|---" * (len(metrics) + 1) + "|"]
    for name, cells in report["variants"].items():
        shown = [
            f"{c['mean']:.3f}" if "difference" not in c
            else f"{c['difference']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}]"
            for c in (cells[m] for m in metrics)
        ]
        lines.append(f"| {name} | " + " | ".join(shown) + " |")
    validated = report["cross_validated"]
    lines += ["", f"Cross-validated ({report['folds']} folds; chosen per fold: {', '.join(report['chosen'])}): "
              + "; ".join(f"{m} {v['cv'] - v['base']:+.3f} [{v['low']:+.3f}, {v['high']:+.3f}]"
                          for m, v in validated.items()) + "."]
    return lines


def growth_table(sitting: list[Record]) -> list[str]:
    """``recall bench --suite growth``: one graph's memory and query times at each size (the suite's own table)."""
    figures = sitting[0].figures
    report = GrowthReport(
        rows=[GrowthRow(**row) for row in figures["rows"]],
        vectors=[VectorRow(**row) for row in figures["vectors"]],
        baseline_mb=figures["baseline_mb"],
    )
    return [_about(sitting[:1]), "", *render_growth(report).splitlines()[2:]]


def load_table(sitting: list[Record]) -> list[str]:
    """``recall bench --suite load``: each level's throughput and p99 in every run, beside their medians."""
    config = sitting[0].figures["config"]
    levels: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
    for run in sitting:
        for level in run.figures["levels"]:
            levels.setdefault((level["hubs"], level["loop"], level["agents"]), []).append(level)
    lines = [_about(sitting) + f" {config['seconds']:g} s a level, open loop at {config['rate']:g} requests/s.", "",
             "| hubs | loop | agents | req/s, each run | req/s median | p99 ms, each run | p99 median | errors "
             "| CPU ms a request (hubs) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for (hubs, loop, agents), runs in levels.items():
        rates, tails = [lv["throughput"] for lv in runs], [lv["p99_ms"] for lv in runs]
        cpu = [lv["cpu_ms"] for lv in runs if lv.get("cpu_ms")]
        spent = (f"{_median([whole_processes(c) for c in cpu]):.1f} "
                 f"({_median([c.get('hubs', 0.0) for c in cpu]):.1f})") if cpu else "-"
        lines.append(
            f"| {hubs} | {loop} | {agents} | {' / '.join(f'{r:.0f}' for r in rates)} | **{_median(rates):.0f}** | "
            f"{' / '.join(f'{t:.0f}' for t in tails)} | **{_median(tails):.0f}** | {sum(lv['errors'] for lv in runs)} "
            f"| {spent} |"
        )
    return lines


SITTING_TABLES: dict[str, Callable[[list[Record]], list[str]]] = {
    "bench": bench_table, "locomo": locomo_table, "longmemeval": longmemeval_table, "tune": tune_table,
    "growth": growth_table, "load": load_table, "peers": peers_table,
}
"""How a sitting of each suite is shown: ``<!-- results:SUITE -->`` is the suite's newest sitting,
``<!-- results:SUITE:FILE -->`` the one run kept in ``FILE`` (a results file's name without ``.json``)."""


def current(
    suite: str, settle: str | None = "background", beads: int = DEFAULT_BEADS, peer: str = "mcp-memory"
) -> Callable[[Sequence[Record]], list[str]]:
    """The newest sitting of ``suite``; of the bus suite, at ``beads`` beads, with creates settled as ``settle``
    says (``background``, the hub's default, or ``inline``; None: either); of ``peers``, against ``peer``."""
    def table(records: Sequence[Record]) -> list[str]:
        groups = [
            g for g in sittings(records, suite)
            if (suite != "bench" or (settle in (None, _create_settle(g[0])) and g[0].figures.get("beads") == beads))
            and (suite != "peers" or peer_kind(g[0]) == peer)
        ]
        against = f" against {peer}" if suite == "peers" else ""
        return SITTING_TABLES[suite](groups[-1]) if groups else [f"No results file of suite {suite!r}{against} yet."]

    return table


TABLES: dict[str, Callable[[Sequence[Record]], list[str]]] = {
    **{suite: current(suite) for suite in SITTING_TABLES}, "inline": current("bench", settle="inline"),
    "large": current("bench", settle=None, beads=LARGE_BEADS), "mem0": current("peers", peer="mem0"),
    "history": history,
}
_BLOCK = re.compile(
    r"(<!-- results:(?P<name>[a-z][a-z0-9]*(?::[\w.-]+)?) -->\n)(?P<body>.*?)(<!-- /results:(?P=name) -->)", re.S
)


def _table(name: str, records: Sequence[Record]) -> list[str]:
    if name in TABLES:
        return TABLES[name](records)
    suite, _, file = name.partition(":")
    if suite not in SITTING_TABLES or not file:
        raise ValueError(f"no results table named {name!r} (known: {', '.join(TABLES)}, or SUITE:FILE)")
    kept = [r for r in records if r.name == f"{file}.json"]
    if not kept:
        raise ValueError(f"no results file {file}.json for the table {name!r}")
    return SITTING_TABLES[suite](kept)


def rendered(text: str, records: Sequence[Record]) -> str:
    """``text`` with every marked block replaced by its table."""

    def table(match: re.Match[str]) -> str:
        return match.group(1) + "\n".join(_table(match["name"], records)) + "\n" + match.group(4)

    return _BLOCK.sub(table, text)


def documents(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def refreshed(root: Path, records: Sequence[Record]) -> dict[Path, str]:
    """The documents under ``root`` whose tables differ from what the results files give, with their new text."""
    texts = {path: path.read_text() for path in documents(root)}
    fresh = {path: rendered(text, records) for path, text in texts.items()}
    return {path: text for path, text in fresh.items() if text != texts[path]}


def stale(root: Path, records: Sequence[Record]) -> list[Path]:
    return list(refreshed(root, records))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate the results tables of README and docs.")
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository (default: here)")
    parser.add_argument("--check", action="store_true", help="only list the documents whose tables are stale")
    args = parser.parse_args(argv)
    records = load(args.root / RESULTS_DIR)
    outdated = refreshed(args.root, records)
    if args.check:
        for path in outdated:
            print(f"stale: {path}", file=sys.stderr)
        return 1 if outdated else 0
    for path, text in outdated.items():
        path.write_text(text)
        print(f"rewrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
