"""What of a bead is embedded, and embedding texts (an embedder that fails is ``unavailable``).

Shared by the writes that keep the vector sets (:mod:`recall_hub.ops.indexing`) and the reads that
embed a stored bead again (``find_similar``)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from recall_schemas import Unavailable

from recall_hub.context import HubContext
from recall_hub.embedders import EmbedderError
from recall_hub.embedders.base import Span, SpanPooling, TokenReading
from recall_hub.embedders.early import discard
from recall_hub.retrieval.keyword import STOPWORDS
from recall_hub.store.vectors import BeadVectors


def bead_text(props: Mapping[str, Any]) -> str:
    title = props.get("title") or ""
    content = props.get("content") or ""
    return f"{title}\n{content}" if content and content != title else title


WORDS_PER_TOKEN = 0.62
"""Words of a chunk per token of the model's window: English runs ~1.3 WordPiece tokens a word, so a chunk of
``0.62 * window`` words fits the window with room for longer words and the model's own two tokens."""
OVERLAP = 0.25
"""Of a chunk, the share the next one repeats: a sentence cut by one window lies whole in the next."""
MAX_CHUNKS = 32
"""Vectors one bead may have. A text of more chunks than this is covered by as many windows spread evenly
over it (gaps between them); its keyword document always holds all of it."""


def bead_chunks(props: Mapping[str, Any], window_tokens: int | None) -> list[str]:
    """The texts a bead is embedded as: its whole text first (what the model reads of it, as for any bead),
    then, when it runs past the model's window, overlapping windows of its words from where the first one
    stops to the end (at most :data:`MAX_CHUNKS` in all)."""
    text = bead_text(props)
    if window_tokens is None:
        return [text]
    size = max(8, int(window_tokens * WORDS_PER_TOKEN))
    words = text.split()
    if len(words) <= size:
        return [text]
    step = max(1, int(size * (1 - OVERLAP)))
    starts = list(range(step, len(words) - size + step, step))
    if len(starts) > MAX_CHUNKS - 1:  # spread the windows over the whole text instead of stopping early
        last = len(words) - size
        starts = sorted({round(step + i * (last - step) / (MAX_CHUNKS - 2)) for i in range(MAX_CHUNKS - 1)})
    return [text, *(" ".join(words[start : start + size]) for start in starts)]


SENTENCE_MIN_WORDS = 4
"""Shorter sentences ("Wow!", "Thanks so much.") get no vector of their own."""
_SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*(?=\s)")


def sentence_spans(text: str) -> list[Span]:
    """The sentences of ``text`` worth a vector, as character spans; none unless there are two or more."""
    spans, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        spans.append((start, match.end()))
        start = match.end()
    spans.append((start, len(text)))
    kept = []
    for begin, end in spans:
        piece = text[begin:end]
        stripped = piece.strip()
        if len(stripped.split()) >= SENTENCE_MIN_WORDS:
            offset = begin + piece.index(stripped)
            kept.append((offset, offset + len(stripped)))
    return kept if len(kept) >= 2 else []


def _parts(ctx: HubContext, texts: Sequence[str]) -> list[Span] | None:
    """The sentence spans a bead embedded as ``texts`` (:func:`bead_chunks`) is pooled over, if any: a bead within
    the model's window that says several things (``sentence_vectors``) also has a vector of each sentence,
    pooled from the same reading of the whole text where the embedder can (:class:`SpanPooling`) — a turn that
    greets, answers and asks back is found by the sentence that answers."""
    embedder = ctx.embedder
    pools = isinstance(embedder, SpanPooling) and embedder.pools_spans
    if not ctx.settings.sentence_vectors or len(texts) != 1 or not pools:
        return None
    return sentence_spans(texts[0]) or None


async def _embed_chunks(ctx: HubContext, texts: Sequence[str]) -> BeadVectors:
    """One bead's vectors (:func:`embed_beads`)."""
    (vectors,) = await _embed_many(ctx, [list(texts)])
    return vectors


def reads_tokens(ctx: HubContext) -> bool:
    """Whether beads keep their token signs and searches match them (``late_interaction`` and a model that can)."""
    embedder = ctx.embedder
    return ctx.settings.late_interaction and isinstance(embedder, TokenReading) and embedder.reads_tokens


async def _embed_many(ctx: HubContext, chunked: Sequence[Sequence[str]]) -> list[BeadVectors]:
    """Beads' vectors, each from its chunks: those pooled by sentence in one call, the rest embedded in another
    (or, with token signs kept, every first text read with its tokens in one call and later chunks in another)."""
    parts = [_parts(ctx, texts) for texts in chunked]
    if reads_tokens(ctx):
        return await _embed_with_tokens(ctx, chunked, parts)
    pooled_texts = [texts[0] for texts, spans in zip(chunked, parts, strict=True) if spans is not None]
    plain_texts = [text for texts, spans in zip(chunked, parts, strict=True) if spans is None for text in texts]
    pooled: list[np.ndarray] = []
    if pooled_texts:
        assert isinstance(ctx.embedder, SpanPooling)
        with _unavailable_on_failure():
            pooled = await ctx.embedder.embed_spans(pooled_texts, [spans for spans in parts if spans is not None])
    plain = await embed_texts(ctx, plain_texts) if plain_texts else None
    out, start, taken = [], 0, iter(pooled)
    for texts, spans in zip(chunked, parts, strict=True):
        if spans is not None:
            out.append(BeadVectors(next(taken), sentences=True))
            continue
        assert plain is not None
        out.append(BeadVectors(plain[start : start + len(texts)]))
        start += len(texts)
    return out


async def _embed_with_tokens(
    ctx: HubContext, chunked: Sequence[Sequence[str]], parts: Sequence[list[Span] | None]
) -> list[BeadVectors]:
    assert isinstance(ctx.embedder, TokenReading)
    later = [text for texts in chunked for text in texts[1:]]
    with _unavailable_on_failure():
        read = await ctx.embedder.embed_spans_and_tokens(
            [texts[0] for texts in chunked], [spans or [] for spans in parts], STOPWORDS
        )
    windows = await embed_texts(ctx, later) if later else None
    out, start = [], 0
    for texts, spans, (rows, tokens) in zip(chunked, parts, read, strict=True):
        if len(texts) > 1:
            assert windows is not None
            rows = np.vstack([rows[:1], windows[start : start + len(texts) - 1]])
            start += len(texts) - 1
        out.append(BeadVectors(rows, sentences=spans is not None, tokens=tokens))
    return out


@contextlib.contextmanager
def _unavailable_on_failure() -> Iterator[None]:
    try:
        yield
    except EmbedderError as exc:
        raise Unavailable(f"embedder failed: {exc}") from exc


async def embed_texts(ctx: HubContext, texts: Sequence[str]) -> np.ndarray:
    with _unavailable_on_failure():
        return await ctx.embedder.embed(list(texts))


def embed_early(ctx: HubContext, props: Mapping[str, Any]) -> None:
    """Start embedding a bead about to be written, for :func:`embed_beads` to take once it is
    (:mod:`recall_hub.embedders.early`); the caller drops it if the write does not happen."""
    texts = bead_chunks(props, ctx.embedder.window_tokens)
    ctx.early_vectors.start(str(props["bead_id"]), texts, _embed_chunks(ctx, texts))


async def embed_beads(ctx: HubContext, beads: Sequence[Mapping[str, Any]]) -> list[BeadVectors]:
    """Each bead's vectors, one row per chunk (:func:`bead_chunks`; the first is its whole text) or, for a bead
    pooled by sentence, its whole text then its sentences (:func:`_parts`): those started early for the
    same texts (:func:`embed_early`), the others embedded together."""
    chunks = [bead_chunks(props, ctx.embedder.window_tokens) for props in beads]
    taken = ctx.early_vectors.take
    early = [taken(str(props.get("bead_id")), texts) for props, texts in zip(beads, chunks, strict=True)]
    missing = [texts for texts, started in zip(chunks, early, strict=True) if started is None]
    try:
        rest = iter(await _embed_many(ctx, missing))
        return [await started if started is not None else next(rest) for started in early]
    except BaseException:  # the embeddings taken and not awaited yet are let go, their failures retrieved
        for started in early:
            if started is not None:
                discard(started)
        raise
