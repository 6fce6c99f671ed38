"""A bead that says several things is found by the one sentence that answers: a bead within the model's window
with two sentences or more also has a vector of each sentence, pooled from the same reading of the whole text
(late chunking: no extra model run), and is scored by its best vector. The session hub runs the local model."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import World
from recall_hub.context import HubContext
from recall_hub.embedders import LocalEmbedder
from recall_hub.retrieval.embedding import sentence_spans
from recall_schemas import Visibility
from test_long_content import chunk_names, long_text

TURN = (
    "Hey Sam, long time no see, how have you been lately? Work has been hectic with the quarterly audit and "
    "endless meetings. My sister finally adopted a rescue greyhound named Pixel last weekend. "
    "Anyway, are we still on for the football match on Saturday?"
)
OTHERS = [
    "The audit committee meets every quarter to review the accounts.",
    "Saturday's football match kicks off at three at the city stadium.",
    "The shelter has kittens and rabbits waiting for new homes.",
    "My sister is moving to Lisbon for a new job in the spring.",
    "Dogs need daily walks, fresh water and a good diet.",
]
QUERY = "which dog did my sister adopt?"


def test_sentences_worth_a_vector_are_cut_by_character_span() -> None:
    spans = sentence_spans(TURN)
    assert [TURN[a:b] for a, b in spans] == [
        "Hey Sam, long time no see, how have you been lately?",
        "Work has been hectic with the quarterly audit and endless meetings.",
        "My sister finally adopted a rescue greyhound named Pixel last weekend.",
        "Anyway, are we still on for the football match on Saturday?",
    ]
    # Short sentences get no vector of their own, and one sentence worth a vector is the text itself.
    assert sentence_spans("Wow! Thanks so much. I finally adopted a rescue greyhound last weekend.") == []
    assert sentence_spans("One plain sentence with no end") == []
    said = 'She said "we ship on Friday." Then the build broke twice before lunch!! Who knew?'
    assert [said[a:b] for a, b in sentence_spans(said)] == [
        'She said "we ship on Friday."', "Then the build broke twice before lunch!!"
    ]


@pytest.mark.parametrize("int8_activations", [True, False])
async def test_a_sentence_vector_is_pooled_from_the_whole_text_read_once(int8_activations: bool) -> None:
    embedder = LocalEmbedder(int8_activations=int8_activations)
    try:
        spans = sentence_spans(TURN)
        rows, other = await embedder.embed_spans([TURN, OTHERS[0]], [spans, []])
        whole = await embedder.embed([TURN, OTHERS[0]])
        assert rows.shape == (1 + len(spans), 384) and other.shape == (1, 384)
        assert np.allclose(rows[0], whole[0], atol=1e-5) and np.allclose(other[0], whole[1], atol=1e-5)
        alone = await embedder.embed([TURN[a:b] for a, b in spans])
        for k in range(len(spans)):  # each part is nearest to its own sentence embedded alone
            assert int(np.argmax(alone @ rows[1 + k])) == k
        # A span past the model's window (256 tokens) has no tokens read, so no vector.
        long = TURN + " and more" * 400
        (cut,) = await embedder.embed_spans([long], [[(0, 52), (len(long) - 8, len(long))]])
        assert cut.shape == (2, 384)
    finally:
        await embedder.aclose()


async def test_a_bead_that_says_several_things_is_found_by_the_sentence_that_answers(
    world: World, hub: HubContext
) -> None:
    for text in OTHERS:
        await world.bead(Visibility.GROUP, text)
    turn = await world.bead(Visibility.GROUP, TURN)
    scope = f"group:{world.group_id}"
    sentences = len(sentence_spans(TURN))
    assert await chunk_names(hub, turn.bead_id, scope) == [turn.bead_id, *(f"{turn.bead_id}#s{n}" for n in range(1, 5))]
    assert sentences == 4
    found = await world.member.search_beads(QUERY, limit=1, mode="vector", filters={"group_id": world.group_id})
    assert [h.bead.bead_id for h in found.hits] == [turn.bead_id]
    # Its vector of the whole text alone ranks below another bead: the greeting and the football dilute it.
    first = await hub.vectors.vector(turn.bead_id, scope)
    query = (await hub.embedder.embed_queries([QUERY]))[0]
    best_other = max(float(np.dot(v, query)) for v in await hub.embedder.embed(OTHERS))
    assert first is not None and float(np.dot(first, query)) < best_other
    # Deleted, every one of its vectors goes.
    await world.creator.delete_bead(turn.bead_id)
    assert await chunk_names(hub, turn.bead_id, scope) == []


async def test_a_bead_that_grows_long_trades_its_sentences_for_windows_and_back(world: World, hub: HubContext) -> None:
    bead = await world.bead(Visibility.GROUP, TURN)
    scope = f"group:{world.group_id}"
    assert len(await chunk_names(hub, bead.bead_id, scope)) == 5
    await world.creator.update_bead(bead.bead_id, content=long_text())
    windows = await chunk_names(hub, bead.bead_id, scope)
    assert len(windows) > 5 and not any("#s" in name for name in windows)
    await world.creator.update_bead(bead.bead_id, title="This is a short note. It says two things at once.", content="")
    assert await chunk_names(hub, bead.bead_id, scope) == [bead.bead_id, f"{bead.bead_id}#s1", f"{bead.bead_id}#s2"]
    # Moved to the creator's private scope, all of them go with it.
    await world.creator.update_bead(bead.bead_id, visibility="private")
    assert await chunk_names(hub, bead.bead_id, scope) == []
    assert len(await chunk_names(hub, bead.bead_id, f"private:{world.creator.ai_id}")) == 3


async def test_without_sentence_vectors_a_short_bead_has_one_vector(
    world: World, hub: HubContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hub.settings, "sentence_vectors", False)  # RECALL_SENTENCE_VECTORS=false
    bead = await world.bead(Visibility.GROUP, TURN)
    assert await chunk_names(hub, bead.bead_id, f"group:{world.group_id}") == [bead.bead_id]
