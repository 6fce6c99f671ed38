"""Opportunistic micro-batching: concurrent single-text requests share one model call.

While the model embeds one batch, new requests queue; the next call takes all of them (up to
``max_batch``). An idle hub adds no wait at all; a busy one embeds many creates per model call,
which is what bounds ingest on a small CPU.
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
        self._queue: asyncio.Queue[tuple[str, asyncio.Future[np.ndarray]]] = asyncio.Queue()
        self._worker: asyncio.Task[None] | None = None

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dim(self) -> int:
        return self.inner.dim

    async def warmup(self) -> None:
        await self.inner.warmup()

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) != 1:
            return await self.inner.embed(texts)
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._run(), name="recall-embed-batcher")
        future: asyncio.Future[np.ndarray] = asyncio.get_running_loop().create_future()
        await self._queue.put((texts[0], future))
        return (await future).reshape(1, -1)

    async def _run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < self.max_batch and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                vectors = await self.inner.embed([text for text, _ in batch])
            except Exception as exc:  # each waiting request gets the failure, the worker lives on
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, future), vector in zip(batch, vectors, strict=True):
                if not future.done():
                    future.set_result(vector)

    async def aclose(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
        await self.inner.aclose()
