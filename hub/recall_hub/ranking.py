"""Fusion and priors, as pure functions.

Relevance is Reciprocal Rank Fusion over rank positions: ``sum(1 / (RRF_K + rank))`` over the lists
(keyword, vector) that found the bead. Priors then multiply it by ``PRIOR_FACTOR ** z`` where ``z``
in [-1, 1] is a weighted mean of importance, recency, provenance and demotion (archived or
superseded). So priors move a score by at most ×1.5 up or ÷1.5 down, and can reorder two beads only
when their relevance differs by less than ``PRIOR_FACTOR ** 2`` = 2.25×.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

RRF_K = 60
PRIOR_FACTOR = 1.5
RECENCY_HALF_LIFE_DAYS = 30.0
WEIGHTS = {"importance": 0.35, "recency": 0.2, "provenance": 0.15, "demotion": 0.3}
PROVENANCE_SIGNAL = {"observed": 1.0, "authored": 0.5, "recorded": 0.0, "derived": -0.5}
DAY_MS = 86_400_000


@dataclass
class Fused:
    bead_id: str
    relevance: float = 0.0
    sources: list[tuple[str, int, float]] = field(default_factory=list)  # (list, rank, raw score)


def rrf(lists: Mapping[str, Sequence[tuple[str, float]]]) -> dict[str, Fused]:
    """Fuse ranked lists of ``(bead_id, raw_score)`` (best first) by rank position."""
    fused: dict[str, Fused] = {}
    for name, items in lists.items():
        for rank, (bead_id, raw) in enumerate(items, start=1):
            entry = fused.setdefault(bead_id, Fused(bead_id))
            entry.relevance += 1.0 / (RRF_K + rank)
            entry.sources.append((name, rank, raw))
    return fused


def prior(props: Mapping[str, Any], superseded: bool, now_ms: int) -> tuple[float, list[str]]:
    """The bounded multiplier for one bead, and notes on what moved it."""
    importance = (float(props.get("importance", 5)) - 5.0) / 5.0
    age_days = max(0.0, (now_ms - int(props.get("created_at", now_ms))) / DAY_MS)
    recency = 2.0 * 0.5 ** (age_days / RECENCY_HALF_LIFE_DAYS) - 1.0
    provenance = PROVENANCE_SIGNAL.get(str(props.get("provenance", "authored")), 0.0)
    archived = props.get("status") == "archived"
    demotion = -1.0 if (archived or superseded) else 0.0
    z = (
        WEIGHTS["importance"] * importance
        + WEIGHTS["recency"] * recency
        + WEIGHTS["provenance"] * provenance
        + WEIGHTS["demotion"] * demotion
    )
    z = max(-1.0, min(1.0, z))
    notes = []
    if archived:
        notes.append("archived: demoted")
    if superseded:
        notes.append("superseded by a newer bead (UPDATES): demoted")
    return math.pow(PRIOR_FACTOR, z), notes
