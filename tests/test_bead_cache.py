"""A hub keeps the beads it read last and does not read their properties again while their stamp (version,
updated_at) is the graph's: what a caller gets is the same as from a full read, visibility included."""

from __future__ import annotations

import secrets

import pytest
from recall_client import RecallClient
from recall_hub.context import HubContext
from recall_hub.store import bead_cache
from recall_hub.store.bead_cache import StaleBead
from recall_schemas import MemoryBead, Visibility

from tests.conftest import ClientFactory, World


async def search_page(client: RecallClient, word: str) -> dict[str, MemoryBead]:
    result = await client.search_beads(word, mode="keyword", limit=10)
    return {hit.bead.bead_id: hit.bead for hit in result.hits}


async def test_a_page_read_again_takes_the_held_properties_and_equals_a_full_read(
    hub: HubContext, connect: ClientFactory
) -> None:
    writer = await connect()
    word = f"heron{secrets.token_hex(3)}"
    made = [await writer.create_bead(f"{word} note {i}", f"the {word} waded at dawn, entry {i}") for i in range(4)]
    first = await search_page(writer, word)
    hits_before = hub.beads.cache.hits
    again = await search_page(writer, word)
    assert hub.beads.cache.hits - hits_before >= len(made)  # no property of these was sent again
    assert set(again) == {b.bead_id for b in made}
    for bead_id, bead in again.items():
        fresh = await writer.get_bead(bead_id)
        assert bead.model_dump(exclude={"accessed_at"}) == fresh.model_dump(exclude={"accessed_at"})
        assert bead.accessed_at >= first[bead_id].accessed_at


async def test_an_edit_is_seen_at_once_though_the_old_properties_are_held(
    hub: HubContext, connect: ClientFactory
) -> None:
    writer = await connect()
    word = f"ibis{secrets.token_hex(3)}"
    bead = await writer.create_bead(f"{word} sighting", "two birds by the river")
    await search_page(writer, word)
    assert bead.bead_id in hub.beads.cache.held([bead.bead_id])
    await writer.update_bead(bead.bead_id, content="three birds by the river", importance=9)
    page = await search_page(writer, word)
    assert page[bead.bead_id].content == "three birds by the river"
    assert page[bead.bead_id].importance == 9


async def test_held_properties_never_show_a_bead_its_reader_may_no_longer_see(
    hub: HubContext, world: World
) -> None:
    bead = await world.bead(Visibility.GROUP, title="the egret's plan")
    assert bead.bead_id in await hub.beads.many(world.member.ai_id, [bead.bead_id])
    assert bead.bead_id in hub.beads.cache.held([bead.bead_id])
    await world.ops.remove_member(world.group_id, world.member.ai_id)
    assert await hub.beads.many(world.member.ai_id, [bead.bead_id]) == {}


async def test_reads_move_accessed_at_on_held_beads(hub: HubContext, connect: ClientFactory) -> None:
    writer = await connect()
    bead = await writer.create_bead("a crane's nest", "on the old chimney")
    held_before = (await hub.beads.many(writer.ai_id, [bead.bead_id]))[bead.bead_id][0]
    await hub.graph.query(
        "MATCH (b:Bead {bead_id: $id}) SET b.accessed_at = b.accessed_at + 1000", {"id": bead.bead_id}
    )
    props, _ = (await hub.beads.many(writer.ai_id, [bead.bead_id]))[bead.bead_id]
    assert props["accessed_at"] == held_before["accessed_at"] + 1000


async def test_a_change_that_moves_no_stamp_is_caught_by_the_tests_check(
    hub: HubContext, connect: ClientFactory
) -> None:
    assert bead_cache.VERIFY  # the suite runs with the check on (tests/conftest.py)
    writer = await connect()
    bead = await writer.create_bead("a stork", "counted twice")
    await hub.beads.many(writer.ai_id, [bead.bead_id])
    await hub.graph.query("MATCH (b:Bead {bead_id: $id}) SET b.title = 'a swan'", {"id": bead.bead_id})
    with pytest.raises(StaleBead, match="title"):
        await hub.beads.many(writer.ai_id, [bead.bead_id])
    hub.beads.cache.drop([bead.bead_id])
    props, _ = (await hub.beads.many(writer.ai_id, [bead.bead_id]))[bead.bead_id]
    assert props["title"] == "a swan"


async def test_a_held_bead_is_made_once_per_version_with_each_reads_accessed_at(
    hub: HubContext, connect: ClientFactory
) -> None:
    writer = await connect()
    bead = await writer.create_bead("a kite", "over the marsh")
    props, _ = (await hub.beads.many(writer.ai_id, [bead.bead_id]))[bead.bead_id]
    first = hub.beads.cache.bead(props)
    again, _ = (await hub.beads.many(writer.ai_id, [bead.bead_id]))[bead.bead_id]
    assert hub.beads.cache.bead(again) is first  # not validated again
    later = hub.beads.cache.bead({**again, "accessed_at": again["accessed_at"] + 5000})
    assert later.accessed_at > first.accessed_at and later.model_dump(exclude={"accessed_at"}) == first.model_dump(
        exclude={"accessed_at"}
    )
    await writer.update_bead(bead.bead_id, title="a red kite")
    edited, _ = (await hub.beads.many(writer.ai_id, [bead.bead_id]))[bead.bead_id]
    assert hub.beads.cache.bead(edited).title == "a red kite"
