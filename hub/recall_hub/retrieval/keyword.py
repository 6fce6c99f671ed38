"""Keyword retrieval: BM25 over FalkorDB's full-text index of title + content.

The index finds which beads hold a word (with its stemming), but the ``score`` that
``db.idx.fulltext.queryNodes`` yields is not a usable relevance: it is coarse (integer-valued, a
rounded IDF with no length normalisation), so a bead that merely repeats the speaker's name ties
with the one that holds the rare word asked about. So each query word is looked up on its own,
among the beads the caller may see that pass the filters, which gives its document frequency
*in the caller's searchable scope*; the beads are then scored with Okapi BM25:

    score(b) = sum over query words w in b of  idf(w) * (k1 + 1) / (1 + k1 * (1 - b + b * len(b) / avg_len))
    idf(w)   = ln(1 + (N - df(w) + 0.5) / (df(w) + 0.5))

with term frequency taken as presence (the index says whether a bead holds a word, not how often;
beads are short). Lengths are in characters (title + content), so only their ratio to the mean
matters. ``N`` and the mean length are counted over the same scope and cached briefly per caller
and filters. The scoring runs inside the graph query, so only the best ``limit`` beads come back.
Function words (and question words: "what did she ...") are dropped from the query before lookup:
they carry no topic and would cost a scan of most beads each.
"""

from __future__ import annotations

import re
import time
from collections import OrderedDict

from recall_schemas import BeadFilters

from recall_hub.context import HubContext

_WORD = re.compile(r"\w+", re.UNICODE)
MAX_TERMS = 32
BM25_K1 = 0.9
BM25_B = 0.4
"""Anserini's defaults (k1 0.9, b 0.4); on LoCoMo they beat Lucene's 1.2/0.75 (docs/retrieval.md)."""
TERM_CAP = 2000
"""At most this many beads are read per query word; a word in more beads is nearly a stopword
(its IDF is tiny), so the beads past the cap only lose a negligible share of their score."""
SCOPE_TTL_S = 30.0
_SCOPE_CACHE_SIZE = 1024

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


def fulltext_query(text: str) -> str | None:
    """The caller's words as a RediSearch OR-query, or None when there is no word in it.

    Only word characters survive, so no query syntax from the caller ever reaches the index.
    """
    terms = query_terms(text)
    return "|".join(terms) if terms else None


_scope_cache: OrderedDict[tuple[str, str, str], tuple[float, int, float]] = OrderedDict()


async def _scope_stats(ctx: HubContext, caller: str, filters: BeadFilters) -> tuple[int, float]:
    """How many beads the caller may search under ``filters``, and their mean length (cached briefly)."""
    key = (ctx.graph.graph_name, caller, filters.model_dump_json())
    cached = _scope_cache.get(key)
    now = time.monotonic()
    if cached is not None and now - cached[0] < SCOPE_TTL_S:
        return cached[1], cached[2]
    count, mean = await ctx.beads.scope_stats(caller, filters)
    _scope_cache[key] = (now, count, mean)
    _scope_cache.move_to_end(key)
    while len(_scope_cache) > _SCOPE_CACHE_SIZE:
        _scope_cache.popitem(last=False)
    return count, mean


async def keyword_candidates(
    ctx: HubContext, caller: str, text: str, filters: BeadFilters, limit: int
) -> list[tuple[str, float]]:
    """Visible beads holding words of ``text``, best BM25 first. Visibility and filters apply
    before any limit, and to the statistics too. Scored inside the graph query, so only the
    ``limit`` best rows travel back."""
    terms = query_terms(text)
    if not terms:
        return []
    total, mean_length = await _scope_stats(ctx, caller, filters)
    return await ctx.beads.keyword_bm25(
        caller, terms, filters, total=total, mean_length=mean_length, k1=BM25_K1, b=BM25_B, term_cap=TERM_CAP,
        limit=limit,
    )
