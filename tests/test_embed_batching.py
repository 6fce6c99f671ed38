"""Concurrent single-text embeddings share model calls and get exactly their own vectors."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
import pytest
from recall_hub.embedders import HashEmbedder
from recall_hub.embedders.batching import BatchingEmbedder


class Counting(HashEmbedder):
    def __init__(self) -> None:
        super().__init__(dim=64)
        self.calls: list[int] = []

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(len(texts))
        await asyncio.sleep(0)  # a real model yields while its thread works
        return await super().embed(texts)


async def test_concurrent_requests_are_batched_and_each_gets_its_own_vector() -> None:
    inner = Counting()
    batching = BatchingEmbedder(inner, max_batch=8)
    texts = [f"memory number {i} about topic {i % 3}" for i in range(20)]
    try:
        got = await asyncio.gather(*(batching.embed([t]) for t in texts))
        expected = await HashEmbedder(dim=64).embed(texts)
    finally:
        await batching.aclose()
    assert all(g.shape == (1, 64) for g in got)
    assert np.allclose(np.vstack(got), expected)
    assert sum(inner.calls) == 20 and len(inner.calls) < 20 and max(inner.calls) <= 8


async def test_a_failing_batch_fails_its_requests_and_the_next_ones_still_work() -> None:
    class Flaky(Counting):
        async def embed(self, texts: Sequence[str]) -> np.ndarray:
            if any("boom" in t for t in texts):
                raise RuntimeError("model failed")
            return await super().embed(texts)

    batching = BatchingEmbedder(Flaky())
    try:
        with pytest.raises(RuntimeError, match="model failed"):
            await batching.embed(["boom"])
        assert (await batching.embed(["fine"])).shape == (1, 64)
    finally:
        await batching.aclose()


async def test_queries_do_not_wait_behind_documents() -> None:
    """Queries and documents queue apart: a query sent while documents are being embedded goes to the
    model at once, as a call of its own kind."""
    started, release = asyncio.Event(), asyncio.Event()

    kinds: list[str] = []

    class Slow(Counting):
        async def embed(self, texts: Sequence[str]) -> np.ndarray:
            kinds.append("documents")
            started.set()
            await release.wait()
            return await super().embed(texts)

        async def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
            kinds.append("queries")
            return await HashEmbedder.embed(self, texts)

    inner = Slow()
    batching = BatchingEmbedder(inner, max_batch=8)
    try:
        documents = [asyncio.ensure_future(batching.embed([f"note {i}"])) for i in range(3)]
        await started.wait()
        query = await batching.embed_queries(["what changed?"])
        assert query.shape == (1, 64) and not any(d.done() for d in documents)
        release.set()
        await asyncio.gather(*documents)
    finally:
        await batching.aclose()
    assert kinds[:2] == ["documents", "queries"]


async def test_an_embedder_that_reads_documents_in_parallel_gets_that_many_calls_in_flight() -> None:
    """With two document runs (the local model's two lanes), a second single text does not wait for the
    first one's call: both are with the model at once, and a third queues until one of them returns."""
    in_flight: list[int] = []
    both_started, release = asyncio.Event(), asyncio.Event()

    class TwoRuns(Counting):
        document_runs = 2
        running = 0

        async def embed(self, texts: Sequence[str]) -> np.ndarray:
            self.running += 1
            in_flight.append(self.running)
            if self.running == 2:
                both_started.set()
            await release.wait()
            self.running -= 1
            return await super().embed(texts)

    batching = BatchingEmbedder(TwoRuns(), max_batch=8)
    try:
        first = asyncio.ensure_future(batching.embed(["first note"]))
        await asyncio.sleep(0)
        second = asyncio.ensure_future(batching.embed(["second note"]))
        await asyncio.wait_for(both_started.wait(), 5)
        third = asyncio.ensure_future(batching.embed(["third note"]))
        await asyncio.sleep(0)
        assert max(in_flight) == 2 and not third.done()
        release.set()
        got = await asyncio.gather(first, second, third)
    finally:
        await batching.aclose()
    assert np.allclose(np.vstack(got), await HashEmbedder(dim=64).embed(["first note", "second note", "third note"]))
    assert max(in_flight) == 2


class ReadingTokens(HashEmbedder):
    """Reads each text's "tokens" (here: a row per word) beside its vector, counting its calls."""

    def __init__(self) -> None:
        super().__init__(dim=64)
        self.calls: list[int] = []

    @property
    def reads_tokens(self) -> bool:
        return True

    async def embed_spans_and_tokens(self, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]],
                                     skip: frozenset[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        self.calls.append(len(texts))
        await asyncio.sleep(0)
        words = [[w for w in t.split() if w not in skip] for t in texts]
        return [(await self.embed([t]), await self.embed(w)) for t, w in zip(texts, words, strict=True)]

    async def embed_queries_and_tokens(self, texts: Sequence[str], skip: frozenset[str]
                                       ) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(rows[0], tokens) for rows, tokens in await self.embed_spans_and_tokens(texts, [[]] * len(texts), skip)]


@pytest.mark.parametrize("kind", ["documents", "queries"])
async def test_texts_read_with_their_tokens_are_batched_too(kind: str) -> None:
    inner = ReadingTokens()
    batching = BatchingEmbedder(inner, max_batch=8)
    texts = [f"memory number {i} about the topic {i % 3}" for i in range(20)]
    skip = frozenset({"the", "about"})
    try:
        reads = (batching.embed_spans_and_tokens([t], [[]], skip) if kind == "documents"
                 else batching.embed_queries_and_tokens([t], skip) for t in texts)
        got = [r for (r,) in await asyncio.gather(*reads)]
    finally:
        await batching.aclose()
    assert sum(inner.calls) == 20 and len(inner.calls) < 20 and max(inner.calls) <= 8
    for text, (_, tokens) in zip(texts, got, strict=True):  # each its own
        assert np.allclose(tokens, await HashEmbedder(dim=64).embed([w for w in text.split() if w not in skip]))
