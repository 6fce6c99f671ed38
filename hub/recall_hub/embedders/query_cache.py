"""Embeddings of recent search queries: agents repeat their queries, and embedding one is the
slowest step of a search (milliseconds, against microseconds for a lookup)."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from recall_hub.embedders.base import Embedder, TokenReading


class QueryVectors:
    def __init__(self, embedder: Embedder, size: int = 4096) -> None:
        self.embedder = embedder
        self.size = size
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._tokens: OrderedDict[str, tuple[np.ndarray, np.ndarray]] = OrderedDict()

    async def reading(self, text: str, skip: frozenset[str]) -> tuple[np.ndarray, np.ndarray]:
        """The query's embedding and its word tokens' outputs (:class:`TokenReading`; ``skip`` is the same for
        every call of a hub)."""
        cached = self._tokens.get(text)
        if cached is not None:
            self._tokens.move_to_end(text)
            return cached
        if not isinstance(self.embedder, TokenReading):
            raise TypeError(f"{self.embedder!r} does not read tokens")
        ((vector, tokens),) = await self.embedder.embed_queries_and_tokens([text], skip)
        for array in (vector, tokens):
            array.setflags(write=False)
        self._tokens[text] = (vector, tokens)
        while len(self._tokens) > self.size:
            self._tokens.popitem(last=False)
        return vector, tokens

    async def vector(self, text: str) -> np.ndarray:
        """The query's embedding (raises :class:`EmbedderError` like the embedder)."""
        cached = self._cache.get(text)
        if cached is not None:
            self._cache.move_to_end(text)
            return cached
        read = self._tokens.get(text)
        if read is not None:  # a hybrid search read it with its tokens: the same vector
            self._tokens.move_to_end(text)
            return read[0]
        vector: np.ndarray = np.asarray((await self.embedder.embed_queries([text]))[0])
        vector.setflags(write=False)  # shared by every search that asks again
        self._cache[text] = vector
        while len(self._cache) > self.size:
            self._cache.popitem(last=False)
        return vector
