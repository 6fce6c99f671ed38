"""search_beads: ranked, explained, optionally token-budgeted."""

from __future__ import annotations

from recall_schemas import RankSource, ScoreExplanation, SearchBeads, SearchHit, SearchResult

from .context import HubContext
from .keyword import keyword_candidates
from .records import bead_from_node


async def search_beads(ctx: HubContext, caller: str, req: SearchBeads) -> SearchResult:
    candidates = await keyword_candidates(ctx, caller, req.query, req.filters, req.limit)
    hits = [
        SearchHit(
            bead=bead_from_node(c.node),
            score=c.score,
            explanation=ScoreExplanation(
                sources=[RankSource(list="keyword", rank=c.rank, raw_score=c.score)],
                relevance=c.score,
                prior=1.0,
            ),
        )
        for c in candidates
    ]
    return SearchResult(hits=hits)
