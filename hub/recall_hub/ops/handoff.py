"""Ops handoff as one operation: role, handoff bead with its links, and agent state move together
in one atomic query; the new ops then acknowledges. Until it does, the handoff reads as pending."""

from __future__ import annotations

import json
import logging
from typing import Any

from recall_schemas import (
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    ScoreExplanation,
    SearchHit,
    new_id,
)
from recall_schemas.coordination import (
    AcknowledgeHandoff,
    GetHandoffBrief,
    Handoff,
    HandoffBrief,
    HandoffList,
    ListHandoffs,
    Notification,
    Todo,
    TransferOps,
)
from recall_schemas.rendering import render_bead

from recall_hub.context import HubContext
from recall_hub.ops.after_commit import settle_quietly
from recall_hub.ops.agent_state import merged
from recall_hub.retrieval.search import pack
from recall_hub.store.records import content_hash
from recall_hub.timeutil import now_ms
from recall_hub.tokens import count_tokens

log = logging.getLogger(__name__)

DEFAULT_SUMMARISED = 10
BRIEF_CANDIDATES = 100
MAX_RETRIES = 5


async def transfer_ops(ctx: HubContext, caller: str, req: TransferOps) -> Handoff:
    """Hand the role over. A retry with the same ``handoff_id`` returns the first handoff."""
    if req.from_ops != caller:
        raise Forbidden("from_ops must be the caller: an identity can only hand over its own role")
    if req.to_agent == caller:
        raise InvalidRequest("to_agent must be another member")
    handoff_id = req.handoff_id or new_id("h")
    mine, taken = await ctx.handoffs.sent(caller, handoff_id)
    if mine is not None:
        return mine
    if taken:
        raise NotFound(f"handoff {handoff_id} not found")
    role = await ctx.groups.role_in(caller, req.group_id)
    if role is None:
        raise NotFound(f"group {req.group_id} not found")
    if role != "ops":
        raise Forbidden(f"only the ops of {req.group_id} may hand the role over")
    if await ctx.groups.member_role(caller, req.group_id, req.to_agent) is None:
        raise NotFound(f"{req.to_agent} is not a member of {req.group_id}")
    summarised = req.bead_ids or await ctx.handoffs.group_memory_ids(caller, req.group_id, DEFAULT_SUMMARISED)
    for _ in range(MAX_RETRIES):
        from_state, _ = await ctx.agents.own_state(caller)
        to_found = await ctx.agents.peer_state(caller, req.to_agent)
        if to_found is None:
            raise NotFound(f"{req.to_agent} is not a member of {req.group_id}")
        to_state, to_version = to_found
        now = now_ms()
        bead_id = new_id("b")
        bead = {
            "bead_id": bead_id, "idem": f"{caller}:{handoff_id}", "title": f"Ops handoff: {caller} → {req.to_agent}",
            "content": req.context_summary, "content_hash": content_hash(req.context_summary), "bead_type": "handoff",
            "importance": 9, "tags": ["handoff"], "created_at": now, "updated_at": now, "accessed_at": now,
            "created_by": caller, "group_id": req.group_id, "visibility": "group",
            "metadata": json.dumps({"handoff_id": handoff_id, "to_ops": req.to_agent}), "status": "active",
            "provenance": "authored", "corroborated_by": [], "version": 1,
        }
        done = await ctx.handoffs.transfer(
            caller, to=req.to_agent, group_id=req.group_id, handoff_id=handoff_id, bead=bead,
            summarised=summarised, to_state=merged(to_state, from_state), to_version=to_version, now=now,
        )
        if done is not None:
            handoff, stored = done
            await _after_transfer(ctx, handoff, stored)
            return handoff
        mine, taken = await ctx.handoffs.sent(caller, handoff_id)
        if mine is not None:
            return mine
        if taken:
            raise NotFound(f"handoff {handoff_id} not found")
        if await ctx.groups.role_in(caller, req.group_id) != "ops":
            raise Forbidden(f"only the ops of {req.group_id} may hand the role over")
    raise Conflict("the new ops' state changed concurrently; retry")


async def _after_transfer(ctx: HubContext, handoff: Handoff, bead: dict[str, Any]) -> None:
    """Committed already, with its outbox entry: settle the handoff bead's follow-up (vector, change
    log), then deliver the brief to the new ops — a live hint; the handoff record and the brief stay
    readable (``handoff_brief``) whatever happens to the notification."""
    await settle_quietly(ctx, bead["bead_id"])
    try:
        brief = await handoff_brief(ctx, handoff.to_ops, GetHandoffBrief(group_id=handoff.group_id))
        await ctx.feed.notify(handoff.to_ops, Notification(kind="handoff", handoff=handoff, brief=brief))
    except Exception:
        log.exception("post-handoff work for %s incomplete", handoff.handoff_id)


async def acknowledge_handoff(ctx: HubContext, caller: str, req: AcknowledgeHandoff) -> Handoff:
    handoff = await ctx.handoffs.acknowledge(caller, req.handoff_id, now_ms())
    if handoff is None:
        raise NotFound(f"handoff {req.handoff_id} not found")
    return handoff


async def list_handoffs(ctx: HubContext, caller: str, req: ListHandoffs) -> HandoffList:
    """A group's ops transfers, newest first, with their acknowledgements; for its current members."""
    handoffs = await ctx.handoffs.in_group(caller, req.group_id, req.limit)
    if handoffs is None:
        raise NotFound(f"group {req.group_id} not found")
    return HandoffList(handoffs=handoffs)


async def handoff_brief(ctx: HubContext, caller: str, req: GetHandoffBrief) -> HandoffBrief:
    """The latest handoff of the group, its most important and recent memory within the budget,
    open todos, and (for the new ops) the state handed over."""
    if await ctx.groups.role_in(caller, req.group_id) is None:
        raise NotFound(f"group {req.group_id} not found")
    handoff = await ctx.handoffs.latest(caller, req.group_id)
    beads = await ctx.handoffs.group_memory(caller, req.group_id, BRIEF_CANDIDATES)
    hits = [SearchHit(bead=b, score=b.importance, explanation=ScoreExplanation(relevance=0, prior=1)) for b in beads]
    kept, _ = pack(hits, req.max_tokens, max_per_source=2)
    state = (await ctx.agents.own_state(caller))[0] if handoff and handoff.to_ops == caller else None
    todos = [t for t in (state.todos if state else []) if not t.done]
    todos += [Todo(text=b.title, bead_id=b.bead_id) for b in beads if b.bead_type.value == "todo"]
    return HandoffBrief(
        group_id=req.group_id,
        handoff=handoff,
        text="\n\n".join(render_bead(h.bead) for h in kept),
        bead_ids=[h.bead.bead_id for h in kept],
        tokens=sum(count_tokens(render_bead(h.bead)) + 1 for h in kept),
        open_todos=todos,
        state=state,
    )
