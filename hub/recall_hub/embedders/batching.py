"""Opportunistic micro-batching: concurrent single-text requests share one model call.

While the model embeds one batch, new requests queue; the next call takes all of them (up to
``max_batch``). An idle hub adds no wait at all; a busy one embeds many creates per model call,
which is what bounds ingest on a small CPU. An embedder that reads several documents at once
(:class:`~recall_hub.embedders.base.ParallelRuns`: the local model's lanes) gets that many calls in
flight. Queries and documents queue apart, each kind batched on its own: an asymmetric model embeds
them differently, and a search's query must not wait behind the documents of a busy ingest (an
embedder with a lane per kind, as the local one has, runs them at once).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Generic, TypeVar

import numpy as np
from recall_schemas.tasks import stop_tasks

from recall_hub.embedders.base import Embedder, ParallelRuns, Span, SpanPooling, TokenReading

T = TypeVar("T")
R = TypeVar("R")


class BatchingEmbedder:
    def __init__(self, inner: Embedder, max_batch: int = 32) -> None:
        self.inner = inner
        self.max_batch = max_batch
        runs = inner.document_runs if isinstance(inner, ParallelRuns) else 1
        self._documents: _Queue[str, np.ndarray] = _Queue(inner.embed, max_batch, "recall-embed-documents", runs)
        self._queries: _Queue[str, np.ndarray] = _Queue(inner.embed_queries, max_batch, "recall-embed-queries")
        self._query_tokens: dict[frozenset[str], _Queue[str, tuple[np.ndarray, np.ndarray]]] = {}
        self._document_tokens: dict[
            frozenset[str], _Queue[tuple[str, Sequence[Span]], tuple[np.ndarray, np.ndarray]]
        ] = {}

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
        return await self._documents.vector(texts[0])

    async def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) != 1:
            return await self.inner.embed_queries(texts)
        return await self._queries.vector(texts[0])

    @property
    def pools_spans(self) -> bool:
        return isinstance(self.inner, SpanPooling) and self.inner.pools_spans

    async def embed_spans(self, texts: Sequence[str], spans: Sequence[Sequence[Span]]) -> list[np.ndarray]:
        if not isinstance(self.inner, SpanPooling):
            raise TypeError(f"{self.inner!r} does not pool spans")
        return await self.inner.embed_spans(texts, spans)

    @property
    def reads_tokens(self) -> bool:
        return isinstance(self.inner, TokenReading) and self.inner.reads_tokens

    async def embed_spans_and_tokens(
        self, texts: Sequence[str], spans: Sequence[Sequence[Span]], skip: frozenset[str]
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        inner = self.inner
        if not isinstance(inner, TokenReading):
            raise TypeError(f"{inner!r} does not read tokens")
        if len(texts) != 1:
            return await inner.embed_spans_and_tokens(texts, spans, skip)
        queue = self._document_tokens.get(skip)
        if queue is None:
            async def read(items: Sequence[tuple[str, Sequence[Span]]]) -> list[tuple[np.ndarray, np.ndarray]]:
                return await inner.embed_spans_and_tokens([t for t, _ in items], [s for _, s in items], skip)

            runs = inner.document_runs if isinstance(inner, ParallelRuns) else 1
            queue = self._document_tokens[skip] = _Queue(read, self.max_batch, "recall-embed-document-tokens", runs)
        return [await queue.one((texts[0], spans[0]))]

    async def embed_queries_and_tokens(
        self, texts: Sequence[str], skip: frozenset[str]
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        inner = self.inner
        if not isinstance(inner, TokenReading):
            raise TypeError(f"{inner!r} does not read tokens")
        if len(texts) != 1:
            return await inner.embed_queries_and_tokens(texts, skip)
        queue = self._query_tokens.get(skip)
        if queue is None:
            queue = self._query_tokens[skip] = _Queue(
                functools.partial(inner.embed_queries_and_tokens, skip=skip), self.max_batch,
                "recall-embed-query-tokens",
            )
        return [await queue.one(texts[0])]

    async def aclose(self) -> None:
        await self._documents.aclose()
        await self._queries.aclose()
        for queue in self._query_tokens.values():
            await queue.aclose()
        for tokens_queue in self._document_tokens.values():
            await tokens_queue.aclose()
        await self.inner.aclose()


class _Queue(Generic[T, R]):
    """Single texts (or texts with what goes with them) of one kind, embedded together by ``embed`` (one result
    an item) while they queue behind the calls in flight (at most ``runs`` at once)."""

    def __init__(
        self, embed: Callable[[Sequence[T]], Awaitable[Iterable[R]]], max_batch: int, name: str, runs: int = 1
    ) -> None:
        self._embed = embed
        self._max_batch = max_batch
        self._name = name
        self._waiting: asyncio.Queue[tuple[T, asyncio.Future[R]]] = asyncio.Queue()
        self._workers: list[asyncio.Task[None] | None] = [None] * max(1, runs)

    async def vector(self, text: T) -> np.ndarray:
        """The text's vector as a one-row array (a queue of an embedder's vectors)."""
        return np.asarray(await self.one(text)).reshape(1, -1)

    async def one(self, text: T) -> R:
        for n, worker in enumerate(self._workers):
            if worker is None or worker.done():
                self._workers[n] = asyncio.create_task(self._run(), name=f"{self._name}-{n}")
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        await self._waiting.put((text, future))
        return await future

    async def _run(self) -> None:
        while True:
            batch = [await self._waiting.get()]
            while len(batch) < self._max_batch and not self._waiting.empty():
                batch.append(self._waiting.get_nowait())
            try:
                vectors = await self._embed([text for text, _ in batch])
            except Exception as exc:  # each waiting request gets the failure, the worker lives on
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, future), vector in zip(batch, vectors, strict=True):
                if not future.done():
                    future.set_result(vector)

    async def aclose(self) -> None:
        await stop_tasks(worker for worker in self._workers if worker is not None)
