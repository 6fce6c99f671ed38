"""A create embeds its text while it commits: the model's time overlaps the checks and the write instead of
following them, and the vector stored is the one the text gives — once, and only for a bead that was written."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Sequence

import numpy as np
import pytest
from recall_hub.config import HubSettings
from recall_hub.context import HubContext
from recall_hub.embedders.early import EarlyVectors
from recall_hub.embedders.hashing import HashEmbedder
from recall_hub.ops.beads import create_bead, create_beads
from recall_hub.retrieval.freshness import handed_off_work_done
from recall_hub.store.vectors import scope_of
from recall_schemas import CreateBead, CreateBeads, NotFound, Visibility

from tests.conftest import new_ai


class RecordingEmbedder(HashEmbedder):
    """Notes each document text it embeds, in order, in ``events`` (shared with the test)."""

    def __init__(self, events: list[str]) -> None:
        super().__init__()
        self.events = events

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.events.extend(f"embed:{text}" for text in texts)
        return await super().embed(texts)


def _note_commits(store: object, write: str, events: list[str]) -> None:
    """Note ``committed`` in ``events`` each time ``store.<write>`` returns."""
    original = getattr(store, write)

    async def noted(*args: object, **kwargs: object) -> object:
        found = await original(*args, **kwargs)
        events.append("committed")
        return found

    setattr(store, write, noted)


@pytest.fixture
async def recorded(settings: HubSettings) -> AsyncIterator[tuple[HubContext, list[str]]]:
    events: list[str] = []
    ctx = await HubContext.connect(
        settings.model_copy(update={"graph_name": f"early_{secrets.token_hex(4)}"}), embedder=RecordingEmbedder(events)
    )
    for write in ("create", "create_many"):
        _note_commits(ctx.beads, write, events)
    try:
        yield ctx, events
    finally:
        await ctx.aclose()


async def test_a_create_embeds_its_text_once_starting_before_its_commit(
    recorded: tuple[HubContext, list[str]],
) -> None:
    ctx, events = recorded
    writer, title = new_ai(), f"embedded early {secrets.token_hex(4)}"
    bead = await create_bead(ctx, writer, CreateBead(title=title, content="while the write commits"))
    text = f"embed:{title}\nwhile the write commits"
    assert events.count(text) == 1
    assert events.index(text) < events.index("committed")
    await handed_off_work_done(ctx)  # what a read through the bus waits for under RECALL_CREATE_SETTLE=background
    stored = await ctx.vectors.vector(bead.bead_id, scope_of({"visibility": "private", "created_by": writer}))
    expected = (await HashEmbedder().embed([f"{title}\nwhile the write commits"]))[0]
    assert stored is not None
    assert float(np.dot(stored, expected)) > 0.99  # the set's Q8 quantisation, not another text
    assert len(ctx.early_vectors) == 0


async def test_a_refused_or_replayed_create_leaves_no_embedding_behind(
    recorded: tuple[HubContext, list[str]],
) -> None:
    ctx, _ = recorded
    writer = new_ai()
    with pytest.raises(NotFound):
        await create_bead(ctx, writer, CreateBead(
            title="not my group", visibility=Visibility.GROUP, group_id=f"g_{secrets.token_hex(4)}"
        ))
    assert len(ctx.early_vectors) == 0
    again = CreateBead(title=f"twice {secrets.token_hex(4)}", idempotency_key=f"k-{secrets.token_hex(4)}")
    first = await create_bead(ctx, writer, again)
    replay = await create_bead(ctx, writer, again)
    assert replay.bead_id == first.bead_id
    assert len(ctx.early_vectors) == 0


async def test_a_batch_embeds_its_texts_while_it_commits_and_leaves_no_embedding_behind(
    recorded: tuple[HubContext, list[str]],
) -> None:
    ctx, events = recorded
    writer, tag = new_ai(), secrets.token_hex(4)
    key = f"k-{tag}"
    made = await create_beads(ctx, writer, CreateBeads(beads=[
        CreateBead(title=f"batch {tag} 0", content="while the batch commits", idempotency_key=key),
        CreateBead(title=f"batch {tag} 1", content="a replay of the first", idempotency_key=key),
        CreateBead(title=f"batch {tag} 2", content="while the batch commits"),
        CreateBead(title="not my group", visibility=Visibility.GROUP, group_id=f"g_{tag}"),
    ]))
    first, replay, other, refused = made.items
    assert first.created and other.created and replay.bead_id == first.bead_id and not replay.created
    assert refused.error is not None and refused.error.code == "not_found"
    for n in (0, 2):
        text = f"embed:batch {tag} {n}\nwhile the batch commits"
        assert events.count(text) == 1
        assert events.index(text) < events.index("committed")
    scope = scope_of({"visibility": "private", "created_by": writer})
    assert first.bead_id is not None and other.bead_id is not None
    for bead_id, n in ((first.bead_id, 0), (other.bead_id, 2)):
        stored = await ctx.vectors.vector(bead_id, scope)
        expected = (await HashEmbedder().embed([f"batch {tag} {n}\nwhile the batch commits"]))[0]
        assert stored is not None and float(np.dot(stored, expected)) > 0.99
    assert len(ctx.early_vectors) == 0


async def test_an_early_embedding_is_taken_only_for_the_texts_it_embeds() -> None:
    early = EarlyVectors()
    gate = asyncio.Event()

    async def embedding() -> np.ndarray:
        await gate.wait()
        return np.ones((1, 4), dtype=np.float32)

    early.start("b_1", ["the text as asked"], embedding())
    assert early.take("b_1", ["the text as stored, changed since"]) is None
    assert len(early) == 0  # dropped, and its embedding cancelled

    early.start("b_1", ["the text as asked"], embedding())
    taken = early.take("b_1", ["the text as asked"])
    assert taken is not None and early.take("b_1", ["the text as asked"]) is None  # taken once
    gate.set()
    assert (await taken).shape == (1, 4)

    failed: asyncio.Future[np.ndarray] = asyncio.get_running_loop().create_future()
    failed.set_exception(RuntimeError("embedder down"))
    early.start("b_2", ["nobody takes it"], failed)
    early.drop("b_2")  # its failure read, so nothing reports it as never retrieved
    assert len(early) == 0
