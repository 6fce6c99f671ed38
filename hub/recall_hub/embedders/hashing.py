"""Deterministic feature-hashing embedder: no model, no network, same vector in every process.

Only used when asked for (``kind="hash"``): tests, benchmarks of the plumbing, machines that cannot
run the local model. It captures word overlap, not meaning.

Features are the lowercased word unigrams and adjacent-word bigrams of the text (``\\w+`` runs,
Unicode-aware). Each feature is hashed with BLAKE2b (keyed by a fixed personalisation string, so the
result never depends on ``PYTHONHASHSEED``) into one of ``dim`` buckets with a sign of +1 or -1, and
the counts are L2-normalised. A text without any word (empty, punctuation only) maps to one fixed
unit vector, so every row is unit length.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import re
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from recall_hub.embedders.base import check_texts, l2_normalise

__all__ = ["HashEmbedder"]

logger = logging.getLogger(__name__)

_WORD = re.compile(r"\w+")
_PERSON = b"recall-hash-v1"  # changing this (or the features) changes every vector: bump model_id too
_EMPTY_FEATURE = "\x00empty"
# Above this many characters in one call, hashing moves off the event loop.
_INLINE_CHARS = 20_000


@lru_cache(maxsize=1 << 16)
def _bucket(feature: str, dim: int) -> tuple[int, float]:
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8, person=_PERSON).digest()
    n = int.from_bytes(digest, "little")
    sign = -1.0 if n >> 63 else 1.0
    return (n & 0x7FFF_FFFF_FFFF_FFFF) % dim, sign


def _features(text: str) -> list[str]:
    words = _WORD.findall(text.lower())
    if not words:
        return [_EMPTY_FEATURE]
    return words + [f"{a} {b}" for a, b in itertools.pairwise(words)]


class HashEmbedder:
    """Signed feature hashing of word unigrams + bigrams; ``model_id`` is ``hash:<dim>``."""

    def __init__(self, dim: int = 384) -> None:
        if dim < 1:
            raise ValueError("dim must be >= 1")
        self._dim = dim
        self._model_id = f"hash:{dim}"

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def window_tokens(self) -> int | None:
        """Hashing reads every word of a text."""
        return None

    def embed_sync(self, texts: Sequence[str]) -> np.ndarray:
        """The vectors, computed on the calling thread (pure function of the texts and ``dim``)."""
        items = check_texts(texts)
        out = np.zeros((len(items), self._dim), dtype=np.float32)
        for row, text in enumerate(items):
            for feature in _features(text):
                col, sign = _bucket(feature, self._dim)
                out[row, col] += sign
        # A text whose features all cancel out would give a zero row: fall back to the fixed vector.
        zero = ~out.any(axis=1)
        if zero.any():
            col, sign = _bucket(_EMPTY_FEATURE, self._dim)
            out[zero, col] = sign
        return l2_normalise(out)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        items = check_texts(texts)
        if sum(len(t) for t in items) <= _INLINE_CHARS:
            return self.embed_sync(items)
        return await asyncio.to_thread(self.embed_sync, items)

    async def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return await self.embed(texts)  # a symmetric model

    async def warmup(self) -> None:
        """Nothing to load; present so that every embedder can be warmed up the same way."""

    async def aclose(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"HashEmbedder(dim={self._dim})"
