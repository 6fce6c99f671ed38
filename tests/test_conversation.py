"""Conversation neighbours: the beads written next to each other in a scope lend each other graph context, though
each writer's beads are in a hub session of its own."""

from __future__ import annotations

import asyncio
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from recall_client import RecallClient
from recall_hub.context import HubContext
from recall_hub.retrieval.ranking import WRITTEN_NEXT
from recall_hub.store import conversation
from recall_hub.store.conversation import ConversationOrder
from recall_schemas import MemoryBead, SearchHit, Visibility
from recall_schemas.ids import new_id

from tests.conftest import ClientFactory, World, new_ai

MINUTE = 60_000
DAY = 24 * 60 * MINUTE


def test_a_beads_neighbours_are_the_nearest_of_its_scope_stamped_before_and_after_it() -> None:
    order = ConversationOrder()
    for stamp, bead_id, author in [(10, "b_2", "a_x"), (0, "b_0", "a_x"), (5, "b_1", "a_y"), (5, "b_9", "a_x")]:
        order.place(bead_id, "group:g_1", stamp, None, author)
    order.place("b_x", "group:g_2", 7, None, "a_y")  # another scope, stamped between
    assert order.neighbours("b_0") == (None, "b_1")
    assert order.neighbours("b_1") == ("b_0", "b_9")  # the same stamp: the id decides, as in a session's chain
    assert order.neighbours("b_9") == ("b_1", None)  # b_2 is b_9's writer's: its own next bead is no reply
    assert order.neighbours("b_2") == (None, None)
    assert order.neighbours("b_x") == (None, None)
    assert order.neighbours("b_unknown") == (None, None)


def test_conversations_written_at_once_interleave_and_each_bead_neighbours_its_own() -> None:
    """Two conversations imported at once into one group: each turn says when its conversation happened."""
    order = ConversationOrder()
    turns = [("b_a1", 0, "a_1"), ("b_b1", DAY, "a_3"), ("b_b2", DAY, "a_4"), ("b_a2", 0, "a_2"), ("b_a3", 0, "a_1"),
             ("b_b3", DAY, "a_3")]
    for stamp, (bead_id, happened, author) in enumerate(turns):
        order.place(bead_id, "group:g_1", stamp, happened, author)
    assert order.neighbours("b_a2") == ("b_a1", "b_a3")
    assert order.neighbours("b_b2") == ("b_b1", "b_b3")
    assert order.neighbours("b_b1") == (None, "b_b2")


def test_an_imported_turn_neighbours_only_turns_of_its_own_conversation() -> None:
    """Turns that say when they happened are one conversation within a minute of each other; a live bead (which
    says nothing) never neighbours an imported one."""
    order = ConversationOrder()
    gap = conversation.EVENT_GAP_MS
    turns = [("b_1", 0, "a_1"), ("b_live", None, "a_3"), ("b_2", gap, "a_2"), ("b_3", 2 * gap + 1, "a_1")]
    for stamp, (bead_id, happened, author) in enumerate(turns):
        order.place(bead_id, "group:g_1", stamp, happened, author)
    assert order.neighbours("b_2") == ("b_1", None)
    assert order.neighbours("b_live") == (None, None)


def test_beads_far_apart_in_their_stamps_are_not_neighbours() -> None:
    order = ConversationOrder()
    order.place("b_1", "global", 0, None, "a_1")
    order.place("b_2", "global", conversation.STAMP_GAP_MS + 1, None, "a_2")
    order.place("b_3", "global", conversation.STAMP_GAP_MS + 2, None, "a_1")
    assert order.neighbours("b_2") == (None, "b_3")


def test_a_removed_or_moved_bead_leaves_its_place_and_its_neighbours_become_each_others() -> None:
    order = ConversationOrder()
    for stamp, (bead_id, author) in enumerate([("b_1", "a_1"), ("b_2", "a_2"), ("b_3", "a_3")]):
        order.place(bead_id, "group:g_1", stamp, None, author)
    order.remove("b_2")
    assert order.neighbours("b_1") == (None, "b_3")
    assert order.neighbours("b_2") == (None, None)
    order.place("b_2", "group:g_1", 1, None, "a_2")
    order.place("b_3", "private:a_3", 2, None, "a_3")  # moved to another scope
    assert order.neighbours("b_2") == ("b_1", None)
    assert order.neighbours("b_3") == (None, None)
    order.remove("b_3")
    order.remove("b_3")  # twice: nothing to do


def _context_notes(hit: SearchHit) -> list[str]:
    return [n for n in hit.explanation.notes if n.startswith("context:")]


def _hit(hits: list[SearchHit], bead: MemoryBead) -> SearchHit:
    return next(h for h in hits if h.bead.bead_id == bead.bead_id)


async def test_a_reply_in_its_writers_own_session_takes_context_from_the_turn_written_before_it(world: World) -> None:
    """Two agents of a group, each writing into a session of its own: the reply holds none of the question's words
    and no edge joins them, yet it is read with the question — and never with a bead of another scope written
    between them."""
    word = f"zq{secrets.token_hex(5)}"
    asked = await world.creator.create_bead(
        f"where did you put the {word} keys", group_id=world.group_id, visibility="group", session_id=new_id("s")
    )
    await world.member.create_bead(f"my own {word} note", visibility=Visibility.PRIVATE.value)
    reply = await world.member.create_bead(
        "under the stairs, behind the boxes", group_id=world.group_id, visibility="group", session_id=new_id("s")
    )
    hits = (await world.member.search_beads(word, filters={"group_id": world.group_id})).hits
    assert hits[0].bead.bead_id == asked.bead_id
    notes = _context_notes(_hit(hits, reply))
    assert len(notes) == 1 and notes[0].endswith(f"from {asked.bead_id} ({WRITTEN_NEXT})")
    # Keyword and vector search alone are the plain lists: no context.
    plain = (await world.member.search_beads(word, mode="keyword", filters={"group_id": world.group_id})).hits
    assert reply.bead_id not in {h.bead.bead_id for h in plain}


@pytest.mark.parametrize("days_apart", [2, 30])
async def test_two_conversations_imported_into_one_group_at_once_each_reply_reads_its_own_question(
    world: World, days_apart: int
) -> None:
    words = [f"zr{secrets.token_hex(5)}" for _ in range(2)]
    when = [datetime(2025, 3, 1, tzinfo=UTC), datetime(2025, 3, 1, tzinfo=UTC) + timedelta(days=days_apart)]
    group = {"group_id": world.group_id, "visibility": "group"}
    asked = [await world.creator.create_bead(f"how did the {w} trip go", valid_from=t, session_id=new_id("s"), **group)
             for w, t in zip(words, when, strict=True)]
    replies = [await world.member.create_bead(f"reply number {i}: wonderful, thanks", valid_from=t,
                                              session_id=new_id("s"), **group) for i, t in enumerate(when)]
    for word, question, reply in zip(words, asked, replies, strict=True):
        hits = (await world.member.search_beads(word, filters={"group_id": world.group_id})).hits
        assert hits[0].bead.bead_id == question.bead_id
        notes = _context_notes(_hit(hits, reply))
        assert len(notes) == 1 and notes[0].endswith(f"from {question.bead_id} ({WRITTEN_NEXT})"), notes


async def test_agents_writing_into_a_group_at_once_through_two_hubs_give_each_hub_the_order_of_the_graph(
    connect: ClientFactory, two_hubs: tuple[HubContext, HubContext]
) -> None:
    """Each hub keeps the order from the index log it follows: after a burst of concurrent writes by eight agents
    (requests shared by the two hubs), a deletion and a move out of the group, both hubs give every bead the
    neighbours the graph's stamps, dates and authors give."""
    ops = await connect(new_ai("o"))
    group = await ops.create_group("talkers")
    agents = [await connect() for _ in range(8)]
    for agent in agents:
        await ops.add_member(group.group_id, agent.ai_id)
    day = datetime(2025, 5, 1, tzinfo=UTC)

    async def talk(agent: RecallClient, k: int) -> list[MemoryBead]:
        dated: list[dict[str, Any]] = [{"valid_from": day} if (k + i) % 3 == 0 else {} for i in range(5)]
        return [await agent.create_bead(f"turn {k}.{i}", group_id=group.group_id, visibility="group", **dated[i])
                for i in range(5)]

    written = [b for beads in await asyncio.gather(*(talk(a, k) for k, a in enumerate(agents))) for b in beads]
    await agents[0].delete_bead(written[0].bead_id)
    await agents[1].update_bead(written[5].bead_id, visibility="private", group_id=None)
    expected = ConversationOrder()
    rows = await two_hubs[0].graph.ro_query(
        "MATCH (b:Bead) WHERE b.group_id = $g AND b.visibility = 'group' "
        "RETURN b.bead_id, b.created_at, b.valid_from, b.created_by", {"g": group.group_id},
    )
    for bead_id, stamp, valid_from, author in rows:
        expected.place(bead_id, f"group:{group.group_id}", stamp, valid_from, author)
    assert len(rows) == len(written) - 2
    wanted = {b.bead_id: expected.neighbours(b.bead_id) if b is not written[5] else (None, None) for b in written[1:]}
    assert sum(1 for pair in wanted.values() for n in pair if n is not None) >= len(written) // 2
    for ctx in two_hubs:
        await ctx.keywords.catch_up()
        assert {b.bead_id: _neighbours(ctx, b.bead_id) for b in written[1:]} == wanted


def _neighbours(ctx: HubContext, bead_id: str) -> tuple[str | None, str | None]:
    pairs = ctx.keywords.conversation_edges([bead_id], [bead_id])
    return (next((e for later, e in pairs if later == bead_id), None),
            next((later for later, e in pairs if e == bead_id), None))
