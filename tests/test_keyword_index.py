"""The keyword index with several hubs: each hub applies every write, and a writer reads its own writes
whichever hub answers its search."""

from __future__ import annotations

import asyncio
import secrets

from recall_hub.config import HubSettings
from recall_hub.context import HubContext
from recall_hub.ops.beads import create_bead
from recall_hub.ops.indexing import reindex
from recall_hub.retrieval.search import search_beads
from recall_hub.service.endpoints import HubService
from recall_hub.service.server import running_hub
from recall_schemas import BeadFilters, CreateBead, SearchBeads, SearchMode

from tests.conftest import ClientFactory, new_ai


def searches_served(service: HubService) -> int:
    return service.endpoints["search_beads"]._num_requests


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


async def test_another_client_given_the_writers_position_finds_its_writes_through_any_hub(
    connect: ClientFactory, settings: HubSettings
) -> None:
    async with running_hub(settings):  # a second hub in the queue group
        writer, reader = await connect(), await connect()
        for _ in range(20):
            word = f"zr{secrets.token_hex(5)}"
            bead = await writer.create_bead(f"shared {word}", "written by one agent", visibility="global")
            reader.read_after(writer.index_position)  # as one agent tells another "I wrote it"
            assert reader.index_position == writer.index_position
            hits = (await reader.search_beads(word, mode="keyword")).hits
            assert [h.bead.bead_id for h in hits] == [bead.bead_id], word
        reader.read_after(None)  # nothing to wait for: the position stays
        assert reader.index_position == writer.index_position


async def test_a_rebuild_request_makes_every_hub_reindex_from_the_graph(
    connect: ClientFactory, hub_service: HubService
) -> None:
    """`recall reindex` leaves a marker in the index log; a hub that reads it rebuilds from the graph, so
    even a change that bypassed the log (as a restore or a manual repair would) is found afterwards."""
    ctx = hub_service.ctx
    writer = await connect()
    bead = await writer.create_bead(f"before {secrets.token_hex(4)}")
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
