"""Fusion, graph context and priors, as pure functions.

Relevance is a weighted fusion of the lists' *scores*, each min-max scaled per query to [0, 1] over
that list's candidates (BM25 and cosine similarity alike), so that each list's best counts 1 and its
worst 0, whatever the scale of its scores. A bead found by one list only gets 0 from the other.
``KEYWORD_WEIGHT`` and ``VECTOR_WEIGHT`` weigh the lists (their sum is 1 in hybrid mode; a single-list
mode is that list's normalised score alone, so its order is exactly the list's — BM25 alone divided by
its best, a ratio the date boost and the priors multiply). Rank-only fusion (:func:`rrf`, kept for
comparison) throws away how far apart the scores are, and on LoCoMo it loses to BM25 alone
(docs/retrieval.md).

Graph context (hybrid mode): a bead whose session neighbour (a ``FOLLOWS_FROM`` edge either way) or
conversation neighbour (written next to it in its scope: :mod:`recall_hub.store.conversation`) is relevant is
likely relevant too — a reply to the question, the answer to a request. So each candidate gains
``CONTEXT_WEIGHT`` times the best fused relevance among its neighbours that are candidates themselves
(:func:`add_context`).

Priors then multiply relevance by ``PRIOR_FACTOR ** z`` where ``z`` in [-1, 1] is a weighted mean
of importance, recency, provenance, demotion (archived, superseded or rejected) and verification (a small,
bounded boost for beads other identities verified). So priors move a score by
at most ×1.5 up or ÷1.5 down, and can reorder two beads only when their relevance differs by less
than ``PRIOR_FACTOR ** 2`` = 2.25×.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from recall_hub.timeutil import DAY_MS

WRITTEN_NEXT = "written next to it"
"""A conversation neighbour's context (:mod:`recall_hub.store.conversation`), as the explanation names it."""
RRF_K = 60
KEYWORD_WEIGHT = 0.6
VECTOR_WEIGHT = 0.4
"""Chosen by cross-validation over both dev sets (docs/retrieval.md, "The evidence on record"): against 0.7 / 0.3,
LongMemEval's recall_all@5 +0.042 [+0.008, +0.083] on its 120 questions, LoCoMo inside its interval."""
LIST_WEIGHTS = {"keyword": KEYWORD_WEIGHT, "vector": VECTOR_WEIGHT}
CONTEXT_WEIGHT = 0.4
TOKEN_WEIGHT = 0.4
"""Of the query's words matched one by one against a candidate's (``late_interaction``), added beside the fused
lists' 1 (docs/retrieval.md, "Token-level matching": 0.2 to 0.6 move the dev sets' figures by less than their
intervals)."""
TOKEN_COMMON: float | None = 0.7
"""Each of the query's words counts in the match by how few of the matched candidates hold it (a token of theirs
at this cosine or closer): BM25's IDF over the candidates (:func:`token_rarity`); None: all count the same. 0.5
and 0.6 did about as well (docs/retrieval.md, "Words few candidates hold count more")."""
MIN_SPREAD = 0.1
"""Min-max scaling of cosine similarities never stretches a spread narrower than this (tiny lists)."""
KEYWORD_MIN_SPREAD = 0.5
"""Min-max scaling of BM25 never stretches a spread narrower than this share of the best score (tiny lists:
two beads that match about equally stay about equal). Chosen over BM25 divided by the best on both dev sets
(docs/retrieval.md, "Each list scaled over its own candidates")."""
PRIOR_FACTOR = 1.5
RECENCY_HALF_LIFE_DAYS = 30.0
WEIGHTS = {"importance": 0.35, "recency": 0.2, "provenance": 0.15, "demotion": 0.3, "verification": 0.1}
FULL_TRUST = 3
"""Verifications beyond this many add nothing: the boost is bounded (at most ×1.5**0.1, about 4%)."""
PROVENANCE_SIGNAL = {"observed": 1.0, "authored": 0.5, "recorded": 0.0, "derived": -0.5}


@dataclass
class Fused:
    bead_id: str
    relevance: float = 0.0
    sources: list[tuple[str, int, float]] = field(default_factory=list)  # (list, rank, raw score)
    context: float = 0.0
    """The part of ``relevance`` lent by a neighbour (graph context)."""
    context_from: str | None = None
    context_via: str = "FOLLOWS_FROM"
    """How ``context_from`` neighbours it: an edge, or :data:`WRITTEN_NEXT`."""
    notes: list[str] = field(default_factory=list)
    """What else moved ``relevance`` (a date window), for the explanation."""


def rrf(lists: Mapping[str, Sequence[tuple[str, float]]]) -> dict[str, Fused]:
    """Fuse ranked lists of ``(bead_id, raw_score)`` (best first) by rank position."""
    fused: dict[str, Fused] = {}
    for name, items in lists.items():
        for rank, (bead_id, raw) in enumerate(items, start=1):
            entry = fused.setdefault(bead_id, Fused(bead_id))
            entry.relevance += 1.0 / (RRF_K + rank)
            entry.sources.append((name, rank, raw))
    return fused


def _normalised(name: str, items: Sequence[tuple[str, float]], alone: bool) -> list[float]:
    scores = [raw for _, raw in items]
    if not scores:
        return []
    low, high = min(scores), max(scores)
    if alone and name == "keyword":
        return [raw / high if high > 0 else 1.0 for raw in scores]
    spread = max(high - low, KEYWORD_MIN_SPREAD * high if name == "keyword" else MIN_SPREAD)
    if spread <= 0:
        return [1.0] * len(scores)
    return [max(0.0, 1.0 - (high - raw) / spread) for raw in scores]


def fuse(
    lists: Mapping[str, Sequence[tuple[str, float]]], weights: Mapping[str, float] | None = None
) -> dict[str, Fused]:
    """Weighted fusion of ranked lists of ``(bead_id, raw_score)`` (best first), by normalised score.

    Each list's scores are min-max scaled over the list (BM25, ``"keyword"``, with a spread of at least
    ``KEYWORD_MIN_SPREAD`` of its best; cosine, ``"vector"``, of at least ``MIN_SPREAD``). BM25 asked alone is
    divided by its best instead: a ratio, which the date window's boost and the priors multiply as they did.
    The weights of the lists asked for are rescaled to sum to 1.
    """
    weights = weights or LIST_WEIGHTS
    total = sum(weights.get(name, 1.0) for name in lists) or 1.0
    fused: dict[str, Fused] = {}
    alone = len(lists) == 1
    for name, items in lists.items():
        weight = weights.get(name, 1.0) / total
        normalised = _normalised(name, items, alone)
        for rank, ((bead_id, raw), norm) in enumerate(zip(items, normalised, strict=True), start=1):
            entry = fused.setdefault(bead_id, Fused(bead_id))
            entry.relevance += weight * norm
            entry.sources.append((name, rank, raw))
    return fused


def add_token_matches(fused: Mapping[str, Fused], matches: Mapping[str, float], weight: float = TOKEN_WEIGHT) -> None:
    """Raise the candidates that have token signs by ``weight`` times their match (``store.vectors.match_signs``),
    scaled over them as the vector list's cosines are (a third list, read over the candidates, not an index)."""
    ranked = sorted(((b, m) for b, m in matches.items() if b in fused), key=lambda item: (-item[1], item[0]))
    for rank, ((bead_id, raw), norm) in enumerate(zip(ranked, _normalised("tokens", ranked, False), strict=True), 1):
        entry = fused[bead_id]
        entry.relevance += weight * norm
        entry.sources.append(("tokens", rank, raw))


def token_rarity(best: np.ndarray, common: float) -> np.ndarray:
    """Each query token's weight from ``best`` (one row a candidate, a column a query token: its best cosine
    there): BM25's IDF of how many candidates match it at ``common`` or closer. A word every candidate says —
    the name of the person a whole conversation is with — tells them apart by nothing."""
    n = len(best)
    held = (best >= common).sum(axis=0)
    weights: np.ndarray = np.log((n - held + 0.5) / (held + 0.5) + 1.0)
    return weights


def split_by_screening(
    ids: Iterable[str], screened: Mapping[str, Mapping[str, Any]], field: str
) -> tuple[dict[str, Mapping[str, Any]], list[str]]:
    """Of ``ids``, what screening read of those it read ``field`` of, and the others (whose ``field`` only the
    graph can tell: screened by a path that does not read it)."""
    known: dict[str, Mapping[str, Any]] = {}
    unread: list[str] = []
    for bead_id in ids:
        props = screened.get(bead_id)
        if props is not None and field in props:
            known[bead_id] = props
        else:
            unread.append(bead_id)
    return known, unread


def add_context(
    fused: Mapping[str, Fused], neighbours: Mapping[str, Iterable[str]], weight: float = CONTEXT_WEIGHT
) -> None:
    """Raise each bead by ``weight`` times the best relevance among its neighbours in ``fused``.

    Uses the relevance before any context was added, so the order of updates does not matter.
    """
    base = {bead_id: entry.relevance for bead_id, entry in fused.items()}
    for bead_id, entry in fused.items():
        best, via = 0.0, None
        for other in neighbours.get(bead_id, ()):
            score = base.get(other, 0.0)
            if other != bead_id and (score > best or (score == best and via is not None and other < via)):
                best, via = score, other
        if via is not None and best > 0:
            entry.context = weight * best
            entry.context_from = via
            entry.relevance += entry.context


def _identities(n: int) -> str:
    return "1 identity" if n == 1 else f"{n} identities"


def prior(props: Mapping[str, Any], superseded: bool, now_ms: int) -> tuple[float, list[str]]:
    """The bounded multiplier for one bead, and notes on what moved it."""
    importance = (float(props.get("importance", 5)) - 5.0) / 5.0
    age_days = max(0.0, (now_ms - int(props.get("created_at", now_ms))) / DAY_MS)
    recency = 2.0 * 0.5 ** (age_days / RECENCY_HALF_LIFE_DAYS) - 1.0
    provenance = PROVENANCE_SIGNAL.get(str(props.get("provenance", "authored")), 0.0)
    archived = props.get("status") == "archived"
    verdicts = props.get("trust_verdicts") or []
    rejections, verifications = verdicts.count("rejected"), verdicts.count("verified")
    demotion = -1.0 if (archived or superseded or rejections) else 0.0
    # A rejected bead gets no credit for its verifications: it is demoted as a whole.
    verification = 0.0 if rejections else min(verifications, FULL_TRUST) / FULL_TRUST
    z = (
        WEIGHTS["importance"] * importance
        + WEIGHTS["recency"] * recency
        + WEIGHTS["provenance"] * provenance
        + WEIGHTS["demotion"] * demotion
        + WEIGHTS["verification"] * verification
    )
    z = max(-1.0, min(1.0, z))
    notes = []
    if archived:
        notes.append("archived: demoted")
    if superseded:
        notes.append("superseded by a newer bead (UPDATES): demoted")
    if rejections:
        notes.append(f"rejected by {_identities(rejections)} (the bead's trust says who and why): demoted")
    elif verifications:
        notes.append(f"verified by {_identities(verifications)}: trusted a little more")
    return math.pow(PRIOR_FACTOR, z), notes
