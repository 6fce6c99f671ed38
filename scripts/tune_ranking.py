"""Choose ranking constants on both retrieval dev sets together, by cross-validation (never fitted to one).

    python scripts/tune_ranking.py --work-dir /tmp/tune                # ingest once, then every variant
    python scripts/tune_ranking.py --work-dir /tmp/tune --variants base,context.0.2
    python scripts/tune_ranking.py --work-dir /tmp/tune --variants base --tag short \
        --setting recall_hub.store.keyword_index.SOME_CONSTANT=50      # what the index is built with
    python scripts/tune_ranking.py --work-dir /tmp/loc --lme-questions 0   # LoCoMo alone
    python scripts/tune_ranking.py --work-dir /tmp/tune --report-only --save benchmarks/results --note "..."

Both dev sets are ingested once, plainly and through the bus as the evals do (``recall eval locomo --plain``,
``recall eval longmemeval``), into an embedded stack kept in ``--work-dir``; a later run reuses it. Each
variant is a set of ranking constants (module attributes) changed in the in-process hub; every question of
both sets is then asked through the bus with the default request, and the per-question results are kept in
``--work-dir/results``. The report gives, per variant, LoCoMo session Hit@1 and turn Recall@10 and
LongMemEval session recall_any@1, recall_all@5 and turn Recall@10, each as the paired difference from
``base`` with a 95% bootstrap interval; then a cross-validated choice: the questions are cut in folds (LoCoMo
by conversation, LongMemEval by question), each fold is scored with the variant that does best on the other
folds (each set's metrics averaged, the two sets weighing the same), and the folds' scores are pooled:
an estimate of what choosing among these variants gives on questions the choice did not see.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import random
import shlex
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from recall_hub.bench import locomo, longmemeval
from recall_hub.bench.evalkit import eval_hub
from recall_hub.bench.records import new_record, save

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
GRAPH = "tune"
METRICS = ("locomo sess@1", "locomo R@10", "lme any@1", "lme all@5", "lme turn R@10")

RANKING = "recall_hub.retrieval.ranking"
SEARCH = "recall_hub.retrieval.search"
VARIANTS: dict[str, dict[str, Any]] = {
    "base": {},
    **{f"context.{c}": {f"{RANKING}.CONTEXT_WEIGHT": c} for c in (0.2, 0.6)},
    **{f"tokens.{w}": {f"{RANKING}.TOKEN_WEIGHT": w} for w in (0.0, 0.2, 0.3, 0.5, 0.6)},
    **{f"rarity.{c}": {f"{RANKING}.TOKEN_COMMON": c} for c in (0.5, 0.6, 0.7)},
    **{f"keyword.{k}": {f"{RANKING}.LIST_WEIGHTS": {"keyword": k, "vector": round(1 - k, 2)}}
       for k in (0.5, 0.6, 0.7, 0.8)},
    **{f"candidates.{n}": {f"{SEARCH}.CANDIDATES": n} for n in (30, 75, 100)},
    **{f"matched.{n}": {f"{SEARCH}.TOKEN_MATCHED": n} for n in (30, 100, 1000)},
    **{f"bm25L.{n}": {"recall_hub.store.bm25.REFERENCE_LENGTH": n} for n in (60, 150, 200, 300)},
    **{f"depth.{n}": {"recall_hub.store.bm25.RESCORE_DEPTH": n} for n in (50, 200)},
    **{f"k1.{k}": {"recall_hub.store.bm25.K1": k} for k in (0.9, 1.5, 2.0)},
    **{f"b.{b}": {"recall_hub.store.bm25.B": b} for b in (0.5, 0.9)},
    **{f"own.{x}": {"recall_hub.retrieval.asker.OWN_BOOST": x} for x in (1.0, 1.4, 3.0)},
    **{f"ago.{x}": {"recall_hub.retrieval.dates.AGO_SPREAD": x} for x in (0.0, 0.5, 2.0)},
    **{f"date.{x}": {"recall_hub.retrieval.timely.DATE_BOOST": x} for x in (2.5, 4.0)},
    **{f"chunkdisc.{x}": {"recall_hub.store.vectors.CHUNK_DISCOUNT": x} for x in (0.05, 0.2)},
    **{f"sentdisc.{x}": {"recall_hub.store.vectors.SENTENCE_DISCOUNT": x} for x in (0.0, 0.05, 0.1)},
    **{f"asked.{n}": {"recall_hub.store.vectors.ASKED_PER_BEAD": n} for n in (3, 4)},
    **{f"admit.{n}": {f"{SEARCH}.ADMIT_FROM": n} for n in (3, 10)},
    **{f"context.{c}": {f"{RANKING}.CONTEXT_WEIGHT": c} for c in (0.3, 0.5)},
    "talk.off": {"recall_hub.store.conversation.STAMP_GAP_MS": -1},
    **{f"talk.stamp.{s}": {"recall_hub.store.conversation.STAMP_GAP_MS": s * 1000} for s in (60, 3600)},
    **{f"talk.event.{s}": {"recall_hub.store.conversation.EVENT_GAP_MS": s * 1000} for s in (0, 60, 600, 3600)},
    **{f"vsim.{n}": {"recall_hub.store.vectors.ASKED_PER_BEAD": n / 50, "recall_hub.store.vectors.SEARCH_EF": n}
       for n in (50, 64, 75)},
}
"""Variant name -> {"module.ATTRIBUTE": value}: what the hub reads at request time."""


@contextlib.contextmanager
def applied(overrides: dict[str, Any]) -> Iterator[None]:
    saved = []
    for dotted, value in overrides.items():
        module_name, attribute = dotted.rsplit(".", 1)
        module = importlib.import_module(module_name)
        saved.append((module, attribute, getattr(module, attribute)))
        setattr(module, attribute, value)
    try:
        yield
    finally:
        for module, attribute, value in reversed(saved):
            setattr(module, attribute, value)


def load_state(state_file: Path) -> dict[str, Any]:
    return json.loads(state_file.read_text()) if state_file.exists() else {"locomo": {}, "lme": {}}


def save_state(state_file: Path, state: dict[str, Any]) -> None:
    state_file.write_text(json.dumps(state))


async def ingest_missing(
    url: str, state_file: Path, convs: list[locomo.Conversation], items: list[longmemeval.Item]
) -> dict[str, Any]:
    """Ingest what ``state_file`` does not record yet, recording each conversation and question once done (so
    a later run with more questions goes on from there)."""
    state = load_state(state_file)
    for conv in convs:
        if conv.key not in state["locomo"]:
            ing = await locomo.ingest(url, conv, 4, plain=True)
            state["locomo"][conv.key] = {"group_id": ing.group_id, "agents": ing.agents, "beads": ing.beads}
            save_state(state_file, state)
            print(f"ingested LoCoMo {conv.key}", file=sys.stderr, flush=True)
    for n, item in enumerate(items, start=1):
        if item.question_id not in state["lme"]:
            lme = await longmemeval.ingest(url, item, 4)
            state["lme"][item.question_id] = {"group_id": lme.group_id, "asker": lme.asker, "beads": lme.beads}
            save_state(state_file, state)
            print(f"ingested LongMemEval {n}/{len(items)}", file=sys.stderr, flush=True)
    return state


async def ask_all(
    url: str, state: dict[str, Any], convs: list[locomo.Conversation], items: list[longmemeval.Item]
) -> dict[str, dict[str, list[float]]]:
    """Per question: ``{"locomo": {"<conv>/<q>": [sess@1, R@10]}, "lme": {"<qid>": [any@1, all@5, turn R@10|-1]}}``."""
    out: dict[str, dict[str, list[float]]] = {"locomo": {}, "lme": {}}
    for conv in convs:
        saved = state["locomo"][conv.key]
        ing = locomo.Ingested(conv.key, saved["group_id"], saved["agents"], saved["beads"])
        for a in await locomo.ask(url, conv, ing, ["hybrid+priors"]):
            out["locomo"][f"{conv.key}/{a.question}"] = [a.session_hit, a.recall]
    for item in items:
        saved = state["lme"][item.question_id]
        lme = longmemeval.Ingested(saved["group_id"], saved["asker"], saved["beads"], None)
        (a,) = await longmemeval.ask(url, item, lme, ["hybrid+priors"])
        turn = a.turn_recall
        out["lme"][item.question_id] = [a.recall_any(1), a.recall_all(5), -1.0 if turn is None else turn]
    return out


def metric_rows(result: dict[str, dict[str, list[float]]], keys: dict[str, list[str]]) -> dict[str, list[float]]:
    loc = [result["locomo"][k] for k in keys["locomo"]]
    lme = [result["lme"][k] for k in keys["lme"]]
    return {
        "locomo sess@1": [v[0] for v in loc],
        "locomo R@10": [v[1] for v in loc],
        "lme any@1": [v[0] for v in lme],
        "lme all@5": [v[1] for v in lme],
        "lme turn R@10": [v[2] for v in lme if v[2] >= 0],
    }


def objective(result: dict[str, dict[str, list[float]]], keys: dict[str, list[str]]) -> float:
    """The two sets weigh the same: the mean of each set's metrics, averaged."""
    rows = {m: statistics.fmean(v) for m, v in metric_rows(result, keys).items() if v}
    return statistics.fmean(
        statistics.fmean(value for m, value in rows.items() if m.startswith(prefix))
        for prefix in ("locomo", "lme") if any(m.startswith(prefix) for m in rows)
    )


def paired_interval(a: list[float], b: list[float], seed: int = 0, resamples: int = 1000) -> tuple[float, float]:
    rng = random.Random(seed)
    diffs = [y - x for x, y in zip(a, b, strict=True)]
    n = len(diffs)
    means = sorted(sum(rng.choices(diffs, k=n)) / n for _ in range(resamples))
    return means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]


def folds(keys: dict[str, list[str]], k: int, seed: int = 0) -> list[dict[str, list[str]]]:
    conversations = sorted({key.split("/", 1)[0] for key in keys["locomo"]})
    questions = sorted(keys["lme"])
    random.Random(seed).shuffle(questions)
    out = []
    for i in range(k):
        held = set(conversations[i::k])
        out.append({
            "locomo": [key for key in keys["locomo"] if key.split("/", 1)[0] in held],
            "lme": questions[i::k],
        })
    return out


def figures(results: dict[str, dict[str, dict[str, list[float]]]], k: int) -> dict[str, Any]:
    """Per variant and metric: the mean over the questions and, but for ``base``, the paired difference from
    ``base`` with its 95% interval; then the cross-validated choice (what a results file keeps)."""
    base = results["base"]
    keys = {"locomo": sorted(base["locomo"]), "lme": sorted(base["lme"])}
    base_rows = metric_rows(base, keys)
    metrics = [m for m in METRICS if base_rows[m]]
    variants: dict[str, dict[str, dict[str, float]]] = {}
    for name, result in results.items():
        rows = metric_rows(result, keys)
        variants[name] = {}
        for m in metrics:
            cell = {"mean": statistics.fmean(rows[m])}
            if name != "base":
                lo, hi = paired_interval(base_rows[m], rows[m])
                cell |= {"difference": cell["mean"] - statistics.fmean(base_rows[m]), "low": lo, "high": hi}
            variants[name][m] = cell
    chosen: list[str] = []
    pooled: dict[str, dict[str, list[float]]] = {"locomo": {}, "lme": {}}
    for held in folds(keys, k):
        train = {s: [key for key in keys[s] if key not in set(held[s])] for s in keys}
        best = max(results, key=lambda name: objective(results[name], train))
        chosen.append(best)
        for s in keys:
            for key in held[s]:
                pooled[s][key] = results[best][s][key]
    cv = metric_rows(pooled, keys)
    validated = {}
    for m in metrics:
        lo, hi = paired_interval(base_rows[m], cv[m])
        validated[m] = {"base": statistics.fmean(base_rows[m]), "cv": statistics.fmean(cv[m]), "low": lo, "high": hi}
    return {
        "questions": {"locomo": len(keys["locomo"]), "lme": len(keys["lme"])}, "metrics": metrics,
        "variants": variants, "folds": k, "chosen": chosen, "cross_validated": validated,
    }


def render(report: dict[str, Any]) -> str:
    metrics = report["metrics"]
    lines = [f"{'variant':<28}" + "".join(f"{m:>30}" for m in metrics)]
    for name, cells in report["variants"].items():
        shown = [
            f"{c['mean']:.3f}" if "difference" not in c
            else f"{c['mean']:.3f} {c['difference']:+.3f} [{c['low']:+.3f},{c['high']:+.3f}]"
            for c in (cells[m] for m in metrics)
        ]
        lines.append(f"{name:<28}" + "".join(f"{c:>30}" for c in shown))
    lines += ["", f"cross-validated ({report['folds']} folds; chosen per fold: {', '.join(report['chosen'])}):"]
    for m, v in report["cross_validated"].items():
        lines.append(f"  {m:<16} base {v['base']:.3f}  cv {v['cv']:.3f} "
                     f"(paired difference [{v['low']:+.3f}, {v['high']:+.3f}])")
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", type=Path, required=True)
    parser.add_argument("--locomo", type=Path, default=DATA / "locomo")
    parser.add_argument("--longmemeval", type=Path, default=DATA / "longmemeval")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--lme-questions", type=int, default=None,
                        help="a stratified subset of LongMemEval (the first N of each type in turn); all by default")
    parser.add_argument("--ingested-only", action="store_true",
                        help="ask only the LongMemEval questions --work-dir holds already (ingest nothing more)")
    parser.add_argument("--rerun", action="store_true", help="ask again for variants already asked")
    parser.add_argument("--setting", action="append", default=[], metavar="MODULE.ATTRIBUTE=JSON",
                        help="set for the whole run, before the hub starts (what the index is built with); "
                             "the results are named <variant>+<--tag>")
    parser.add_argument("--tag", default="", help="appended to each variant's name (with --setting)")
    parser.add_argument("--report-only", action="store_true",
                        help="report the variants already asked (in --work-dir/results) without starting a hub")
    parser.add_argument("--save", type=Path, metavar="RESULTS_DIR",
                        help="write the report as a results file there (suite 'tune'), e.g. benchmarks/results")
    parser.add_argument("--note", default="", help="kept in the results file: what the variants were, when asked")
    args = parser.parse_args()
    settings = {dotted: json.loads(value) for dotted, value in (s.split("=", 1) for s in args.setting)}
    suffix = f"+{args.tag}" if args.tag else ""
    convs = locomo.load_locomo(args.locomo, 10)
    items = longmemeval.load_longmemeval(args.longmemeval, args.lme_questions)
    state_file = args.work_dir / "ingested.json"
    if args.ingested_only:
        items = [item for item in items if item.question_id in load_state(state_file)["lme"]]
    results_dir = args.work_dir / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        with applied(settings):
            async with eval_hub(None, None, None, GRAPH, args.work_dir / "stack") as target:
                await run_variants(target.nats_url, args, state_file, results_dir, suffix, convs, items)
    results = {p.stem: json.loads(p.read_text()) for p in sorted(results_dir.glob("*.json"))}
    results = {"base": results.pop("base"), **results}
    report = figures(results, args.folds) | ({"note": args.note} if args.note else {})
    print(render(report))
    if args.save is not None:
        command = shlex.join(["python", "scripts/tune_ranking.py", *sys.argv[1:]])  # as records.new_record does
        print(f"results: {save(new_record('tune', report, command=command), args.save)}", file=sys.stderr)


async def run_variants(
    url: str, args: argparse.Namespace, state_file: Path, results_dir: Path, suffix: str,
    convs: list[locomo.Conversation], items: list[longmemeval.Item],
) -> None:
    started = time.perf_counter()
    state = await ingest_missing(url, state_file, convs, items)
    print(f"ingest: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    for name in args.variants.split(","):
        path = results_dir / f"{name}{suffix}.json"
        if path.exists() and not args.rerun:
            continue
        started = time.perf_counter()
        with applied(VARIANTS[name]):
            result = await ask_all(url, state, convs, items)
        path.write_text(json.dumps(result))
        print(f"{name}{suffix}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
