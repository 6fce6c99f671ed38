"""``RECALL_CREATE_SETTLE=background``: a create replies once it is committed and logged, its vector follows,
and a read that must see the caller's writes waits for their vectors — whichever hub took the create."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Sequence

import numpy as np
import pytest
from recall_hub.config import HubSettings
from recall_hub.context import HubContext
from recall_hub.embedders.hashing import HashEmbedder
from recall_hub.ops.beads import create_bead
from recall_hub.retrieval.freshness import handed_off_work_done
from recall_hub.retrieval.search import search_beads
from recall_schemas import CreateBead, SearchBeads, SearchMode

from tests.conftest import new_ai, until


class GatedEmbedder(HashEmbedder):
    """Embeds documents only once ``gate`` is open (queries at once); ``fail`` makes document embedding fail."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.fail = False

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        await self.gate.wait()
        if self.fail:
            raise RuntimeError("embedder down")
        return await super().embed(texts)


@pytest.fixture
async def two_hubs(settings: HubSettings) -> AsyncIterator[tuple[HubContext, HubContext, GatedEmbedder]]:
    """Two hubs' contexts on one graph, both settling creates in the background; the first one's document
    embedding waits for its gate."""
    background = settings.model_copy(update={"graph_name": f"settle_{secrets.token_hex(4)}",
                                             "create_settle": "background", "index_wait_s": 30.0})
    gated = GatedEmbedder()
    first = await HubContext.connect(background, embedder=gated)
    second = await HubContext.connect(background, embedder=HashEmbedder())
    try:
        yield first, second, gated
    finally:
        gated.gate.set()
        await first.background.wait_for_earlier()
        await first.aclose()
        await second.aclose()


async def found_by_meaning(ctx: HubContext, caller: str, title: str) -> list[str]:
    result = await search_beads(ctx, caller, SearchBeads(query=title, mode=SearchMode.VECTOR, limit=5))
    return [hit.bead.bead_id for hit in result.hits]


async def test_a_create_replies_before_its_vector_and_its_writer_finds_it_by_meaning_through_another_hub(
    two_hubs: tuple[HubContext, HubContext, GatedEmbedder],
) -> None:
    first, second, gated = two_hubs
    writer, title = new_ai(), f"settled later {secrets.token_hex(4)}"
    bead = await create_bead(first, writer, CreateBead(title=title, content="its vector follows the reply"))
    position = first.index_log.last_appended
    assert first.background.pending == 1  # replied with the work still to do
    assert bead.bead_id not in await found_by_meaning(second, writer, title)  # no vector yet, and no demand

    asked = 0
    unsettled = second.outbox.system_unsettled

    async def counted(until_ms: int) -> int:
        nonlocal asked
        asked += 1
        return await unsettled(until_ms)

    second.outbox.system_unsettled = counted  # type: ignore[method-assign]

    async def read_your_write() -> list[str]:
        await handed_off_work_done(second, position)
        return await found_by_meaning(second, writer, title)

    reading = asyncio.create_task(read_your_write())
    await until("the other hub waiting on the first one's create", lambda: asked > 0)
    assert not reading.done()
    gated.gate.set()
    assert bead.bead_id in await reading


async def test_a_create_whose_work_failed_once_is_not_waited_for(
    two_hubs: tuple[HubContext, HubContext, GatedEmbedder],
) -> None:
    """Work that failed is the sweep's to retry, in its own time: reads answer meanwhile (the bead is found by
    its words, not yet by its meaning)."""
    first, second, gated = two_hubs
    writer, title = new_ai(), f"embedder down {secrets.token_hex(4)}"
    gated.fail = True
    gated.gate.set()
    bead = await create_bead(first, writer, CreateBead(title=title, content="written while the model fails"))
    position = first.index_log.last_appended
    await first.background.wait_for_earlier()
    pending = await second.outbox.system_pending(bead.bead_id)
    assert [(e.kind, e.attempts) for e in pending] == [("created", 1)]
    async with asyncio.timeout(5):  # the hubs' wait is 30 s: answering at once is the test
        await handed_off_work_done(second, position)
