"""Stopping what runs in the background, for certain (``recall_schemas.tasks``, ``recall_client.connections``): a
cancellation can be lost (on Python 3.11 ``asyncio.wait_for`` returns a result that arrives together with it, and
redis-py and nats-py guard their I/O with it), so a loop polling a store or the bus is cancelled again until it
has ended. A hub's shutdown once hung behind its replica watcher so."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from conftest import until
from recall_client.connections import close_nats
from recall_hub.config import HubSettings
from recall_hub.store.connections import pool
from recall_hub.tooling.stack import EmbeddedStack
from recall_schemas.tasks import stop_tasks
from redis.asyncio import Redis


async def test_a_task_that_loses_cancellations_is_cancelled_until_it_ends() -> None:
    lost = 0

    async def poll() -> None:
        nonlocal lost
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if lost == 3:  # the fourth cancellation arrives
                    raise
                lost += 1  # what a racing wait_for does: the cancellation becomes a result, the loop goes on

    task = asyncio.create_task(poll())
    await asyncio.sleep(0)
    assert await stop_tasks([task], within=5) == set()
    assert task.cancelled() and lost == 3


async def test_a_task_that_will_not_end_is_reported_within_the_bound() -> None:
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    assert await stop_tasks([task], within=0.3) == {task}
    release.set()
    await task


async def test_a_task_that_failed_or_ended_is_taken_as_stopped() -> None:
    async def fails() -> None:
        raise RuntimeError("store away")

    failed, ended = asyncio.create_task(fails()), asyncio.create_task(asyncio.sleep(0))
    await asyncio.wait({failed, ended})
    assert await stop_tasks([failed, ended]) == set()
    assert await stop_tasks(iter([])) == set()


async def test_a_loop_polling_redis_is_stopped_wherever_the_cancellation_lands(settings: HubSettings) -> None:
    """The replica watcher's shape: a store call in a loop that keeps going after a store error; cancelled at
    random points 200 times (a single cancel lost about four times in ten here on Python 3.11)."""
    redis = Redis.from_pool(pool(settings.redis_url, socket_timeout=5))
    rng = random.Random(7)
    try:
        for _ in range(200):

            async def watch() -> None:
                while True:
                    try:
                        await redis.info("replication")
                    except Exception:
                        pass
                    await asyncio.sleep(0)

            task = asyncio.create_task(watch())
            for _ in range(rng.randint(1, 30)):
                await asyncio.sleep(0)
            assert await stop_tasks([task], within=5) == set()
    finally:
        await redis.aclose()


@pytest.fixture
def own_nats(tmp_path: Path) -> Iterator[EmbeddedStack]:
    with EmbeddedStack(tmp_path / "stack") as running:
        yield running


async def test_a_connection_closed_while_its_server_is_gone_stops_retrying(own_nats: EmbeddedStack) -> None:
    async def quietly(exc: Exception) -> None:
        pass

    nc = await nats.connect(own_nats.nats_url, max_reconnect_attempts=-1, reconnect_time_wait=0.05, error_cb=quietly)
    own_nats.kill("nats-server")
    await until("the connection is reconnecting", lambda: nc.is_reconnecting)
    await close_nats(nc)
    assert nc.is_closed
    reconnecting = getattr(nc, "_reconnection_task", None)
    assert reconnecting is not None and reconnecting.done()
