"""create_beads and `recall import`: many beads per request, each checked and idempotent on its own."""

from __future__ import annotations

import asyncio
import json
import secrets
import sys
from pathlib import Path

import pytest
from recall_hub.context import HubContext
from recall_hub.tooling.stack import EmbeddedStack
from recall_schemas import CreateBead, InvalidRequest, new_id

from tests.conftest import ClientFactory, new_ai


def _word() -> str:
    return f"zb{secrets.token_hex(5)}"


async def _count_beads(hub: HubContext, ids: list[str]) -> int:
    return len(await hub.beads.system_many(ids))


async def test_a_batch_stores_each_bead_as_a_single_create_would(connect: ClientFactory, hub: HubContext):
    ops, outsider = await connect(new_ai("o")), await connect()
    group = (await ops.create_group("batch team")).group_id
    session, word = new_id("s"), _word()
    beads = [
        {"title": f"step {i} {word}", "content": f"detail {i}", "session_id": session, "tags": ["batch"]}
        for i in range(5)
    ]
    beads.append({"title": f"team note {word}", "visibility": "group", "group_id": group})
    items = await ops.create_beads(beads, batch_size=4)  # two requests
    assert [i.error for i in items] == [None] * 6 and all(i.created for i in items)
    ids = [i.bead_id for i in items]
    assert len(set(ids)) == 6
    # Each bead is stored, found by its words and by meaning, listed in its session in order, and
    # followed by the after-commit work of a single create (vector, FOLLOWS_FROM chain, feed entry).
    assert [b.bead_id for b in await ops.get_by_session(session)] == ids[:5]
    assert {h.bead.bead_id for h in (await ops.search_beads(word, mode="keyword", limit=10)).hits} == set(ids)
    by_meaning = await ops.search_beads("step 0 detail 0", mode="vector", filters={"session_id": session})
    assert ids[0] in {h.bead.bead_id for h in by_meaning.hits}
    for bead_id in ids:
        props = await hub.beads.system_get(bead_id)
        assert props is not None and props["vec_model"] == hub.vectors.model_id
    chain = await ops.get_relationships(ids[1])
    assert any(r.rel_type.value == "FOLLOWS_FROM" and (r.from_id, r.to_id) == (ids[1], ids[0]) for r in chain)
    changes = await ops.changes_since(group)
    assert ids[5] in [c.bead_id for c in changes.changes]
    # The outsider sees none of the group bead, in a batch or not.
    assert ids[5] not in {h.bead.bead_id for h in (await outsider.search_beads(word, mode="keyword")).hits}
    # Every bead's after-commit work is done (other tests' may still be pending on the shared hub).
    assert all(not entries for entries in (await hub.outbox.system_pending_many(ids)).values())


async def test_writes_keep_the_order_they_came_in_whatever_the_batch_size(connect: ClientFactory):
    """A single write, a batch right after it, another single write: the session lists and chains them in that
    order (a batch's beads are stamped after the write before it, not back-dated)."""
    writer = await connect()
    session = new_id("s")
    first = await writer.create_bead("before the batch", session_id=session)
    batch = await writer.create_beads([{"title": f"batch {i}", "session_id": session} for i in range(200)])
    last = await writer.create_bead("after the batch", session_id=session)
    expected = [first.bead_id, *(i.bead_id for i in batch), last.bead_id]
    listed = await writer.get_by_session(session, limit=len(expected))
    assert [b.bead_id for b in listed] == expected
    assert [b.created_at for b in listed] == sorted({b.created_at for b in listed})  # strictly increasing
    chain = await writer.get_relationships(expected[1], rel_type="FOLLOWS_FROM", direction="out")
    assert [r.to_id for r in chain] == [first.bead_id]


async def test_each_bead_is_refused_on_its_own_and_nothing_of_it_is_written(connect: ClientFactory, hub: HubContext):
    ops, agent = await connect(new_ai("o")), await connect()
    group = (await ops.create_group("not yours")).group_id
    word = _word()
    items = await agent.create_beads([
        {"title": f"fine {word}"},
        {"title": f"sneaking in {word}", "visibility": "group", "group_id": group},  # not a member
        {"title": f"reserved {word}", "metadata": {"_recall_x": 1}},
        {"title": f"also fine {word}"},
    ])
    assert [i.error.code.value if i.error else None for i in items] == [None, "not_found", "invalid", None]
    assert [i.bead_id is not None for i in items] == [True, False, False, True]
    # refused exactly like a single create into that group: the group is "not found"
    with pytest.raises(Exception) as single:
        await agent.create_bead(f"single {word}", visibility="group", group_id=group)
    assert type(single.value).__name__ == "NotFound" and items[1].error.message == str(single.value)
    found = {h.bead.bead_id for h in (await ops.search_beads(word, mode="keyword", limit=10)).hits}
    assert found == set()  # the group's ops sees nothing of the refused bead
    assert {h.bead.bead_id for h in (await agent.search_beads(word, mode="keyword", limit=10)).hits} == {
        items[0].bead_id, items[3].bead_id}


async def test_a_retried_batch_stores_nothing_twice(connect: ClientFactory, hub: HubContext):
    agent = await connect()
    word = _word()
    beads = [CreateBead(title=f"once {word} {i}", idempotency_key=f"k{word}{i}") for i in range(3)]
    first = await agent.create_beads(beads)
    again = await agent.create_beads([*beads, CreateBead(title=f"new {word}", idempotency_key=f"k{word}new")])
    assert [i.bead_id for i in again[:3]] == [i.bead_id for i in first]
    assert [i.created for i in again] == [False, False, False, True]
    assert len((await agent.search_beads(word, mode="keyword", limit=20)).hits) == 4
    # A key repeated inside one batch is one bead as well.
    twice = await agent.create_beads([CreateBead(title=f"dup {word}", idempotency_key=f"d{word}")] * 2, batch_size=8)
    assert twice[0].bead_id == twice[1].bead_id and [i.created for i in twice] == [True, False]


async def test_a_malformed_batch_is_refused_whole_and_writes_nothing(connect: ClientFactory, hub: HubContext):
    agent = await connect()
    word = _word()
    with pytest.raises(InvalidRequest):
        await agent.create_beads([{"title": f"ok {word}"}, {"title": ""}])  # caught before sending
    raw = json.dumps({"beads": [{"title": f"ok {word}"}, {"title": f"bad {word}", "importance": 99}]}).encode()
    reply = await agent.nc.request(f"recall.v1.req.{agent.ai_id}.create_beads", raw, timeout=10)
    assert reply.headers and reply.headers.get("Nats-Service-Error-Code") == "400"
    assert "beads.1.importance" in reply.data.decode()
    assert (await agent.search_beads(word, mode="keyword")).hits == []


async def _run(*command: str) -> tuple[int, str, str]:
    """A CLI run in a subprocess, without blocking the event loop the test's hub serves on."""
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_recall_import_loads_a_file_once(tmp_path: Path, stack: EmbeddedStack, hub: HubContext):
    word = _word()
    ai = new_ai()
    lines = [json.dumps({"title": f"imported {word} {i}", "content": "from a file"}) for i in range(5)]
    lines.insert(2, "{not json")
    lines.insert(4, json.dumps({"content": "no title"}))
    source = tmp_path / "beads.jsonl"
    source.write_text("\n".join(lines) + "\n\n")
    command = [sys.executable, "-m", "recall_hub.tooling.cli", "import", str(source), "--ai", ai,
               "--nats", stack.nats_url, "--batch", "2"]
    code, out, err = await _run(*command)
    assert code == 1, err  # two lines were not beads
    assert "7 line(s): 5 bead(s) created, 0 already there (same idempotency key), 2 refused" in out
    assert "line 3:" in out and "line 5: title: Field required" in out
    assert "5/5 beads" in err  # the progress bar
    code, out, _ = await _run(*command)
    assert "0 bead(s) created, 5 already there" in out
