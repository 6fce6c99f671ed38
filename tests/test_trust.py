"""Trust: verifying and rejecting beads, what it does to every ranking, and the stale list.

The rules, from the design: any identity that can see a bead may verify or reject it, except its
creator (Forbidden); a bead the caller cannot see is not found, so a private bead can be marked by
nobody. One mark per identity (a later verdict replaces its earlier one; the same verdict again
changes nothing). A rejected bead ranks below an otherwise equal bead in search, context and why, and
the hit's explanation says so; a verified one ranks a little above it, by a bounded amount.
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
from recall_hub.retrieval.ranking import FULL_TRUST, PRIOR_FACTOR, WEIGHTS
from recall_hub.tooling.stack import EmbeddedStack
from recall_schemas import (
    Forbidden,
    InvalidRequest,
    ListStale,
    MemoryBead,
    NotFound,
    StaleList,
    StaleReason,
    TrustVerdict,
    Visibility,
    new_id,
)
from recall_schemas.subjects import request_subject


def token() -> str:
    return new_id("x")[2:]


# --- who may verify or reject ----------------------------------------------------------------------

# role -> visibilities it can see (and so may mark, unless it is the creator)
SEES = {
    "member": {Visibility.GROUP, Visibility.GLOBAL},
    "ops": {Visibility.GROUP, Visibility.GLOBAL},
    "outsider": {Visibility.GLOBAL},
    "ex_member": {Visibility.GLOBAL},
}


@pytest.mark.parametrize("visibility", list(Visibility), ids=lambda v: v.value)
@pytest.mark.parametrize("verdict", list(TrustVerdict), ids=lambda v: v.value)
async def test_who_may_verify_or_reject(world: World, visibility: Visibility, verdict: TrustVerdict) -> None:
    async def mark(client: RecallClient, bead_id: str) -> MemoryBead:
        if verdict is TrustVerdict.VERIFIED:
            return await client.verify_bead(bead_id, note="checked the logs")
        return await client.reject_bead(bead_id, reason="contradicted by the logs")

    bead = await world.bead(visibility)
    with pytest.raises(Forbidden):
        await mark(world.creator, bead.bead_id)
    after_refusal = await world.creator.get_bead(bead.bead_id)
    assert (after_refusal.trust, after_refusal.version) == ([], bead.version), "a refusal changes nothing"

    marked_by = []
    for role, seen in SEES.items():
        client = getattr(world, role)
        if visibility in seen:
            result = await mark(client, bead.bead_id)
            marked_by.append(client.ai_id)
            assert [m.ai_id for m in result.trust] == marked_by, role
        else:
            with pytest.raises(NotFound):
                await mark(client, bead.bead_id)
    stored = await world.creator.get_bead(bead.bead_id)
    assert [(m.ai_id, m.verdict) for m in stored.trust] == [(ai, verdict) for ai in marked_by]
    assert stored.version == bead.version + len(marked_by)
    if visibility is Visibility.PRIVATE:
        assert stored.trust == [], "nobody but its creator sees a private bead, so nobody can mark it"


async def test_a_mark_records_who_when_and_why_one_per_identity(world: World) -> None:
    bead = await world.bead(Visibility.GROUP)
    before = datetime.now(UTC) - timedelta(seconds=5)
    verified = await world.member.verify_bead(bead.bead_id, note="matches the runbook")
    [mark] = verified.trust
    assert (mark.ai_id, mark.verdict, mark.note) == (world.member.ai_id, TrustVerdict.VERIFIED, "matches the runbook")
    assert before <= mark.at <= datetime.now(UTC) + timedelta(seconds=5)
    assert verified.version == bead.version + 1

    again = await world.member.verify_bead(bead.bead_id, note="a second look")
    assert again.trust == verified.trust and again.version == verified.version, "re-verifying is idempotent"

    rejected = await world.ops.reject_bead(bead.bead_id, reason="the runbook is outdated")
    assert [(m.ai_id, m.verdict, m.note) for m in rejected.trust] == [
        (world.member.ai_id, TrustVerdict.VERIFIED, "matches the runbook"),
        (world.ops.ai_id, TrustVerdict.REJECTED, "the runbook is outdated"),
    ]
    changed_mind = await world.member.reject_bead(bead.bead_id, reason="agree, outdated")
    assert [(m.ai_id, m.verdict) for m in changed_mind.trust] == [
        (world.ops.ai_id, TrustVerdict.REJECTED), (world.member.ai_id, TrustVerdict.REJECTED),
    ], "a new verdict replaces the identity's earlier mark"
    # Updates by the creator keep the marks.
    updated = await world.creator.update_bead(bead.bead_id, importance=7)
    assert updated.trust == changed_mind.trust


async def test_bad_input_is_a_typed_error_and_changes_nothing(world: World, stack: EmbeddedStack) -> None:
    bead = await world.bead(Visibility.GROUP)
    with pytest.raises(InvalidRequest):
        await world.member.reject_bead(bead.bead_id, reason="")
    with pytest.raises(InvalidRequest):
        await world.member.verify_bead("not-a-bead-id")
    with pytest.raises(NotFound):
        await world.member.verify_bead(new_id("b"))
    with pytest.raises(InvalidRequest):
        await world.member.list_stale(older_than_days=-1)
    # The hub itself refuses what a client library would have caught.
    nc = await nats.connect(stack.nats_url)
    try:
        for op, body in [
            ("reject_bead", {"bead_id": bead.bead_id}),
            ("reject_bead", {"bead_id": bead.bead_id, "reason": "   "}),
            ("verify_bead", {"bead_id": bead.bead_id, "note": "x" * 1001}),
            ("verify_bead", {"bead_id": bead.bead_id, "verdict": "verified"}),
            ("list_stale", {"limit": 0}),
        ]:
            msg = await nc.request(request_subject(world.member.ai_id, op), json.dumps(body).encode(), timeout=10)
            assert msg.headers and msg.headers.get("Nats-Service-Error") == "invalid", (op, body, msg.data)
    finally:
        await nc.drain()
    assert (await world.creator.get_bead(bead.bead_id)).trust == []


# --- ranking -------------------------------------------------------------------------------------


async def _twins(client: RecallClient, word: str, count: int = 2) -> list[MemoryBead]:
    """Beads equal in everything that ranks them but their ids (created a few ms apart), tagged ``word``."""
    return [
        await client.create_bead(
            f"Cache warmup {word}", f"The {word} cache is warmed at deploy", visibility="global", tags=[word]
        )
        for _ in range(count)
    ]


def _ids(hits: list) -> list[str]:  # type: ignore[type-arg]
    return [h.bead.bead_id for h in hits]


async def test_a_rejected_bead_ranks_below_an_equal_one_everywhere(connect: ClientFactory) -> None:
    author, reader, critic = await connect(), await connect(), await connect()
    word = token()
    twins = await _twins(author, word)
    query, only = f"{word} cache warmup", {"tags": [word]}
    first = _ids((await reader.search_beads(query, limit=5, filters=only)).hits)
    assert set(first) == {b.bead_id for b in twins}
    top, other = first  # whichever ranks first without marks is the one rejected

    await critic.reject_bead(top, reason="warmup was removed in the last release")

    hits = (await reader.search_beads(query, limit=5, filters=only)).hits
    assert _ids(hits) == [other, top], "search demotes the rejected bead"
    rejected_hit = hits[1]
    assert any("rejected" in note for note in rejected_hit.explanation.notes), rejected_hit.explanation
    assert not any("rejected" in note for note in hits[0].explanation.notes)
    assert rejected_hit.explanation.prior < hits[0].explanation.prior / PRIOR_FACTOR ** (WEIGHTS["demotion"] / 2)
    assert [m.note for m in rejected_hit.bead.trust] == ["warmup was removed in the last release"]

    for mode in ("keyword", "vector"):
        ranked = _ids((await reader.search_beads(query, limit=5, mode=mode, filters=only)).hits)
        assert ranked == [other, top], mode
    context = await reader.context(query, max_tokens=2000, filters=only)
    assert context.bead_ids == [other, top], "context demotes it"
    why = await reader.why(query, seeds=2, hops=1, filters=only)
    assert why.seeds == [other, top], "why's seeds demote it"


async def test_verification_lifts_a_bead_a_little_and_boundedly(connect: ClientFactory) -> None:
    author = await connect()
    verifiers = [await connect() for _ in range(FULL_TRUST + 1)]
    word = token()
    plain, few, many = await _twins(author, word, 3)
    query, only = f"{word} cache warmup", {"tags": [word]}
    for verifier in verifiers[:FULL_TRUST]:
        await verifier.verify_bead(few.bead_id)
    for verifier in verifiers:
        await verifier.verify_bead(many.bead_id)
    # The oldest one, unverified, ranked first before: verified, it now ranks first.
    await verifiers[0].verify_bead(plain.bead_id)
    hits = {h.bead.bead_id: h for h in (await author.search_beads(query, limit=5, filters=only)).hits}
    one, three, four = (hits[b.bead_id].explanation.prior for b in (plain, few, many))
    assert one < three, "more verifications, more trust"
    assert four == pytest.approx(three, rel=1e-3), f"bounded: the {FULL_TRUST + 1}th verification adds nothing"
    assert three / one <= PRIOR_FACTOR ** WEIGHTS["verification"] * 1.01, "a small boost"
    assert any("verified by 4 identities" in n for n in hits[many.bead_id].explanation.notes)

    unverified = (await _twins(author, word, 1))[0]
    ranked = _ids((await author.search_beads(query, limit=5, filters=only)).hits)
    assert ranked.index(plain.bead_id) < ranked.index(unverified.bead_id), "verified beats an equal newer one"


# --- the stale list ------------------------------------------------------------------------------


async def test_the_stale_list_says_which_beads_and_why(world: World, connect: ClientFactory) -> None:
    c, g = world.creator, world.group_id

    async def make(title: str, provenance: str = "authored", **fields: object) -> MemoryBead:
        return await c.create_bead(title, group_id=g, visibility="group", provenance=provenance, **fields)  # type: ignore[arg-type]

    derived = await make("Derived, nobody checked", "derived")
    recorded = await make("Recorded, then verified", "recorded")
    await world.member.verify_bead(recorded.bead_id)
    rejected = await make("Derived, rejected", "derived")
    await world.member.reject_bead(rejected.bead_id, reason="wrong")
    authored = await make("Authored by hand")
    old_source = await make("Source, since replaced")
    new_source = await make("Source, the replacement")
    await c.supersede_bead(old_source.bead_id, new_source.bead_id)
    deleted_source = await make("Source, deleted")
    kept_source = await make("Source, still there")
    hidden_source = await world.ops.create_bead("Ops' private source", visibility="private")
    from_old = await make("Made from the replaced source", metadata={"source_bead_id": old_source.bead_id})
    from_deleted = await make("Made from the deleted source", metadata={"source_bead_id": [deleted_source.bead_id]})
    from_kept = await make("Made from a source still there", metadata={"source_bead_id": kept_source.bead_id})
    from_hidden = await make("Made from a source the creator cannot see",
                             metadata={"source_bead_id": hidden_source.bead_id})
    from_two = await make("Derived from two sources", "derived",
                          metadata={"source_bead_id": [kept_source.bead_id, deleted_source.bead_id]})
    await c.delete_bead(deleted_source.bead_id)

    stale = await world.member.list_stale(group_id=g, older_than_days=0, limit=100)
    causes = {item.bead.bead_id: {(x.reason, x.source_id, x.newer_id) for x in item.causes} for item in stale}
    assert causes == {
        derived.bead_id: {(StaleReason.UNVERIFIED, None, None)},
        from_old.bead_id: {(StaleReason.SOURCE_SUPERSEDED, old_source.bead_id, new_source.bead_id)},
        from_deleted.bead_id: {(StaleReason.SOURCE_GONE, deleted_source.bead_id, None)},
        from_hidden.bead_id: {(StaleReason.SOURCE_GONE, hidden_source.bead_id, None)},
        from_two.bead_id: {
            (StaleReason.UNVERIFIED, None, None), (StaleReason.SOURCE_GONE, deleted_source.bead_id, None),
        },
    }
    oldest_first = [b.bead_id for b in (derived, from_old, from_deleted, from_hidden, from_two)]
    assert [i.bead.bead_id for i in stale] == oldest_first
    for left_out in (recorded, rejected, authored, old_source, from_kept):
        assert left_out.bead_id not in causes

    # Age: a fresh weak bead is not stale yet.
    young = {i.bead.bead_id for i in await world.member.list_stale(group_id=g, older_than_days=1, limit=100)}
    assert derived.bead_id not in young and from_old.bead_id in young

    # Visibility: a group's stale beads are its members' business only.
    for outsider in (world.outsider, world.ex_member):
        with pytest.raises(NotFound):
            await outsider.list_stale(group_id=g, older_than_days=0)
        everywhere = {i.bead.bead_id for i in await outsider.list_stale(older_than_days=0, limit=500)}
        assert not everywhere & set(causes), "no group bead leaks through the unscoped list"
    stranger = await connect()
    await stranger.create_bead("Stranger's derived note", provenance="derived")
    assert derived.bead_id not in {i.bead.bead_id for i in await stranger.list_stale(older_than_days=0, limit=500)}


async def test_the_stale_list_pages_without_repeats(world: World) -> None:
    made = [
        await world.creator.create_bead(f"Derived {i}", group_id=world.group_id, visibility="group",
                                        provenance="derived")
        for i in range(3)
    ]
    seen: list[str] = []
    cursor = None
    for _ in range(5):
        reply = await world.member.call(
            "list_stale", ListStale(group_id=world.group_id, older_than_days=0, limit=1, cursor=cursor), StaleList
        )
        seen += [i.bead.bead_id for i in reply.items]
        cursor = reply.next_cursor
        if cursor is None:
            break
    assert seen == [b.bead_id for b in made]
    assert [i.bead.bead_id for i in await world.member.list_stale(group_id=world.group_id, older_than_days=0,
                                                                   limit=2)] == seen[:2]


# --- audit -----------------------------------------------------------------------------------------


async def test_marks_and_stale_lists_are_audited(world: World, hub: HubContext) -> None:
    bead = await world.bead(Visibility.GROUP, provenance="derived")
    listed = await world.creator.list_stale(group_id=world.group_id, older_than_days=0)
    assert [i.bead.bead_id for i in listed] == [bead.bead_id]
    await world.member.verify_bead(bead.bead_id)
    await world.ops.reject_bead(bead.bead_id, reason="no")
    with pytest.raises(Forbidden):
        await world.creator.verify_bead(bead.bead_id)
    with pytest.raises(NotFound):
        await world.outsider.reject_bead(bead.bead_id, reason="no")
    entries = [(e.ai_id, e.op, e.allowed, e.code) for e in await hub.audit.entries(bead_id=bead.bead_id)]
    assert entries[1:] == [
        (world.creator.ai_id, "list_stale", True, "ok"),
        (world.member.ai_id, "verify_bead", True, "ok"),
        (world.ops.ai_id, "reject_bead", True, "ok"),
        (world.creator.ai_id, "verify_bead", False, "forbidden"),
        (world.outsider.ai_id, "reject_bead", False, "not_found"),
    ]
    cli = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "recall_hub.tooling.cli", "audit", "--redis", hub.settings.redis_url,
        "--graph", hub.settings.graph_name, "--bead", bead.bead_id, stdout=asyncio.subprocess.PIPE)
    out = (await cli.communicate())[0].decode()
    assert cli.returncode == 0
    for op in ("verify_bead", "reject_bead", "list_stale"):
        assert op in out, out
