"""The reranking stage: a cross-encoder (``ctx.reranker``) reorders the best fused candidates of a search,
within its time budget. It never fails a search: on a timeout, an error or an answer that is not one score per
candidate, the fused order stands (logged at most once a minute)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from recall_schemas import SearchHit

from recall_hub.context import HubContext
from recall_hub.rerankers import RerankerError

log = logging.getLogger(__name__)

_QUIET_S = 60.0
_last_warning = 0.0


def reranking_depth(ctx: HubContext, limit: int) -> int:
    """How many hits a search reads before reranking (the reranker sees the best ``top_n``)."""
    return max(limit, ctx.settings.reranker.top_n) if ctx.reranker is not None else limit


async def rerank(ctx: HubContext, query: str, hits: Sequence[SearchHit]) -> list[SearchHit]:
    """``hits`` with the first ``top_n`` in the reranker's order (each explained), the rest after them."""
    reranker, config = ctx.reranker, ctx.settings.reranker
    head = list(hits[: config.top_n])
    if reranker is None or len(head) < 2:
        return list(hits)
    texts = [_text(hit)[: config.max_chars] for hit in head]
    try:
        scores = await reranker.scores(query, texts)
    except RerankerError as exc:
        _warn(f"reranker skipped, the fused order stands: {exc}")
        return list(hits)
    order = sorted(range(len(head)), key=lambda i: (-scores[i], i))
    reranked = []
    for i in order:
        hit = head[i]
        note = f"reranked by {reranker.name}: {scores[i]:.4f} (fused rank {i + 1})"
        explanation = hit.explanation.model_copy(update={"notes": [*hit.explanation.notes, note]})
        reranked.append(hit.model_copy(update={"explanation": explanation}))
    return reranked + list(hits[len(head) :])


def _text(hit: SearchHit) -> str:
    bead = hit.bead
    return f"{bead.title}\n{bead.content}" if bead.content and bead.content != bead.title else bead.title


def _warn(message: str) -> None:
    global _last_warning
    now = time.monotonic()
    if now - _last_warning >= _QUIET_S:
        _last_warning = now
        log.warning("%s", message)
