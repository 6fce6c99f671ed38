"""Token-level matching by the local model (late interaction), measured on dumped candidates (experiment tooling).

    python scripts/late_interaction.py /tmp/tune/candidates.jsonl --data ../shared/data \\
        --variants float,int8,binary,rp128,rp128-binary --weights 0.4,0.8

Each question of the dump (``scripts/dump_candidates.py``: LoCoMo and LongMemEval, the current ranking's
candidates) and each candidate's text (``"Speaker: text"``, ``"role: text"``) are read by the local model once
(its first window, as the hub's embedder reads it; the outputs kept in ``--cache``). A candidate's score: for each
content token of the question (no function word, no punctuation, no special token) the best cosine among the
candidate's content tokens, averaged. Scaled over the question's candidates like the vector list (spread floor
``--spread`` of cosine) and added with weight *w* beside 0.6 keyword / 0.4 vector before graph context; each
variant's paired difference from the current ranking with a 95% bootstrap interval (``learn_fusion.report``).

The variants are what storing each candidate's token outputs would cost: ``float`` as the model gives them,
``int8`` (384 bytes a token), ``binary`` (the sign of each dimension: 48 bytes a token; the question's tokens
stay float), ``rp128`` a fixed random projection to 128 dimensions, ``rp128-binary`` (16 bytes a token);
``binary-query`` the question's tokens as signs too (a Hamming distance); ``:N`` after a variant keeps only a
candidate's first N content tokens; ``all-`` before a variant keeps every token of the candidate, not only its
content tokens; ``idf-`` before a variant weighs each question token by its word's BM25 IDF among the turns of its
conversation or haystack (a weighted mean instead of the plain one); ``pool<C>-`` (``pool0.7-binary-query:48``)
weighs it by BM25's IDF of how many of the question's candidates hold it (one of their tokens at cosine C or
closer: what the hub does, ``ranking.TOKEN_COMMON``); ``sym-`` averages that with each candidate
token's best cosine among the question's (how much of the candidate the question covers); ``prev-`` matches
against the candidate's tokens and the turn's before it in its session (with ``:N``, each one's first N;
``prev<λ>-``, ``prev0.8-``, scales the turn before's cosines by λ). ``--against VARIANT:W``
gives the paired differences from the ranking with that variant at weight W instead of from the current ranking
without one.
"""

from __future__ import annotations

import argparse
import json
import pickle
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
from recall_hub.embedders.local import LocalEmbedder
from recall_hub.retrieval.keyword import STOPWORDS

sys.path.insert(0, str(Path(__file__).resolve().parent))
import learn_fusion

Key = tuple[str, str, str]
Tokens = tuple[np.ndarray, list[str], list[int]]
"""A text's token outputs (float16, one row a token), its tokens and each token's word index (-1: special)."""
_SPECIAL = {"[CLS]", "[SEP]", "[PAD]"}
_HAS_WORD = re.compile(r"[a-z0-9]")
_PROJECTION = np.random.default_rng(7).standard_normal((384, 128)).astype(np.float32) / np.sqrt(128)


def turn_texts(data: Path) -> dict[Key, str]:
    """Each dev-set turn as the evals write it, by (set, conversation or question key, candidate key)."""
    texts = {}
    for path in sorted((data / "locomo").glob("*.json")):
        for name, turns in json.loads(path.read_text()).items():
            if name.startswith("session_") and isinstance(turns, list):
                for turn in turns:
                    texts[("locomo", path.stem, turn["dia_id"])] = f"{turn['speaker']}: {turn['text']}"
    for path in sorted((data / "longmemeval").glob("*_*.json")):
        record = json.loads(path.read_text())
        for sid, session in zip(record["haystack_session_ids"], record["haystack_sessions"], strict=True):
            for i, turn in enumerate(session):
                texts[("lme", path.stem.split("_", 1)[1], f"{sid}#{i}")] = f"{turn['role']}: {turn['content']}"
    return texts


def read_tokens(texts: list[str]) -> list[Tokens]:
    embedder = LocalEmbedder()
    lane = embedder._documents[0]
    loaded = embedder._load(lane)
    encodings = loaded.tokenizer.encode_batch(texts)
    out: list[Any] = [None] * len(texts)
    order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids), reverse=True)
    for start in range(0, len(order), 16):
        run = order[start : start + 16]
        outputs, _ = embedder._run_model(loaded, [encodings[i].ids for i in run])
        for row, i in enumerate(run):
            e = encodings[i]
            words = [w if w is not None else -1 for w in e.word_ids]
            out[i] = (outputs[row, : len(e.ids)].astype(np.float16), list(e.tokens), words)
    embedder.close()
    return out


def content(tokens: Tokens, keep_all: bool = False) -> np.ndarray:
    """Which tokens count: not special, holding a letter or digit, and (unless ``keep_all``) of no function word."""
    _, strs, words = tokens
    keep = np.array([s not in _SPECIAL and (keep_all or bool(_HAS_WORD.search(s.removeprefix("##")))) for s in strs])
    if keep_all:
        return keep
    pieces: dict[int, list[int]] = {}
    for i, word in enumerate(words):
        if word >= 0:
            pieces.setdefault(word, []).append(i)
    for indexes in pieces.values():
        if "".join(strs[i].removeprefix("##") for i in indexes).lower() in STOPWORDS:
            keep[indexes] = False
    return keep


def stored(rows: np.ndarray, variant: str) -> np.ndarray:
    m = rows.astype(np.float32)
    if variant.startswith("rp128"):
        m = m @ _PROJECTION
    if variant.endswith("binary"):
        m = np.sign(m)
    elif variant == "int8":
        scale = np.abs(m).max(axis=1, keepdims=True) / 127
        m = np.round(m / np.maximum(scale, 1e-9)) * scale
    return m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-9)


_WORD = re.compile(r"[a-z0-9]+")


def document_frequencies(texts: dict[Key, str]) -> dict[tuple[str, str], tuple[int, dict[str, int]]]:
    """By (set, conversation or question key): how many turns, and in how many each word is."""
    out: dict[tuple[str, str], tuple[int, dict[str, int]]] = {}
    for (kind, owner, _), text in texts.items():
        n, df = out.setdefault((kind, owner), (0, {}))
        for word in set(_WORD.findall(text.lower())):
            df[word] = df.get(word, 0) + 1
        out[(kind, owner)] = (n + 1, df)
    return out


def idf_weights(query: Tokens, frequencies: tuple[int, dict[str, int]]) -> np.ndarray:
    """Each content token of the question weighed by its word's BM25 IDF among the turns."""
    _, strs, words = query
    n, df = frequencies
    spelled: dict[int, str] = {}
    for s, w in zip(strs, words, strict=True):
        if w >= 0:
            spelled[w] = spelled.get(w, "") + s.removeprefix("##")
    weights = []
    for keep, w in zip(content(query), words, strict=True):
        if keep:
            d = df.get(spelled[w].lower(), 0)
            weights.append(np.log((n - d + 0.5) / (d + 0.5) + 1.0))
    return np.array(weights, dtype=np.float32)


def previous(key: Key) -> Key:
    """The turn before ``key`` in its session (LoCoMo ``D3:7`` → ``D3:6``, LongMemEval ``sid#4`` → ``sid#3``)."""
    kind, owner, turn = key
    head, sep, number = turn.rpartition(":" if kind == "locomo" else "#")
    return (kind, owner, f"{head}{sep}{int(number) - 1}")


def candidate_tokens(docs: dict[Key, Tokens], key: Key, variant: str) -> tuple[Tokens | None, np.ndarray | None]:
    """The candidate's tokens and each row's scale; with ``prev<λ>-``, the turn before it's joined to them (each
    kept to its first N content tokens with ``:N``, its cosines scaled by λ, 1 when not given)."""
    own = docs.get(key)
    found = re.search(r"prev([0-9.]*)-", variant)
    before = docs.get(previous(key)) if found else None
    if own is None or before is None:
        return own, None
    _, _, cap = variant.partition(":")
    keep_all = "all-" in variant
    parts = [(t, np.flatnonzero(content(t, keep_all))[: int(cap) if cap else None]) for t in (own, before)]
    (own, mine), (before, theirs) = parts
    shift = max(own[2], default=-1) + 1
    joined = (np.concatenate([own[0][mine], before[0][theirs]]),
              [own[1][i] for i in mine] + [before[1][i] for i in theirs],
              [own[2][i] for i in mine] + [before[2][i] + shift if before[2][i] >= 0 else -1 for i in theirs])
    scale = np.ones(len(mine) + len(theirs), dtype=np.float32)
    scale[len(mine):] = float(found.group(1) or 1.0)
    return joined, scale


def late_score(
    query: Tokens, found: tuple[Tokens | None, np.ndarray | None], variant: str, weights: np.ndarray | None = None,
    keep_best: list[np.ndarray] | None = None,
) -> float:
    candidate, scale = found
    variant = re.sub(r"^(idf-)?(prev[0-9.]*-)?", "", variant)
    both_ways = variant.startswith("sym-")
    variant = variant.removeprefix("sym-")
    keep_all = variant.startswith("all-")
    kind, _, cap = variant.removeprefix("all-").partition(":")
    asked = content(query)
    if candidate is None or not asked.any():
        return 0.0
    kept = np.flatnonzero(content(candidate, keep_all))[: int(cap) if cap and scale is None else None]
    if not len(kept):
        return 0.0
    q = query[0][asked].astype(np.float32)
    q = (q @ _PROJECTION if kind.startswith("rp128") else q)
    if kind == "binary-query":  # the query's tokens kept as signs too: a Hamming distance
        q, kind = np.sign(q), "binary"
    q /= np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-9)
    cosines = q @ stored(candidate[0][kept], kind).T
    if scale is not None:
        cosines = cosines * scale[kept]
    best = cosines.max(axis=1)
    if keep_best is not None:
        keep_best.append(best)
    score = float(best.mean() if weights is None else (best * weights).sum() / max(weights.sum(), 1e-9))
    return (score + float(cosines.max(axis=0).mean())) / 2 if both_ways else score


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dump", type=Path)
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--cache", type=Path, help="where the token outputs are kept (default: beside the dump)")
    parser.add_argument("--variants", default="float,binary")
    parser.add_argument("--weights", default="0.4,0.8")
    parser.add_argument("--spread", type=float, default=0.1)
    parser.add_argument("--top", type=int, default=0, help="match only the best N candidates of the current ranking")
    parser.add_argument("--against", help="VARIANT:W, the ranking the differences are taken from")
    args = parser.parse_args()
    records = [json.loads(line) for line in args.dump.open()]
    cache = args.cache or args.dump.with_suffix(".tokens.pkl")
    texts = turn_texts(args.data)
    frequencies = document_frequencies(texts) if "idf-" in f"{args.variants},{args.against}" else {}
    if cache.exists():
        docs, queries = pickle.loads(cache.read_bytes())
    else:
        needed = sorted({(r["set"], r["key"].split("/")[0] if r["set"] == "locomo" else r["key"], c["key"])
                         for r in records for c in r["cands"].values()} & texts.keys())
        needed = sorted(set(needed) | {previous(k) for k in needed} & texts.keys())
        docs = dict(zip(needed, read_tokens([texts[k] for k in needed]), strict=True))
        queries = dict(zip([(r["set"], r["key"]) for r in records], read_tokens([r["query"] for r in records]),
                           strict=True))
        cache.write_bytes(pickle.dumps((docs, queries)))
    questions = learn_fusion.load(args.dump)
    keys = {r["key"]: [r["cands"][b]["key"] for b in sorted(r["cands"])] for r in records}

    def read_late(variant: str) -> None:
        for q in questions:
            owner = q.key.split("/")[0] if q.set == "locomo" else q.key
            query = queries[(q.set, q.key)]
            weights = idf_weights(query, frequencies[(q.set, owner)]) if variant.startswith("idf-") else None
            pool, _, plain = variant.partition("-") if variant.startswith("pool") else ("", "", variant)
            if pool:  # each question token weighed by how few of the candidates match it (above a cosine)
                bests: list[np.ndarray] = []
                for k in keys[q.key]:
                    found = len(bests)
                    late_score(query, candidate_tokens(docs, (q.set, owner, k), plain), plain, None, bests)
                    if len(bests) == found:
                        bests.append(np.full(int(content(query).sum()), np.nan))
                table = np.array(bests)
                n = np.isfinite(table[:, 0]).sum() if table.size else 0
                df = (np.nan_to_num(table, nan=-1.0) >= float(pool.removeprefix("pool"))).sum(axis=0)
                w = np.log((n - df + 0.5) / (df + 0.5) + 1.0)
                s = np.array([0.0 if not np.isfinite(b).all() else float((b * w).sum() / max(w.sum(), 1e-9))
                              for b in table]) if table.size else np.zeros(len(keys[q.key]))
            else:
                s = np.array([late_score(query, candidate_tokens(docs, (q.set, owner, k), variant), variant, weights)
                              for k in keys[q.key]])
            if args.top:
                fused = learn_fusion.scores(q, ["kn", "vn"], np.array([0.6, 0.4]), 0.0)[0] / q.mult
                s[np.argsort(-fused, kind="stable")[args.top :]] = 0.0
            q.raw["late"] = learn_fusion._minmax(s, s > 0, args.spread, False)

    if args.against:
        variant, _, weight = args.against.rpartition(":")
        read_late(variant)
        current = learn_fusion.evaluate(questions, ["kn", "vn", "late"], np.array([0.6, 0.4, float(weight)]), 0.4)
    else:
        current = learn_fusion.evaluate(questions, ["kn", "vn"], np.array([0.6, 0.4]), 0.4)
    against = args.against or "the current ranking"
    print(f"{len(questions)} questions, {len(docs)} candidate texts; paired differences from {against}")
    for variant in args.variants.split(","):
        read_late(variant)
        for w in (float(x) for x in args.weights.split(",")):
            result = learn_fusion.evaluate(questions, ["kn", "vn", "late"], np.array([0.6, 0.4, w]), 0.4)
            learn_fusion.report(questions, current, result, f"{variant} w={w}")


if __name__ == "__main__":
    main()
