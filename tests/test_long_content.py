"""Long content is found by meaning: a bead longer than the model's window is embedded in overlapping chunks,
each a vector of the bead's scope, and scored by its best chunk; the chunks are replaced when its text
changes, moved with its scope and removed with it (deleted or forgotten). The session hub runs the local
model, which reads 256 tokens of a text."""

from __future__ import annotations

import itertools
import math
import random
import secrets

import numpy as np
from conftest import World
from recall_hub.context import HubContext
from recall_hub.retrieval.embedding import MAX_CHUNKS, bead_chunks
from recall_hub.retrieval.freshness import handed_off_work_done
from recall_hub.store.vectors import CHUNK_DISCOUNT, SENTENCE_DISCOUNT, bead_of, element, nearest_beads
from recall_schemas import Visibility

FILLER = (
    "The migration guide walks through the schema changes table by table, with the commands to run, the checks "
    "to make before each step and what to do when a step fails halfway. "
)
TAIL = "Finally, the hedgehog sanctuary in Lapland feeds its animals with mealworms every Thursday evening."
QUERY = "when are the hedgehogs fed at the sanctuary in Lapland?"


def long_text() -> str:
    return FILLER * 40 + TAIL  # ~1,400 words: the fact lies far beyond the model's 256 tokens


async def chunk_names(hub: HubContext, bead_id: str, scope: str) -> list[str]:
    """The names of the bead's vectors present in ``scope``'s set: its whole text, windows, sentences (once the
    creates handed off before have their vectors, as a read through the bus would wait for)."""
    await handed_off_work_done(hub)
    key = hub.vectors.key(scope)
    present = []
    for sentences in (False, True):
        for chunk in range(1 if sentences else 0, MAX_CHUNKS):
            name = element(bead_id, chunk, sentences)
            if await hub.redis.execute_command("VEMB", key, name):  # type: ignore[no-untyped-call]
                present.append(name)
    return present


def every_entry_read(replies: list[list[bytes]], k: int) -> list[tuple[str, float]]:
    """The rule itself: every vector of every set read, each bead scored by its best (a later chunk discounted)."""
    best: dict[str, float] = {}
    for reply in replies:
        for name_bytes, score in zip(reply[::2], reply[1::2], strict=True):
            name = name_bytes.decode()
            discount = 0.0 if bead_of(name) == name else SENTENCE_DISCOUNT if "#s" in name else CHUNK_DISCOUNT
            similarity = 2.0 * float(score) - 1.0 - discount
            best[bead_of(name)] = max(best.get(bead_of(name), -math.inf), similarity)
    return sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))[:k]


def test_nearest_beads_are_the_nearest_beads_of_every_vector() -> None:
    rng = random.Random(5)
    for _ in range(2000):
        replies = []
        for _ in range(rng.randint(0, 4)):  # one VSIM reply per scope, best first, names unique within it
            entries = {(f"b_{rng.randint(0, 40)}" + rng.choice(["", "", "#1", "#2", "#s1"])): round(rng.random(), 2)
                       for _ in range(rng.randint(0, 60))}
            ordered = sorted(entries.items(), key=lambda kv: -kv[1])
            replies.append([x for name, score in ordered for x in (name.encode(), str(score).encode())])
        k = rng.randint(1, 30)
        assert nearest_beads(replies, k) == every_entry_read(replies, k)


def test_a_text_longer_than_the_window_is_cut_into_overlapping_chunks_the_first_whole() -> None:
    text = " ".join(f"w{i}" for i in range(1000))
    chunks = bead_chunks({"title": "t", "content": text}, 256)
    assert chunks[0] == f"t\n{text}"  # what the model reads of a short bead is unchanged
    windows = [c.split() for c in chunks[1:]]
    assert windows[-1][-1] == "w999"  # to the end
    for before, after in itertools.pairwise(windows):
        assert set(before) & set(after)  # overlapping
        assert len(before) <= int(256 * 0.62)
    assert bead_chunks({"title": "short"}, 256) == ["short"]
    assert bead_chunks({"title": "t", "content": text}, None) == [f"t\n{text}"]
    huge = bead_chunks({"title": "t", "content": " ".join(f"w{i}" for i in range(40_000))}, 256)
    assert len(huge) == MAX_CHUNKS and huge[-1].split()[-1] == "w39999"  # spread over all of it


async def test_the_end_of_a_long_bead_is_found_by_meaning(world: World, hub: HubContext) -> None:
    others = [
        "The hedge trimmer is stored in the blue shed behind the greenhouse.",
        "Sanctuary volunteers meet on the first Monday of the month to plan the rota.",
        "Mealworm protein bars are sold at the health food shop on Main Street.",
        "Lapland trip: flights booked for February, the cabin has a sauna.",
    ]
    for text in others:
        await world.bead(Visibility.GROUP, text)
    long_bead = await world.bead(Visibility.GROUP, "Migration guide", content=long_text())
    scope = f"group:{world.group_id}"
    names = await chunk_names(hub, long_bead.bead_id, scope)
    assert len(names) == len(bead_chunks(await hub.beads.system_get(long_bead.bead_id) or {}, 256)) > 5
    found = await world.member.search_beads(QUERY, limit=2, mode="vector", filters={"group_id": world.group_id})
    assert long_bead.bead_id in [h.bead.bead_id for h in found.hits]
    # Its vector of the whole text alone (what the model reads: the first 256 tokens) does not find it.
    first = await hub.vectors.vector(long_bead.bead_id, scope)
    query = (await hub.embedder.embed_queries([QUERY]))[0]
    best_other = max(float(np.dot(v, query)) for v in await hub.embedder.embed(others))
    assert first is not None and float(np.dot(first, query)) < best_other


async def test_chunks_follow_the_bead_through_updates_moves_and_removal(world: World, hub: HubContext) -> None:
    bead = await world.bead(Visibility.GROUP, f"Runbook {secrets.token_hex(3)}", content=long_text())
    group_scope, private_scope = f"group:{world.group_id}", f"private:{world.creator.ai_id}"
    many = await chunk_names(hub, bead.bead_id, group_scope)
    assert len(many) > 5
    # A shorter text: the chunks it no longer has go.
    await world.creator.update_bead(bead.bead_id, content=FILLER * 5)
    fewer = await chunk_names(hub, bead.bead_id, group_scope)
    assert 1 <= len(fewer) < len(many) and fewer == many[: len(fewer)]
    # A longer text again, then a move to the creator's private scope: all of them move, none stay.
    await world.creator.update_bead(bead.bead_id, content=long_text())
    await world.creator.update_bead(bead.bead_id, visibility="private")
    assert await chunk_names(hub, bead.bead_id, group_scope) == []
    assert await chunk_names(hub, bead.bead_id, private_scope) == many
    # Filters reach every chunk: a tag filter finds the bead by its last chunk.
    await world.creator.edit_bead(bead.bead_id, add_tags=["runbook"])
    hits = await world.creator.search_beads(QUERY, limit=3, mode="vector", filters={"tags": ["runbook"]})
    assert [h.bead.bead_id for h in hits.hits] == [bead.bead_id]
    # Deleted: nothing left anywhere; and a forgotten bead's chunks go the same way.
    await world.creator.delete_bead(bead.bead_id)
    assert await chunk_names(hub, bead.bead_id, private_scope) == []
    doomed = await world.bead(Visibility.GROUP, "Another runbook", content=long_text())
    assert len(await chunk_names(hub, doomed.bead_id, group_scope)) > 5
    await world.ops.forget_bead(doomed.bead_id, "leaked")
    assert await chunk_names(hub, doomed.bead_id, group_scope) == []
