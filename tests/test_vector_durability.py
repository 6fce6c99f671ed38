"""A bead's vectors as replaced are the vectors the store keeps: after a restart of redis-server (its AOF
replayed) the replaced vector and attributes are there, not the first ones.

Redis 8.2's VADD of an element a vector set already holds changes it in memory but writes nothing to the AOF
(nor to a replica); the store replaces an element by removing and adding it in one transaction.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from recall_hub.store.keys import Keys
from recall_hub.store.vectors import VectorStore, element
from recall_hub.tooling.stack import EmbeddedStack
from redis.asyncio import Redis

DIM = 8


def _unit(seed: int) -> np.ndarray:
    vector = np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
    return vector / np.linalg.norm(vector)


async def _stored(redis_url: str, bead_id: str, chunks: int) -> tuple[list[np.ndarray | None], object]:
    redis = Redis.from_url(redis_url)
    try:
        store = VectorStore(redis, Keys("durable"), "model")
        vectors = [await store.vector(element(bead_id, chunk), "global") for chunk in range(chunks)]
        return vectors, await redis.vset().vgetattr(store.key("global"), bead_id)
    finally:
        await redis.aclose()


async def test_replaced_vectors_and_attributes_survive_a_restart(tmp_path: Path) -> None:
    first, second = np.stack([_unit(1), _unit(2)]), np.stack([_unit(3)])
    with EmbeddedStack(tmp_path) as stack:
        redis = Redis.from_url(stack.redis_url)
        store = VectorStore(redis, Keys("durable"), "model")
        await store.add("b_one", "global", first, {"importance": 3})  # two chunks
        await store.add("b_one", "global", second, {"importance": 9})  # replaced by one
        await redis.aclose()
        before_restart = await _stored(stack.redis_url, "b_one", 2)
    with EmbeddedStack(tmp_path) as stack:
        after_restart = await _stored(stack.redis_url, "b_one", 2)
    for vectors, attributes in (before_restart, after_restart):
        assert vectors[0] is not None and float(vectors[0] @ second[0]) > 0.99
        assert vectors[1] is None  # the second chunk went with the replacement
        assert isinstance(attributes, dict) and attributes["importance"] == 9
