"""The keyword index with several hubs: each hub applies every write, and a writer reads its own writes
whichever hub answers its search."""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from datetime import UTC, datetime

import pytest
from recall_hub.config import HubSettings
from recall_hub.context import HubContext
from recall_hub.ops.beads import create_bead, update_bead
from recall_hub.ops.indexing import reindex
from recall_hub.retrieval.freshness import handed_off_work_done
from recall_hub.retrieval.scopes import searchable_scopes
from recall_hub.retrieval.search import screen, search_beads
from recall_hub.service.endpoints import HubService
from recall_hub.service.server import running_hub
from recall_hub.store.keyword_index import COMMIT_INTERVAL_S
from recall_schemas import BeadFilters, CreateBead, SearchBeads, SearchMode, UpdateBead, Visibility
from recall_schemas.ids import new_id
from recall_schemas.requests import index_seq_key

from tests.conftest import ClientFactory, World, new_ai, until


def searches_served(service: HubService) -> int:
    return service.endpoints["search_beads"].num_requests


async def test_a_writer_finds_its_writes_through_any_hub_and_every_hub_applies_them(
    connect: ClientFactory, settings: HubSettings, hub_service: HubService
) -> None:
    async with running_hub(settings) as second:  # same bus, same graph: two hubs in the queue group
        writer = await connect()
        answered_by_both = set()
        words = []
        for _ in range(40):
            word = f"zk{secrets.token_hex(5)}"
            words.append(word)
            bead = await writer.create_bead(f"finding {word}", "written then searched at once")
            before = searches_served(hub_service)
            hits = (await writer.search_beads(word, mode="keyword")).hits
            answered_by_both.add(0 if searches_served(hub_service) > before else 1)
            assert [h.bead.bead_id for h in hits] == [bead.bead_id], word
        assert answered_by_both == {0, 1}  # both hubs answered some of the searches
        # Each hub's own index holds every write (it follows the one index log).
        for service in (hub_service, second):
            await service.ctx.keywords.catch_up()
            scopes = [f"private:{writer.ai_id}"]
            found = {w for w in words if service.ctx.keywords.search(scopes, [w], BeadFilters(), 5)}
            assert found == set(words)


async def test_a_stream_of_writes_is_committed_in_batches_and_others_find_it_without_a_position(
    connect: ClientFactory, hub_service: HubService
) -> None:
    """Each commit costs a segment merge soon after: the follow commits at most every COMMIT_INTERVAL_S
    while writes keep coming, and still publishes them to readers that carry no position."""
    index = hub_service.ctx.keywords
    writer, reader = await connect(), await connect()
    word = f"zs{secrets.token_hex(5)}"
    commits, started = index.commits, time.monotonic()
    made = [await writer.create_bead(f"stream {word} {i}", "one of many", visibility="global") for i in range(60)]
    elapsed = time.monotonic() - started
    assert index.commits - commits <= elapsed / COMMIT_INTERVAL_S + 2, (index.commits - commits, elapsed)

    async def all_found() -> bool:
        return len((await reader.search_beads(word, mode="keyword", limit=100)).hits) == len(made)

    await until("every write found by a reader without the writer's position", all_found)


async def test_a_vector_search_sees_its_callers_writes_without_the_index_committing_them(
    connect: ClientFactory, hub_service: HubService
) -> None:
    index = hub_service.ctx.keywords
    writer = await connect()
    word = f"zv{secrets.token_hex(5)}"
    retagged = await writer.create_bead(f"retagged {word}", "tagged old, then new", tags=["old"])
    await until("the first write applied", lambda: index.applied == hub_service.ctx.index_log.last_appended)
    async with index._lock:  # the index applies nothing meanwhile
        commits = index.commits
        await writer.update_bead(retagged.bead_id, tags=["new"])
        fresh = await writer.create_bead(f"fresh {word}", "written while the index waits", tags=["new"])
        hits = (await writer.search_beads(f"retagged fresh {word}", mode="vector", filters={"tags": ["new"]})).hits
        assert {h.bead.bead_id for h in hits} >= {retagged.bead_id, fresh.bead_id}
        # The index still holds the old tag: without the caller's position, screening by it drops the bead.
        assert index.screen([f"private:{writer.ai_id}"], [retagged.bead_id], BeadFilters(tags=["new"]))[0] == {}
        assert index.commits == commits
    hits = (await writer.search_beads(word, mode="keyword", filters={"tags": ["new"]})).hits
    assert {h.bead.bead_id for h in hits} == {retagged.bead_id, fresh.bead_id}


async def test_another_client_given_the_writers_position_finds_its_writes_through_any_hub(
    connect: ClientFactory, settings: HubSettings
) -> None:
    async with running_hub(settings):  # a second hub in the queue group
        writer, reader = await connect(), await connect()
        for _ in range(20):
            word = f"zr{secrets.token_hex(5)}"
            bead = await writer.create_bead(f"shared {word}", "written by one agent", visibility="global")
            reader.read_after(writer.index_position)  # as one agent tells another "I wrote it"
            # At least the writer's: a reply may carry a later position (RECALL_CREATE_SETTLE=background logs the
            # bead again after its session link, once the create has replied).
            assert index_seq_key(reader.index_position) >= index_seq_key(writer.index_position)
            hits = (await reader.search_beads(word, mode="keyword")).hits
            assert [h.bead.bead_id for h in hits] == [bead.bead_id], word
        before = reader.index_position
        reader.read_after(None)  # nothing to wait for: the position stays
        assert reader.index_position == before


async def test_a_rebuild_request_makes_every_hub_reindex_from_the_graph(
    connect: ClientFactory, hub_service: HubService
) -> None:
    """`recall reindex` leaves a marker in the index log; a hub that reads it rebuilds from the graph, so
    even a change that bypassed the log (as a restore or a manual repair would) is found afterwards."""
    ctx = hub_service.ctx
    writer = await connect()
    bead = await writer.create_bead(f"before {secrets.token_hex(4)}")
    await handed_off_work_done(ctx)  # RECALL_CREATE_SETTLE=background logs the bead again after the reply
    await ctx.keywords.catch_up()  # the create is applied (it read the bead as it was then)
    hidden = f"zr{secrets.token_hex(5)}"
    await ctx.graph.query("MATCH (b:Bead {bead_id: $id}) SET b.title = $t", {"id": bead.bead_id, "t": hidden})
    scopes = [f"private:{writer.ai_id}"]
    await ctx.keywords.catch_up()
    assert ctx.keywords.search(scopes, [hidden], BeadFilters(), 5) == []  # the log never named the change
    marker = await ctx.index_log.request_rebuild()
    await ctx.keywords.catch_up()
    assert [b for b, _ in ctx.keywords.search(scopes, [hidden], BeadFilters(), 5)] == [bead.bead_id]
    assert ctx.keywords.applied >= marker


async def test_a_rebuild_that_fails_half_way_leaves_the_index_as_it_was(
    connect: ClientFactory, hub_service: HubService
) -> None:
    """A rebuild adds every bead again before one commit publishes them; if the graph fails in the middle,
    none of that half-build may reach a later commit (it would drop the beads not re-added yet, and hold
    documents numbered for an index view that never came)."""
    ctx = hub_service.ctx
    writer = await connect()
    word = f"zf{secrets.token_hex(5)}"
    beads = [(await writer.create_bead(f"{word} {i}", f"kept {i}")).bead_id for i in range(3)]
    await ctx.keywords.catch_up()
    scopes = [f"private:{writer.ai_id}"]
    before = ctx.keywords.search(scopes, [word], BeadFilters(), 10)
    assert sorted(b for b, _ in before) == sorted(beads)

    class GraphFailed(Exception):
        pass

    async def failing(ids: object) -> dict[str, dict[str, str]]:
        raise GraphFailed

    ctx.keywords.beads.system_preceding = failing  # type: ignore[method-assign]
    try:
        with pytest.raises(GraphFailed):
            await ctx.keywords.rebuild()
    finally:
        del ctx.keywords.beads.system_preceding
    assert ctx.keywords.search(scopes, [word], BeadFilters(), 10) == before
    later = await writer.create_bead(f"{word} later", "after the failed rebuild")
    await ctx.keywords.catch_up()  # commits what the log names, and nothing of the failed rebuild
    found = ctx.keywords.search(scopes, [word], BeadFilters(), 10)
    assert sorted(b for b, _ in found) == sorted([*beads, later.bead_id])
    hits = (await writer.search_beads(word, mode="keyword", limit=10)).hits
    assert {h.bead.bead_id for h in hits} == {*beads, later.bead_id}
    assert all(word in h.bead.title for h in hits)


async def test_a_search_during_a_full_reindex_never_shows_a_bead_the_caller_may_not_see(
    settings: HubSettings,
) -> None:
    """`recall reindex` drops every vector set and re-embeds, and the keyword index rebuilds from the graph;
    searches go on meanwhile (the domain functions, called directly on a graph of its own): whatever a
    half-built index returns, every hit is re-checked against the graph, and afterwards all is found."""
    ctx = await HubContext.connect(settings.model_copy(update={"graph_name": f"recall_reindex_{secrets.token_hex(4)}"}))
    try:
        owner, outsider, word = new_ai(), new_ai(), f"zw{secrets.token_hex(5)}"
        for i in range(40):
            await create_bead(ctx, owner, CreateBead(title=f"{word} private {i}", idempotency_key=f"p{i}"))
        shared = {
            (await create_bead(ctx, owner, CreateBead(title=f"{word} shared {i}", visibility="global",
                                                      idempotency_key=f"g{i}"))).bead_id
            for i in range(5)
        }  # fmt: skip
        await handed_off_work_done(ctx)  # the creates' own work done (RECALL_CREATE_SETTLE=background)
        await ctx.keywords.catch_up()
        rebuilding = asyncio.create_task(reindex(ctx))
        searched_during = 0
        while not rebuilding.done():
            for mode in (SearchMode.HYBRID, SearchMode.KEYWORD, SearchMode.VECTOR):
                result = await search_beads(ctx, outsider, SearchBeads(query=word, mode=mode, limit=50))
                assert {h.bead.bead_id for h in result.hits} <= shared, mode
                searched_during += 1
            await ctx.keywords.catch_up()  # reads the rebuild marker: the keyword index is rebuilt too
        assert await rebuilding == 45
        assert searched_during > 0
        mine = await search_beads(ctx, owner, SearchBeads(query=word, mode=SearchMode.VECTOR, limit=50))
        assert len(mine.hits) == 45
    finally:
        await ctx.aclose()


async def test_screening_on_the_index_agrees_with_the_graph_for_every_caller_and_filter(
    world: World, hub_service: HubService
) -> None:
    """Searches weigh their candidates on what the keyword index holds of them; it must say exactly what
    the graph would: the same beads visible to each identity, the same filters passed, the same inputs to
    priors (importance, age, provenance, status, trust marks, type) and the boosts (when it held, its author)."""
    ctx = hub_service.ctx
    rng = random.Random(11)
    ids = []
    for i in range(40):
        visibility = rng.choice(list(Visibility))
        bead = await world.bead(
            visibility, f"screened {i}", bead_type=rng.choice(["fact", "decision", "note", "topic"]),
            importance=rng.randint(0, 10), tags=rng.sample(["red", "blue", "green"], rng.randint(0, 2)),
            provenance=rng.choice(["observed", "authored", "recorded", "derived"]),
            valid_from=rng.choice([None, datetime(2023, rng.randint(1, 12), 1, tzinfo=UTC)]),
        )
        ids.append(bead.bead_id)
        if visibility is not Visibility.PRIVATE and rng.random() < 0.4:
            await (world.member.verify_bead if rng.random() < 0.5 else world.member.reject_bead)(
                bead.bead_id, "checked")
    for bead_id in ids[:4]:  # as a decay pass archives (store and log entry)
        await ctx.graph.query(
            "MATCH (b:Bead {bead_id: $id}) SET b.status = 'archived', b.version = coalesce(b.version, 1) + 1",
            {"id": bead_id},
        )
        await ctx.index_log.append(bead_id)
    await ctx.keywords.catch_up()
    filter_sets = [
        BeadFilters(), BeadFilters(tags=["red"]), BeadFilters(bead_types=["decision", "topic"]),
        BeadFilters(min_importance=4, max_importance=8), BeadFilters(group_id=world.group_id),
        BeadFilters(visibility="private"), BeadFilters(created_by=world.creator.ai_id, status="active"),
    ]
    for client in (world.creator, world.member, world.ex_member, world.outsider, world.ops):
        for filters in filter_sets:
            scopes = await searchable_scopes(ctx, client.ai_id, filters)
            from_index, unknown = ctx.keywords.screen(scopes, ids, filters)
            assert unknown == []
            assert from_index == await ctx.beads.screen(client.ai_id, ids, filters), (client.ai_id, filters)

    # Without filters the index screens from the rows it keeps beside its documents, with any from its columns:
    # both say the same, a deleted bead and one never indexed included (the graph screens those).
    await world.creator.delete_bead(ids[-1])
    await ctx.keywords.catch_up()
    asked = [*ids, f"b_{secrets.token_hex(8)}"]
    for client in (world.creator, world.member, world.outsider):
        scopes = await searchable_scopes(ctx, client.ai_id, BeadFilters())
        from_rows = ctx.keywords.screen(scopes, asked, BeadFilters())
        assert from_rows == ctx.keywords.screen(scopes, asked, BeadFilters(min_importance=0))
        assert from_rows[1] == asked[-2:]


async def test_session_edges_from_the_index_once_screened_are_the_graphs_for_every_caller(
    world: World, hub_service: HubService
) -> None:
    """Hybrid search reads the FOLLOWS_FROM edges around its candidates from the index's map of them, which
    knows nothing of visibility: screened as a search screens them, they must be exactly the edges the graph
    gives each caller — for session chains across scopes, reply edges, a deleted bead and a forgotten one."""
    ctx = hub_service.ctx
    rng = random.Random(5)
    session = new_id("s")
    ids: list[str] = []
    for i in range(30):
        visibility = rng.choice(list(Visibility))
        bead = await world.bead(visibility, f"turn {i}", session_id=session)  # each follows the one before
        ids.append(bead.bead_id)
    for _ in range(10):  # reply edges across the session, as a client that knows its structure adds them
        later, earlier = sorted(rng.sample(range(len(ids)), 2), reverse=True)
        await world.creator.add_relationship(ids[later], ids[earlier], "FOLLOWS_FROM")
    await world.creator.delete_bead(ids[7])
    await world.creator.forget_bead(ids[12], "not to be kept")
    await ctx.keywords.catch_up()
    for gone in (7, 12):  # its session neighbours no longer lead to it
        around = [ids[gone - 1], ids[gone + 1]]
        assert all(ids[gone] not in pair for pair in ctx.keywords.session_edges(around, around))
    for client in (world.creator, world.member, world.ex_member, world.outsider, world.ops):
        scopes = await searchable_scopes(ctx, client.ai_id, BeadFilters())
        for _ in range(5):
            candidates = rng.sample(ids, 12)
            visible, _ = ctx.keywords.screen(scopes, candidates, BeadFilters())
            among = sorted(visible)
            around = among[:3]
            expected = set(await ctx.beads.session_edges(client.ai_id, among, around))
            from_index = ctx.keywords.session_edges(among, around)
            reached = sorted({b for pair in from_index for b in pair})
            seen_there = await screen(ctx, client.ai_id, scopes, reached, BeadFilters())  # as a search does
            screened = {pair for pair in from_index if pair[0] in seen_there and pair[1] in seen_there}
            assert screened == expected, client.ai_id
            assert not {ids[7], ids[12]} & set(reached)  # gone from the graph, gone from the map


async def test_a_search_while_the_index_lags_the_graph_shows_nothing_the_caller_may_not_see(
    settings: HubSettings,
) -> None:
    """Between a write and its application to the index, the index screens on the old state: a bead made
    private still looks global to it, and a bead just written is not in it at all. Hits are read from
    the graph, so the first is never shown to another identity and the second is screened by the graph."""
    ctx = await HubContext.connect(settings.model_copy(update={"graph_name": f"recall_lag_{secrets.token_hex(4)}"}))
    try:  # no hub runs on this context: its index applies the log only when told to
        owner, other, word = new_ai(), new_ai(), f"zl{secrets.token_hex(5)}"
        moved = await create_bead(ctx, owner, CreateBead(title=f"{word} soon private", visibility="global"))
        kept = await create_bead(ctx, owner, CreateBead(title=f"{word} stays global", visibility="global"))
        await ctx.keywords.catch_up()
        await update_bead(ctx, owner, UpdateBead(bead_id=moved.bead_id, updates={"visibility": "private"}))
        late = await create_bead(ctx, owner, CreateBead(title=f"{word} written late", visibility="global"))
        await handed_off_work_done(ctx)  # its vector stored (RECALL_CREATE_SETTLE=background: after the reply)
        scopes = await searchable_scopes(ctx, other, BeadFilters())
        stale, unknown = ctx.keywords.screen(scopes, [moved.bead_id, kept.bead_id, late.bead_id], BeadFilters())
        assert set(stale) == {moved.bead_id, kept.bead_id} and unknown == [late.bead_id]  # the index lags
        for mode in (SearchMode.HYBRID, SearchMode.KEYWORD, SearchMode.VECTOR):
            hits = (await search_beads(ctx, other, SearchBeads(query=word, mode=mode))).hits
            found = {h.bead.bead_id for h in hits}
            assert moved.bead_id not in found, mode
            assert kept.bead_id in found, mode
            if mode is not SearchMode.KEYWORD:  # the vector set has it; the graph screens it
                assert late.bead_id in found, mode
    finally:
        await ctx.aclose()


async def test_a_reply_is_found_by_the_words_of_the_turn_it_follows_below_a_bead_that_holds_them(
    world: World,
) -> None:
    """The turn before a bead (``FOLLOWS_FROM``) is indexed with it, weighed down: a question's words find
    its answer, after the beads holding those words themselves."""
    word = f"zc{secrets.token_hex(5)}"
    session = new_id("s")
    asked = await world.bead(Visibility.GROUP, f"where do you get the {word} ideas", session_id=session)
    answer = await world.bead(Visibility.GROUP, "mostly from old books", session_id=session)
    world.member.read_after(world.creator.index_position)
    hits = (await world.member.search_beads(word, mode="keyword", filters={"group_id": world.group_id})).hits
    assert [h.bead.bead_id for h in hits] == [asked.bead_id, answer.bead_id]
    assert hits[0].score > hits[1].score


@pytest.mark.parametrize(
    ("written", "asked"),
    [("I bought a {w} lens", "what {w} did I buy"), ("she drew the {w} mural", "her {w} drawing"),
     ("the children loved the {w}", "which {w} did the child like"), ("we ran the {w} benchmark", "running {w}")],
)
async def test_an_irregular_form_finds_its_base_word_and_the_base_word_finds_it(
    connect: ClientFactory, written: str, asked: str
) -> None:
    """The stemmer makes "buying" one word with "buy" but not "bought": irregular forms are indexed and searched
    as their base word, so a question in one tense finds a memory in another."""
    me, word = await connect(), f"zf{secrets.token_hex(5)}"
    bead = await me.create_bead(written.format(w=word))
    other = await me.create_bead(word)  # shorter: without the base word it would rank first
    hits = (await me.search_beads(asked.format(w=word), mode="keyword")).hits
    assert [h.bead.bead_id for h in hits] == [bead.bead_id, other.bead_id]
    assert hits[0].score > hits[1].score


async def test_words_of_a_turn_the_reader_may_not_see_never_find_the_bead_that_follows_it(world: World) -> None:
    """A private note followed by a group bead of its author: the group bead is not found by the note's words
    (a member would learn what the note said), while a global turn before a private bead lends its words."""
    word, other = f"zp{secrets.token_hex(5)}", f"zg{secrets.token_hex(5)}"
    session = new_id("s")
    await world.bead(Visibility.PRIVATE, f"private {word} draft", session_id=session)
    shared = await world.bead(Visibility.GROUP, "the plan as agreed", session_id=session)
    for reader in (world.member, world.creator):
        reader.read_after(world.creator.index_position)
        hits = (await reader.search_beads(word, mode="keyword")).hits
        assert shared.bead_id not in {h.bead.bead_id for h in hits}, reader.ai_id
    later = new_id("s")
    await world.bead(Visibility.GLOBAL, f"public {other} announcement", session_id=later)
    mine = await world.bead(Visibility.PRIVATE, "noted for myself", session_id=later)
    found = {h.bead.bead_id for h in (await world.creator.search_beads(other, mode="keyword")).hits}
    assert mine.bead_id in found


async def test_once_the_turn_before_is_deleted_or_forgotten_its_words_find_nothing(world: World) -> None:
    for remove in ("delete", "forget"):
        word = f"zd{secrets.token_hex(5)}"
        session = new_id("s")
        before = await world.bead(Visibility.GROUP, f"{word} question", session_id=session)
        after = await world.bead(Visibility.GROUP, "the reply", session_id=session)
        found = {h.bead.bead_id for h in (await world.creator.search_beads(word, mode="keyword")).hits}
        assert found == {before.bead_id, after.bead_id}
        if remove == "delete":
            await world.creator.delete_bead(before.bead_id)
        else:
            await world.creator.forget_bead(before.bead_id, "wrong")
        assert (await world.creator.search_beads(word, mode="keyword")).hits == [], remove


@pytest.mark.parametrize("change", ["delete", "forget", "share"])
async def test_a_bead_takes_the_words_of_a_turn_before_it_once_it_may_hold_them(world: World, change: str) -> None:
    """A group turn, a private note of its author, a group reply: the reply holds none of the note's words (a
    member would learn them). Once the note is deleted or forgotten, the reply follows the first turn and is found
    by its words; once the note is made global, by the note's words — at a hub that applied each change as it
    came, though the reply's document held no word of the bead that changed."""
    first_word, note_word = f"zn{secrets.token_hex(5)}", f"zn{secrets.token_hex(5)}"
    session = new_id("s")
    first = await world.bead(Visibility.GROUP, f"{first_word} question", session_id=session)
    note = await world.bead(Visibility.PRIVATE, f"a note to myself {note_word}", session_id=session)
    reply = await world.bead(Visibility.GROUP, "the reply", session_id=session)
    for word, bead in ((first_word, first), (note_word, note)):
        found = {h.bead.bead_id for h in (await world.creator.search_beads(word, mode="keyword")).hits}
        assert found == {bead.bead_id}  # the reply holds the words of neither
    if change == "delete":
        await world.creator.delete_bead(note.bead_id)
    elif change == "forget":
        await world.creator.forget_bead(note.bead_id, "wrong")
    else:
        await world.creator.update_bead(note.bead_id, visibility="global")
    word, expected = (note_word, {note.bead_id, reply.bead_id}) if change == "share" else (
        first_word, {first.bead_id, reply.bead_id})
    for reader in (world.creator, world.member):
        reader.read_after(world.creator.index_position)
        found = {h.bead.bead_id for h in (await reader.search_beads(word, mode="keyword")).hits}
        assert found == expected, reader.ai_id


async def test_a_word_finds_exactly_the_callers_beads_that_hold_it_and_equal_texts_score_alike_in_any_scope() -> None:
    """Words are indexed per scope: for any set of scopes (and a filter), a search finds exactly the beads of
    those scopes that hold a query word, and the same text scores the same in every scope."""
    from typing import cast

    from recall_hub.store.beads import BeadStore
    from recall_hub.store.index_log import IndexLog
    from recall_hub.store.keyword_index import KeywordIndex

    rng = random.Random(11)
    scopes = ["global", "group:g_1", "group:g_2", "private:a_1", "private:a_2"]
    vocabulary = [f"w{i}" for i in range(40)]
    texts = [" ".join(rng.choices(vocabulary, k=rng.randint(3, 12))) for _ in range(60)]
    beads = []
    for i in range(600):
        kind, _, owner = (scope := rng.choice(scopes)).partition(":")
        beads.append({
            "bead_id": f"b_{i:04d}", "title": texts[i % len(texts)], "visibility": kind, "scope": scope,
            "group_id": owner if kind == "group" else None, "created_by": owner if kind == "private" else "a_0",
            "tags": ["t"] if i % 3 == 0 else [], "importance": 5, "created_at": i,
        })
    index = KeywordIndex(cast(BeadStore, None), cast(IndexLog, None))
    await index.load(beads)
    for _ in range(200):
        mine = rng.sample(scopes, rng.randint(1, len(scopes)))
        words = rng.sample(vocabulary, rng.randint(1, 3))
        filters = BeadFilters(tags=["t"]) if rng.random() < 0.3 else BeadFilters()
        found = index.search(mine, words, filters, limit=len(beads))
        expected = {
            b["bead_id"] for b in beads
            if b["scope"] in mine and set(words) & set(b["title"].split()) and (not filters.tags or b["tags"])
        }
        assert {bead_id for bead_id, _ in found} == expected
        text_of = {b["bead_id"]: b["title"] for b in beads}
        by_text: dict[str, set[float]] = {}
        for bead_id, score in found:
            by_text.setdefault(text_of[bead_id], set()).add(score)
        assert all(len(scores) == 1 for scores in by_text.values()), by_text
        # Ties are in bead-id order.
        assert found == sorted(found, key=lambda hit: (-hit[1], hit[0]))


async def test_beads_in_scopes_the_caller_may_not_see_move_none_of_its_scores() -> None:
    """Scores use the statistics of the caller's scopes and a fixed reference length: beads holding the same
    words in scopes it cannot see, in texts of any length, change neither what its search finds nor the
    scores (with a filter or without)."""
    from typing import cast

    from recall_hub.store.beads import BeadStore
    from recall_hub.store.index_log import IndexLog
    from recall_hub.store.keyword_index import KeywordIndex

    rng = random.Random(12)
    mine = ["global", "group:g_1", "private:a_1"]
    others = ["group:g_2", "private:a_2"]
    vocabulary = [f"w{i}" for i in range(30)]

    def bead(i: int, scope: str, words: int) -> dict[str, object]:
        kind, _, owner = scope.partition(":")
        return {
            "bead_id": f"b_{i:04d}", "title": " ".join(rng.choices(vocabulary, k=words)), "visibility": kind,
            "group_id": owner if kind == "group" else None, "created_by": owner if kind == "private" else "a_0",
            "tags": [rng.choice(["t", "u"])], "importance": 5, "created_at": i,
        }

    visible = [bead(i, rng.choice(mine), rng.randint(3, 20)) for i in range(300)]
    hidden = [bead(1000 + i, rng.choice(others), rng.randint(20, 400)) for i in range(300)]
    alone = KeywordIndex(cast(BeadStore, None), cast(IndexLog, None))
    await alone.load(visible)
    shared = KeywordIndex(cast(BeadStore, None), cast(IndexLog, None))
    await shared.load(visible + hidden)
    for _ in range(100):
        scopes = rng.sample(mine, rng.randint(1, len(mine)))
        words = rng.sample(vocabulary, rng.randint(1, 3))
        filters = BeadFilters(tags=["t"]) if rng.random() < 0.3 else BeadFilters()
        expected = dict(alone.search(scopes, words, filters, limit=600))
        found = dict(shared.search(scopes, words, filters, limit=600))
        assert found.keys() == expected.keys()
        assert all(found[b] == pytest.approx(expected[b], rel=1e-4) for b in found), (found, expected)


async def test_a_score_is_bm25_against_the_reference_length_whatever_else_the_index_holds() -> None:
    """Okapi BM25 with k1 = 1.2, b = 0.75 and the in-scope IDF, each text normalised against the reference
    length: a word said once in a short turn outweighs the same word once in a long one, and a text as
    long as the reference scores as BM25 says for an average-length text."""
    import math
    from typing import cast

    from recall_hub.store import bm25
    from recall_hub.store.beads import BeadStore
    from recall_hub.store.index_log import IndexLog
    from recall_hub.store.keyword_index import KeywordIndex

    length = int(bm25.REFERENCE_LENGTH)
    texts = {
        "b_short": "harbor walk",
        "b_reference": "harbor " + " ".join(f"filler{i}" for i in range(length - 1)),
        "b_long": "harbor harbor " + " ".join(f"other{i}" for i in range(4 * length - 2)),
        "b_none": "nothing here",
    }
    index = KeywordIndex(cast(BeadStore, None), cast(IndexLog, None))
    await index.load([
        {"bead_id": bead_id, "title": text, "visibility": "global", "created_by": "a_1", "created_at": i}
        for i, (bead_id, text) in enumerate(texts.items())
    ])
    found = dict(index.search(["global"], ["harbor"], BeadFilters(), limit=10))
    idf = math.log(1 + (4 - 3 + 0.5) / (3 + 0.5))
    k1, b = bm25.K1, bm25.B

    def expected(tf: int, words: int) -> float:
        return idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * words / length))

    assert set(found) == {"b_short", "b_reference", "b_long"}
    assert found["b_short"] == pytest.approx(expected(1, 2), rel=1e-4)
    assert found["b_reference"] == pytest.approx(idf, rel=1e-4)  # tf 1 at the reference length: the IDF itself
    assert found["b_long"] == pytest.approx(expected(2, 4 * length), rel=1e-4)
    assert found["b_short"] > found["b_reference"] > found["b_long"]


async def test_a_search_whose_write_was_applied_while_it_waited_goes_on_at_once(
    connect: ClientFactory, hub_service: HubService
) -> None:
    """Searches that must see their caller's write queue for the keyword index. One whose write was applied
    while it waited (by the follow, or another search) answers at once instead of applying and committing what
    others wrote since: under many writers, that repeated work made every search wait behind the others."""
    index = hub_service.ctx.keywords
    writer, other = await connect(), await connect()
    appliers: list[asyncio.Task[object] | None] = []
    original = index._apply

    async def recording(bead_ids: set[str]) -> None:
        appliers.append(asyncio.current_task())
        await original(bead_ids)

    index._apply = recording  # type: ignore[method-assign]
    try:
        async with asyncio.timeout(30):
            async with index._lock:  # the follow and every search wait here meanwhile
                first = await writer.create_bead(f"first {secrets.token_hex(4)}")
                waiting = asyncio.create_task(index.catch_up(writer.index_position))
                await asyncio.sleep(0)  # one turn: the search's catch-up is past its first check, at the lock
                await original({first.bead_id})  # applied as the follow would, while the search waits
                await index._commit()
                index.applied = writer.index_position
                await other.create_bead(f"later {secrets.token_hex(4)}")  # more in the log after the search's write
            await waiting
    finally:
        del index._apply
    assert waiting not in appliers
