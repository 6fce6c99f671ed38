"""Fit fusion weights on dumped candidates (``scripts/dump_candidates.py``) with cross-validation over both sets.

    python scripts/learn_fusion.py /tmp/tune120/candidates.jsonl --features kn,vn,cov

Each question's candidates are scored ``base = w · features``, graph context added (``+ wc · best neighbour's
base``), then the date window's and the asker's multipliers; ``w`` and ``wc`` are fitted by a listwise softmax
loss (the turns that answer as the target). The report gives the current ranking rebuilt from the features (it
should match what the hub returned), then a 5-fold cross-validated fit (LoCoMo folds by conversation,
LongMemEval by question; each fold scored with weights fitted on the others), each metric as the paired
difference from the current ranking with a 95% bootstrap interval.

    python scripts/learn_fusion.py DUMP --gbdt 7,150 [--texts ../shared/data]

``--gbdt LEAVES,ROUNDS`` fits gradient-boosted trees instead (LightGBM's lambdarank, ``pip install lightgbm``;
an evidence turn labelled 3, another turn of its session 1) on every feature above plus the current score and
rank, cross-validated the same way; ``--texts DIR`` (holding ``locomo/`` and ``longmemeval/``) adds what each
candidate's text says against the question's form (a date or time word for "when", a number for "how many", a
place for "where", a turn that only asks).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

KW_SPREAD, VEC_SPREAD = 0.5, 0.1
_REQUEST = re.compile(
    r"\b(recommend|suggest|suggestions?|tips?|advice|ideas?|any\s+\w+\s+for|can you|could you)\b", re.I
)
_SELF = re.compile(r"\b(i|me|my|mine|myself)\b", re.I)


@dataclass
class Question:
    set: str
    key: str
    category: Any
    ids: list[str]
    raw: dict[str, np.ndarray]
    nb: list[list[int]]
    mult: np.ndarray
    turn: np.ndarray
    sess: np.ndarray
    group: list[str]
    evidence: int
    answer_sessions: set[str]
    recorded: dict[str, float]
    query: str = ""


def _minmax(values: np.ndarray, present: np.ndarray, spread_floor: float, relative: bool) -> np.ndarray:
    if not present.any():
        return np.zeros_like(values)
    high, low = values[present].max(), values[present].min()
    spread = max(high - low, spread_floor * high if relative else spread_floor)
    out = np.where(present, np.maximum(0.0, 1.0 - (high - values) / spread) if spread > 0 else 1.0, 0.0)
    return out


def load(path: Path, own_boost: float = 2.0, date_boost: float = 1.5) -> list[Question]:
    out = []
    for line in path.open():
        rec = json.loads(line)
        ids = sorted(rec["cands"])
        index = {b: i for i, b in enumerate(ids)}
        cands = [rec["cands"][b] for b in ids]
        n = len(ids)
        kw = np.array([c["src"].get("keyword", [0, 0.0])[1] for c in cands])
        kw_in = np.array(["keyword" in c["src"] for c in cands])
        kw_rank = np.array([c["src"].get("keyword", [999, 0])[0] for c in cands], dtype=float)
        vec = np.array([c["src"].get("vector", [0, 0.0])[1] for c in cands])
        vec_in = np.array(["vector" in c["src"] for c in cands])
        vec_rank = np.array([c["src"].get("vector", [999, 0])[0] for c in cands], dtype=float)
        raw = {
            "kn": _minmax(kw, kw_in, KW_SPREAD, True),
            "vn": _minmax(vec, vec_in, VEC_SPREAD, False),
            "kr": np.where(kw_in, kw / max(kw[kw_in].max(), 1e-9), 0.0) if kw_in.any() else np.zeros(n),
            "cos": np.where(vec_in, vec, 0.0),
            "kin": kw_in.astype(float), "vin": vec_in.astype(float),
            "krr": np.where(kw_in, 1.0 / (kw_rank + 5.0), 0.0), "vrr": np.where(vec_in, 1.0 / (vec_rank + 5.0), 0.0),
            "cov": np.array([c["cov"] for c in cands]), "ccov": np.array([c["ctx_cov"] for c in cands]),
            "len": np.array([math.log1p(c["len"]) / 6.0 for c in cands]),
            "terms": np.full(n, rec.get("terms", 0) / 10.0),
        }
        query = rec.get("query", "")
        raw["qreq"] = np.full(n, float(bool(_REQUEST.search(query))))
        raw["qself"] = np.full(n, float(bool(_SELF.search(query))))
        raw["qlen"] = np.full(n, min(len(query.split()), 30) / 10.0)
        raw["qcov"] = np.full(n, raw["cov"].max() if n else 0.0)
        top = np.sort(kw[kw_in])[::-1] if kw_in.any() else np.zeros(2)
        raw["qkgap"] = np.full(n, (top[0] - top[1]) / top[0] if len(top) > 1 and top[0] > 0 else 1.0)
        vtop = np.sort(vec[vec_in])[::-1] if vec_in.any() else np.zeros(2)
        raw["qvgap"] = np.full(n, (vtop[0] - vtop[1]) * 10 if len(vtop) > 1 else 1.0)
        raw["cov2"] = raw["cov"] ** 2
        raw["covk"] = raw["cov"] * raw["kin"]
        raw["full"] = (raw["cov"] > 0.999).astype(float)
        mult = np.array([(date_boost if c["window"] else 1.0) * (own_boost if c["own"] else 1.0) for c in cands])
        recorded = ({"sess@1": rec["session_hit"], "R@10": rec["recall"]} if rec["set"] == "locomo"
                    else {"any@1": rec["any1"], "all@5": rec["all5"], "turn R@10": rec["turn10"]})
        out.append(Question(
            rec["set"], rec["key"], rec["category"], ids, raw,
            [[index[x] for x in c["nb"] if x in index] for c in cands], mult,
            np.array([c["turn"] for c in cands], dtype=float), np.array([c["sess"] for c in cands], dtype=float),
            [c["group"] for c in cands], rec.get("evidence", rec.get("answer_turns", 0)),
            set(rec.get("answer_sessions", [])), recorded, query,
        ))
    return out


def _feature(q: Question, name: str) -> np.ndarray:
    if "*" in name:
        a, b = name.split("*")
        return q.raw[a] * q.raw[b]
    return q.raw[name]


def scores(q: Question, feats: list[str], w: np.ndarray, wc: float) -> tuple[np.ndarray, np.ndarray, list[int]]:
    F = np.stack([_feature(q, f) for f in feats], axis=1)
    base = F @ w
    ctx = np.zeros(len(base))
    via = [-1] * len(base)
    for i, nbs in enumerate(q.nb):
        best, arg = 0.0, -1
        for j in nbs:
            if j != i and base[j] > best:
                best, arg = base[j], j
        if arg >= 0:
            ctx[i], via[i] = best, arg
    return (base + wc * ctx) * q.mult, F, via


def metrics(q: Question, final: np.ndarray) -> dict[str, float]:
    order = sorted(range(len(final)), key=lambda i: (-round(final[i], 9), q.ids[i]))
    if q.set == "locomo":
        top = order[:10]
        return {"sess@1": float(q.sess[order[0]]) if order else 0.0,
                "R@10": float(q.turn[top].sum()) / max(q.evidence, 1)}
    sessions = list(dict.fromkeys(q.group[i] for i in order[:50]))
    out = {"any@1": float(bool(sessions[:1]) and sessions[0] in q.answer_sessions),
           "all@5": float(q.answer_sessions <= set(sessions[:5]))}
    if q.evidence:
        out["turn R@10"] = float(q.turn[order[:10]].sum()) / q.evidence
    return out


def evaluate(qs: list[Question], feats: list[str], w: np.ndarray, wc: float) -> dict[str, dict[str, float]]:
    return {q.key: metrics(q, scores(q, feats, w, wc)[0]) for q in qs}


def objective(qs: list[Question], res: dict[str, dict[str, float]]) -> float:
    per_set = []
    for s in ("locomo", "lme"):
        rows: dict[str, list[float]] = {}
        for q in qs:
            if q.set == s:
                for m, v in res[q.key].items():
                    rows.setdefault(m, []).append(v)
        if rows:
            per_set.append(statistics.fmean(statistics.fmean(v) for v in rows.values()))
    return statistics.fmean(per_set)


def fit(qs: list[Question], feats: list[str], w0: np.ndarray, wc0: float, steps: int = 300, lr: float = 0.03,
        temperature: float = 0.1, l2: float = 1e-3) -> tuple[np.ndarray, float]:
    """Adam on the listwise softmax loss, the two sets weighing the same."""
    w, wc = w0.astype(float).copy(), float(wc0)
    params = np.append(w, wc)
    m, v = np.zeros_like(params), np.zeros_like(params)
    weight = {s: 1.0 / max(1, sum(q.set == s for q in qs)) for s in ("locomo", "lme")}
    usable = [q for q in qs if q.turn.any() or q.sess.any()]
    for step in range(1, steps + 1):
        grad = np.zeros_like(params)
        for q in usable:
            final, F, via = scores(q, feats, params[:-1], params[-1])
            target = q.turn if q.turn.any() else q.sess
            target = target / target.sum()
            z = final / temperature
            p = np.exp(z - z.max())
            p /= p.sum()
            d = (p - target) / temperature * weight[q.set]  # dL/dfinal
            Fn = np.array([F[j] if j >= 0 else np.zeros(F.shape[1]) for j in via])
            ctx = np.array([F[j] @ params[:-1] if j >= 0 else 0.0 for j in via])
            grad[:-1] += (d * q.mult) @ (F + params[-1] * Fn)
            grad[-1] += (d * q.mult) @ ctx
        grad += l2 * params
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad**2
        params -= lr * (m / (1 - 0.9**step)) / (np.sqrt(v / (1 - 0.999**step)) + 1e-8)
    return params[:-1], float(params[-1])


def folds(qs: list[Question], k: int = 5, seed: int = 0) -> list[set[str]]:
    conversations = sorted({q.key.split("/")[0] for q in qs if q.set == "locomo"})
    lme = sorted(q.key for q in qs if q.set == "lme")
    random.Random(seed).shuffle(lme)
    out = []
    for i in range(k):
        held = set(conversations[i::k])
        out.append({q.key for q in qs if q.set == "locomo" and q.key.split("/")[0] in held} | set(lme[i::k]))
    return out


def paired(a: list[float], b: list[float], resamples: int = 1000) -> tuple[float, float, float]:
    rng = random.Random(0)
    diffs = [y - x for x, y in zip(a, b, strict=True)]
    n = len(diffs)
    means = sorted(sum(rng.choices(diffs, k=n)) / n for _ in range(resamples))
    return statistics.fmean(diffs), means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]


Results = dict[str, dict[str, float]]


def report(qs: list[Question], base: Results, other: Results, label: str) -> None:
    cells = []
    for s, names in (("locomo", ("sess@1", "R@10")), ("lme", ("any@1", "all@5", "turn R@10"))):
        for m in names:
            keys = [q.key for q in qs if q.set == s and m in base[q.key]]
            if not keys:
                continue
            a, b = [base[k][m] for k in keys], [other[k][m] for k in keys]
            d, lo, hi = paired(a, b)
            cells.append(f"{s} {m} {statistics.fmean(b):.3f} ({d:+.3f} [{lo:+.3f}, {hi:+.3f}])")
    print(f"{label}: " + "; ".join(cells))


_TIME = re.compile(
    r"\b(yesterday|today|tonight|tomorrow|ago|weekend|last (week|month|year|night)|\d{4}|january|february|march|"
    r"april|may|june|july|august|september|october|november|december|monday|tuesday|wednesday|thursday|friday|"
    r"saturday|sunday)\b", re.I)
_NUMBER = re.compile(
    r"\b\d+(\.\d+)?\b|\b(one|two|three|four|five|six|seven|eight|nine|ten|twelve|dozen|hundred)\b", re.I)
_PLACE = re.compile(r"\b(in|at|to|from) [A-Z][a-z]+")


def turn_texts(data: Path) -> dict[tuple[str, str, str], str]:
    """Each dev-set turn's text by (set, question or conversation key, candidate key), as the dumps name them."""
    texts = {}
    for path in sorted((data / "locomo").glob("*.json")):
        for name, turns in json.loads(path.read_text()).items():
            if name.startswith("session_") and isinstance(turns, list):
                for turn in turns:
                    texts[("locomo", path.stem, turn["dia_id"])] = turn["text"]
    for path in sorted((data / "longmemeval").glob("*_*.json")):
        record = json.loads(path.read_text())
        for sid, session in zip(record["haystack_session_ids"], record["haystack_sessions"], strict=True):
            for i, turn in enumerate(session):
                texts[("lme", path.stem.split("_", 1)[1], f"{sid}#{i}")] = turn["content"]
    return texts


def _text_features(q: Question, keys: list[str], texts: dict[tuple[str, str, str], str]) -> np.ndarray:
    question = q.query.lower()
    when = float(question.startswith("when") or "how many days" in question or "what date" in question)
    count = float("how many" in question or "how much" in question)
    where = float(question.startswith("where"))
    owner = q.key.split("/")[0] if q.set == "locomo" else q.key
    rows = []
    for key in keys:
        text = texts.get((q.set, owner, key), "")
        timed, numbered, placed = bool(_TIME.search(text)), bool(_NUMBER.search(text)), bool(_PLACE.search(text))
        rows.append([timed, numbered, placed, text.strip().endswith("?"), len(text) / 500, when, count, where,
                     when * timed, count * numbered, where * placed])
    return np.array(rows, dtype=float).reshape(len(keys), 11)


def gbdt(qs: list[Question], keys: dict[str, list[str]], leaves: int, rounds: int,
         texts: dict[tuple[str, str, str], str] | None) -> Results:
    """Lambdarank trees over every feature, cross-validated by :func:`folds`; the scores of each held-out fold."""
    import lightgbm  # an experiment's dependency, not the hub's

    names = ["kn", "vn", "kr", "cos", "kin", "vin", "krr", "vrr", "cov", "ccov", "len", "terms", "qreq", "qself",
             "qlen", "qcov", "qkgap", "qvgap"]
    table = {}
    for q in qs:
        current = scores(q, ["kn", "vn"], np.array([0.6, 0.4]), 0.4)[0]
        rank = np.empty(len(current))
        rank[np.argsort(-current, kind="stable")] = np.arange(len(current))
        columns = [q.raw[n] for n in names] + [current, rank, q.mult, current / max(current.max(), 1e-9)]
        x = np.column_stack(columns)
        if texts is not None:
            x = np.column_stack([x, _text_features(q, keys[q.key], texts)])
        table[q.key] = (x, (q.turn * 2 + q.sess).astype(int))
    params = {"objective": "lambdarank", "learning_rate": 0.05, "num_leaves": leaves, "min_data_in_leaf": 50,
              "feature_fraction": 0.8, "bagging_fraction": 0.8, "bagging_freq": 1, "lambdarank_truncation_level": 20,
              "verbose": -1, "seed": 1}
    pooled: Results = {}
    for held in folds(qs):
        train = [q for q in qs if q.key not in held and (q.turn.any() or q.sess.any())]
        data = lightgbm.Dataset(np.vstack([table[q.key][0] for q in train]),
                                np.concatenate([table[q.key][1] for q in train]), group=[len(q.ids) for q in train])
        model = lightgbm.train(params, data, rounds)
        pooled |= {q.key: metrics(q, model.predict(table[q.key][0])) for q in qs if q.key in held}
    return pooled


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dumps", type=Path, nargs="+")
    parser.add_argument("--features", default="kn,vn")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--temperature", type=float, default=0.1)
    parser.add_argument("--l2", type=float, default=1e-3)
    parser.add_argument("--no-cv", action="store_true")
    parser.add_argument("--gbdt", help="LEAVES,ROUNDS: gradient-boosted trees instead of a linear fit")
    parser.add_argument("--texts", type=Path, help="with --gbdt: a folder holding locomo/ and longmemeval/")
    args = parser.parse_args()
    qs = [q for path in args.dumps for q in load(path)]
    feats = args.features.split(",")
    current = evaluate(qs, ["kn", "vn"], np.array([0.6, 0.4]), 0.4)
    recorded = {q.key: q.recorded for q in qs}
    report(qs, recorded, current, "current rebuilt vs recorded")
    if args.gbdt:
        leaves, rounds = (int(x) for x in args.gbdt.split(","))
        keys = {}
        for path in args.dumps:
            for line in path.open():
                rec = json.loads(line)
                keys[rec["key"]] = [rec["cands"][b]["key"] for b in sorted(rec["cands"])]
        texts = turn_texts(args.texts) if args.texts else None
        report(qs, current, gbdt(qs, keys, leaves, rounds, texts), f"gbdt {leaves} leaves, {rounds} rounds, cv")
        return
    w0 = np.array([0.6 if f == "kn" else 0.4 if f == "vn" else 0.0 for f in feats])
    w, wc = fit(qs, feats, w0, 0.4, args.steps, temperature=args.temperature, l2=args.l2)
    print("fitted on all:", dict(zip(feats, np.round(w, 3).tolist(), strict=True)), "context", round(wc, 3))
    report(qs, current, evaluate(qs, feats, w, wc), "in-sample")
    if args.no_cv:
        return
    pooled: dict[str, dict[str, float]] = {}
    for held in folds(qs):
        train = [q for q in qs if q.key not in held]
        w, wc = fit(train, feats, w0, 0.4, args.steps, temperature=args.temperature, l2=args.l2)
        print("  fold:", dict(zip(feats, np.round(w, 3).tolist(), strict=True)), "context", round(wc, 3))
        pooled |= evaluate([q for q in qs if q.key in held], feats, w, wc)
    report(qs, current, pooled, "cross-validated")


if __name__ == "__main__":
    main()
