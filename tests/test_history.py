"""Superseding a bead by a newer one, and a bead's version history.

The rules, from the design: both beads must be visible to the caller (else not found), and the caller
must be allowed to change the old one — its creator or the group's ops (else forbidden). The new bead
points at the old one (``UPDATES``); the old one stays readable and ranks lower. Superseding again
changes nothing; a bead cannot supersede itself, and no chain may loop. The history of a bead is the
chain of versions through it that the caller can see, oldest first; a version the caller cannot see
is left out without a trace, and so is everything beyond it.
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, datetime, timedelta

import nats
import pytest
from conftest import ClientFactory, World
from recall_client import RecallClient
from recall_hub.context import HubContext
from recall_hub.tooling.stack import EmbeddedStack
from recall_schemas import (
    BeadHistory,
    Conflict,
    Forbidden,
    InvalidRequest,
    MemoryBead,
    NotFound,
    RelType,
    new_id,
)
from recall_schemas.subjects import request_subject


async def _group_bead(client: RecallClient, group_id: str, title: str) -> MemoryBead:
    return await client.create_bead(title, group_id=group_id, visibility="group")


def _versions(history: BeadHistory) -> list[tuple[str, int]]:
    return [(v.bead.bead_id, v.offset) for v in history.versions]


# --- supersede -----------------------------------------------------------------------------------


async def test_supersede_links_new_to_old_once_and_keeps_the_old_readable(world: World) -> None:
    creator, member, g = world.creator, world.member, world.group_id
    old = await _group_bead(creator, g, "Deploys run on Fridays")
    new = await _group_bead(creator, g, "Deploys run on Tuesdays")
    before = datetime.now(UTC) - timedelta(seconds=5)
    link = await creator.supersede_bead(old.bead_id, new.bead_id, reason="the release train moved")
    assert (link.from_id, link.to_id, link.rel_type, link.created_by) == (
        new.bead_id, old.bead_id, RelType.UPDATES, creator.ai_id)
    assert link.properties.metadata == {"reason": "the release train moved"} and link.created_at >= before

    again = await creator.supersede_bead(old.bead_id, new.bead_id, reason="another reason")
    assert again == link, "superseding again changes nothing"
    edges = await member.get_relationships(old.bead_id, rel_type="UPDATES")
    assert [(e.from_id, e.to_id) for e in edges] == [(new.bead_id, old.bead_id)]
    still = await member.get_bead(old.bead_id)
    assert (still.title, still.version) == (old.title, old.version), "the old bead stays as it was, readable"


async def test_who_may_supersede(world: World) -> None:
    creator, member, ops, g = world.creator, world.member, world.ops, world.group_id
    old = await _group_bead(creator, g, "Old runbook")
    new = await _group_bead(member, g, "New runbook")
    hidden = await member.create_bead("Member's private draft")
    with pytest.raises(Forbidden):  # sees both, but may not change the creator's bead
        await member.supersede_bead(old.bead_id, new.bead_id)
    for outsider in (world.outsider, world.ex_member):
        with pytest.raises(NotFound):
            await outsider.supersede_bead(old.bead_id, new.bead_id)
    with pytest.raises(NotFound):  # the creator may change old, but cannot see the new one
        await creator.supersede_bead(old.bead_id, hidden.bead_id)
    assert await creator.get_relationships(old.bead_id, rel_type="UPDATES") == [], "refusals change nothing"

    link = await ops.supersede_bead(old.bead_id, new.bead_id)  # the group's ops may
    assert (link.from_id, link.to_id, link.created_by) == (new.bead_id, old.bead_id, ops.ai_id)
    own = await member.create_bead("Member's own note", group_id=g, visibility="group")
    assert (await member.supersede_bead(own.bead_id, new.bead_id)).to_id == own.bead_id  # and a creator may


async def test_self_and_cycles_are_refused(world: World, stack: EmbeddedStack) -> None:
    creator, g = world.creator, world.group_id
    v1, v2, v3 = [await _group_bead(creator, g, f"Version {i}") for i in (1, 2, 3)]
    with pytest.raises(InvalidRequest):
        await creator.supersede_bead(v1.bead_id, v1.bead_id)
    nc = await nats.connect(stack.nats_url)
    try:
        body = json.dumps({"old_id": v1.bead_id, "new_id": v1.bead_id}).encode()
        msg = await nc.request(request_subject(creator.ai_id, "supersede_bead"), body, timeout=10)
        assert msg.headers and msg.headers.get("Nats-Service-Error") == "invalid"
    finally:
        await nc.drain()
    await creator.supersede_bead(v1.bead_id, v2.bead_id)
    await creator.supersede_bead(v2.bead_id, v3.bead_id)
    for old, new in ((v2, v1), (v3, v1), (v3, v2)):
        with pytest.raises(Conflict):
            await creator.supersede_bead(old.bead_id, new.bead_id)
    with pytest.raises(NotFound):
        await creator.supersede_bead(new_id("b"), v1.bead_id)
    edges = {(e.from_id, e.to_id) for b in (v1, v2, v3) for e in await creator.get_relationships(b.bead_id, "UPDATES")}
    assert edges == {(v2.bead_id, v1.bead_id), (v3.bead_id, v2.bead_id)}


async def test_a_superseded_bead_ranks_below_its_replacement_twin(connect: ClientFactory) -> None:
    author = await connect()
    word = new_id("x")[2:]
    twins = [await author.create_bead(f"Retry {word} policy", f"Retry {word} three times", visibility="global",
                                      tags=[word]) for _ in range(2)]
    query, only = f"{word} retry policy", {"tags": [word]}
    top, other = [h.bead.bead_id for h in (await author.search_beads(query, limit=5, filters=only)).hits]
    await author.supersede_bead(top, other)
    hits = (await author.search_beads(query, limit=5, filters=only)).hits
    assert [h.bead.bead_id for h in hits] == [other, top]
    assert any("superseded" in n for n in hits[1].explanation.notes)
    assert {b.bead_id for b in twins} == {top, other}


# --- history -------------------------------------------------------------------------------------


async def test_history_is_the_chain_through_the_bead_oldest_first(world: World) -> None:
    creator, ops, member, g = world.creator, world.ops, world.member, world.group_id
    v1, v2, v3 = [await _group_bead(creator, g, f"Limit is {n}") for n in (10, 20, 30)]
    await creator.supersede_bead(v1.bead_id, v2.bead_id, reason="load grew")
    await ops.supersede_bead(v2.bead_id, v3.bead_id)

    history = await member.get_history(v2.bead_id)
    assert _versions(history) == [(v1.bead_id, -1), (v2.bead_id, 0), (v3.bead_id, 1)]
    assert [(link.old_id, link.new_id, link.superseded_by, link.reason) for link in history.links] == [
        (v1.bead_id, v2.bead_id, creator.ai_id, "load grew"),
        (v2.bead_id, v3.bead_id, ops.ai_id, None),
    ]
    assert history.links[0].superseded_at <= history.links[1].superseded_at and not history.truncated
    assert _versions(await member.get_history(v1.bead_id)) == [(v1.bead_id, 0), (v2.bead_id, 1), (v3.bead_id, 2)]
    assert _versions(await member.get_history(v3.bead_id)) == [(v1.bead_id, -2), (v2.bead_id, -1), (v3.bead_id, 0)]
    alone = await _group_bead(creator, g, "Nothing replaced this")
    assert _versions(await member.get_history(alone.bead_id)) == [(alone.bead_id, 0)]

    cut = await member.get_history(v1.bead_id, limit=2)
    assert _versions(cut) == [(v1.bead_id, 0), (v2.bead_id, 1)] and cut.truncated
    assert [(link.old_id, link.new_id) for link in cut.links] == [(v1.bead_id, v2.bead_id)]


async def test_history_leaves_out_what_the_caller_cannot_see(world: World) -> None:
    creator, ops, member, g = world.creator, world.ops, world.member, world.group_id
    v1 = await _group_bead(creator, g, "Budget is 10k")
    hidden = await ops.create_bead("Budget is 12k (ops' private draft)")  # private to ops
    v3 = await _group_bead(ops, g, "Budget is 15k")
    await ops.supersede_bead(v1.bead_id, hidden.bead_id, reason="draft")  # ops may change the group's beads
    await ops.supersede_bead(hidden.bead_id, v3.bead_id)

    assert _versions(await ops.get_history(v1.bead_id)) == [(v1.bead_id, 0), (hidden.bead_id, 1), (v3.bead_id, 2)]
    for reader in (member, creator):
        for bead, alone in ((v1, [(v1.bead_id, 0)]), (v3, [(v3.bead_id, 0)])):
            history = await reader.get_history(bead.bead_id)
            assert _versions(history) == alone and history.links == [] and not history.truncated
            assert hidden.bead_id not in history.model_dump_json(), "nothing names the hidden version"
    # Nor does ranking: to the member v1 is not superseded (its newer version is invisible).
    word_hits = (await member.search_beads("Budget is 10k", limit=10, filters={"group_id": g})).hits
    v1_hit = next(h for h in word_hits if h.bead.bead_id == v1.bead_id)
    assert not any("superseded" in n for n in v1_hit.explanation.notes)
    for stranger in (world.outsider, world.ex_member):
        with pytest.raises(NotFound):
            await stranger.get_history(v1.bead_id)
    with pytest.raises(NotFound):
        await member.get_history(hidden.bead_id)


async def test_supersede_and_history_are_audited(world: World, hub: HubContext) -> None:
    creator, member, g = world.creator, world.member, world.group_id
    old = await _group_bead(creator, g, "Audited old")
    new = await _group_bead(creator, g, "Audited new")
    with pytest.raises(Forbidden):
        await member.supersede_bead(old.bead_id, new.bead_id)
    await creator.supersede_bead(old.bead_id, new.bead_id)
    await member.get_history(new.bead_id)
    for bead in (old, new):
        entries = [(e.ai_id, e.op, e.allowed, e.code) for e in await hub.audit.entries(bead_id=bead.bead_id)]
        assert entries[1:] == [
            (member.ai_id, "supersede_bead", False, "forbidden"),
            (creator.ai_id, "supersede_bead", True, "ok"),
            (member.ai_id, "get_history", True, "ok"),
        ], bead.bead_id
    cli = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "recall_hub.tooling.cli", "audit", "--redis", hub.settings.redis_url,
        "--graph", hub.settings.graph_name, "--ai", member.ai_id, stdout=asyncio.subprocess.PIPE)
    out = (await cli.communicate())[0].decode()
    assert cli.returncode == 0 and "supersede_bead" in out and "get_history" in out and "forbidden" in out
