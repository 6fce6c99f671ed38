"""The end-to-end coordination scenario, over the bus only: an ops creates a group, two agents join
and work in sessions, share findings, one session migrates, the ops hands off to an agent mid-work,
and an agent leaves and loses access. Used by `recall demo --scenario`, `recall up --secure --demo`
and the tests (with the generated NATS security configuration)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from recall_client import NotFound, RecallClient
from recall_schemas.coordination import Todo

Connect = Callable[[str], Awaitable[RecallClient]]


@dataclass
class ScenarioResult:
    group_id: str
    checks: dict[str, bool] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(self.checks.values())


async def _until(condition: Callable[[], Awaitable[bool]], within: float = 10.0) -> bool:
    """Poll ``condition`` until true (events are applied asynchronously by the hub)."""
    async with asyncio.timeout(within):
        delay = 0.02
        while not await condition():
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)
    return True


async def run_scenario(
    connect: Connect, ops_id: str, coder_id: str, tester_id: str, say: Callable[[str], None] = print
) -> ScenarioResult:
    ops, coder, tester = await connect(ops_id), await connect(coder_id), await connect(tester_id)
    tag = secrets.token_hex(4)
    group = await ops.create_group(f"scenario {tag}")
    gid = group.group_id
    result = ScenarioResult(group_id=gid)
    check = result.checks.__setitem__
    for agent in (coder, tester):
        await ops.add_member(gid, agent.ai_id)
    say(f"1. {ops_id} creates {gid}; {coder_id} and {tester_id} join")

    sessions = {coder.ai_id: f"s_c{tag}", tester.ai_id: f"s_t{tag}"}
    for agent in (coder, tester):
        await agent.events.session_started(sessions[agent.ai_id], gid)

    async def registered() -> bool:
        try:
            return all([await a.get_session(sessions[a.ai_id]) for a in (coder, tester)])
        except NotFound:
            return False

    check("sessions registered from JetStream events", await _until(registered))
    say("2. both agents start sessions by publishing session.started events on JetStream")

    finding = await coder.create_bead(
        "Payment retries double-charge", "Retry without idempotency key charges twice", bead_type="finding",
        importance=8, group_id=gid, visibility="group", session_id=sessions[coder.ai_id], tags=["payments"])
    fix = await coder.create_bead(
        "Fix: idempotency key on retries", "Pass the order id as idempotency key", bead_type="decision",
        importance=7, group_id=gid, visibility="group", session_id=sessions[coder.ai_id], tags=["payments"])
    note = await coder.create_bead("coder scratch", "try the sandbox first", session_id=sessions[coder.ai_id])
    test_note = await tester.create_bead(
        "Retry test added", "test_retry_is_idempotent covers the double charge", bead_type="observation",
        group_id=gid, visibility="group", session_id=sessions[tester.ai_id])
    seen = {h.bead.bead_id for h in (await ops.search_beads("payment retries double charge", limit=10)).hits}
    check("ops finds the agents' group findings", {finding.bead_id, fix.bead_id} <= seen)
    check("a private note stays private", note.bead_id not in seen)
    say(f"3. agents share findings; ops' search finds {len(seen & {finding.bead_id, fix.bead_id, test_note.bead_id})}"
        " group beads and not the private note")

    new_session = f"s_m{tag}"
    migrated = await coder.migrate_session_with_memories(sessions[coder.ai_id], new_session)
    moved = [b.bead_id for b in await coder.get_by_session(new_session)]
    check("session migration carried every bead", moved == [finding.bead_id, fix.bead_id, note.bead_id])
    check("the session passes its integrity check", (await coder.check_session(new_session)).problems == [])
    say(f"4. {coder_id} migrates its session: {migrated.migrated_beads} beads move, FOLLOWS_FROM chain intact")

    await ops.ai_state_save(todos=[Todo(text="ship the retry fix")], context_summary="payments hardening")
    async with tester.notifications() as notes:
        handoff = await ops.transfer_ops(gid, tester.ai_id, "Retry bug found and fixed; ship it and watch refunds.")
        brief_note = await asyncio.wait_for(anext(n async for n in notes if n.kind == "handoff"), 10)
    check("the new ops receives the handoff brief", brief_note.brief is not None)
    roles = {m.ai_id: m.role.value for m in (await tester.list_members(gid)).members}
    check("roles moved", roles[tester.ai_id] == "ops" and roles[ops.ai_id] == "agent")
    check("the handoff is pending until acknowledged", handoff.status == "pending")
    brief = await tester.handoff_brief(gid)
    check("open todos travel with the role", "ship the retry fix" in {t.text for t in brief.open_todos})
    acked = await tester.acknowledge_handoff(handoff.handoff_id)
    check("the new ops acknowledged", acked.status == "acknowledged")
    say(f"5. {ops_id} hands the ops role to {tester_id} mid-work: brief delivered, todos carried, acknowledged")

    await coder.remove_member(gid, coder.ai_id)
    try:
        await coder.get_bead(test_note.bead_id)
        check("a leaver loses access at once", False)
    except NotFound:
        check("a leaver loses access at once", True)
    try:
        await coder.changes_since(gid)
        check("a leaver cannot replay the group's changes", False)
    except NotFound:
        check("a leaver cannot replay the group's changes", True)
    say(f"6. {coder_id} leaves {gid}: its next read of the group's memory is refused (not found)")
    say("")
    for name, passed in result.checks.items():
        say(f"   [{'ok' if passed else 'FAILED'}] {name}")
    return result
