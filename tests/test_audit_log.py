"""``audit_log``: a group's ops reads who read and wrote the group's beads — and nothing else."""

from __future__ import annotations

import pytest
from conftest import ClientFactory, new_ai
from recall_hub.config import HubSettings
from recall_hub.context import HubContext
from recall_hub.store.audit import AuditLog
from recall_schemas import Forbidden, InvalidRequest, NotFound
from redis.asyncio import Redis


async def test_the_ops_reads_the_groups_beads_trail_and_nothing_beyond_it(connect: ClientFactory) -> None:
    ops = await connect(new_ai("o"))
    group = (await ops.create_group("audited")).group_id
    writer, reader, outsider = await connect(), await connect(), await connect()
    for member in (writer, reader):
        await ops.add_member(group, member.ai_id)
    shared = await writer.create_bead("Shared plan", "group memory", visibility="group", group_id=group)
    private = await writer.create_bead("Writer's own note", "private", visibility="private", group_id=group)
    other_group = (await writer.create_group("elsewhere")).group_id
    elsewhere = await writer.create_bead("Other group's plan", "x", visibility="group", group_id=other_group)
    await reader.get_bead(shared.bead_id)
    await writer.rank_by_importance([shared.bead_id, private.bead_id, elsewhere.bead_id])
    with pytest.raises(NotFound):
        await outsider.get_bead(shared.bead_id)

    trail = await ops.audit_log(group)
    named = {b for entry in trail for b in entry.bead_ids}
    assert shared.bead_id in named
    assert private.bead_id not in named and elsewhere.bead_id not in named
    assert [e.at for e in trail] == sorted((e.at for e in trail), reverse=True)
    ops_seen = {(e.ai_id, e.op) for e in trail}
    assert (writer.ai_id, "create_bead") in ops_seen
    assert (reader.ai_id, "get_bead") in ops_seen
    assert (writer.ai_id, "rank_by_importance") in ops_seen  # shown, with only the group's bead in it
    assert all(e.ai_id != outsider.ai_id for e in trail)  # not a member: only in the bead's own trail

    by_bead = await ops.audit_log(group, bead_id=shared.bead_id)
    refused = [e for e in by_bead if e.ai_id == outsider.ai_id]
    assert refused and not refused[0].allowed and refused[0].code == "not_found"
    assert {e.ai_id for e in await ops.audit_log(group, member=reader.ai_id)} == {reader.ai_id}
    assert len(await ops.audit_log(group, limit=1)) == 1


async def test_members_are_forbidden_outsiders_see_no_group_and_bad_filters_are_refused(
    connect: ClientFactory,
) -> None:
    ops = await connect(new_ai("o"))
    group = (await ops.create_group("closed")).group_id
    member, outsider = await connect(), await connect()
    await ops.add_member(group, member.ai_id)
    bead = await member.create_bead("Secret plan", visibility="group", group_id=group)
    private = await member.create_bead("Not the group's", visibility="private")

    with pytest.raises(Forbidden):
        await member.audit_log(group)
    with pytest.raises(NotFound):
        await outsider.audit_log(group)
    with pytest.raises(NotFound):
        await ops.audit_log(group, member=outsider.ai_id)  # not a member of the group
    with pytest.raises(NotFound):
        await ops.audit_log(group, bead_id=private.bead_id)  # not one of the group's beads
    with pytest.raises(InvalidRequest):
        await ops.audit_log(group, limit=0)
    assert await ops.audit_log(group, bead_id=bead.bead_id)


async def test_an_entry_is_in_redis_before_its_reply_reaches_the_caller(
    connect: ClientFactory, hub: HubContext, settings: HubSettings
) -> None:
    """The hub does not wait for Redis to answer the audit write before it replies, but it has written the
    entry to its Redis connection by then: a reader on a connection of its own, asking as soon as each reply
    is in, finds the entry every time (without the hub's help: a fresh AuditLog has nothing to wait for) —
    a new bead's first entry too."""
    agent = await connect()
    reader_redis = Redis.from_url(settings.redis_url)
    reader = AuditLog(reader_redis, hub.keys)
    try:
        bead = await agent.create_bead("Audited at once", "read many times")
        # The reply holds the new bead, so its stream starts with the entry, before the reply.
        assert [e.op for e in await reader.entries(bead_id=bead.bead_id)] == ["create_bead"]
        for n in range(1, 41):
            await agent.get_bead(bead.bead_id)
            entries = await reader.entries(ai_id=agent.ai_id, limit=1000)
            assert [e.op for e in entries].count("get_bead") == n
            assert entries[-1].bead_ids == [bead.bead_id]
        on_bead = await reader.entries(bead_id=bead.bead_id, limit=1000)
        assert [e.op for e in on_bead] == ["create_bead"] + ["get_bead"] * 40
    finally:
        await reader_redis.aclose()
