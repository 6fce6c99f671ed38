"""The hub's connections to Redis and FalkorDB (store/connections.py), against real servers: a pooled
connection a restarted server closed is replaced before anything is sent on it, writes included; a read
whose connection breaks under it is sent once more on a fresh one, a write is not."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio
import redis.exceptions
from conftest import until
from recall_hub.store import connections
from recall_hub.store.graph import GraphStore
from recall_hub.tooling.stack import EmbeddedStack
from recall_schemas import Unavailable

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def admin(stack: EmbeddedStack) -> AsyncIterator[redis.asyncio.Redis]:
    """A plain client of the session's Redis, to watch and kill the connections of the clients under test."""
    client = redis.asyncio.Redis.from_url(stack.redis_url)
    yield client
    await client.aclose()


async def _blocked_in(admin: redis.asyncio.Redis, name: str, command: str, other_than: str = "") -> str:
    """The id of the connection named ``name`` once it is blocked in ``command`` (not ``other_than``)."""
    found: list[str] = []

    async def blocked() -> bool:
        found[:] = [c["id"] for c in await admin.client_list()
                    if c["name"] == name and c["cmd"] == command and "b" in c["flags"] and c["id"] != other_than]
        return bool(found)

    await until(f"{name} blocked in {command}", blocked, within=15)
    return found[0]


async def test_a_read_whose_connection_breaks_is_sent_once_more_on_a_fresh_one(
    stack: EmbeddedStack, admin: redis.asyncio.Redis
) -> None:
    name, key = f"reader-{secrets.token_hex(3)}", f"test:connections:{secrets.token_hex(4)}"
    reader = connections.client(stack.redis_url, max_connections=2, client_name=name, socket_timeout=None)
    try:
        read = asyncio.create_task(reader.xread({key: "$"}, block=60_000))
        first = await _blocked_in(admin, name, "xread")
        await admin.client_kill_filter(_id=first)  # the server closes the connection under the waiting read
        await _blocked_in(admin, name, "xread", other_than=first)  # sent again, on another connection
        entry = await admin.xadd(key, {"n": "1"})
        assert await asyncio.wait_for(read, 30) == [[key.encode(), [(entry, {b"n": b"1"})]]]
    finally:
        await reader.aclose()
        await admin.delete(key)


async def test_a_write_whose_connection_breaks_is_not_sent_again(
    stack: EmbeddedStack, admin: redis.asyncio.Redis
) -> None:
    name, key = f"writer-{secrets.token_hex(3)}", f"test:connections:{secrets.token_hex(4)}"
    writer = connections.client(stack.redis_url, max_connections=2, client_name=name, socket_timeout=None)
    try:
        move = asyncio.create_task(writer.blmove(f"{key}:from", f"{key}:to", 60, "LEFT", "RIGHT"))
        first = await _blocked_in(admin, name, "blmove")
        await admin.client_kill_filter(_id=first)
        with pytest.raises(redis.exceptions.ConnectionError, match="Connection closed by server"):
            await asyncio.wait_for(move, 30)  # sent again, it would still be waiting
        await admin.rpush(f"{key}:from", "item")
        assert await admin.lrange(f"{key}:from", 0, -1) == [b"item"]  # no second BLMOVE took it
    finally:
        await writer.aclose()
        await admin.delete(f"{key}:from", f"{key}:to")


def test_broke_means_the_connection_broke_not_that_the_server_answered_or_the_pool_was_full() -> None:
    closed = redis.exceptions.ConnectionError("Connection closed by server.")
    assert connections.broke(closed)
    try:
        raise Unavailable("graph store unreachable: Connection closed by server.") from closed
    except Unavailable as exc:
        assert connections.broke(exc)  # a store's error raised from it
    assert not connections.broke(redis.exceptions.BusyLoadingError("Redis is loading the dataset in memory"))
    assert not connections.broke(redis.exceptions.AuthenticationError("invalid password"))
    assert not connections.broke(redis.exceptions.TimeoutError("Timeout reading from socket"))
    try:
        raise redis.exceptions.ConnectionError("No connection available.") from TimeoutError()
    except redis.exceptions.ConnectionError as exc:
        assert not connections.broke(exc)  # BlockingConnectionPool: no free connection in time


async def test_connections_a_restarted_server_closed_are_replaced_before_a_write_is_sent(tmp_path: Path) -> None:
    """INCR and a graph write are never sent twice: they succeed after the restart only because no pooled
    connection to the old server is used."""
    with EmbeddedStack(tmp_path) as stack:
        name = "restarted"
        client = connections.client(stack.redis_url, max_connections=8, client_name=name)
        graph = GraphStore(stack.redis_url, "connections_test", max_connections=8)
        try:
            await graph.query("CREATE (:Start)")
            # At once, so each pool opens several connections; idle when the server dies.
            await asyncio.gather(*(client.incr("before") for _ in range(8)),
                                 *(graph.ro_query("RETURN $n", {"n": n}) for n in range(8)))
            async with redis.asyncio.Redis.from_url(stack.redis_url) as admin:
                assert len([c for c in await admin.client_list() if c["name"] == name]) > 1
            await asyncio.to_thread(stack.restart, "redis-server", kill=True)

            done = await asyncio.gather(*(client.incr("after") for _ in range(8)),
                                        *(graph.query("MERGE (:Note {n: $n})", {"n": n}) for n in range(8)),
                                        return_exceptions=True)
            assert [d for d in done if isinstance(d, BaseException)] == []
            assert int(await client.get("after") or 0) == 8
            assert (await graph.ro_query("MATCH (n:Note) RETURN count(n)"))[0][0] == 8
        finally:
            await client.aclose()
            await graph.aclose()
