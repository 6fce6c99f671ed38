"""Membership and sessions through the real client: a group never loses its last ops however many
membership changes race; a non-member cannot tell whether a hub-issued group id exists; a session's
integrity check and migration count and name only the beads the caller may see."""

from __future__ import annotations

import asyncio
import random
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from recall_client import Conflict, Forbidden, NotFound, RecallClient, RecallError
from recall_hub.context import HubContext
from recall_hub.ops.groups import issue_group_id
from recall_hub.timeutil import now_ms
from recall_schemas import MemoryBead, new_id

from tests.conftest import ClientFactory, new_ai

ROUNDS = 25


async def _ops_of(observer: RecallClient, group_id: str) -> set[str]:
    return {m.ai_id for m in (await observer.list_members(group_id)).members if m.role.value == "ops"}


async def _team(connect: ClientFactory, n_ops: int) -> tuple[str, list[RecallClient], RecallClient]:
    """A fresh group with ``n_ops`` ops and an agent that stays in it to observe."""
    ops = [await connect(new_ai("o")) for _ in range(n_ops)]
    observer = await connect()
    group_id = (await ops[0].create_group("racing ops")).group_id
    for other in ops[1:]:
        await ops[0].add_member(group_id, other.ai_id, role="ops")
    await ops[0].add_member(group_id, observer.ai_id)
    return group_id, ops, observer


# --- the last ops ----------------------------------------------------------------------------

SELF_MOVES = {"demote_self", "leave"}


def _move(me: RecallClient, other: RecallClient, group_id: str, kind: str) -> Awaitable[Any]:
    """One of the membership changes that can take the ops role away from someone."""
    if kind == "demote_self":
        return me.add_member(group_id, me.ai_id, role="agent")
    if kind == "leave":
        return me.remove_member(group_id, me.ai_id)
    if kind == "demote_other":
        return me.add_member(group_id, other.ai_id, role="agent")
    assert kind == "remove_other"
    return me.remove_member(group_id, other.ai_id)


async def test_ops_stepping_down_at_once_always_leave_exactly_one_ops(connect: ClientFactory) -> None:
    """Every ops of a group demotes itself or leaves at the same moment: all but one go through,
    the one refused gets Conflict and is the group's only ops afterwards."""
    rng = random.Random(7)
    clients = [await connect(new_ai("o")) for _ in range(4)]
    observer = await connect()
    for round_ in range(ROUNDS):
        n_ops = 2 + round_ % 3
        ops = clients[:n_ops]
        group_id = (await ops[0].create_group(f"round {round_}")).group_id
        for other in ops[1:]:
            await ops[0].add_member(group_id, other.ai_id, role="ops")
        await ops[0].add_member(group_id, observer.ai_id)
        moves = [_move(c, c, group_id, rng.choice(sorted(SELF_MOVES))) for c in ops]
        outcomes = await asyncio.gather(*moves, return_exceptions=True)
        refused = [c.ai_id for c, o in zip(ops, outcomes, strict=True) if isinstance(o, BaseException)]
        assert all(isinstance(o, Conflict) for o in outcomes if isinstance(o, BaseException)), outcomes
        assert len(refused) == 1, (round_, outcomes)
        assert await _ops_of(observer, group_id) == set(refused), round_


@pytest.mark.parametrize(
    "moves",
    [
        ("demote_self", "demote_self"),
        ("demote_self", "leave"),
        ("leave", "leave"),
        ("demote_other", "demote_other"),
        ("remove_other", "remove_other"),
        ("demote_other", "leave"),
        ("remove_other", "demote_self"),
    ],
)
async def test_two_ops_racing_never_leave_the_group_without_ops(
    connect: ClientFactory, moves: tuple[str, str]
) -> None:
    """Two ops, each making one of the changes that can take the ops role away, at the same moment."""
    for round_ in range(ROUNDS):
        group_id, (a, b), observer = await _team(connect, 2)
        outcomes = await asyncio.gather(
            _move(a, b, group_id, moves[0]), _move(b, a, group_id, moves[1]), return_exceptions=True
        )
        assert len(await _ops_of(observer, group_id)) >= 1, (round_, outcomes)
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        # Whichever ran first, the other was refused by the rules only (it may have lost its role or
        # its membership to the first) ...
        assert all(isinstance(o, Conflict | Forbidden | NotFound) for o in errors), outcomes
        if set(moves) <= SELF_MOVES:
            # ... and when both only touch themselves, exactly one is refused, as the last ops.
            assert len(errors) == 1 and isinstance(errors[0], Conflict), outcomes


async def test_the_last_ops_is_refused_whatever_change_would_remove_it(connect: ClientFactory) -> None:
    group_id, (ops,), observer = await _team(connect, 1)
    with pytest.raises(Conflict):
        await ops.add_member(group_id, ops.ai_id, role="agent")
    with pytest.raises(Conflict):
        await ops.remove_member(group_id, ops.ai_id)
    assert await _ops_of(observer, group_id) == {ops.ai_id}
    # Promoting someone else first makes either change possible.
    await ops.add_member(group_id, observer.ai_id, role="ops")
    assert {m.ai_id for m in (await ops.add_member(group_id, ops.ai_id, role="agent")).members} == {
        ops.ai_id, observer.ai_id}
    assert await _ops_of(observer, group_id) == {observer.ai_id}


# --- group ids -----------------------------------------------------------------------------


Call = Callable[[str], Awaitable[Any]]


async def _refusal(call: Call, group_id: str) -> tuple[type, str, dict[str, Any]]:
    with pytest.raises(RecallError) as refused:
        await call(group_id)
    error = refused.value
    return type(error), error.message.replace(group_id, "<id>"), error.details


async def _assert_same_reply(call: Call, taken: str, free: str, what: str) -> None:
    assert await _refusal(call, taken) == await _refusal(call, free), what


def _group_calls(caller: RecallClient, somebody: str) -> dict[str, Call]:
    """Every operation that names a group, as ``call(group_id)``."""
    return {
        "create_group": lambda g: caller.create_group("mine now", group_id=g),
        "list_members": caller.list_members,
        "add_member": lambda g: caller.add_member(g, caller.ai_id),
        "remove_member": lambda g: caller.remove_member(g, caller.ai_id),
        "get_by_group": caller.get_by_group,
        "changes_since": caller.changes_since,
        "handoff_brief": caller.handoff_brief,
        "transfer_ops": lambda g: caller.transfer_ops(g, somebody, "take over"),
        "create_bead": lambda g: caller.create_bead("into a group", visibility="group", group_id=g),
    }


async def test_a_non_member_cannot_tell_whether_a_hub_issued_group_id_exists(connect: ClientFactory) -> None:
    """For every operation naming a group, an outsider and an ex-member get the same reply for an
    existing group as for an id of the same form that was never issued — create_group included."""
    ops, leaver, outsider = await connect(new_ai("o")), await connect(), await connect()
    group = await ops.create_group("secret team")
    await ops.add_member(group.group_id, leaver.ai_id)
    await leaver.remove_member(group.group_id, leaver.ai_id)
    for caller in (outsider, leaver):
        for name, call in _group_calls(caller, ops.ai_id).items():
            await _assert_same_reply(call, group.group_id, issue_group_id(), f"{name} as {caller.ai_id}")
    # The probes changed nothing: the group is as it was, and no group was made for a probed id.
    assert [m.ai_id for m in (await ops.list_members(group.group_id)).members] == [ops.ai_id]
    assert await outsider.list_groups() == [] and await leaver.list_groups() == []


async def test_a_taken_group_id_gets_one_reply_whoever_asks_and_whoever_holds_it(connect: ClientFactory) -> None:
    """A refused create says nothing about the group holding the id: a caller-chosen name that is
    taken, a hub-issued id that exists and one that does not all get the same Conflict, for members
    and non-members alike. A free name is still created."""
    ops, member, outsider = await connect(new_ai("o")), await connect(), await connect()
    chosen = f"g_team{secrets.token_hex(4)}"
    await ops.create_group("named team", group_id=chosen)
    issued = (await ops.create_group("issued team")).group_id
    await ops.add_member(chosen, member.ai_id)
    await ops.add_member(issued, member.ai_id)
    for caller in (ops, member, outsider):
        create = _group_calls(caller, ops.ai_id)["create_group"]
        kind, message, details = await _refusal(create, chosen)
        assert kind is Conflict
        assert await _refusal(create, issued) == (kind, message, details), caller.ai_id
        assert await _refusal(create, issue_group_id()) == (kind, message, details), caller.ai_id
    free = f"g_free{secrets.token_hex(4)}"
    assert (await outsider.create_group("a name of my own", group_id=free)).group_id == free
    assert [m.ai_id for m in (await ops.list_members(chosen)).members] == [ops.ai_id, member.ai_id]


async def test_a_replayed_group_created_event_is_still_idempotent(connect: ClientFactory, hub_service: Any) -> None:
    ops = await connect(new_ai("o"))
    group_id = new_id("g")
    for event_id in ("gc1", "gc2"):  # two events, the same group: the second finds it already made
        await ops.events.group_created(group_id, "evented", event_id=f"{event_id}{group_id}")
        assert await hub_service.events.wait_for(f"{event_id}{group_id}") == ["applied"]
    assert [m.ai_id for m in (await ops.list_members(group_id)).members] == [ops.ai_id]


# --- what a session check and a migration see --------------------------------------------


async def _foreign_bead(hub: HubContext, session_id: str, **props: Any) -> str:
    """A bead written into ``session_id`` by someone else (not possible through the API today; the
    check must hold for whatever the store holds)."""
    bead_id = new_id("b")
    await hub.graph.query(
        "CREATE (b:Bead) SET b = $props",
        {"props": {
            "bead_id": bead_id, "title": "foreign", "content": "", "content_hash": "x", "bead_type": "note",
            "importance": 5, "tags": [], "created_at": 1, "updated_at": 1, "accessed_at": 1,
            "session_id": session_id, "status": "active", "provenance": "authored", "metadata": "{}",
            "corroborated_by": [], **props,
        }},
    )
    return bead_id


async def test_a_session_check_counts_and_names_only_beads_the_caller_may_see(
    connect: ClientFactory, hub: HubContext
) -> None:
    ops, owner, member = await connect(new_ai("o")), await connect(), await connect()
    stranger = await connect()
    team = (await ops.create_group("team")).group_id
    other_team = (await ops.create_group("other team")).group_id
    for ai in (owner, member):
        await ops.add_member(team, ai.ai_id)
    session = new_id("s")
    # The session's group is the team's (its first bead sets it).
    beads: dict[str, MemoryBead] = {
        "group": await owner.create_bead("group work", visibility="group", group_id=team, session_id=session),
        "private": await owner.create_bead("private work", visibility="private", session_id=session),
        "global": await owner.create_bead("global work", visibility="global", session_id=session),
    }
    foreign = {
        "stranger private": await _foreign_bead(hub, session, created_by=stranger.ai_id, visibility="private"),
        "other team": await _foreign_bead(
            hub, session, created_by=ops.ai_id, visibility="group", group_id=other_team),
        "stranger global": await _foreign_bead(hub, session, created_by=stranger.ai_id, visibility="global"),
    }

    async def seen_by(caller: RecallClient) -> tuple[int, set[str], str]:
        report = await caller.check_session(session)
        text = " ".join(p.problem for p in report.problems)
        return report.beads, {p.bead_id for p in report.problems}, text

    def ids(*names: str) -> set[str]:
        return {beads[n].bead_id if n in beads else foreign[n] for n in names}

    # Beads others wrote under the same session id belong to their sessions (sessions are per owner).
    cases = {
        owner: ids("group", "private", "global"),
        member: ids("group", "global"),  # not the owner's private bead
    }
    for caller, visible in cases.items():
        count, named, text = await seen_by(caller)
        assert count == len(visible), caller.ai_id
        assert named <= visible, (caller.ai_id, named - visible)
        assert other_team not in text and foreign["other team"] not in text, caller.ai_id
    # The owner leaves the team: the team's bead is no longer the owner's to count or name.
    await owner.remove_member(team, owner.ai_id)
    count, named, text = await seen_by(owner)
    visible = ids("private", "global")
    assert count == len(visible) and named <= visible, named - visible
    assert beads["group"].bead_id not in text
    # Someone who may not see the session at all learns nothing about it.
    with pytest.raises(NotFound):
        await stranger.check_session(session)

    # Migration moves (and counts) only what the owner may see; the rest stays where it was. (A new session
    # would be the team's, which the owner has left: it migrates into a session of no group.)
    new_session = new_id("s")
    await hub.sessions.register(owner.ai_id, new_session, None, "active", now_ms())
    moved = await owner.migrate_session_with_memories(session, new_session)
    assert moved.migrated_beads == len(visible)
    assert {b.bead_id for b in await owner.get_by_session(new_session)} == visible
    assert {b.bead_id for b in await member.get_by_session(session)} == ids("group")
    with pytest.raises(NotFound):  # not the team's session: nothing of it for the member
        await member.check_session(new_session)


async def test_a_migration_never_ties_a_session_to_a_group_its_owner_is_not_in(
    connect: ClientFactory, hub: HubContext
) -> None:
    """The new session of a migration is made in the old one's group: only while the owner is a member of it,
    checked in the query that migrates (as a bead's group is in the one that creates it). Otherwise the
    group is ``not_found``, whether the owner left it or it never existed, and nothing changes."""
    ops, owner = await connect(new_ai("o")), await connect()
    team = (await ops.create_group("team")).group_id
    await ops.add_member(team, owner.ai_id)
    first, session = new_id("s"), new_id("s")
    await owner.create_bead("team work", visibility="group", group_id=team, session_id=first)
    note = await owner.create_bead("my note", visibility="private", session_id=first)
    assert (await owner.migrate_session_with_memories(first, session)).migrated_beads == 2  # a member: fine
    assert (await owner.get_session(session)).group_id == team

    await owner.remove_member(team, owner.ai_id)
    with pytest.raises(NotFound, match=f"group {team} not found"):
        await owner.create_bead("more team work", visibility="group", group_id=team, session_id=session)
    fresh = new_id("s")
    with pytest.raises(NotFound, match=f"group {team} not found") as left:
        await owner.migrate_session_with_memories(session, fresh)
    with pytest.raises(NotFound):
        await owner.get_session(fresh)  # never made
    assert (await owner.get_session(session)).state == "active"
    assert [b.bead_id for b in await owner.get_by_session(session)] == [note.bead_id]
    # Nor into an existing session of that group.
    ungrouped = new_id("s")
    elsewhere = await owner.create_bead("elsewhere", session_id=ungrouped)
    with pytest.raises(NotFound, match=f"group {team} not found"):
        await owner.migrate_session_with_memories(ungrouped, session)
    assert (await owner.get_session(ungrouped)).state == "active"
    assert [b.bead_id for b in await owner.get_by_session(ungrouped)] == [elsewhere.bead_id]
    # A group that does not exist reads the same as one the owner has left.
    missing, orphan = issue_group_id(), new_id("s")
    await hub.sessions.register(owner.ai_id, orphan, None, "active", now_ms())
    await hub.graph.query("MATCH (s:Session {session_id: $s, owner: $o}) SET s.group_id = $g",
                          {"s": orphan, "o": owner.ai_id, "g": missing})
    with pytest.raises(NotFound) as gone:
        await owner.migrate_session_with_memories(orphan, new_id("s"))
    assert str(gone.value).replace(missing, "G") == str(left.value).replace(team, "G")
    # Back in the team, the same migration goes through, into a session of the team.
    await ops.add_member(team, owner.ai_id)
    assert (await owner.migrate_session_with_memories(session, fresh)).migrated_beads == 2
    assert (await owner.get_session(fresh)).group_id == team


async def test_a_session_member_check_does_not_reveal_whether_an_unknown_group_exists(
    connect: ClientFactory, hub: HubContext
) -> None:
    """A visible bead naming a group the caller is not in is reported the same whether that group
    exists or not."""
    ops, owner = await connect(new_ai("o")), await connect()
    existing = (await ops.create_group("exists")).group_id
    session = new_id("s")
    first = await owner.create_bead("start", session_id=session)
    missing = issue_group_id()
    b_existing = await _foreign_bead(hub, session, created_by=owner.ai_id, visibility="private", group_id=existing)
    b_missing = await _foreign_bead(hub, session, created_by=owner.ai_id, visibility="private", group_id=missing)
    report = await owner.check_session(session)
    about = {p.bead_id: p.problem for p in report.problems if p.problem.startswith("group")}
    assert about[b_existing].replace(existing, "<g>") == about[b_missing].replace(missing, "<g>")
    assert first.bead_id not in about


async def test_a_search_reads_the_scopes_of_a_group_joined_or_left_a_moment_ago(connect, hub: HubContext) -> None:
    """Hubs keep each caller's groups between membership changes; a change by any hub makes the next search
    read them afresh, so joining a group shows its beads at once and leaving hides them at once."""
    ops, member = await connect(new_ai("o")), await connect()
    word = f"zm{new_id('t')[2:]}"
    group = await ops.create_group("joined later")
    bead = await ops.create_bead(f"{word} for the group", visibility="group", group_id=group.group_id)
    await hub.keywords.catch_up()  # another writer's bead: this reader waits for the index, not for its groups
    for mode in ("keyword", "vector", "hybrid"):  # the member's groups are now known to the hub
        assert bead.bead_id not in [h.bead.bead_id for h in (await member.search_beads(word, mode=mode)).hits]
    await ops.add_member(group.group_id, member.ai_id)
    for mode in ("keyword", "vector", "hybrid"):
        assert bead.bead_id in [h.bead.bead_id for h in (await member.search_beads(word, mode=mode)).hits], mode
    await ops.remove_member(group.group_id, member.ai_id)
    for mode in ("keyword", "vector", "hybrid"):
        assert bead.bead_id not in [h.bead.bead_id for h in (await member.search_beads(word, mode=mode)).hits]
