"""Keyword retrieval: BM25 on the hub's tantivy index, inside the caller's scopes.

The caller's words are lower-cased and deduplicated, and function words (and question words: "what
did she ...") are dropped: they carry no topic. The index (:mod:`recall_hub.store.keyword_index`)
scores the rest with Okapi BM25 computed on the statistics of the beads the caller may see, and
takes top-k among those beads only.
"""

from __future__ import annotations

import re
from typing import Any

from recall_schemas import BeadFilters

from recall_hub.context import HubContext
from recall_hub.retrieval.freshness import keyword_index_caught_up

_WORD = re.compile(r"\w+", re.UNICODE)
MAX_TERMS = 32

STOPWORDS = frozenset(
    """
    a about above after again against all also am an and any are as at be because been before being below
    between both but by can could did do does doing done down during each either else ever every few for
    from further get gets got had has have having he her here hers herself him himself his how i if in into
    is it its itself just me might mine more most much must my myself neither no nor not now of off on once
    only onto or other our ours ourselves out over own per same shall she should so some such than that the
    their theirs them themselves then there these they this those though through thus to too under until up
    upon us very via was we were what whatever when whenever where wherever whether which while who whoever
    whom whose why will with within without would yes yet you your yours yourself yourselves
    """.split()
)
"""English function words and question words; short and general on purpose (no domain words)."""


def query_terms(text: str) -> list[str]:
    """The caller's words to look up: lower-cased, deduplicated, function words dropped.

    When every word is a function word (``"who is it"``) the words are kept as they are.
    """
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(text) if len(w) <= 64))
    content = [w for w in words if w not in STOPWORDS]
    return (content or words)[:MAX_TERMS]


async def keyword_candidates(
    ctx: HubContext, scopes: list[str], text: str, filters: BeadFilters, limit: int,
    within: tuple[int, int] | None = None,
) -> tuple[list[tuple[str, float]], dict[str, dict[str, Any]]]:
    """Beads of ``scopes`` (the caller's, see :func:`~recall_hub.retrieval.scopes.searchable_scopes`)
    holding words of ``text``, best BM25 first; scopes and filters apply inside the index query,
    before its limit, and to the statistics too. With them, what screening reads of each
    (:meth:`~recall_hub.store.keyword_index.KeywordIndex.screen`).

    ``within``: only beads dated in ``[start, end)`` (epoch ms), scored as without it."""
    terms = query_terms(text)
    if not terms:
        return [], {}
    if not ctx.keywords.ready:
        await ctx.keywords.catch_up()
    await keyword_index_caught_up(ctx)
    # On the event loop, not a worker thread: in hybrid search it runs while the query is embedded anyway, and a
    # thread's hand-off and its bouts with the loop for the interpreter lock cost more than the ~1 ms it holds.
    return ctx.keywords.search_screened(scopes, terms, filters, limit, within)
