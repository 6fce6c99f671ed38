"""Where Redis runs a search's VSIMs: on its main thread while the sets searched are small (a hand-off to a
thread and back costs more than it overlaps), on its threads once they hold more than ``MAIN_THREAD_UP_TO``
vectors together (the sets then searched side by side). Each set's size is read beside the searches, again once
it is ``SET_SIZES_KEPT_S`` old. The hits are the same either way."""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import pytest
from recall_hub.store import vectors
from recall_hub.store.keys import Keys
from recall_hub.store.vectors import VectorStore
from recall_hub.tooling.stack import EmbeddedStack
from redis.asyncio import Redis

DIM = 8


def _unit(seed: int) -> np.ndarray:
    vector = np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
    return vector / np.linalg.norm(vector)


async def test_small_sets_on_the_main_thread_large_ones_on_redis_threads(
    stack: EmbeddedStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    redis = Redis.from_url(stack.redis_url)
    try:
        store = VectorStore(redis, Keys(f"threads{uuid.uuid4().hex[:8]}"), "model")
        for n in range(12):
            await store.add(f"b_global{n}", "global", _unit(n)[None, :], {})
        for n in range(6):
            await store.add(f"b_group{n}", "group:g_one", _unit(100 + n)[None, :], {})
        sent: list[tuple[Any, ...]] = []
        execute = redis.execute_command

        async def recorded(*args: Any, **options: Any) -> Any:
            sent.append(args)
            return await execute(*args, **options)

        monkeypatch.setattr(redis, "execute_command", recorded)
        scopes, query = ["global", "group:g_one"], _unit(7)

        def searches() -> list[tuple[Any, ...]]:
            return [args for args in sent if args[0] == "VSIM"]

        def sizes_read() -> int:
            return sum(1 for args in sent if args[0] == "VCARD")

        small = await store.search(scopes, query, 5)  # sizes not known yet: as small sets
        assert all("NOTHREAD" in args for args in searches()) and len(searches()) == 2
        assert sizes_read() == 2

        sent.clear()
        monkeypatch.setattr(vectors, "MAIN_THREAD_UP_TO", 17)  # the two sets hold 18 vectors
        large = await store.search(scopes, query, 5)
        assert not any("NOTHREAD" in args for args in searches()) and len(searches()) == 2
        assert sizes_read() == 0  # read a moment ago
        assert large == small and large[0].bead_id == "b_global7"

        sent.clear()
        monkeypatch.setattr(vectors, "MAIN_THREAD_UP_TO", 18)
        await store.search(scopes, query, 5, filter_expr=".importance >= 0")  # a filtered VSIM keeps its thread
        assert not any("NOTHREAD" in args for args in searches())
        monkeypatch.setattr(vectors, "SET_SIZES_KEPT_S", 0.0)
        await store.search(["global"], query, 5)
        assert sizes_read() == 1  # read again once old
        assert "NOTHREAD" in searches()[-1]
    finally:
        await redis.aclose()
