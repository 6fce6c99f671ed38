"""Group coordination over the bus: events on JetStream, sessions, agent state, ops handoff,
the change feed, key-value memory and audit."""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import uuid

import pytest
from recall_client import Forbidden, NotFound, RecallClient
from recall_hub.config import HubSettings
from recall_hub.context import HubContext
from recall_hub.ops import beads as bead_ops
from recall_hub.ops.after_commit import follow_session
from recall_hub.ops.beads import new_bead_props
from recall_hub.ops.forget import forget_bead
from recall_hub.ops.sessions import migrate_session_with_memories
from recall_hub.retrieval.freshness import handed_off_work_done
from recall_hub.retrieval.search import search_beads
from recall_hub.service.endpoints import HubService
from recall_hub.service.server import running_hub
from recall_hub.store.sessions import AUTO_LINK_NOTE
from recall_hub.timeutil import new_moments
from recall_hub.tooling.stack import EmbeddedStack
from recall_schemas import CreateBead, DeleteBead, SearchBeads, SearchMode, new_id
from recall_schemas.coordination import MigrateSession, Todo
from recall_schemas.events import DeadLetter
from recall_schemas.forget import ForgetBead
from recall_schemas.subjects import DEAD_LETTER_ROOT, event_subject

from tests.conftest import Interleaved, new_ai, team

# --- events -----------------------------------------------------------------------------------


async def test_session_events_register_sessions_once_whatever_the_redeliveries(connect, hub_service: HubService):
    agent = await connect()
    session = new_id("s")
    event_id = uuid.uuid4().hex
    await agent.events.session_started(session, event_id=event_id)
    assert await hub_service.events.wait_for(event_id) == ["applied"]
    assert (await agent.get_session(session)).owner == agent.ai_id
    # The same event again under another JetStream message id (a replay): acknowledged, not re-applied.
    js = agent.nc.jetstream()
    payload = json.dumps({"kind": "session.started", "event_id": event_id, "session_id": session}).encode()
    await js.publish(event_subject(agent.ai_id, "session.started"), payload, headers={"Nats-Msg-Id": "replay-1"})
    assert await hub_service.events.wait_for(event_id, deliveries=2) == ["applied", "duplicate"]
    other = await connect()  # the same id names the other identity's own session, never this one
    theirs = await other.create_bead("not my session", session_id=session)
    assert [b.bead_id for b in await agent.get_by_session(session)] == []
    assert (await other.get_session(session)).owner == other.ai_id
    assert [b.bead_id for b in await other.get_by_session(session)] == [theirs.bead_id]


async def _dead_letter(connect, hub_service: HubService, publish) -> DeadLetter:
    watcher = await connect()
    letters: asyncio.Queue[DeadLetter] = asyncio.Queue()

    async def on_letter(msg) -> None:
        letters.put_nowait(DeadLetter.model_validate_json(msg.data))

    sub = await watcher.nc.subscribe(f"{DEAD_LETTER_ROOT}.>", cb=on_letter)
    await watcher.nc.flush()
    try:
        await publish()
        return await asyncio.wait_for(letters.get(), 10)
    finally:
        await sub.unsubscribe()


async def test_an_event_that_can_never_apply_is_dead_lettered_with_its_reason(connect, hub_service: HubService):
    agent = await connect()
    js = agent.nc.jetstream()
    subject = event_subject(agent.ai_id, "session.started")
    message_id = {"Nats-Msg-Id": f"{agent.ai_id}:{uuid.uuid4().hex}"}
    letter = await _dead_letter(connect, hub_service, lambda: js.publish(subject, b"{not json", headers=message_id))
    assert letter.code == "invalid" and letter.subject == subject and letter.payload == "{not json"

    ops, group_id, (member,) = await team(connect, 1)
    stranger = await connect()
    letter = await _dead_letter(connect, hub_service, lambda: stranger.events.member_added(group_id, stranger.ai_id))
    assert letter.code == "not_found" and letter.publisher == stranger.ai_id
    letter = await _dead_letter(connect, hub_service, lambda: member.events.member_added(group_id, stranger.ai_id))
    assert letter.code == "forbidden"
    assert stranger.ai_id not in [m.ai_id for m in (await ops.list_members(group_id)).members]
    # A session of a group its owner is not in (never was, or has left) is not made: the group is not found.
    session = new_id("s")
    letter = await _dead_letter(connect, hub_service, lambda: stranger.events.session_started(session, group_id))
    assert (letter.code, letter.reason) == ("not_found", f"group {group_id} not found")
    with pytest.raises(NotFound):
        await stranger.get_session(session)
    letter = await _dead_letter(
        connect, hub_service, lambda: member.events.session_started(new_id("s"), ai_id=ops.ai_id))
    assert letter.code == "forbidden" and "may not publish session events" in letter.reason


async def test_events_published_while_no_hub_runs_are_applied_when_one_starts(tmp_path):
    with EmbeddedStack(tmp_path) as stack:
        settings = HubSettings(nats_url=stack.nats_url, falkordb_url=stack.redis_url, redis_url=stack.redis_url,
                               embedder={"kind": "hash"})
        async with running_hub(settings):
            pass  # the first start creates the streams and the durable consumer
        ops = new_ai("o")
        group_id = new_id("g")
        async with RecallClient(ops, stack.nats_url) as client:
            await client.events.group_created(group_id, "offline team", event_id="g1")
            await client.events.member_added(group_id, "a_late0001", event_id="m1")
            await client.events.session_started("s_offline01", group_id, event_id="s1")
            async with running_hub(settings) as service:
                assert await service.events.wait_for("g1") == ["applied"]
                assert await service.events.wait_for("m1") == ["applied"]
                assert await service.events.wait_for("s1") == ["applied"]
                members = (await client.list_members(group_id)).members
                assert [(m.ai_id, m.role.value) for m in members] == [(ops, "ops"), ("a_late0001", "agent")]
                assert (await client.get_session("s_offline01")).group_id == group_id


# --- sessions ---------------------------------------------------------------------------------


async def test_session_migration_moves_every_bead_and_keeps_the_chain(connect):
    agent = await connect()
    old, new = new_id("s"), new_id("s")
    beads = [await agent.create_bead(f"step {i}", f"work item {i}", session_id=old) for i in range(3)]
    result = await agent.migrate_session_with_memories(old, new)
    assert result.migrated_beads == 3
    assert [b.bead_id for b in await agent.get_by_session(new)] == [b.bead_id for b in beads]
    assert await agent.get_by_session(old) == []
    assert (await agent.get_session(old)).state == "migrated"
    chain = await agent.traverse_graph(beads[-1].bead_id, max_depth=5, rel_types=["FOLLOWS_FROM"], direction="out")
    assert [n.bead.bead_id for n in chain.nodes] == [b.bead_id for b in reversed(beads)]
    report = await agent.check_session(new)
    assert report.beads == 3 and report.problems == []
    other = await connect()
    with pytest.raises(NotFound):
        await other.migrate_session_with_memories(new, new_id("s"))


async def test_a_migration_into_a_session_with_beads_makes_one_chain_of_them(connect, hub):
    """The moved beads and those already there, interleaved by their stamps, follow each other in that order."""
    agent = await connect()
    old, new = new_id("s"), new_id("s")
    beads = [await agent.create_bead(f"step w{i}x{new[2:]}", session_id=(new, old)[i % 2]) for i in range(5)]
    await agent.migrate_session_with_memories(old, new)
    ids = [b.bead_id for b in beads]
    assert [b.bead_id for b in await agent.get_by_session(new)] == ids
    assert await _chain(agent, new) == [[]] + [[earlier] for earlier in ids[:-1]]
    report = await agent.check_session(new)
    assert report.beads == 5 and report.problems == []
    for i in range(1, 5):  # the keyword index follows the new links
        hits = (await agent.search_beads(f"w{i - 1}x{new[2:]}", mode="keyword")).hits
        assert ids[i] in [h.bead.bead_id for h in hits]
        assert (ids[i], ids[i - 1]) in hub.keywords.session_edges([ids[i]], [ids[i]])


async def _chain(agent: RecallClient, session: str) -> list[list[str]]:
    """What each bead of the session follows, oldest first."""
    return [
        [r.to_id for r in await agent.get_relationships(b.bead_id, rel_type="FOLLOWS_FROM", direction="out")]
        for b in await agent.get_by_session(session)
    ]


REMOVALS = {
    "delete": lambda agent, bead_id: agent.delete_bead(bead_id),
    "forget": lambda agent, bead_id: agent.forget_bead(bead_id, "wrong", allow_again=True),
}


@pytest.mark.parametrize("removal", sorted(REMOVALS))
@pytest.mark.parametrize("removed", [[0], [2], [5], [1, 2], [2, 4], [0, 1, 2, 3, 4]])
async def test_a_bead_removed_from_a_session_leaves_its_chain_whole(connect, hub, removal, removed):
    """What followed a deleted or forgotten bead follows what it followed: the session's chain has no gap for
    the integrity check to report, for graph context to miss or for the keyword index to keep."""
    agent = await connect()
    session = new_id("s")
    beads = [await agent.create_bead(f"step {i}", f"work item w{i}x{session[2:]}", session_id=session)
             for i in range(6)]
    await agent.search_beads(f"step w0x{session[2:]}", mode="keyword")  # the index has them before the removal
    for i in removed:
        await REMOVALS[removal](agent, beads[i].bead_id)
    kept = [b.bead_id for i, b in enumerate(beads) if i not in removed]
    assert [b.bead_id for b in await agent.get_by_session(session)] == kept
    assert await _chain(agent, session) == [[]] + [[earlier] for earlier in kept[:-1]]
    report = await agent.check_session(session)
    assert report.beads == len(kept) and report.problems == []
    # The keyword index follows the graph: each kept bead is found (weighed down) by the words of the bead it
    # follows now, never by those of a removed one, and hybrid search's graph context reads the new link.
    for later, earlier in zip(kept[1:], kept, strict=False):
        word = f"w{[b.bead_id for b in beads].index(earlier)}x{session[2:]}"
        assert later in [h.bead.bead_id for h in (await agent.search_beads(word, mode="keyword")).hits]
        assert (later, earlier) in hub.keywords.session_edges([later], [later])
    for i in removed:
        hits = (await agent.search_beads(f"w{i}x{session[2:]}", mode="keyword")).hits
        assert hits == []


async def _session_links(hub: HubContext, session: str) -> list[tuple[str, str]]:
    """Every ``FOLLOWS_FROM`` link out of the session's beads, ``(later, earlier)``, sorted (read from the graph)."""
    rows = await hub.graph.ro_query(
        "MATCH (x:Bead)-[:FOLLOWS_FROM]->(y:Bead) WHERE x.session_id = $session RETURN x.bead_id, y.bead_id",
        {"session": session},
    )
    return sorted((str(later), str(earlier)) for later, earlier in rows)


async def _create_linked(hub: HubContext, me: str, props: dict, in_create: bool) -> dict:
    """A bead stored as a create stores it: committed and linked into its session's chain — by the create's own
    query, or by the link that follows it (a create's work after a crash, a bulk create) — and logged for the
    keyword indexes with the beads the link re-linked."""
    follows = AUTO_LINK_NOTE if in_create else None
    outcome = await hub.beads.create(me, props, idem=f"{me}:{props['bead_id']}", follows=follows)
    assert outcome is not None and outcome.created
    if in_create:
        assert outcome.relinked is not None
        await hub.index_log.append_many(outcome.relinked)
    else:
        await follow_session(hub, outcome.props)  # logs the re-linked beads itself
    await hub.index_log.append(outcome.props["bead_id"])
    return outcome.props


LINKED = pytest.mark.parametrize("in_create", [True, False], ids=["linked-by-the-create", "linked-after"])


@LINKED
@pytest.mark.parametrize("order", list(itertools.permutations(range(4))))
async def test_a_sessions_chain_follows_the_stamps_whatever_order_its_creates_commit_in(hub, order, in_create):
    """Creates of one author into one session from two connections or two hubs may commit out of the order they
    were stamped in; each bead still follows the one stamped before it."""
    me, session = new_ai(), new_id("s")
    words = [f"w{i}x{session[2:]}" for i in range(4)]
    beads = [new_bead_props(me, CreateBead(title=f"step {word}", session_id=session), new_moments())[0]
             for word in words]
    for i in order:
        await _create_linked(hub, me, beads[i], in_create)
    rows = await _session_links(hub, session)
    ids = [b["bead_id"] for b in beads]
    assert rows == sorted(zip(ids[1:], ids, strict=False))
    # The keyword index follows: each bead is found (weighed down) by the words of the one stamped before it.
    await hub.keywords.catch_up(hub.index_log.last_appended)
    for i in range(1, 4):
        found = await search_beads(hub, me, SearchBeads(query=words[i - 1], mode=SearchMode.KEYWORD))
        assert sorted(h.bead.bead_id for h in found.hits) == sorted(ids[i - 1 : i + 1])
        assert (ids[i], ids[i - 1]) in hub.keywords.session_edges([ids[i]], [ids[i]])


@pytest.mark.parametrize("settle", ["background", "inline"])
async def test_a_create_committed_after_a_later_stamped_one_takes_its_place_in_the_chain_and_the_index(
    hub: HubContext, monkeypatch: pytest.MonkeyPatch, settle: str
) -> None:
    """Through the create operation: two creates of one author into one session, the one stamped later committing
    first (two connections, two hubs). The second links itself before the first in its own query, and the keyword
    indexes learn before its reply that the first follows it now (its document holds the words it follows)."""
    monkeypatch.setattr(hub.settings, "create_settle", settle)
    me, session, moment = new_ai(), new_id("s"), new_moments()
    stamps = iter([moment + 10, moment])
    monkeypatch.setattr(bead_ops, "new_moments", lambda *_: next(stamps))
    later_word, earlier_word = f"later{session[2:]}", f"earlier{session[2:]}"
    later = await bead_ops.create_bead(hub, me, CreateBead(title=f"step {later_word}", session_id=session))
    await hub.keywords.catch_up(hub.index_log.last_appended)  # indexed while it follows nothing
    earlier = await bead_ops.create_bead(hub, me, CreateBead(title=f"step {earlier_word}", session_id=session))
    assert await _session_links(hub, session) == [(later.bead_id, earlier.bead_id)]
    await hub.keywords.catch_up(hub.index_log.last_appended)
    found = await search_beads(hub, me, SearchBeads(query=earlier_word, mode=SearchMode.KEYWORD))
    assert sorted(h.bead.bead_id for h in found.hits) == sorted([earlier.bead_id, later.bead_id])


@LINKED
@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
async def test_beads_stamped_in_the_same_millisecond_chain_in_the_order_of_their_ids(hub, order, in_create):
    """Two hubs (or a hub's clock) can stamp beads of one session with the same time; the chain then takes them
    in the order of their ids, whatever order they commit in."""
    me, session, moment = new_ai(), new_id("s"), new_moments()
    beads = [new_bead_props(me, CreateBead(title=f"tied {i}", session_id=session), moment)[0] for i in range(3)]
    for i in order:
        await _create_linked(hub, me, beads[i], in_create)
    rows = await _session_links(hub, session)
    ids = sorted(b["bead_id"] for b in beads)
    assert {b["created_at"] for b in beads} == {moment}
    assert rows == sorted(zip(ids[1:], ids, strict=False))


BOUNDARIES = pytest.mark.parametrize("after", range(5), ids=lambda k: f"after-query-{k}")


@LINKED
@BOUNDARIES
async def test_a_create_landing_inside_another_creates_link_keeps_the_chain(hub, monkeypatch, after, in_create):
    """Three beads of one author's session stamped 1, 2, 3: 3 commits first, then 1, and 2 lands at each query
    boundary of 1's create. Each bead follows the one stamped before it, and only that one."""
    me, session = new_ai(), new_id("s")
    beads = [new_bead_props(me, CreateBead(title=f"step {i}", session_id=session), new_moments())[0]
             for i in range(3)]
    await _create_linked(hub, me, beads[2], in_create)
    interleaved = Interleaved(monkeypatch, hub, after, lambda: _create_linked(hub, me, beads[1], in_create))
    await interleaved.run(lambda: _create_linked(hub, me, beads[0], in_create))
    ids = [b["bead_id"] for b in beads]
    assert await _session_links(hub, session) == sorted(zip(ids[1:], ids, strict=False))


@pytest.mark.parametrize("write", ["delete", "forget", "late create"])
@pytest.mark.parametrize("at", [0, 1, 3, 4])
@BOUNDARIES
async def test_a_write_landing_inside_a_migration_keeps_the_chain(connect, hub, monkeypatch, write, at, after):
    """A migration merges two sessions of an author into one chain, while a write to them lands at each query
    boundary of the migration: a delete or forget of bead ``at`` (by its author at another hub, or by a teammate),
    or a create into the merged session stamped just after bead ``at`` that commits only now. The session is one
    chain of its beads in the order of their stamps."""
    agent = await connect()
    me = agent.ai_id
    old, new = new_id("s"), new_id("s")
    ids: list[str] = []
    for i, session in enumerate([new, old, new, old, new, new]):
        ids.append((await agent.create_bead(f"step {i}", session_id=session)).bead_id)
        if i == at:
            late = new_bead_props(me, CreateBead(title="late", session_id=new), new_moments())[0]
    others = {
        "delete": lambda: bead_ops.delete_bead(hub, me, DeleteBead(bead_id=ids[at])),
        "forget": lambda: forget_bead(hub, me, ForgetBead(bead_id=ids[at], reason="wrong", allow_again=True)),
        "late create": lambda: _create_linked(hub, me, late, in_create=True),
    }
    interleaved = Interleaved(monkeypatch, hub, after, others[write])
    await interleaved.run(
        lambda: migrate_session_with_memories(hub, me, MigrateSession(old_session_id=old, new_session_id=new))
    )
    chain = [*ids[: at + 1], late["bead_id"], *ids[at + 1 :]] if write == "late create" else ids[:at] + ids[at + 1 :]
    assert await _session_links(hub, new) == sorted(zip(chain[1:], chain, strict=False))


async def test_session_integrity_check_reports_inconsistent_beads(connect, hub):
    agent = await connect()
    session = new_id("s")
    first = await agent.create_bead("fine", session_id=session)
    broken = await agent.create_bead("broken", session_id=session)
    await handed_off_work_done(hub)  # its vector made (RECALL_CREATE_SETTLE=background: after the reply), then undone
    await hub.graph.query("MATCH (b:Bead {bead_id: $id}) SET b.group_id = 'g_doesnotexist', b.vec_model = NULL",
                          {"id": broken.bead_id})
    report = await agent.check_session(session)
    problems = {(p.bead_id, p.problem.split(" ")[0]) for p in report.problems}
    assert (broken.bead_id, "group") in problems
    assert (broken.bead_id, "no") in problems
    assert first.bead_id not in {p.bead_id for p in report.problems}


# --- agent state ------------------------------------------------------------------------------


async def test_agent_state_is_private_except_through_a_transfer(connect):
    _, _, (alice, bob) = await team(connect)
    saved = await alice.ai_state_save(todos=[Todo(text="finish the migration")], working_notes="halfway")
    assert saved.todos[0].text == "finish the migration"
    assert (await alice.ai_state_save(context_summary="migrating users")).working_notes == "halfway"
    assert (await bob.ai_state_get()).todos == []
    sent = await alice.ai_state_transfer(bob.ai_id)
    assert sent.ai_id == alice.ai_id
    received = await bob.ai_state_get()
    assert [t.text for t in received.todos] == ["finish the migration"]
    assert received.inherited_from == [alice.ai_id] and "halfway" in received.working_notes
    stranger = await connect()
    with pytest.raises(NotFound):
        await alice.ai_state_transfer(stranger.ai_id)


# --- ops handoff ------------------------------------------------------------------------------


async def test_ops_handoff_moves_role_context_and_state_together(connect):
    ops, group_id, (alice, bob) = await team(connect)
    decision = await ops.create_bead("Ship on Friday", "release train", importance=9, group_id=group_id,
                                     visibility="group")
    todo = await ops.create_bead("Rotate the TLS cert", bead_type="todo", group_id=group_id, visibility="group")
    await ops.ai_state_save(todos=[Todo(text="review PR 42")], context_summary="release week")
    async with alice.notifications() as notes:
        handoff = await ops.transfer_ops(
            group_id, alice.ai_id, "Release is on track; cert rotation open.", handoff_id="h_release01")
        delivered = await asyncio.wait_for(anext(n async for n in notes if n.kind == "handoff"), 10)
    assert delivered.brief is not None and delivered.handoff == handoff
    handoff = await ops.transfer_ops(group_id, alice.ai_id, "Release is on track; cert rotation open.",
                                     handoff_id="h_release01")
    assert handoff.status == "pending" and handoff.to_ops == alice.ai_id
    roles = {m.ai_id: m.role.value for m in (await bob.list_members(group_id)).members}
    assert roles == {ops.ai_id: "agent", alice.ai_id: "ops", bob.ai_id: "agent"}
    bead = await bob.get_bead(handoff.handoff_bead_id)
    assert bead.bead_type.value == "handoff" and bead.visibility.value == "group"
    linked = {r.to_id for r in await bob.get_relationships(bead.bead_id, direction="out")}
    assert {decision.bead_id, todo.bead_id} <= linked
    assert (await ops.transfer_ops(group_id, alice.ai_id, "again", handoff_id="h_release01")).handoff_id == \
        handoff.handoff_id
    brief = await alice.handoff_brief(group_id)
    assert brief.handoff is not None and brief.handoff.status == "pending"
    assert decision.bead_id in brief.bead_ids
    assert {t.text for t in brief.open_todos} >= {"review PR 42", "Rotate the TLS cert"}
    with pytest.raises(NotFound):
        await bob.acknowledge_handoff(handoff.handoff_id)
    acked = await alice.acknowledge_handoff(handoff.handoff_id)
    assert acked.status == "acknowledged" and acked.acknowledged_at is not None
    with pytest.raises(Forbidden):
        await ops.transfer_ops(group_id, bob.ai_id, "I am not ops any more")


async def test_a_refused_handoff_changes_nothing(connect):
    ops, group_id, (alice,) = await team(connect, 1)
    stranger = await connect()
    before = (await ops.list_members(group_id)).members
    with pytest.raises(NotFound):
        await ops.transfer_ops(group_id, stranger.ai_id, "to a non-member")
    with pytest.raises(Forbidden):
        await alice.transfer_ops(group_id, alice.ai_id + "x", "not ops")  # alice is no ops
    assert (await ops.list_members(group_id)).members == before
    assert [b for b in await ops.get_by_group(group_id) if b.bead_type.value == "handoff"] == []
    raw = await ops.nc.request(f"recall.v1.req.{alice.ai_id}.transfer_ops", json.dumps(
        {"group_id": group_id, "from_ops": ops.ai_id, "to_agent": alice.ai_id, "context_summary": "spoof"}).encode())
    assert raw.headers["Nats-Service-Error-Code"] == "403"


# --- change feed ------------------------------------------------------------------------------


async def test_members_follow_the_change_feed_and_late_joiners_replay_it(connect):
    ops, group_id, (alice,) = await team(connect, 1)
    feed = alice.changes(group_id)
    first = asyncio.ensure_future(anext(feed))  # replays the (empty) log, then waits for live changes
    created = await ops.create_bead("Feed item", "one", group_id=group_id, visibility="group")
    change = await asyncio.wait_for(first, 10)
    assert (change.action, change.bead_id) == ("created", created.bead_id)
    await ops.update_bead(created.bead_id, content="two")
    updated = await asyncio.wait_for(anext(feed), 10)
    assert updated.action == "updated" and updated.bead is not None and updated.bead.content == "two"
    await feed.aclose()
    await ops.delete_bead(created.bead_id)

    late = await connect()
    await ops.add_member(group_id, late.ai_id)
    replay = await late.changes_since(group_id)
    assert [(c.action, c.bead_id) for c in replay.changes] == [
        ("created", created.bead_id), ("updated", created.bead_id), ("deleted", created.bead_id)]
    resumed = await late.changes_since(group_id, cursor=replay.changes[0].cursor)
    assert [c.action for c in resumed.changes] == ["updated", "deleted"]


async def test_an_ex_member_stops_receiving_at_once(connect):
    ops, group_a, (alice,) = await team(connect, 1)
    group_b = (await ops.create_group("still together")).group_id
    await ops.add_member(group_b, alice.ai_id)
    async with alice.notifications() as notes:
        await ops.remove_member(group_a, alice.ai_id)
        await ops.create_bead("secret after leaving", group_id=group_a, visibility="group")
        sentinel = await ops.create_bead("sentinel", group_id=group_b, visibility="group")
        # Notifications from the hub arrive in order: the sentinel coming first proves the other never came.
        note = await asyncio.wait_for(anext(notes), 10)
    assert note.change is not None and note.change.bead_id == sentinel.bead_id
    with pytest.raises(NotFound):
        await alice.changes_since(group_a)


# --- key-value memory -------------------------------------------------------------------------


async def test_learn_recall_unified_and_promote(connect):
    agent, other = await connect(), await connect()
    await agent.learn("deploy.command", "make release VERSION=x", {"source": "runbook"})
    assert (await agent.recall("deploy.command")).value == "make release VERSION=x"
    assert (await agent.recall("deploy.command", max_length=4)).value == "make"
    with pytest.raises(NotFound):
        await other.recall("deploy.command")
    await agent.create_bead("Release checklist", "tag, build, then make release", visibility="private")
    unified = await agent.unified_recall("make release")
    assert [e.key for e in unified.entries] == ["deploy.command"]
    assert unified.beads.hits and unified.beads.hits[0].bead.title == "Release checklist"
    bead = await agent.promote_to_bead("deploy.command", bead_type="fact")
    assert (bead.title, bead.content, bead.metadata["promoted_from"]) == (
        "deploy.command", "make release VERSION=x", "deploy.command")
    assert (await agent.promote_to_bead("deploy.command")).bead_id == bead.bead_id


# --- audit ------------------------------------------------------------------------------------


async def test_audit_records_reads_writes_and_refusals(connect, hub):
    ops, group_id, (alice,) = await team(connect, 1)
    bead = await ops.create_bead("Audited", group_id=group_id, visibility="group")
    await alice.get_bead(bead.bead_id)
    await ops.remove_member(group_id, alice.ai_id)
    with pytest.raises(NotFound):
        await alice.get_bead(bead.bead_id)
    entries = await hub.audit.entries(bead_id=bead.bead_id)
    assert [(e.ai_id, e.op, e.allowed) for e in entries] == [
        (ops.ai_id, "create_bead", True), (alice.ai_id, "get_bead", True), (alice.ai_id, "get_bead", False)]
    assert entries[-1].code == "not_found"
    cli = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "recall_hub.tooling.cli", "audit", "--redis", hub.settings.redis_url,
        "--graph", hub.settings.graph_name, "--ai", alice.ai_id,
        stdout=asyncio.subprocess.PIPE)
    out = (await cli.communicate())[0].decode()
    assert cli.returncode == 0
    assert "get_bead" in out and "not_found" in out and bead.bead_id in out


async def test_the_audit_names_every_bead_a_read_returned(connect, hub):
    """Search hits, why()'s seeds and graph, traversal edges, relationship ends: each bead a reply names is
    in the reader's audit entry (and none of the texts, tags or metadata are taken for ids)."""
    me = await connect()
    tag = new_id("t")[2:]
    first = await me.create_bead("Audit trail alpha", "alpha", tags=[tag], metadata={"bead_id": "b_notabead"})
    second = await me.create_bead("Audit trail beta", "beta", tags=[tag])
    await me.add_relationship(second.bead_id, first.bead_id, "RELATED_TO")
    hits = await me.search_beads("audit trail", filters={"tags": [tag]})
    await me.why("audit trail", filters={"tags": [tag]})
    await me.traverse_graph(first.bead_id, max_depth=1)
    entries = [e for e in await hub.audit.entries(ai_id=me.ai_id) if e.op in ("search_beads", "why", "traverse_graph")]
    named = {e.op: set(e.bead_ids) for e in entries}
    assert {h.bead.bead_id for h in hits.hits} == {first.bead_id, second.bead_id}
    assert named == {op: {first.bead_id, second.bead_id} for op in ("search_beads", "why", "traverse_graph")}
