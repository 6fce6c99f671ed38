"""A Redis outage reaches callers as ``unavailable`` (retry later), never ``internal``, whichever store
meets it — key-value memory, the change feed, the audit — and names that store. The hub here keeps its
graph (FalkorDB) and its Redis on the servers of two stacks of its own, so Redis can stop while the graph
answers, as with external servers; the session's stack is left alone."""

from __future__ import annotations

import asyncio
import logging
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis.exceptions
from recall_client import RecallClient, Unavailable
from recall_hub.config import HubSettings
from recall_hub.context import HubContext
from recall_hub.embedders import EmbedderConfig, HashEmbedder
from recall_hub.ops.beads import create_bead
from recall_hub.outages import as_unavailable
from recall_hub.retrieval.freshness import handed_off_work_done
from recall_hub.retrieval.search import search_beads
from recall_hub.service.server import running_hub
from recall_hub.store.keys import Keys
from recall_hub.store.locks import Locks
from recall_hub.store.presence import client_name, new_hub_id, running_hubs
from recall_hub.tooling.stack import EmbeddedStack
from recall_schemas import CreateBead, ErrorCode, SearchBeads, SearchMode, Visibility
from redis.asyncio import Redis

from tests.conftest import new_ai, until

pytestmark = pytest.mark.timeout(180)


@dataclass
class Hub:
    ops: RecallClient
    group_id: str
    redis: EmbeddedStack
    """The stack whose redis-server holds the hub's vectors, key-value memory, change logs and audit."""


@pytest.fixture(scope="module")
def two_stacks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmbeddedStack, EmbeddedStack]]:
    """One stack for NATS and the graph, one for Redis."""
    with (
        EmbeddedStack(tmp_path_factory.mktemp("graph-stack")) as graph,
        EmbeddedStack(tmp_path_factory.mktemp("redis-stack")) as redis_stack,
    ):
        yield graph, redis_stack


@pytest.fixture
async def hub(two_stacks: tuple[EmbeddedStack, EmbeddedStack]) -> AsyncIterator[Hub]:
    graph, redis_stack = two_stacks
    settings = HubSettings(
        nats_url=graph.nats_url, falkordb_url=graph.redis_url, redis_url=redis_stack.redis_url,
        graph_name=f"outage_{secrets.token_hex(4)}", embedder=EmbedderConfig(kind="hash"),
    )
    async with running_hub(settings), RecallClient(new_ai("o"), graph.nats_url) as ops:
        group_id = (await ops.create_group("outage")).group_id
        try:
            yield Hub(ops, group_id, redis_stack)
        finally:
            proc = redis_stack.child("redis-server").proc
            if proc is not None and proc.poll() is not None:
                redis_stack.respawn("redis-server")


async def _unavailable(call: Awaitable[Any], store: str) -> None:
    with pytest.raises(Unavailable) as failed:
        await call
    assert failed.value.code is ErrorCode.UNAVAILABLE
    assert failed.value.message.startswith(f"{store} store unreachable: ")
    assert failed.value.details == {"store": store}


async def test_a_redis_outage_is_unavailable_naming_the_store(hub: Hub, caplog: pytest.LogCaptureFixture) -> None:
    ops = hub.ops
    await ops.learn("before", "learnt while Redis ran")
    hub.redis.kill("redis-server", hard=False)
    caplog.set_level(logging.WARNING, logger="recall_hub")

    await _unavailable(ops.learn("during", "learnt while Redis is down"), "kv")
    await _unavailable(ops.recall("before"), "kv")
    await _unavailable(ops.changes_since(hub.group_id), "feed")  # the membership check reads the graph: fine
    await _unavailable(ops.changes_since("global"), "feed")
    await _unavailable(ops.audit_log(hub.group_id), "audit")
    # An operation of the graph alone is answered: its audit entry cannot be written, which the hub logs as
    # an outage (one line), not as a fault.
    assert [g.group_id for g in await ops.list_groups()] == [hub.group_id]
    lost = [r for r in caplog.records if "audit record lost" in r.getMessage() and "list_groups" in r.getMessage()]
    assert lost and all(r.levelno == logging.WARNING and r.exc_info is None for r in lost)
    assert not [r for r in caplog.records if "internal error" in r.getMessage()]

    hub.redis.respawn("redis-server")  # (a pooled connection the restart closed may fail once more: unavailable)

    async def recalled(key: str) -> str:
        return (await ops.recall(key)).value

    await until("learning works again", lambda: ops.learn("after", "learnt once Redis was back"))
    await until("what was learnt before is there", lambda: _equal(recalled("before"), "learnt while Redis ran"))
    await until("what was learnt after is there", lambda: _equal(recalled("after"), "learnt once Redis was back"))


async def _equal(value: Awaitable[str], expected: str) -> bool:
    return await value == expected


def test_a_redis_timeout_in_a_store_is_unavailable_too() -> None:
    """Timeouts count as much as refused connections; the store named is the one called, not a helper of it."""
    helper: dict[str, Any] = {"__name__": "recall_hub.store.connections", "redis": redis}
    exec("def send():\n    raise redis.exceptions.TimeoutError('Timeout reading from socket')", helper)
    store: dict[str, Any] = {"__name__": "recall_hub.store.feed", "send": helper["send"]}
    exec("def read():\n    send()", store)
    with pytest.raises(Unavailable) as failed, as_unavailable():
        store["read"]()
    assert failed.value.message == "feed store unreachable: Timeout reading from socket"
    assert isinstance(failed.value.__cause__, redis.exceptions.TimeoutError)
    with pytest.raises(Unavailable, match=r"^a store unreachable: Connection refused$"), as_unavailable():
        raise redis.exceptions.ConnectionError("Connection refused")
    with pytest.raises(KeyError), as_unavailable():  # anything else stays what it is: a fault
        raise KeyError("bead_id")


async def test_a_lock_whose_release_redis_missed_is_taken_over_by_its_process_only(
    two_stacks: tuple[EmbeddedStack, EmbeddedStack],
) -> None:
    """Redis stops while a hub holds a lock and starts again from its files, the lock in them: the hub's
    release failed, so the lock would stay held by nobody until it expires. The hub that held it takes it back
    at once; any other hub still finds it held."""
    _, redis_stack = two_stacks
    keys = Keys(f"locks_{secrets.token_hex(4)}")
    mine, theirs = Redis.from_url(redis_stack.redis_url), Redis.from_url(redis_stack.redis_url)
    here, there = Locks(mine, keys, ttl_s=60.0), Locks(theirs, keys, ttl_s=60.0)
    try:
        async with here.hold("bead:b_1", wait_s=0) as held:
            assert held
            redis_stack.kill("redis-server", hard=False)  # SIGTERM: the append-only file keeps the lock
        redis_stack.respawn("redis-server")
        assert await until_answering(mine) and await until_answering(theirs)
        assert await mine.exists(keys.lock("bead:b_1"))
        async with there.hold("bead:b_1", wait_s=0) as held:
            assert not held  # another hub: the lock is still its holder's
        async with here.hold("bead:b_1", wait_s=0) as held:
            assert held  # the holder's own process takes it over
        assert not await mine.exists(keys.lock("bead:b_1"))  # and releases it
        async with there.hold("bead:b_1", wait_s=0) as held:
            assert held
    finally:
        proc = redis_stack.child("redis-server").proc
        if proc is not None and proc.poll() is not None:
            redis_stack.respawn("redis-server")
        await mine.aclose()
        await theirs.aclose()


async def until_answering(client: Redis) -> bool:
    """A pooled connection that the restart closed fails once: ask until Redis answers."""
    async def answers() -> bool:
        try:
            return bool(await client.ping())
        except redis.exceptions.ConnectionError:
            return False

    await until("Redis answering again", answers)
    return True


_HOLD_A_LOCK = """
import asyncio, sys
from redis.asyncio import Redis
from recall_hub.store.keys import Keys
from recall_hub.store.locks import Locks
from recall_hub.store.presence import client_name

async def main(url, root, hub, name):
    async with Locks(Redis.from_url(url, client_name=client_name(hub)), Keys(root), ttl_s=60.0, owner=hub).hold(name):
        print("held", flush=True)
        await asyncio.Event().wait()

asyncio.run(main(*sys.argv[1:]))
"""


async def test_a_lock_held_by_a_hub_that_is_gone_is_taken_over_at_once(stack: EmbeddedStack) -> None:
    """A hub process killed while it holds a lock loses its connections to Redis with it: the next hub that asks
    for the lock takes it at once instead of waiting out its time to live (60 s here). A lock whose hub is still
    connected stays its holder's."""
    graph = f"locks_{secrets.token_hex(4)}"
    keys = Keys(graph)
    holders = {name: new_hub_id() for name in ("killed", "running")}
    procs = {
        name: await asyncio.create_subprocess_exec(
            sys.executable, "-c", _HOLD_A_LOCK, stack.redis_url, graph, hub, f"bead:{name}", stdout=subprocess.PIPE
        )
        for name, hub in holders.items()
    }
    asker = new_hub_id()
    mine = Redis.from_url(stack.redis_url, client_name=client_name(asker))
    try:
        for proc in procs.values():
            assert proc.stdout is not None and await proc.stdout.readline() == b"held\n"
        assert await running_hubs(mine) >= {*holders.values(), asker}
        procs["killed"].kill()
        await procs["killed"].wait()
        assert holders["killed"] not in (await running_hubs(mine) or ())
        here = Locks(mine, keys, ttl_s=60.0, owner=asker)
        async with here.hold("bead:running", wait_s=0) as held:
            assert not held
        async with asyncio.timeout(2), here.hold("bead:killed", wait_s=0) as held:
            assert held
            assert (await mine.get(keys.lock("bead:killed"))).startswith(f"{asker}/".encode())
    finally:
        for proc in procs.values():
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        await mine.aclose()


async def test_a_hub_whose_redis_user_may_not_name_connections_serves_and_is_never_taken_for_gone(
    stack: EmbeddedStack, settings: HubSettings, caplog: pytest.LogCaptureFixture
) -> None:
    """An ACL that refuses the CLIENT commands: the hub's connections go unnamed (a named one would not open), it
    says so once, works as before, and no hub can tell it gone, so nothing of its is taken over."""
    user = f"noclient_{secrets.token_hex(4)}"
    admin = Redis.from_url(stack.redis_url)
    await admin.acl_setuser(user, enabled=True, passwords=["+pw"], keys=["~*"], channels=["*"],
                            commands=["+@all", "-client"])
    limited = settings.model_copy(update={
        "redis_url": stack.redis_url.replace("redis://", f"redis://{user}:pw@"),
        "graph_name": f"noclient_{secrets.token_hex(4)}", "create_settle": "background",
    })
    ctx = await HubContext.connect(limited, embedder=HashEmbedder())
    try:
        assert ctx.hub_id == ""
        assert "refuses to name this hub's connections" in caplog.text
        assert await running_hubs(ctx.redis) is None
        bead = await create_bead(ctx, new_ai(), CreateBead(title="kept under a strict ACL", content="by meaning",
                                                           visibility=Visibility.GLOBAL))
        await handed_off_work_done(ctx)
        found = await search_beads(ctx, new_ai(), SearchBeads(query=bead.title, mode=SearchMode.VECTOR))
        assert bead.bead_id in [hit.bead.bead_id for hit in found.hits]
        assert await ctx.outbox.handed_off_by_gone_hubs() == []
    finally:
        await ctx.aclose()
        await admin.acl_deluser(user)
        await admin.aclose()
