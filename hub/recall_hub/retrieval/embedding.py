"""What of a bead is embedded, and embedding texts (an embedder that fails is ``unavailable``).

Shared by the writes that keep the vector sets (:mod:`recall_hub.ops.indexing`) and the reads that
embed a stored bead again (``find_similar``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from recall_schemas import Unavailable

from recall_hub.context import HubContext
from recall_hub.embedders import EmbedderError


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


async def embed_texts(ctx: HubContext, texts: Sequence[str]) -> np.ndarray:
    try:
        return await ctx.embedder.embed(list(texts))
    except EmbedderError as exc:
        raise Unavailable(f"embedder failed: {exc}") from exc


def embed_early(ctx: HubContext, props: Mapping[str, Any]) -> None:
    """Start embedding a bead about to be written, for :func:`embed_beads` to take once it is
    (:mod:`recall_hub.embedders.early`); the caller drops it if the write does not happen."""
    texts = bead_chunks(props, ctx.embedder.window_tokens)
    ctx.early_vectors.start(str(props["bead_id"]), texts, embed_texts(ctx, texts))


async def embed_beads(ctx: HubContext, beads: Sequence[Mapping[str, Any]]) -> list[np.ndarray]:
    """Each bead's vectors, one row per chunk (:func:`bead_chunks`; the first is its whole text): those started
    early for the same texts (:func:`embed_early`), the others embedded in one call."""
    chunks = [bead_chunks(props, ctx.embedder.window_tokens) for props in beads]
    taken = ctx.early_vectors.take
    early = [taken(str(props.get("bead_id")), texts) for props, texts in zip(beads, chunks, strict=True)]
    rest = [text for texts, started in zip(chunks, early, strict=True) if started is None for text in texts]
    vectors = await embed_texts(ctx, rest) if rest else None
    out, start = [], 0
    for texts, started in zip(chunks, early, strict=True):
        if started is not None:
            out.append(await started)
            continue
        assert vectors is not None
        out.append(vectors[start : start + len(texts)])
        start += len(texts)
    return out
