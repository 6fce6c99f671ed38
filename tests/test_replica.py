"""A read replica and failover, on real servers: a primary redis-server with FalkorDB, a ``--replicaof``
replica of it (FalkorDB loaded too), a NATS server of this module's own (so no other hub shares the queue
group), and a hub configured with both (docs/operations.md, "Replicas and failover").

Which server answered is read from the servers themselves (``INFO commandstats``), never from the hub."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from conftest import until
from recall_client import RecallClient
from recall_hub.config import HubSettings
from recall_hub.context import HubContext
from recall_hub.embedders import EmbedderConfig
from recall_hub.service.server import running_hub
from recall_hub.store.replica import Role
from recall_hub.tooling.replica import RedisNode, wait_in_sync
from recall_hub.tooling.stack import EmbeddedStack
from recall_schemas import Unavailable
from recall_schemas.requests import index_seq_key

GRAPH = "recall_replica"


@pytest.fixture(scope="module")
def bus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStack]:
    """NATS for the module's healthy hub only (the stack's own Redis is not used): hubs on one bus share
    the queue group, so a hub on other servers would answer some requests."""
    with EmbeddedStack(tmp_path_factory.mktemp("replica-bus")) as running:
        yield running


@pytest.fixture
def own_bus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStack]:
    """NATS for one test's hubs (a test that kills servers)."""
    with EmbeddedStack(tmp_path_factory.mktemp("replica-own-bus")) as running:
        yield running


@dataclass
class Pair:
    primary: RedisNode
    replica: RedisNode
    nats_url: str

    def settings(self, **overrides: object) -> HubSettings:
        values: dict[str, object] = dict(
            nats_url=self.nats_url,
            falkordb_url=self.primary.url,
            redis_url=self.primary.url,
            falkordb_replica_url=self.replica.url,
            redis_replica_url=self.replica.url,
            graph_name=GRAPH,
            embedder=EmbedderConfig(kind="hash"),
            replica_check_s=0.05,
            outbox_interval_s=3600,  # no sweep reading the primary in the middle of a measurement
            access_flush_s=60,
        )
        values.update(overrides)
        return HubSettings(**values)  # type: ignore[arg-type]


@asynccontextmanager
async def servers(tmp: Path, nats_url: str) -> AsyncIterator[Pair]:
    primary = RedisNode(tmp / "primary").start()
    replica = RedisNode(tmp / "replica", replica_of=primary).start()
    try:
        wait_in_sync(primary, replica)
        yield Pair(primary, replica, nats_url)
    finally:
        replica.stop()
        primary.stop()


@asynccontextmanager
async def hub_on(settings: HubSettings, *, serving: bool = True) -> AsyncIterator[HubContext]:
    async with running_hub(settings) as service:
        ctx = service.ctx
        if serving:
            await until("the replica serves reads", lambda: all(r.role is Role.SERVING for r in ctx.replicas))
        yield ctx


@asynccontextmanager
async def clients(nats_url: str, count: int) -> AsyncIterator[list[RecallClient]]:
    made = [RecallClient(f"a_{secrets.token_hex(5)}", nats_url) for _ in range(count)]
    for client in made:
        await client.connect()
    try:
        yield made
    finally:
        for client in made:
            await client.close()


async def keyword_index_current(ctx: HubContext) -> None:
    """Wait until this hub's keyword index has applied every write logged so far (so a search's catch-up
    reads nothing from the primary)."""
    last = ctx.index_log.last_appended
    await until("keyword index current", lambda: index_seq_key(ctx.keywords.applied) >= index_seq_key(last))


def ro_queries(node: RedisNode) -> int:
    return node.commands().get("graph.RO_QUERY", 0)


def vsims(node: RedisNode) -> int:
    return node.commands().get("VSIM", 0)


# --- a healthy primary and replica --------------------------------------------------------------------


@dataclass
class Healthy:
    pair: Pair
    ctx: HubContext


@pytest.fixture(scope="module")
async def healthy(tmp_path_factory: pytest.TempPathFactory, bus: EmbeddedStack) -> AsyncIterator[Healthy]:
    async with servers(tmp_path_factory.mktemp("healthy"), bus.nats_url) as pair, hub_on(pair.settings()) as ctx:
        yield Healthy(pair, ctx)


async def test_falkordb_answers_read_only_queries_on_a_replica_and_refuses_writes(healthy: Healthy) -> None:
    primary, replica = healthy.pair.primary.client(), healthy.pair.replica.client()
    primary.execute_command("GRAPH.QUERY", "replica_probe", "CREATE (:Probe {n: 7})")  # type: ignore[no-untyped-call]
    wait_in_sync(healthy.pair.primary, healthy.pair.replica)
    reply = replica.execute_command(  # type: ignore[no-untyped-call]
        "GRAPH.RO_QUERY", "replica_probe", "MATCH (p:Probe) RETURN p.n"
    )
    assert reply[1] == [[7]]
    with pytest.raises(redis.exceptions.ReadOnlyError):
        replica.execute_command("GRAPH.QUERY", "replica_probe", "CREATE (:Probe)")  # type: ignore[no-untyped-call]


async def test_a_search_is_served_by_the_replica_and_not_the_primary(healthy: Healthy) -> None:
    primary, replica = healthy.pair.primary, healthy.pair.replica
    word = f"heron{secrets.token_hex(3)}"
    async with clients(healthy.pair.nats_url, 1) as (writer,):
        made = [await writer.create_bead(f"{word} note {i}", f"the {word} waits", tags=[word]) for i in range(5)]
        await writer.search_beads(word)  # first search: this caller's groups are read (on the primary) and kept
        await keyword_index_current(healthy.ctx)
        before = (ro_queries(primary), vsims(primary), ro_queries(replica), vsims(replica))
        found = await writer.search_beads(word)
        listed = await writer.get_by_tag(word)
        after = (ro_queries(primary), vsims(primary), ro_queries(replica), vsims(replica))
    assert {h.bead.bead_id for h in found.hits} == {b.bead_id for b in made}
    assert {b.bead_id for b in listed} == {b.bead_id for b in made}
    assert after[0] == before[0], "the primary answered a graph read of a search"
    assert after[1] == before[1], "the primary answered a vector search"
    assert after[2] >= before[2] + 2, "the replica did not answer the search's and the listing's graph reads"
    assert after[3] > before[3], "the replica did not answer the vector search"


async def test_writes_go_to_the_primary_and_a_writer_reads_them_at_once(healthy: Healthy) -> None:
    primary, replica = healthy.pair.primary, healthy.pair.replica
    async with clients(healthy.pair.nats_url, 1) as (writer,):
        writes_before, replica_reads_before = primary.commands().get("graph.QUERY", 0), ro_queries(replica)
        for i in range(15):
            tag = f"ryw{secrets.token_hex(4)}"
            bead = await writer.create_bead(f"fresh {tag} {i}", tags=[tag])
            assert (await writer.get_bead(bead.bead_id)).bead_id == bead.bead_id  # the primary
            assert [b.bead_id for b in await writer.get_by_tag(tag)] == [bead.bead_id]  # the replica, at once
            assert bead.bead_id in {h.bead.bead_id for h in (await writer.search_beads(tag)).hits}
    assert primary.commands().get("graph.QUERY", 0) >= writes_before + 15
    assert ro_queries(replica) >= replica_reads_before + 30, "the reads right after each write were not the replica's"


async def test_visibility_holds_on_replica_reads(healthy: Healthy) -> None:
    replica = healthy.pair.replica
    word = f"ibis{secrets.token_hex(3)}"
    async with clients(healthy.pair.nats_url, 3) as (owner, member, outsider):
        group = await owner.create_group(f"g_{secrets.token_hex(4)}")
        await owner.add_member(group.group_id, member.ai_id)
        private = await owner.create_bead(f"{word} private", tags=[word])
        shared = await owner.create_bead(f"{word} shared", tags=[word], visibility="group", group_id=group.group_id)
        reads_before = ro_queries(replica)

        async def seen_by(client: RecallClient) -> tuple[set[str], set[str]]:
            hits = {h.bead.bead_id for h in (await client.search_beads(word)).hits}
            listed = {b.bead_id for b in await client.get_by_tag(word)}
            return hits, listed

        assert await seen_by(owner) == ({private.bead_id, shared.bead_id},) * 2
        assert await seen_by(member) == ({shared.bead_id},) * 2
        assert await seen_by(outsider) == (set(), set())
        await owner.remove_member(group.group_id, member.ai_id)
        assert await seen_by(member) == (set(), set()), "a removed member still reads the group from the replica"
    # Read on the replica: each get_by_tag, and each search with hits (one graph read: its hits).
    assert ro_queries(replica) >= reads_before + 6


# --- the replica dies ------------------------------------------------------------------------------------


async def test_a_dead_replica_sends_reads_to_the_primary_without_an_error(
    tmp_path: Path, own_bus: EmbeddedStack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="recall_hub.store.replica")
    async with servers(tmp_path, own_bus.nats_url) as pair, hub_on(pair.settings()) as ctx, clients(
        pair.nats_url, 1
    ) as (writer,):
        word = f"wren{secrets.token_hex(3)}"
        made = [(await writer.create_bead(f"{word} {i}", tags=[word])).bead_id for i in range(4)]
        assert {b.bead_id for b in await writer.get_by_tag(word)} == set(made)
        caplog.clear()
        pair.replica.kill()
        for i in range(3):  # reads and writes go on, answered by the primary
            made.append((await writer.create_bead(f"{word} after {i}", tags=[word])).bead_id)
            assert {b.bead_id for b in await writer.get_by_tag(word)} == set(made)
            assert {h.bead.bead_id for h in (await writer.search_beads(word, limit=50)).hits} == set(made)
        assert ctx.replicas[0].role is Role.PRIMARY
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name == "recall_hub.store.replica"]
        assert len(warnings) == 1, [r.getMessage() for r in warnings]

        # The replica comes back (same data directory and port): it catches up and serves again.
        revived = RedisNode(pair.replica.data_dir, replica_of=pair.primary, port=pair.replica.port).start()
        pair.replica = revived
        await until("the revived replica serves reads", lambda: ctx.replicas[0].role is Role.SERVING)
        reads_before = ro_queries(revived)
        assert {b.bead_id for b in await writer.get_by_tag(word)} == set(made)
        assert ro_queries(revived) > reads_before


# --- the primary dies --------------------------------------------------------------------------------------


async def test_a_dead_primary_fails_writes_as_unavailable_and_promotion_keeps_every_acknowledged_write(
    tmp_path: Path, own_bus: EmbeddedStack
) -> None:
    async with servers(tmp_path, own_bus.nats_url) as pair:
        word = f"kite{secrets.token_hex(3)}"
        acknowledged: list[str] = []
        async with hub_on(pair.settings()) as ctx, clients(pair.nats_url, 1) as (writer,):
            stop_writing = asyncio.Event()

            async def keep_writing() -> BaseException:
                i = 0
                while True:
                    if len(acknowledged) >= 100:  # every acknowledged bead within one search's page
                        await stop_writing.wait()
                    try:
                        acknowledged.append((await writer.create_bead(f"{word} {i}", tags=[word])).bead_id)
                    except Exception as exc:
                        if stop_writing.is_set():
                            return exc
                    i += 1

            writing = asyncio.create_task(keep_writing())
            await until("20 acknowledged writes", lambda: len(acknowledged) >= 20)
            await keyword_index_current(ctx)
            pair.primary.kill()  # under load: writes in flight
            stop_writing.set()
            failure = await asyncio.wait_for(writing, 30)
            assert isinstance(failure, Unavailable), repr(failure)
            with pytest.raises(Unavailable):
                await writer.create_bead(f"{word} refused", tags=[word])
            await until("the replica serves while the primary is down", lambda: ctx.replicas[0].role is Role.SERVING)
            # Stale-tolerant reads go on from the replica, with everything acknowledged before the kill.
            listed = {b.bead_id for b in await writer.get_by_tag(word, limit=500)}
            assert set(acknowledged) <= listed
            found = {h.bead.bead_id for h in (await writer.search_beads(word, limit=100)).hits}
            assert found and found <= listed
            with pytest.raises(Unavailable):  # a read that must see the primary does not pretend
                await writer.get_bead(acknowledged[0])

        # Promotion: the replica becomes the primary, and the hub is pointed at it.
        pair.replica.promote()
        await until("the replica is promoted", lambda: pair.replica.info().get("role") == "master")
        promoted = pair.settings(
            falkordb_url=pair.replica.url, redis_url=pair.replica.url, falkordb_replica_url=None, redis_replica_url=None
        )
        async with hub_on(promoted, serving=False):
            again = RecallClient(writer.ai_id, pair.nats_url)  # the same identity, a new connection
            await again.connect()
            try:
                for bead_id in acknowledged:
                    assert (await again.get_bead(bead_id)).bead_id == bead_id
                found = {h.bead.bead_id for h in (await again.search_beads(word, limit=100)).hits}
                assert found >= set(acknowledged)
                assert (await again.create_bead(f"{word} on the new primary", tags=[word])).bead_id
            finally:
                await again.close()


async def test_a_forgotten_beads_text_leaves_the_replicas_files_too(healthy: Healthy) -> None:
    """A replica keeps files of its own: the erasure after a forget rewrites them as well as the primary's."""
    pair = healthy.pair
    for node in (pair.primary, pair.replica):  # so that a search of the files' bytes is a real search
        node.client().config_set("rdbcompression", "no")
    secret = f"replica-secret-{secrets.token_hex(12)}"

    def on_disk(node: RedisNode) -> bool:
        return any(secret.encode() in path.read_bytes() for path in node.data_dir.rglob("*") if path.is_file())

    async with clients(pair.nats_url, 1) as (me,):
        bead = await me.create_bead(f"deploy token {secret}", f"the token is {secret}")
        await until("the text on both servers' disks", lambda: on_disk(pair.primary) and on_disk(pair.replica))
        await me.forget_bead(bead.bead_id, "leaked")
        await until(
            "the text gone from both servers' files",
            lambda: not on_disk(pair.primary) and not on_disk(pair.replica), within=60,
        )


def test_every_stale_read_is_an_operation_that_only_reads() -> None:
    from recall_hub.ops.dispatch import STALE_READS
    from recall_schemas import OPERATIONS

    assert set(STALE_READS) <= set(OPERATIONS)
    writes = {"create_bead", "create_beads", "update_bead", "delete_bead", "add_relationship", "deduplicate_beads",
              "decay_old_memories", "create_group", "add_member", "remove_member", "get_bead", "list_members"}
    assert not STALE_READS & writes
