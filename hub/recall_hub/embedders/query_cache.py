"""Embeddings of recent search queries: agents repeat their queries, and embedding one is the
slowest step of a search (milliseconds, against microseconds for a lookup)."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from recall_hub.embedders.base import Embedder


class QueryVectors:
    def __init__(self, embedder: Embedder, size: int = 4096) -> None:
        self.embedder = embedder
        self.size = size
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()

    async def vector(self, text: str) -> np.ndarray:
        """The query's embedding (raises :class:`EmbedderError` like the embedder)."""
        cached = self._cache.get(text)
        if cached is not None:
            self._cache.move_to_end(text)
            return cached
        vector: np.ndarray = np.asarray((await self.embedder.embed_queries([text]))[0])
        vector.setflags(write=False)  # shared by every search that asks again
        self._cache[text] = vector
        while len(self._cache) > self.size:
            self._cache.popitem(last=False)
        return vector
