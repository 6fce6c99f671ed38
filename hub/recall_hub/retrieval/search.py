"""Recall: hybrid search, find_similar, why() and token-budgeted context.

Hybrid ranking (docs/retrieval.md has the method and the LoCoMo numbers behind each step): BM25
keyword candidates and vector candidates, read concurrently, fused by normalised score
(:func:`~recall_hub.retrieval.ranking.fuse`); then graph context — a candidate gains part of the relevance of
its ``FOLLOWS_FROM`` neighbours among the candidates (:func:`~recall_hub.retrieval.ranking.add_context`); then
the bounded priors. Keyword-only and vector-only modes are the plain lists, with priors if asked.

Every path starts from beads the caller may see: keyword candidates are filtered by the caller's scopes
inside the keyword index's query before their limit, vector candidates come only from the caller's own
scopes, every candidate is screened (:func:`screen`) before it ranks, and every bead returned is read
from the graph with visibility and filters checked in that query.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter
from recall_schemas import (
    BeadFilters,
    ContextBlock,
    DateWindow,
    Direction,
    FindSimilar,
    GetContext,
    MemoryBead,
    NotFound,
    RankSource,
    ScoreExplanation,
    SearchBeads,
    SearchHit,
    SearchMode,
    SearchResult,
    Unavailable,
    Why,
    WhyResult,
)
from recall_schemas.rendering import render_bead

from recall_hub.context import HubContext
from recall_hub.embedders import EmbedderError
from recall_hub.retrieval import ranking
from recall_hub.retrieval.asker import boost_own
from recall_hub.retrieval.embedding import bead_text, embed_texts, reads_tokens
from recall_hub.retrieval.freshness import start_settle_check, work_settled, written_since_index
from recall_hub.retrieval.hubs import hubs_wanted, replace_hubs
from recall_hub.retrieval.keyword import STOPWORDS, keyword_candidates
from recall_hub.retrieval.ranking import (
    PRIOR_FACTOR,
    WRITTEN_NEXT,
    Fused,
    add_context,
    add_token_matches,
    fuse,
    prior,
    rrf,
)
from recall_hub.retrieval.rerank import rerank, reranking_depth
from recall_hub.retrieval.scopes import last_read_scopes, searchable_scopes
from recall_hub.retrieval.timely import boost_window, created_by_then, past_reads, understood_window
from recall_hub.retrieval.walk import expand
from recall_hub.store.vectors import filter_expression, match_signs
from recall_hub.timeutil import now_ms, to_ms
from recall_hub.tokens import count_tokens

KEYWORD_READERS = frozenset({"search_beads", "context", "why", "unified_recall", "recall_where"})
"""Operations that read the keyword index: a request may ask them to see its caller's writes
(:mod:`~recall_hub.retrieval.freshness`)."""
SETTLED_READERS = KEYWORD_READERS | {
    "find_similar", "get_relationships", "get_edges", "traverse_graph", "changes_since", "deduplicate_beads",
    "check_session", "get_history", "handoff_brief",
}
"""Operations that read what a create's after-commit work makes (vectors, links, change-feed entries, the
vector marks an integrity check reads): with ``create_settle = background``, a request of theirs waits for
the work of every create replied to before it arrived
(:func:`~recall_hub.retrieval.freshness.handed_off_work_done`)."""
SETTLED_IN_RANK = frozenset({"search_beads", "context"})
"""Of those, the operations that read nothing a hand-off makes but through :func:`rank`, which waits for it
only where it reads vectors (after starting the check beside the query's embedding): a keyword search never
waits."""
CANDIDATES = 50
"""How deep each list (keyword, vector) is read before fusion (``limit`` if more are asked). 100 gave the
same LoCoMo figures within a few thousandths, at 2.3 ms more for a hybrid search at 100k beads (measured
2026-12-01; this constant's history is in git)."""
CONTEXT_HITS = 100
"""The most hits ``context`` packs into its budget. Its candidates are a default search's (lists :data:`CANDIDATES`
deep, so its first hits are the ones ``search_beads`` gives): lists as deep as its hits took ~20% more CPU (each
VSIM asked for twice the vectors at twice the EF: 22.7 against 18.8 ms of the hub's and Redis's CPU a request,
17.6 against 15.2 ms p50, 800-token budgets at 5k beads) for budgets that hold a few dozen beads at most."""
HYDRATE_SPARE = 2
"""Beads read beyond ``limit`` at the end, in case one changed between screening and reading."""
WIDE_WINDOW = 0.5
"""A list is not read again restricted to a date window holding more than this share of the beads it reads (a
scope's, for its vector set; all the caller's, for the keyword list): it holds the best of them already. On the
dev sets (docs/retrieval.md) 10 of the 122 questions naming such a window hold more than half; skipping them
changed one LongMemEval question's turn recall (+0.004), 0.25 the same. At 10k beads a hybrid search ending in
"today" (every bead) took 16.5 ms p50 against 26.1 with the vector sets searched again (docs/benchmarks.md)."""
TOKEN_MATCHED = 50
"""Hybrid search matches the query's words one by one against this many best candidates (the lists' depth);
against every candidate (admitted neighbours too) LoCoMo gained the same and LongMemEval a little less, at
twice the cost (docs/retrieval.md)."""
ADMIT_FROM = 5
"""Hybrid search admits the session neighbours of this many best candidates as candidates."""
_HITS = TypeAdapter(list[SearchHit])
"""Hits are validated as one list: one call into pydantic for a page of them, not four a hit."""


async def vector_candidates(
    ctx: HubContext, caller: str, vector: Any, filters: BeadFilters, k: int
) -> list[tuple[str, float]]:
    return await _nearest(ctx, await searchable_scopes(ctx, caller, filters), vector, filters, k)


async def _nearest(
    ctx: HubContext, scopes: list[str], vector: Any, filters: BeadFilters, k: int,
    within: tuple[int, int] | None = None,
) -> list[tuple[str, float]]:
    hits = await ctx.vectors.search(scopes, vector, k, filter_expression(filters, within))
    return [(h.bead_id, h.similarity) for h in hits]


async def _nearest_to(
    ctx: HubContext, scopes: list[str], embedding: asyncio.Future[Any], filters: BeadFilters, k: int
) -> list[tuple[str, float]]:
    vector, _ = await embedding
    await work_settled()  # the vectors of the creates replied to before this search
    return await _nearest(ctx, scopes, vector, filters, k)


async def _query_vector(ctx: HubContext, query: str, with_tokens: bool = False) -> tuple[Any, Any]:
    """The query's vector, and its word tokens' outputs when ``with_tokens`` (else None)."""
    try:
        if with_tokens:
            return await ctx.query_vectors.reading(query, STOPWORDS)
        return await ctx.query_vectors.vector(query), None
    except EmbedderError as exc:
        raise Unavailable(f"embedder failed: {exc}") from exc


async def _match_tokens(ctx: HubContext, scopes: list[str], fused: dict[str, Fused], query_tokens: Any) -> None:
    """Each of the :data:`TOKEN_MATCHED` best candidates that has token signs gains how well the query's words
    match its own, one by one."""
    signs = await ctx.vectors.token_signs(scopes, sorted(_best(fused, TOKEN_MATCHED)))
    common = ranking.TOKEN_COMMON
    weigh = None if common is None else functools.partial(ranking.token_rarity, common=common)
    add_token_matches(fused, match_signs(query_tokens, signs, weigh), ranking.TOKEN_WEIGHT)


async def rank(
    ctx: HubContext,
    caller: str,
    query: str,
    filters: BeadFilters,
    limit: int,
    mode: SearchMode = SearchMode.HYBRID,
    use_priors: bool = True,
    fusion: str = "score",
    as_of: int | None = None,
    window: DateWindow | None = None,
    include_hubs: bool = True,
    depth: int | None = None,
) -> list[SearchHit]:
    """The best ``limit`` hits; ``depth``: how deep each list is read (by default :data:`CANDIDATES`, or ``limit``
    when it is more)."""
    if as_of is not None:
        filters = created_by_then(filters, as_of)
    depth = max(CANDIDATES, limit) if depth is None else depth
    hybrid = mode is SearchMode.HYBRID
    wants_vector = mode in (SearchMode.VECTOR, SearchMode.HYBRID)
    lists: dict[str, list[tuple[str, float]]] = {}
    seen: dict[str, dict[str, Any]] = {}  # the keyword list comes screened
    if wants_vector:
        # The query is embedded while the caller's scopes are read (one membership read); in hybrid search the
        # keyword index is queried meanwhile.
        start_settle_check()
        with_tokens = hybrid and fusion == "score" and reads_tokens(ctx)
        embedding = asyncio.ensure_future(_query_vector(ctx, query, with_tokens))
        try:
            scopes = await searchable_scopes(ctx, caller, filters)
        except BaseException:
            embedding.cancel()
            raise
        vector_list = _nearest_to(ctx, scopes, embedding, filters, depth)
        if hybrid:
            keyword_list = keyword_candidates(ctx, scopes, query, filters, depth)
            (lists["keyword"], seen), lists["vector"] = await asyncio.gather(keyword_list, vector_list)
            if window is not None and window.start is not None and window.end is not None:
                within = (to_ms(window.start), to_ms(window.end))
                await _add_dated(ctx, scopes, query, (await embedding)[0], filters, depth, within, lists, seen)
        else:
            lists["vector"] = await vector_list
    else:
        scopes, (lists["keyword"], seen) = await _keyword_in_scopes(ctx, caller, query, filters, depth)
    fused = rrf(lists) if fusion == "rrf" else fuse(lists)
    if not fused:
        return []
    # Only beads the caller may see (and that pass the filters) rank or lend context.
    seen |= await screen(ctx, caller, scopes, [b for b in fused if b not in seen], filters)
    if not hubs_wanted(include_hubs, filters):
        seen |= await screen(ctx, caller, scopes, sorted(await replace_hubs(ctx, caller, fused, seen)), filters)
    fused = {bead_id: entry for bead_id, entry in fused.items() if bead_id in seen}
    links: dict[str, list[str]] = {}
    if hybrid and fused:
        best = _best(fused, ADMIT_FROM)
        edges = await session_edges(ctx, caller, list(fused), sorted(best))
        linked = {frozenset(pair) for pair in edges}
        talk = [pair for pair in conversation_edges(ctx, list(fused), sorted(best)) if frozenset(pair) not in linked]
        written_next = {frozenset(pair) for pair in talk}
        edges += talk
        for later, earlier in edges:
            if later in fused and earlier in fused:
                links.setdefault(later, []).append(earlier)
                links.setdefault(earlier, []).append(later)
        around = [(later, earlier) for later, earlier in edges if later in best or earlier in best]
        await _admit(ctx, caller, scopes, fused, around, filters, seen, links)
    if not fused:
        return []
    if hybrid:
        _, query_tokens = await embedding
        if query_tokens is not None:
            await _match_tokens(ctx, scopes, fused, query_tokens)
        add_context(fused, {b: [n for n in links.get(b, []) if n in fused] for b in fused}, ranking.CONTEXT_WEIGHT)
        for entry in fused.values():
            if entry.context_from is not None and frozenset((entry.bead_id, entry.context_from)) in written_next:
                entry.context_via = WRITTEN_NEXT
    if window is not None:
        await boost_window(ctx, caller, fused, window, seen)
    if hybrid:
        await boost_own(ctx, caller, query, fused, seen)
    ordered = sorted(fused.values(), key=lambda e: (-e.relevance, e.bead_id))
    now = as_of if as_of is not None else now_ms()  # recency as it was then
    wanted = reranking_depth(ctx, limit)
    if use_priors:
        ordered = _reachable(ordered, wanted)
    # Screened beads are weighed as not superseded; reading them (many) tells, and demotes the few that are.
    staged = [_weigh(entry, seen[entry.bead_id], False, now, use_priors) for entry in ordered]
    staged.sort(key=lambda hit: (-hit.score, hit.entry.bead_id))
    hits = await _hydrate(ctx, caller, staged, filters, wanted, now, use_priors, as_of)
    return (await rerank(ctx, query, hits))[:limit]


async def _keyword_in_scopes(
    ctx: HubContext, caller: str, query: str, filters: BeadFilters, depth: int
) -> tuple[list[str], tuple[list[tuple[str, float]], dict[str, dict[str, Any]]]]:
    """The caller's scopes and the keyword list in them. The index is asked in the scopes this hub last read
    while the membership counter is read (the keyword pass is the event loop's own work, the read a round trip),
    and asked again only when they were not current."""
    reading = asyncio.ensure_future(searchable_scopes(ctx, caller, filters))
    guessed = last_read_scopes(ctx, caller, filters)
    found = None
    try:
        if guessed is not None:
            await asyncio.sleep(0)  # the counter's read goes out before the index is asked
            found = await keyword_candidates(ctx, guessed, query, filters, depth)
        scopes = await reading
    except BaseException:
        reading.cancel()
        raise
    if found is None or scopes != guessed:
        found = await keyword_candidates(ctx, scopes, query, filters, depth)
    return scopes, found


async def _add_dated(
    ctx: HubContext, scopes: list[str], query: str, vector: Any, filters: BeadFilters, depth: int,
    within: tuple[int, int], lists: dict[str, list[tuple[str, float]]], seen: dict[str, dict[str, Any]],
) -> None:
    """The best candidates dated inside the query's window join each list (in place), scored as the list scores
    them: a question about a day or a month is answered by a bead of then that both lists may rank below the
    depth they are read to, behind beads of other times saying the same things. A list is read again only where
    the keyword index holds beads of then, but not most of them (:data:`WIDE_WINDOW`): the vector sets of such
    scopes — a filtered VSIM reads far more of a set than a plain one, most when it holds few beads of then or
    none — and the keyword list when such are its scopes taken together (read in all of them: its scores are
    those of the scopes it is read in). A window holding most of the beads is in the lists already."""
    read_again = scopes
    keyword_again = True
    if ctx.keywords.ready:
        counts = ctx.keywords.dated_counts(scopes, *within)
        read_again = [scope for scope in scopes if _worth_reading_again(*counts[scope])]
        keyword_again = _worth_reading_again(sum(n for n, _ in counts.values()), sum(t for _, t in counts.values()))
    (keyword_hits, keyword_seen), vector_hits = await asyncio.gather(
        keyword_candidates(ctx, scopes, query, filters, depth, within=within) if keyword_again
        else asyncio.sleep(0, ([], {})),
        _nearest(ctx, read_again, vector, filters, depth, within) if read_again else asyncio.sleep(0, []),
    )
    seen.update(keyword_seen)
    lists["keyword"] = _merged(lists["keyword"], keyword_hits)
    lists["vector"] = _merged(lists["vector"], vector_hits)


def _worth_reading_again(of_then: int, held: int) -> bool:
    """Whether a list is read again restricted to a date window that ``of_then`` of the ``held`` beads are in."""
    return 0 < of_then <= WIDE_WINDOW * held


def _merged(ranked: list[tuple[str, float]], more: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """Two lists of ``(bead_id, score)`` of one scoring as one, best first."""
    scores = dict(ranked)
    for bead_id, score in more:
        scores[bead_id] = max(score, scores.get(bead_id, score))
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


async def _admit(
    ctx: HubContext,
    caller: str,
    scopes: list[str],
    fused: dict[str, Fused],
    around: list[tuple[str, str]],
    filters: BeadFilters,
    seen: dict[str, dict[str, Any]],
    links: dict[str, list[str]],
) -> None:
    """Session neighbours of the best candidates join the candidates (relevance 0 of their own: graph
    context gives them part of their neighbour's), once screened like the others; ``seen`` and ``links``
    are extended in place. A reply often answers a question without repeating its words."""
    outside = {n for pair in around for n in pair if n not in fused}
    if not outside:
        return
    screened = await screen(ctx, caller, scopes, sorted(outside), filters)
    seen.update(screened)
    for later, earlier in around:
        if later in screened or earlier in screened:
            links.setdefault(later, []).append(earlier)
            links.setdefault(earlier, []).append(later)
    for bead_id in screened:
        fused[bead_id] = Fused(bead_id)


async def session_edges(ctx: HubContext, caller: str, ids: list[str], around: list[str]) -> list[tuple[str, str]]:
    """``(later, earlier)`` for the ``FOLLOWS_FROM`` edges that join two of the screened candidates ``ids`` or
    touch one of ``around``: from the keyword index's map of them, else from the graph. The index's may name
    a bead outside ``ids`` the caller may not see; :func:`_admit` screens every such bead before it counts."""
    if ctx.keywords.ready:
        return ctx.keywords.session_edges(ids, around)
    return await ctx.beads.session_edges(caller, ids, around)


def conversation_edges(ctx: HubContext, ids: list[str], around: list[str]) -> list[tuple[str, str]]:
    """``(later, earlier)`` for the conversation neighbours (:mod:`~recall_hub.store.conversation`) that join two
    of the screened candidates ``ids`` or touch one of ``around``, from the keyword index (none until it is
    built: the graph stores no such edge). :func:`_admit` screens every bead outside ``ids``."""
    return ctx.keywords.conversation_edges(ids, around) if ctx.keywords.ready else []


def _best(fused: dict[str, Fused], count: int) -> set[str]:
    """The ``count`` most relevant candidates."""
    return {e.bead_id for e in sorted(fused.values(), key=lambda e: (-e.relevance, e.bead_id))[:count]}


def _reachable(ordered: list[Fused], limit: int) -> list[Fused]:
    """The candidates (best first) that priors can still lift into the top ``limit``: priors move a score
    by at most PRIOR_FACTOR either way, so one below the limit-th best over PRIOR_FACTOR**2 never gets there."""
    floor = ordered[min(limit, len(ordered)) - 1].relevance / PRIOR_FACTOR**2
    return [e for e in ordered if e.relevance >= floor]


async def screen(
    ctx: HubContext, caller: str, scopes: list[str], ids: list[str], filters: BeadFilters
) -> dict[str, dict[str, Any]]:
    """What ranking reads of the candidates among ``ids`` the caller may see and that pass ``filters``.

    From the keyword index, which holds every bead with its scope, in memory; from the graph, beads it does
    not hold yet (written a moment ago) and those the caller wrote since the index last applied the log
    (:func:`~recall_hub.retrieval.freshness.written_since_index`: so a caller sees its own writes without the
    index committing them). The index may lag the graph by a moment; what it says here only orders
    candidates — the beads returned are read from the graph, visibility and filters checked again
    (:func:`_hydrate`)."""
    if not ids:
        return {}
    changed = await written_since_index(ctx) if ctx.keywords.ready else None
    if changed is None:
        return await ctx.beads.screen(caller, ids, filters)
    seen, unknown = ctx.keywords.screen(scopes, [b for b in ids if b not in changed], filters)
    unknown += [b for b in ids if b in changed]
    if unknown:
        seen |= await ctx.beads.screen(caller, unknown, filters)
    return seen


@dataclass
class _Weighed:
    score: float
    multiplier: float
    notes: list[str]
    entry: Fused


def _weigh(entry: Fused, props: dict[str, Any], superseded: bool, now: int, use_priors: bool) -> _Weighed:
    if not use_priors:
        return _Weighed(entry.relevance, 1.0, [], entry)
    multiplier, notes = prior(props, superseded, now)
    return _Weighed(entry.relevance * multiplier, multiplier, notes, entry)


async def _hydrate(
    ctx: HubContext, caller: str, staged: list[_Weighed], filters: BeadFilters, limit: int, now: int, use_priors: bool,
    as_of: int | None = None,
) -> list[SearchHit]:
    """The best ``limit`` of ``staged`` (best first) as hits, read in full — a few beyond the limit at a time.

    Each bead read is weighed again on what the graph holds. Reading can only lower a score (the bead
    turns out superseded, or changed since screening and is gone) while the index that screened is
    current, so once ``limit`` read beads score at least the best unread one, no unread bead can beat them.
    """
    done: list[tuple[_Weighed, dict[str, Any]]] = []
    position = 0
    while position < len(staged):
        chunk = staged[position : position + max(limit - len(done), 0) + HYDRATE_SPARE]
        position += len(chunk)
        ids = [weighed.entry.bead_id for weighed in chunk]
        past = past_reads(ctx, as_of)
        beads = await (ctx.beads.many(caller, ids, filters) if past is None or as_of is None
                       else past.many(caller, ids, as_of, filters))
        for weighed in chunk:
            found = beads.get(weighed.entry.bead_id)
            if found is None:  # changed since it was screened
                continue
            props, superseded = found
            done.append((_weigh(weighed.entry, props, superseded, now, use_priors), props))
        bound = staged[position].score if position < len(staged) else float("-inf")
        if sum(1 for weighed, _ in done if weighed.score >= bound) >= limit:
            break
    done.sort(key=lambda item: (-item[0].score, item[0].entry.bead_id))
    return _HITS.validate_python([_hit_fields(weighed, ctx.beads.cache.bead(props)) for weighed, props in done[:limit]])


def _hit_fields(weighed: _Weighed, bead: MemoryBead) -> dict[str, Any]:
    entry, notes = weighed.entry, weighed.notes
    if entry.context_from is not None:
        notes = [f"context: +{entry.context:.3f} from {entry.context_from} ({entry.context_via})", *notes]
    return {
        "bead": bead,
        "score": weighed.score,
        "explanation": {
            "sources": [{"list": name, "rank": r, "raw_score": raw} for name, r, raw in entry.sources],
            "relevance": entry.relevance,
            "prior": weighed.multiplier,
            "notes": [*entry.notes, *notes],
        },
    }


def source_of(bead: MemoryBead) -> str:
    """Beads cut from one item (a document, a diff) share ``metadata.source``; others stand alone."""
    source = bead.metadata.get("source")
    return str(source) if source else bead.bead_id


def pack(hits: Sequence[SearchHit], max_tokens: int, max_per_source: int = 2) -> tuple[list[SearchHit], int]:
    """The best hits whose rendered beads fit ``max_tokens``, at most ``max_per_source`` per source.

    Greedy in rank order: a hit that does not fit is skipped and smaller ones after it may still fit.
    Returns the kept hits and how many were dropped.
    """
    kept: list[SearchHit] = []
    used = 0
    per_source: dict[str, int] = {}
    for hit in hits:
        source = source_of(hit.bead)
        cost = count_tokens(render_bead(hit.bead)) + 1
        if per_source.get(source, 0) >= max_per_source or used + cost > max_tokens:
            continue
        kept.append(hit)
        used += cost
        per_source[source] = per_source.get(source, 0) + 1
    return kept, len(hits) - len(kept)


async def search_beads(ctx: HubContext, caller: str, req: SearchBeads) -> SearchResult:
    as_of = to_ms(req.as_of) if req.as_of is not None else None
    window = understood_window(req.query, to_ms(req.reference_time) if req.reference_time is not None else as_of)
    hits = await rank(
        ctx, caller, req.query, req.filters, req.limit, req.mode, req.use_priors, req.fusion, as_of, window,
        include_hubs=req.include_hubs,
    )
    if req.max_tokens is None:
        return SearchResult(hits=hits, date_window=window)
    kept, _ = pack(hits, req.max_tokens, max_per_source=req.limit)
    return SearchResult(hits=kept, tokens=sum(count_tokens(render_bead(h.bead)) + 1 for h in kept), date_window=window)


async def context(ctx: HubContext, caller: str, req: GetContext) -> ContextBlock:
    window = understood_window(req.query, to_ms(req.reference_time) if req.reference_time is not None else None)
    hits = await rank(ctx, caller, req.query, req.filters, CONTEXT_HITS, window=window, include_hubs=req.include_hubs,
                      depth=CANDIDATES)
    kept, dropped = pack(hits, req.max_tokens, req.max_per_source)
    text = "\n\n".join(render_bead(h.bead) for h in kept)
    return ContextBlock(
        text=text,
        bead_ids=[h.bead.bead_id for h in kept],
        tokens=sum(count_tokens(render_bead(h.bead)) + 1 for h in kept),
        max_tokens=req.max_tokens,
        dropped=dropped,
    )


async def find_similar(ctx: HubContext, caller: str, req: FindSimilar) -> SearchResult:
    props = await ctx.beads.get(caller, req.bead_id)
    if props is None:
        raise NotFound(f"bead {req.bead_id} not found")
    vector = None
    if props.get("vec_scope") and props.get("vec_model") == ctx.vectors.model_id:
        vector = await ctx.vectors.vector(req.bead_id, props["vec_scope"])
    if vector is None:
        vector = (await embed_texts(ctx, [bead_text(props)]))[0]
    candidates = await vector_candidates(ctx, caller, vector, BeadFilters(), req.limit + 1)
    candidates = [(b, s) for b, s in candidates if b != req.bead_id and s >= req.threshold][: req.limit]
    beads = await ctx.beads.many(caller, [b for b, _ in candidates])
    hits = [
        SearchHit(
            bead=ctx.beads.cache.bead(beads[b][0]),
            score=s,
            explanation=ScoreExplanation(
                sources=[RankSource(list="vector", rank=i + 1, raw_score=s)], relevance=s, prior=1.0
            ),
        )
        for i, (b, s) in enumerate(candidates)
        if b in beads
    ]
    return SearchResult(hits=hits)


async def why(ctx: HubContext, caller: str, req: Why) -> WhyResult:
    seeds = await rank(ctx, caller, req.query, req.filters, req.seeds)
    seed_ids = [h.bead.bead_id for h in seeds]
    graph = await expand(ctx, caller, seed_ids, req.hops, req.rel_types, Direction.BOTH, req.limit)
    return WhyResult(seeds=seed_ids, graph=graph)
