"""Opportunistic micro-batching: concurrent single-text requests share one model call.

While the model embeds one batch, new requests queue; the next call takes all of them (up to
``max_batch``). An idle hub adds no wait at all; a busy one embeds many creates per model call,
which is what bounds ingest on a small CPU. Queries and documents share the queue; a model call
takes one kind, since an asymmetric model embeds them differently.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

import numpy as np

from recall_hub.embedders.base import Embedder


class BatchingEmbedder:
    def __init__(self, inner: Embedder, max_batch: int = 32) -> None:
        self.inner = inner
        self.max_batch = max_batch
        self._queue: asyncio.Queue[tuple[str, bool, asyncio.Future[np.ndarray]]] = asyncio.Queue()
        self._worker: asyncio.Task[None] | None = None

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dim(self) -> int:
        return self.inner.dim

    @property
    def window_tokens(self) -> int | None:
        return self.inner.window_tokens

    async def warmup(self) -> None:
        await self.inner.warmup()

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) != 1:
            return await self.inner.embed(texts)
        return await self._queued(texts[0], query=False)

    async def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) != 1:
            return await self.inner.embed_queries(texts)
        return await self._queued(texts[0], query=True)

    async def _queued(self, text: str, query: bool) -> np.ndarray:
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._run(), name="recall-embed-batcher")
        future: asyncio.Future[np.ndarray] = asyncio.get_running_loop().create_future()
        await self._queue.put((text, query, future))
        return (await future).reshape(1, -1)

    async def _run(self) -> None:
        held: tuple[str, bool, asyncio.Future[np.ndarray]] | None = None
        while True:
            first = held or await self._queue.get()
            held = None
            batch = [first]
            while len(batch) < self.max_batch and not self._queue.empty():
                item = self._queue.get_nowait()
                if item[1] != first[1]:
                    held = item  # the other kind: the next call's first
                    break
                batch.append(item)
            texts = [text for text, _, _ in batch]
            try:
                vectors = await (self.inner.embed_queries(texts) if first[1] else self.inner.embed(texts))
            except Exception as exc:  # each waiting request gets the failure, the worker lives on
                for _, _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, _, future), vector in zip(batch, vectors, strict=True):
                if not future.done():
                    future.set_result(vector)

    async def aclose(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
        await self.inner.aclose()
