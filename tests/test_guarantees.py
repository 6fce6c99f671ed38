"""Guarantees by construction: the outbox finishes every acknowledged write's follow-up work, beads
carry versions for safe concurrent changes, vectors sit in exactly one scope, and no secondary path
(explanations, dedupe merges, the change feed) tells a caller about a bead it may not see."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import numpy as np
import pytest
from conftest import ClientFactory, Interleaved, new_ai, team
from recall_client import RecallClient
from recall_hub.config import HubSettings
from recall_hub.context import HubContext
from recall_hub.embedders import EmbedderError, HashEmbedder
from recall_hub.ops import after_commit
from recall_hub.ops.beads import create_bead, delete_bead, update_bead
from recall_hub.retrieval.freshness import handed_off_work_done
from recall_hub.store.vectors import scope_of
from recall_schemas import Conflict, CreateBead, DeleteBead, NotFound, UpdateBead, new_id
from recall_schemas.requests import BeadUpdates


async def _scopes_holding(hub: HubContext, bead_id: str, scopes: list[str]) -> list[str]:
    return [s for s in scopes if await hub.vectors.vector(bead_id, s) is not None]


# --- versions and optimistic concurrency --------------------------------------------------------


async def test_every_change_bumps_the_version_and_a_stale_version_is_a_conflict(connect: ClientFactory):
    me = await connect()
    bead = await me.create_bead("Versioned", "v1")
    assert bead.version == 1
    changed = await me.update_bead(bead.bead_id, if_version=1, content="v2")
    assert changed.version == 2
    with pytest.raises(Conflict) as refused:
        await me.update_bead(bead.bead_id, if_version=1, content="stale write")
    assert refused.value.details["version"] == 2
    with pytest.raises(Conflict):
        await me.delete_bead(bead.bead_id, if_version=1)
    assert (await me.get_bead(bead.bead_id)).content == "v2"  # the refused writes changed nothing
    assert (await me.delete_bead(bead.bead_id, if_version=2)).deleted


async def test_concurrent_read_modify_writes_lose_nothing(connect: ClientFactory):
    me = await connect()
    bead = await me.create_bead("Tag collector", "every writer adds one tag")
    writers = [await connect(me.ai_id) for _ in range(6)]
    tags = [f"t{i}" for i in range(30)]

    async def append(client: RecallClient, tag: str) -> None:
        await client.modify_bead(bead.bead_id, lambda b: {"tags": [*b.tags, tag]}, attempts=100)

    await asyncio.gather(*(append(writers[i % len(writers)], tag) for i, tag in enumerate(tags)))
    final = await me.get_bead(bead.bead_id)
    assert sorted(final.tags) == sorted(tags)
    assert final.version == 1 + len(tags)


# --- vectors in exactly one scope ----------------------------------------------------------------


async def test_concurrent_scope_changes_leave_one_vector_in_the_current_scope(connect: ClientFactory, hub: HubContext):
    ops, g1, _ = await team(connect, 0)
    g2 = (await ops.create_group("second")).group_id
    scopes = ["global", f"private:{ops.ai_id}", f"group:{g1}", f"group:{g2}"]
    moves = [
        {"visibility": "global"}, {"visibility": "private"}, {"visibility": "group", "group_id": g1},
        {"visibility": "group", "group_id": g2}, {"visibility": "private"}, {"visibility": "global"},
    ]
    for round_ in range(3):
        bead = await ops.create_bead(f"Wanderer {round_}", "moves between scopes")
        await asyncio.gather(*(ops.update_bead(bead.bead_id, **move) for move in moves * 2))
        stored = await hub.beads.system_get(bead.bead_id)
        assert stored is not None
        assert await _scopes_holding(hub, bead.bead_id, scopes) == [scope_of(stored)]
        assert stored["vec_scope"] == scope_of(stored)
        await ops.delete_bead(bead.bead_id)
        assert await _scopes_holding(hub, bead.bead_id, scopes) == []


@pytest.mark.parametrize("other", ["delete", "move back"])
@pytest.mark.parametrize("after", range(8), ids=lambda k: f"after-query-{k}")
async def test_a_write_landing_inside_a_moves_work_leaves_vectors_only_where_the_bead_is(isolated, monkeypatch,
                                                                                           other, after):
    """A bead moves from one scope to another while a delete of it, or a move back, lands at each query boundary
    of the move (its commit, then its work: reading the bead, storing its vectors in the new scope, removing the
    old ones, marking where they are). Once both are settled the bead's vectors sit in its scope, and nowhere
    once it is deleted — never in a scope a work read on its way."""
    ctx, _ = isolated
    owner = new_ai("a")
    scopes = ["global", f"private:{owner}"]
    bead = await create_bead(ctx, owner, CreateBead(title="moving", content="to and fro", visibility="global"))
    await handed_off_work_done(ctx)
    writes = {
        "delete": lambda: delete_bead(ctx, owner, DeleteBead(bead_id=bead.bead_id)),
        "move back": lambda: update_bead(
            ctx, owner, UpdateBead(bead_id=bead.bead_id, updates=BeadUpdates(visibility="global"))
        ),
    }

    async def move() -> None:
        with contextlib.suppress(NotFound):  # the delete landed before the move's commit: refused, an answer too
            await update_bead(ctx, owner, UpdateBead(bead_id=bead.bead_id, updates=BeadUpdates(visibility="private")))

    await Interleaved(monkeypatch, ctx, after, writes[other]).run(move)
    await handed_off_work_done(ctx)
    assert await ctx.outbox.system_depth() == 0
    stored = await ctx.beads.system_get(bead.bead_id)
    assert await _scopes_holding(ctx, bead.bead_id, scopes) == ([] if stored is None else [scope_of(stored)])


# --- nothing about invisible beads on secondary paths -----------------------------------------


async def test_a_newer_bead_the_caller_cannot_see_does_not_demote_or_explain(connect: ClientFactory):
    author, other = await connect(), await connect()
    word = new_id("w")[2:]
    old = await author.create_bead(f"Deploy window {word}", "Fridays after 6pm", visibility="global")
    secret = await other.create_bead(f"Deploy window {word} (new)", "private plan", visibility="private")
    await other.add_relationship(secret.bead_id, old.bead_id, "UPDATES")
    hits = (await author.search_beads(f"deploy window {word}")).hits
    mine = next(h for h in hits if h.bead.bead_id == old.bead_id)
    assert not any("superseded" in note for note in mine.explanation.notes)
    # ... while the one who can see the newer bead is told
    theirs = next(h for h in (await other.search_beads(f"deploy window {word}")).hits if h.bead.bead_id == old.bead_id)
    assert any("superseded" in note for note in theirs.explanation.notes)


async def test_a_dedupe_merge_never_changes_a_bead_the_caller_may_not_modify(connect: ClientFactory, hub: HubContext):
    first, second = await connect(), await connect()
    text = f"the build cache lives on the shared volume {new_id('x')}"
    theirs = await first.create_bead("Build cache", text, visibility="global")
    mine = await second.create_bead("Build cache", text, visibility="global")
    for keeper_side in (second, first):  # the oldest (kept) bead is another's, then the duplicate is
        report = await keeper_side.deduplicate_beads(bead_id=mine.bead_id, merge=True)
        assert [c.bead_ids for c in report.clusters] == [[theirs.bead_id, mine.bead_id]]
        assert report.clusters[0].merged_into is None
    for bead in (theirs, mine):
        now = await first.get_bead(bead.bead_id)
        assert (now.status.value, now.corroborated_by, now.version, now.updated_at) == (
            "active", [], 1, bead.updated_at)
    assert await first.get_relationships(theirs.bead_id, "UPDATES") == []


async def test_a_group_ops_merges_duplicates_of_the_group(connect: ClientFactory):
    ops, group_id, (agent,) = await team(connect, 1)
    text = f"rotate the staging keys {new_id('x')}"
    older = await agent.create_bead("Keys", text, group_id=group_id, visibility="group")
    newer = await ops.create_bead("Keys", text, group_id=group_id, visibility="group")
    report = await ops.deduplicate_beads(bead_id=newer.bead_id, merge=True)
    assert report.clusters[0].merged_into == older.bead_id
    kept = await ops.get_bead(older.bead_id)
    assert kept.corroborated_by == [ops.ai_id] and kept.version == 2
    assert (await ops.get_bead(newer.bead_id)).status.value == "archived"
    assert [(r.from_id, r.to_id) for r in await ops.get_relationships(newer.bead_id, "UPDATES")] == [
        (older.bead_id, newer.bead_id)]


async def test_a_bead_leaving_a_group_reads_as_deleted_in_its_feed(connect: ClientFactory):
    ops, group_id, (member,) = await team(connect, 1)
    bead = await ops.create_bead("Shared for now", "later private", group_id=group_id, visibility="group")
    start = (await member.changes_since(group_id)).changes
    cursor = start[-1].cursor if start else None
    await ops.update_bead(bead.bead_id, visibility="private")
    changes = [c for c in (await member.changes_since(group_id, cursor)).changes if c.bead_id == bead.bead_id]
    assert [(c.action, c.bead) for c in changes] == [("deleted", None)]
    # indistinguishable from a real delete
    other = await ops.create_bead("Gone for real", "", group_id=group_id, visibility="group")
    cursor = (await member.changes_since(group_id, changes[-1].cursor)).cursor
    await ops.delete_bead(other.bead_id)
    deleted = (await member.changes_since(group_id, cursor)).changes
    assert [(c.action, c.bead) for c in deleted] == [("deleted", None)]
    assert set(deleted[0].model_dump(exclude={"cursor", "bead_id", "at"})) == set(
        changes[0].model_dump(exclude={"cursor", "bead_id", "at"}))


# --- the outbox -------------------------------------------------------------------------------


class FlakyEmbedder(HashEmbedder):
    """A real (hashing) embedder that can be told to fail, like an embedding service that is down."""

    def __init__(self) -> None:
        super().__init__(dim=64)
        self.down = False

    async def embed(self, texts: list[str]) -> np.ndarray:
        if self.down:
            raise EmbedderError("embedding service is down")
        return await super().embed(texts)


@pytest.fixture
async def isolated(settings: HubSettings) -> AsyncIterator[tuple[HubContext, FlakyEmbedder]]:
    """A hub context on a graph of its own (no serving hub sweeps it), with an embedder that fails on demand."""
    embedder = FlakyEmbedder()
    ctx = await HubContext.connect(
        settings.model_copy(update={"graph_name": f"outbox_{new_id('x')[2:]}"}), embedder=embedder
    )
    try:
        yield ctx, embedder
    finally:
        await ctx.graph.graph.delete()
        async for key in ctx.redis.scan_iter(match=ctx.keys.pattern()):
            await ctx.redis.delete(key)
        await ctx.aclose()


async def _fully_applied(ctx: HubContext, bead_id: str) -> None:
    """The bead's after-commit work is all there: vector in its scope, FOLLOWS_FROM, one feed entry."""
    props = await ctx.beads.system_get(bead_id)
    assert props is not None
    assert props["vec_model"] == ctx.vectors.model_id and props["vec_scope"] == scope_of(props)
    assert await ctx.vectors.vector(bead_id, scope_of(props)) is not None
    created = [c for c in await ctx.feed.read(props.get("group_id") or "global", None, 1000) if c.bead_id == bead_id]
    assert [c.action for c in created] == ["created"]


async def test_work_after_a_failed_step_is_finished_by_the_sweep(isolated):
    ctx, embedder = isolated
    owner = new_ai("o")
    session = new_id("s")
    first = await create_bead(ctx, owner, CreateBead(title="first step", visibility="global", session_id=session))
    embedder.down = True
    second = await create_bead(ctx, owner, CreateBead(title="second step", visibility="global", session_id=session))
    assert second.bead_id  # acknowledged although its follow-up work failed ...
    await handed_off_work_done(ctx)  # (RECALL_CREATE_SETTLE=background: the work follows the reply)
    assert await ctx.outbox.system_depth() == 1  # ... which is kept, not lost
    assert await ctx.beads.system_get(second.bead_id) is not None
    assert await after_commit.sweep(ctx) == 0  # still down: kept for a retry
    assert await ctx.outbox.system_depth() == 1
    embedder.down = False
    await ctx.graph.query("MATCH (o:Outbox) SET o.retry_at = 0")  # don't wait out the back-off
    assert await after_commit.sweep(ctx) == 1
    assert await ctx.outbox.system_depth() == 0
    for bead in (first, second):
        await _fully_applied(ctx, bead.bead_id)
    rows = await ctx.graph.ro_query(
        "MATCH (:Bead {bead_id: $b})-[:FOLLOWS_FROM]->(p:Bead) RETURN p.bead_id", {"b": second.bead_id}
    )
    assert rows == [[first.bead_id]]


async def test_an_idempotent_retry_finishes_the_first_creates_work(isolated):
    ctx, embedder = isolated
    owner = new_ai("a")
    embedder.down = True
    request = CreateBead(title="retried", visibility="global", idempotency_key=new_id("k"))
    first = await create_bead(ctx, owner, request)
    assert await ctx.outbox.system_depth() == 1
    embedder.down = False
    await ctx.graph.query("MATCH (o:Outbox) SET o.retry_at = 0")
    again = await create_bead(ctx, owner, request)
    assert again.bead_id == first.bead_id
    assert await ctx.outbox.system_depth() == 0
    await _fully_applied(ctx, first.bead_id)


async def test_updates_and_deletes_record_their_work_in_the_same_step(isolated):
    ctx, embedder = isolated
    owner = new_ai("a")
    bead = await create_bead(ctx, owner, CreateBead(title="moving", visibility="global"))
    await handed_off_work_done(ctx)  # the create's own work done (RECALL_CREATE_SETTLE=background: after the reply)
    embedder.down = True
    moved = BeadUpdates(title="moved", visibility="private")
    await update_bead(ctx, owner, UpdateBead(bead_id=bead.bead_id, updates=moved))
    assert await ctx.outbox.system_depth() == 1  # the new text could not be embedded: the work waits
    assert await _scopes_holding(ctx, bead.bead_id, ["global", f"private:{owner}"]) == ["global"]
    # Deleting needs no embedding: the delete settles the waiting update first, then itself, in order.
    await delete_bead(ctx, owner, DeleteBead(bead_id=bead.bead_id))
    assert await ctx.outbox.system_depth() == 0
    assert await _scopes_holding(ctx, bead.bead_id, ["global", f"private:{owner}"]) == []
    log = [(c.action, c.bead_id) for c in await ctx.feed.read("global", None, 100)]
    assert log == [("created", bead.bead_id), ("deleted", bead.bead_id)]


# --- one Redis, several hubs (RECALL_GRAPH_NAME) ---------------------------------------------


async def test_two_graph_names_share_nothing_through_redis(settings: HubSettings):
    from recall_hub.ops.changes import changes_since
    from recall_hub.ops.kv import learn, recall
    from recall_schemas import NotFound
    from recall_schemas.coordination import ChangesSince, Learn, Recall

    hubs = [
        await HubContext.connect(settings.model_copy(update={"graph_name": f"iso_{new_id('x')[2:]}"}),
                                 embedder=HashEmbedder(dim=32))
        for _ in range(2)
    ]
    one, two = hubs
    ai = new_ai()
    try:
        await learn(one, ai, Learn(key="deploy", value="blue-green"))
        bead = await create_bead(one, ai, CreateBead(title="only in the first hub", visibility="global"))
        await handed_off_work_done(one)
        with pytest.raises(NotFound):
            await recall(two, ai, Recall(key="deploy"))
        assert [c.bead_id for c in (await changes_since(one, ai, ChangesSince(scope="global"))).changes] == [
            bead.bead_id]
        assert (await changes_since(two, ai, ChangesSince(scope="global"))).changes == []
        assert await one.vectors.scope_sizes() == {"global": 1}
        assert await two.vectors.scope_sizes() == {}
        await one.audit.record(ai, "create_bead", True, "ok", [bead.bead_id])
        assert len(await one.audit.entries(ai_id=ai)) == 1
        assert await two.audit.entries(ai_id=ai) == []
        keys_one = {k async for k in one.redis.scan_iter(match=one.keys.pattern())}
        keys_two = {k async for k in two.redis.scan_iter(match=two.keys.pattern())}
        assert keys_one and not keys_one & keys_two
    finally:
        for ctx in hubs:
            with contextlib.suppress(Exception):
                await ctx.graph.graph.delete()
            async for key in ctx.redis.scan_iter(match=ctx.keys.pattern()):
                await ctx.redis.delete(key)
            await ctx.aclose()


async def test_a_batch_whose_follow_up_work_fails_is_finished_by_the_sweep(isolated):
    from recall_hub.ops.beads import create_beads
    from recall_schemas import CreateBeads

    ctx, embedder = isolated
    owner = new_ai("a")
    session = new_id("s")
    batch = CreateBeads(beads=[
        CreateBead(title=f"batch step {i}", visibility="global", session_id=session) for i in range(4)
    ])
    embedder.down = True
    items = (await create_beads(ctx, owner, batch)).items
    assert all(item.bead_id and item.created for item in items)  # acknowledged ...
    assert await ctx.outbox.system_depth() == 4  # ... and their work kept, not lost
    embedder.down = False
    await ctx.graph.query("MATCH (o:Outbox) SET o.retry_at = 0")
    while await after_commit.sweep(ctx) > 0:
        pass
    assert await ctx.outbox.system_depth() == 0
    for item in items:
        await _fully_applied(ctx, item.bead_id)
