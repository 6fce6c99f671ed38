"""Dump every dev-set question's ranking candidates with what the hub knew of each (experiment tooling).

    python scripts/dump_candidates.py --work-dir /tmp/tune120 --out /tmp/tune120/candidates.jsonl

Reuses the stack ``scripts/tune_ranking.py`` built in ``--work-dir`` (both dev sets ingested once), asks every
question with the default request, and writes one JSON line per question: its labels and, per candidate, the
keyword and vector list entries (rank, raw score), its session neighbours among the candidates, whether the
date window and the asker boost raised it, and how much of the query's IDF its words (and its context's) hold.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from recall_hub.bench import locomo, longmemeval
from recall_hub.bench.evalkit import eval_hub
from recall_hub.retrieval import search
from recall_hub.store import bm25

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tune_ranking

_state: dict[str, Any] = {}
RECORDS: dict[tuple[str, str], dict[str, Any]] = {}


def _coverage(words: bm25.WordCounts, bead_id: str, idfs: dict[str, float]) -> tuple[float, float, int]:
    text, context = words._of.get(bead_id, (bm25._NO_WORDS, bm25._NO_WORDS))
    total = sum(idfs.values()) or 1.0
    out = []
    for _, hashed, _ in (text, context):
        present = set(np.frombuffer(hashed, dtype="<u4").tolist())
        out.append(sum(idf for word, idf in idfs.items() if bm25._word_hash(word) in present) / total)
    return out[0], out[1], text[0]


def patch() -> None:
    original_scores = bm25.WordCounts.scores

    def scores(self: bm25.WordCounts, bead_ids: Any, idfs: Any, context_weight: float) -> list[float]:
        _state["idfs"], _state["words"] = dict(idfs), self
        return original_scores(self, bead_ids, idfs, context_weight)

    bm25.WordCounts.scores = scores  # type: ignore[method-assign]
    original_context = search.add_context

    def add_context(fused: Any, neighbours: Any, weight: float) -> None:
        _state["neighbours"] = {b: sorted(n) for b, n in neighbours.items() if n}
        original_context(fused, neighbours, weight)

    search.add_context = add_context  # type: ignore[assignment]
    original_own = search.boost_own

    async def boost_own(ctx: Any, caller: str, query: str, fused: Any, screened: Any) -> None:
        await original_own(ctx, caller, query, fused, screened)
        idfs, words = _state.pop("idfs", {}), _state.pop("words", None)
        cands = {}
        for b, e in fused.items():
            cov, ctx_cov, length = _coverage(words, b, idfs) if words is not None else (0.0, 0.0, 0)
            cands[b] = {
                "src": {name: [rank, raw] for name, rank, raw in e.sources},
                "nb": _state.get("neighbours", {}).get(b, []),
                "window": any(n.startswith("date:") for n in e.notes),
                "own": any(n.startswith("asked in the first person") for n in e.notes),
                "cov": cov, "ctx_cov": ctx_cov, "len": length, "rel": e.relevance,
            }
        RECORDS[(caller, query)] = {"query": query, "cands": cands, "idf_total": sum(idfs.values()), "terms": len(idfs)}
        _state.pop("neighbours", None)

    search.boost_own = boost_own  # type: ignore[assignment]


async def dump(url: str, work_dir: Path, out: Path, lme_questions: int | None) -> None:
    convs = locomo.load_locomo(tune_ranking.DATA / "locomo", 10)
    items = longmemeval.load_longmemeval(tune_ranking.DATA / "longmemeval", lme_questions)
    state = tune_ranking.load_state(work_dir / "ingested.json")
    with out.open("w") as sink:
        for conv in convs:
            saved = state["locomo"][conv.key]
            ing = locomo.Ingested(conv.key, saved["group_id"], saved["agents"], saved["beads"])
            for a in await locomo.ask(url, conv, ing, ["hybrid+priors"]):
                question = conv.questions[[q.index for q in conv.questions].index(a.question)]
                asker = ing.agents[conv.speakers[[q.index for q in conv.questions].index(a.question) % 2]]
                rec = RECORDS.pop((asker, question.text))
                for b, c in rec["cands"].items():
                    dia = ing.dia_of.get(b, "?")
                    c["turn"] = dia in question.evidence
                    c["sess"] = dia != "?" and locomo._session(dia) in {locomo._session(e) for e in question.evidence}
                    c["group"] = dia.split(":")[0] if dia != "?" else "?"
                    c["key"] = dia
                sink.write(json.dumps({"set": "locomo", "key": f"{conv.key}/{a.question}", "category": a.category,
                                       "evidence": len(question.evidence), "session_hit": a.session_hit,
                                       "recall": a.recall, **rec}) + "\n")
        for item in items:
            saved = state["lme"][item.question_id]
            lme = longmemeval.Ingested(saved["group_id"], saved["asker"], saved["beads"], None)
            (a,) = await longmemeval.ask(url, item, lme, ["hybrid+priors"])
            rec = RECORDS.pop((lme.asker, item.question))
            for b, c in rec["cands"].items():
                key = lme.beads.get(b, "?")
                c["turn"] = key in item.answer_turns
                c["sess"] = key.split("#")[0] in item.answer_sessions
                c["group"] = key.split("#")[0]
                c["key"] = key
            sink.write(json.dumps({"set": "lme", "key": item.question_id, "category": item.question_type,
                                   "answer_sessions": list(item.answer_sessions),
                                   "answer_turns": len(item.answer_turns), "any1": a.recall_any(1),
                                   "all5": a.recall_all(5), "turn10": a.turn_recall, **rec}) + "\n")
            print(f"asked {item.question_id}", file=sys.stderr, flush=True)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--lme-questions", type=int, default=None)
    args = parser.parse_args()
    patch()
    async with eval_hub(None, None, None, tune_ranking.GRAPH, args.work_dir / "stack") as target:
        await dump(target.nats_url, args.work_dir, args.out, args.lme_questions)


if __name__ == "__main__":
    asyncio.run(main())
