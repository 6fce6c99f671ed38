"""``RECALL_CREATE_SETTLE=background``: a create replies once it is committed and logged, its vector follows,
and every read that starts after the reply waits for that work — whoever reads, whichever hub took the create."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Collection, Sequence
from typing import Any
from unittest.mock import ANY

import numpy as np
import pytest
from recall_hub.background import BackgroundWork
from recall_hub.config import HubSettings
from recall_hub.context import HubContext
from recall_hub.embedders.hashing import HashEmbedder
from recall_hub.ops.beads import create_bead, delete_bead, edit_bead, update_bead
from recall_hub.ops.forget import forget_bead
from recall_hub.ops.relationships import get_relationships
from recall_hub.ops.trust import reject_bead, verify_bead
from recall_hub.retrieval.freshness import handed_off_work_done, settling, work_settled
from recall_hub.retrieval.search import search_beads
from recall_schemas import (
    BeadUpdates,
    CreateBead,
    DeleteBead,
    EditBead,
    ForgetBead,
    GetRelationships,
    RejectBead,
    SearchBeads,
    SearchMode,
    UpdateBead,
    VerifyBead,
    Visibility,
)

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
        gated.fail = False
        await first.background.wait_for_earlier()
        await first.aclose()
        await second.aclose()


async def found_by_meaning(ctx: HubContext, caller: str, title: str) -> list[str]:
    result = await search_beads(ctx, caller, SearchBeads(query=title, mode=SearchMode.VECTOR, limit=5))
    return [hit.bead.bead_id for hit in result.hits]


def count_mark_checks(ctx: HubContext) -> list[int]:
    """How many times ``ctx`` reads the hand-off marks from now on (one cell, counted up)."""
    asked = [0]
    before = ctx.outbox.handed_off_before

    async def counted(until_ms: int | None = None, scopes: Collection[str] | None = None) -> tuple[int, list[str]]:
        asked[0] += 1
        return await before(until_ms, scopes)

    ctx.outbox.handed_off_before = counted  # type: ignore[method-assign]
    return asked


def beads_read_by_work(ctx: HubContext) -> list[str]:
    """The beads whose after-commit work at ``ctx`` has read them, from now on (appended once each read is back)."""
    read: list[str] = []
    before = ctx.beads.system_get

    async def recorded(bead_id: str) -> dict[str, Any] | None:
        props = await before(bead_id)
        read.append(bead_id)
        return props

    ctx.beads.system_get = recorded  # type: ignore[method-assign]
    return read


async def test_a_create_replies_before_its_vector_and_another_reader_at_another_hub_finds_it_by_meaning(
    two_hubs: tuple[HubContext, HubContext, GatedEmbedder],
) -> None:
    first, second, gated = two_hubs
    writer, reader, title = new_ai(), new_ai(), f"settled later {secrets.token_hex(4)}"
    bead = await create_bead(
        first, writer, CreateBead(title=title, content="its vector follows the reply", visibility=Visibility.GLOBAL)
    )
    assert first.background.pending == 1  # replied with the work still to do
    assert bead.bead_id not in await found_by_meaning(second, reader, title)  # no vector yet, and no wait

    asked = count_mark_checks(second)

    async def read_after_the_reply() -> list[str]:
        await handed_off_work_done(second)
        return await found_by_meaning(second, reader, title)

    reading = asyncio.create_task(read_after_the_reply())
    await until("the other hub waiting on the first one's create", lambda: asked[0] > 1)
    assert not reading.done()
    gated.gate.set()
    assert bead.bead_id in await reading
    assert await second.outbox.handed_off_before() == (ANY, [])  # the mark is gone with the work


async def test_a_create_whose_work_failed_once_is_not_waited_for(
    two_hubs: tuple[HubContext, HubContext, GatedEmbedder],
) -> None:
    """Work that failed is tried again in its own time: reads answer meanwhile, at either hub (the bead is found
    by its words, not yet by its meaning)."""
    first, second, gated = two_hubs
    writer, title = new_ai(), f"embedder down {secrets.token_hex(4)}"
    gated.fail = True
    gated.gate.set()
    bead = await create_bead(first, writer, CreateBead(title=title, content="written while the model fails"))

    async def failed_once() -> bool:
        pending = await second.outbox.system_pending(bead.bead_id)
        return [e.kind for e in pending] == ["created"] and pending[0].attempts >= 1

    await until("the first try failed", failed_once)
    async with asyncio.timeout(5):  # the hubs' wait is 30 s: answering at once is the test
        await handed_off_work_done(first)
        await handed_off_work_done(second)
    assert bead.bead_id not in await found_by_meaning(second, new_ai(), title)


async def test_work_that_failed_is_tried_again_by_its_hub_without_waiting_for_a_sweep(
    two_hubs: tuple[HubContext, HubContext, GatedEmbedder],
) -> None:
    """The model (or a store) comes back in a second or two: the hub that took the work tries it again until it
    is done, sooner than the sweep's pass (none runs here), and its mark goes with it."""
    first, second, gated = two_hubs
    writer, title = new_ai(), f"model back {secrets.token_hex(4)}"
    gated.fail = True
    gated.gate.set()
    bead = await create_bead(first, writer, CreateBead(title=title, content="written while the model fails",
                                                       visibility=Visibility.GLOBAL))

    async def failed() -> bool:
        return any(e.attempts >= 1 for e in await second.outbox.system_pending(bead.bead_id))

    await until("the first try failed", failed)
    gated.fail = False
    await until("found by meaning at the other hub", lambda: _found(second, title, bead.bead_id), within=15)
    assert await second.outbox.system_pending(bead.bead_id) == []
    assert await second.outbox.handed_off_before() == (ANY, [])


async def _found(ctx: HubContext, title: str, bead_id: str) -> bool:
    return bead_id in await found_by_meaning(ctx, new_ai(), title)


async def test_a_mark_left_by_a_hub_that_died_is_not_waited_for(
    two_hubs: tuple[HubContext, HubContext, GatedEmbedder],
) -> None:
    """A hub that dies after its create's work was done, but before clearing its mark (or while Redis was away),
    leaves a mark naming no work: a read drops it instead of waiting."""
    first, second, gated = two_hubs
    gated.gate.set()
    bead = await create_bead(first, new_ai(), CreateBead(title="settled", content="its work done"))
    await first.background.wait_for_earlier()
    await second.outbox.mark_handed_off(bead.bead_id, f"private:{bead.created_by}")  # as if never cleared
    async with asyncio.timeout(5):  # the hubs' wait is 30 s
        await handed_off_work_done(second)
    assert await second.outbox.handed_off_before() == (ANY, [])


async def test_a_create_is_linked_to_its_session_and_found_by_the_words_it_follows_before_its_work_runs(
    two_hubs: tuple[HubContext, HubContext, GatedEmbedder],
) -> None:
    """The create's own query links it FOLLOWS_FROM the session's previous bead, so when it replies — its
    after-commit work still waiting for the model — the link is there and a keyword search finds the answer by
    the words of the question it follows."""
    first, _, gated = two_hubs
    writer, word = new_ai(), f"ideas{secrets.token_hex(3)}"
    session = f"s_{secrets.token_hex(6)}"
    gated.gate.set()
    question = await create_bead(first, writer, CreateBead(
        title=f"where do you get the {word}?", content="", visibility=Visibility.GLOBAL, session_id=session))
    await first.background.wait_for_earlier()
    gated.gate.clear()
    answer = await create_bead(first, writer, CreateBead(
        title="mostly from old books", content="", visibility=Visibility.GLOBAL, session_id=session))
    assert first.background.pending == 1  # replied with the work still to do
    assert await first.beads.session_edges(writer, [answer.bead_id], [answer.bead_id]) == [
        (answer.bead_id, question.bead_id)
    ]
    await first.keywords.catch_up()
    hits = await search_beads(first, writer, SearchBeads(query=word, mode=SearchMode.KEYWORD, limit=5))
    assert answer.bead_id in [hit.bead.bead_id for hit in hits.hits]
    gated.gate.set()


async def test_a_keyword_search_does_not_wait_for_handed_off_work_and_a_hybrid_search_does(
    two_hubs: tuple[HubContext, HubContext, GatedEmbedder],
) -> None:
    """Within a read (:func:`settling`, what the transport opens around one), only the steps that read what a
    hand-off makes wait for it: a keyword search answers at once — the create's words were logged before its
    reply — while a hybrid search waits for the vector, and then finds the bead by meaning too."""
    first, second, gated = two_hubs
    writer, title = new_ai(), f"words before vectors {secrets.token_hex(4)}"
    bead = await create_bead(first, writer, CreateBead(title=title, content="", visibility=Visibility.GLOBAL))
    assert first.background.pending == 1
    await second.keywords.catch_up()
    asked = count_mark_checks(second)
    with settling(second, None):
        async with asyncio.timeout(5):  # the hubs' wait is 30 s
            by_words = await search_beads(second, writer, SearchBeads(query=title, mode=SearchMode.KEYWORD))
        assert bead.bead_id in [hit.bead.bead_id for hit in by_words.hits] and asked[0] == 0
        hybrid = asyncio.create_task(search_beads(second, writer, SearchBeads(query=title)))
        await until("the hybrid search waiting on the create's vector", lambda: asked[0] > 1)
        assert not hybrid.done()
        gated.gate.set()
        hits = (await hybrid).hits
    assert [hit.bead.bead_id for hit in hits][:1] == [bead.bead_id]
    assert "vector" in [source.list for source in hits[0].explanation.sources]


async def test_a_read_waits_for_the_hand_offs_it_names_and_not_for_later_ones() -> None:
    """This hub's own hand-offs are waited for as they finish, each by its bead: work handed off after a read
    began (a later create's) does not hold that read up."""
    work = BackgroundWork()
    first_done, second_done = asyncio.Event(), asyncio.Event()
    order: list[str] = []

    async def first() -> None:
        await first_done.wait()
        order.append("first done")

    async def read() -> None:
        await work.wait_for(["b_first", "b_elsewhere"])  # "b_elsewhere": not this hub's
        order.append("read")

    assert work.try_hand_off(first, key="b_first")
    assert work.try_hand_off(second_done.wait, key="b_second")
    reading = asyncio.ensure_future(read())
    await asyncio.sleep(0)  # one turn of the loop: the read starts and waits (a yield, not a timed wait)
    first_done.set()
    async with asyncio.timeout(5):
        await reading
    assert order == ["first done", "read"] and work.pending == 1  # "b_second" still runs
    second_done.set()
    await work.wait_for_earlier()
    assert work.pending == 0


async def test_a_handed_off_create_is_related_to_the_similar_create_handed_off_before_it(
    two_hubs: tuple[HubContext, HubContext, GatedEmbedder],
) -> None:
    """A create's auto-links are found among the vectors of the creates before it, as inline: its handed-off
    work waits for theirs (the model being busy with the first create's text must not lose the link)."""
    first, _, gated = two_hubs
    writer, session = new_ai(), f"s_{secrets.token_hex(6)}"
    earlier = await create_bead(first, writer, CreateBead(
        title="Flaky test in checkout", content="test_checkout fails one run in ten", session_id=session))
    asked = count_mark_checks(first)
    later = await create_bead(first, writer, CreateBead(
        title="Flaky test in checkout fixed", content="test_checkout fails one run in ten: fixed the race",
        session_id=session))
    await until("the later create's work waiting for the earlier one's", lambda: asked[0] >= 1)
    assert [e.kind for e in await first.outbox.system_pending(later.bead_id)] == ["created"]
    gated.gate.set()
    await first.background.wait_for_earlier()
    edges = await get_relationships(first, writer, GetRelationships(bead_id=later.bead_id))
    assert (later.bead_id, earlier.bead_id) in {
        (r.from_id, r.to_id) for r in edges.relationships if r.rel_type == "RELATED_TO"
    }


async def test_the_feed_shows_a_bead_as_created_though_an_edit_committed_before_the_work_that_logs_it(
    two_hubs: tuple[HubContext, HubContext, GatedEmbedder],
) -> None:
    """The change feed's ``created`` entry is the bead as its create committed it, and the edit after it has an
    entry of its own, although the edit (at the other hub) committed before the create's work read the bead:
    that work waited behind an earlier create's, held at the model."""
    first, second, gated = two_hubs
    writer = new_ai()
    await create_bead(first, writer, CreateBead(title="an earlier create", content="", visibility=Visibility.GLOBAL))
    bead = await create_bead(first, writer, CreateBead(
        title=f"rotate the keys {secrets.token_hex(4)}", content="before the audit", visibility=Visibility.GLOBAL))
    asked = count_mark_checks(second)
    editing = asyncio.create_task(edit_bead(second, writer, EditBead(bead_id=bead.bead_id, add_tags=["security"])))
    await until("the edit committed and waiting for the creates' work", lambda: asked[0] >= 1)
    assert [e.kind for e in await first.outbox.system_pending(bead.bead_id)] == ["created", "updated"]
    gated.gate.set()
    await editing
    changes = [c for c in await second.feed.read("global", None, 10_000) if c.bead_id == bead.bead_id]
    assert [(c.action, c.bead.tags if c.bead else None) for c in changes] == [
        ("created", []), ("updated", ["security"])
    ]


WRITES_TO_A_BEAD = {
    "update": lambda ctx, writer, _, bead_id: update_bead(
        ctx, writer, UpdateBead(bead_id=bead_id, updates=BeadUpdates(content="rewritten"))),
    "edit": lambda ctx, writer, _, bead_id: edit_bead(ctx, writer, EditBead(bead_id=bead_id, add_tags=["checked"])),
    "delete": lambda ctx, writer, _, bead_id: delete_bead(ctx, writer, DeleteBead(bead_id=bead_id)),
    "verify": lambda ctx, _, other, bead_id: verify_bead(ctx, other, VerifyBead(bead_id=bead_id)),
    "reject": lambda ctx, _, other, bead_id: reject_bead(ctx, other, RejectBead(bead_id=bead_id, reason="out of date")),
    "forget": lambda ctx, writer, _, bead_id: forget_bead(ctx, writer, ForgetBead(bead_id=bead_id, reason="a mistake")),
}


@pytest.mark.parametrize("write", WRITES_TO_A_BEAD)
async def test_the_feed_keeps_the_order_of_the_replies_when_a_bead_is_written_while_its_create_settles(
    two_hubs: tuple[HubContext, HubContext, GatedEmbedder], write: str
) -> None:
    """Create one bead, then another into the same scope, then write to the first, each after the previous
    reply, while the first create's work is still running: the feed lists the first create, the second, then
    the write. The first create's work logs its own entry only; the write is logged by its request, after the
    second create's work."""
    first, second, gated = two_hubs
    writer, other = new_ai(), new_ai()
    worked_on = beads_read_by_work(first)
    earlier = await create_bead(first, writer, CreateBead(
        title=f"earlier {secrets.token_hex(4)}", content="its work held at the model", visibility=Visibility.GLOBAL))
    later = await create_bead(first, writer, CreateBead(
        title=f"later {secrets.token_hex(4)}", content="created before the write", visibility=Visibility.GLOBAL))
    await until("the earlier create's work at the model", lambda: earlier.bead_id in worked_on)
    asked = count_mark_checks(second)
    writing = asyncio.create_task(WRITES_TO_A_BEAD[write](second, writer, other, earlier.bead_id))
    await until("the write committed and waiting for the creates' work", lambda: asked[0] >= 1)
    assert len(await first.outbox.system_pending(earlier.bead_id)) == 2
    gated.gate.set()
    await writing
    await first.background.wait_for_earlier()
    mine = {earlier.bead_id, later.bead_id}
    feed = [(c.bead_id, c.action) for c in await second.feed.read("global", None, 10_000) if c.bead_id in mine]
    assert feed[:2] == [(earlier.bead_id, "created"), (later.bead_id, "created")]
    assert [bead_id for bead_id, _ in feed[2:]] == [earlier.bead_id]


async def test_a_read_waits_only_for_the_creates_into_scopes_its_caller_may_read(
    two_hubs: tuple[HubContext, HubContext, GatedEmbedder],
) -> None:
    """A create another agent cannot see cannot change what that agent reads, so its read does not wait for the
    create's work; the writer's own read does."""
    first, second, gated = two_hubs
    writer, other = new_ai(), new_ai()
    private = await create_bead(first, writer, CreateBead(title="my own note", content="only I may read it"))
    assert private.bead_id in (await second.outbox.handed_off_before())[1]
    with settling(second, None, other):
        async with asyncio.timeout(5):  # the hubs' wait is 30 s
            await work_settled()
    assert private.bead_id in (await second.outbox.handed_off_before())[1]  # still being worked on
    asked = count_mark_checks(second)
    with settling(second, None, writer):
        reading = asyncio.ensure_future(work_settled())
        await until("the writer's read waiting on its create", lambda: asked[0] > 1)
        assert not reading.done()
        gated.gate.set()
        await reading
    assert await second.outbox.handed_off_before() == (ANY, [])
