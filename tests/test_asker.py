"""A question in the first person is about its asker: among the candidates, the beads the asker wrote weigh
more — in hybrid search, said in the hit's explanation — and a question that does not speak of its asker is
ranked as before."""

from __future__ import annotations

import secrets

from conftest import ClientFactory, new_ai
from recall_client import RecallClient
from recall_hub.context import HubContext
from recall_hub.retrieval.asker import OWN_BOOST, boost_own, speaks_of_self
from recall_hub.retrieval.ranking import Fused


def test_first_person_words_are_read_in_any_case_and_with_either_apostrophe() -> None:
    assert speaks_of_self("What book am I reading?")
    assert speaks_of_self("I’ll be late: where are my keys") and speaks_of_self("I'M LATE")
    assert not speaks_of_self("What did Caroline read?")
    assert not speaks_of_self("imagine idle items")


async def _talk(connect: ClientFactory) -> tuple[RecallClient, RecallClient, str, str, str]:
    """A user's statement, an assistant's reply that matches the question better, and other talk."""
    ops, user, assistant = [await connect(new_ai(k)) for k in ("o", "a", "a")]
    group = await ops.create_group("asker")
    for member in (user, assistant):
        await ops.add_member(group.group_id, member.ai_id)
    word = "zq" + secrets.token_hex(4)
    said = await user.create_bead(f"user: I'm reading a book {word} now, The Nightingale",
                                  group_id=group.group_id, visibility="group")
    reply = await assistant.create_bead(f"assistant: reading a book {word}",
                                        group_id=group.group_id, visibility="group")
    for topic in ("the weather is sunny today", "the train leaves at noon", "a recipe for lentil soup",
                  "the printer on the second floor jams", "tickets for the concert sold out"):
        await assistant.create_bead(f"assistant: {topic} {word}", group_id=group.group_id, visibility="group")
    user.read_after(assistant.index_position)  # each finds the other's writes, not only its own
    assistant.read_after(user.index_position)
    return user, assistant, word, said.bead_id, reply.bead_id


async def test_the_asker_s_own_statement_comes_first_when_the_question_speaks_of_the_asker(
    connect: ClientFactory,
) -> None:
    user, assistant, word, said, reply = await _talk(connect)
    plain = await user.search_beads(f"which book reading {word}", limit=5)
    assert [h.bead.bead_id for h in plain.hits][:2] == [reply, said]  # the reply shares more words
    asked = await user.search_beads(f"which book am I reading {word}", limit=5)
    assert asked.hits[0].bead.bead_id == said
    assert f"asked in the first person, and the asker wrote it: x{OWN_BOOST}" in asked.hits[0].explanation.notes
    by_other = await assistant.search_beads(f"which book am I reading {word}", limit=5)
    assert by_other.hits[0].bead.bead_id == reply  # the assistant asking: its own reply is what it said
    keyword = await user.search_beads(f"which book am I reading {word}", limit=5, mode="keyword")
    assert keyword.hits[0].bead.bead_id == reply  # the plain lists stay the plain lists


async def test_the_authors_are_what_screening_read_and_the_graph_tells_those_screened_without_one(
    hub: HubContext, connect: ClientFactory,
) -> None:
    user, assistant, word, said, reply = await _talk(connect)
    fused = {said: Fused(said, 1.0), reply: Fused(reply, 1.0)}
    await boost_own(hub, user.ai_id, "what am I reading", fused, {said: {}, reply: {"created_by": assistant.ai_id}})
    assert (fused[said].relevance, fused[reply].relevance) == (OWN_BOOST, 1.0)  # the statement's author: the graph's

    fused = {said: Fused(said, 1.0), reply: Fused(reply, 1.0)}
    screened = {said: {"created_by": user.ai_id}, reply: {"created_by": assistant.ai_id}}
    await boost_own(hub, assistant.ai_id, "what did I say", fused, screened)
    assert (fused[said].relevance, fused[reply].relevance) == (1.0, OWN_BOOST)
    await boost_own(hub, assistant.ai_id, f"which book reading {word}", fused, screened)  # not in the first person
    assert (fused[said].relevance, fused[reply].relevance) == (1.0, OWN_BOOST)
