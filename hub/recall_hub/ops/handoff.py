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
    Notification,
    Todo,
    TransferOps,
)

from recall_hub.context import HubContext
from recall_hub.ops.agent_state import load_state, merged, state_json
from recall_hub.ops.groups import role_in
from recall_hub.ops.indexing import index_beads
from recall_hub.retrieval.search import pack, render
from recall_hub.store.records import bead_from_node, content_hash
from recall_hub.timeutil import from_ms, now_ms
from recall_hub.tokens import count_tokens

log = logging.getLogger(__name__)

DEFAULT_SUMMARISED = 10
MAX_RETRIES = 5


def _handoff(node: Any) -> Handoff:
    p = node.properties
    return Handoff(
        handoff_id=p["handoff_id"],
        group_id=p["group_id"],
        from_ops=p["from_ops"],
        to_ops=p["to_ops"],
        handoff_bead_id=p["handoff_bead_id"],
        status=p["status"],
        created_at=from_ms(p["created_at"]),
        acknowledged_at=from_ms(p["acknowledged_at"]) if p.get("acknowledged_at") else None,
    )


async def _existing(ctx: HubContext, handoff_id: str) -> Handoff | None:
    rows = await ctx.graph.ro_query("MATCH (h:Handoff {handoff_id: $id}) RETURN h", {"id": handoff_id})
    return _handoff(rows[0][0]) if rows else None


async def _default_summarised(ctx: HubContext, group_id: str) -> list[str]:
    rows = await ctx.graph.ro_query(
        "MATCH (b:Bead {group_id: $group_id}) WHERE b.visibility = 'group' AND b.status = 'active' "
        "RETURN b.bead_id ORDER BY b.importance DESC, b.created_at DESC LIMIT $n",
        {"group_id": group_id, "n": DEFAULT_SUMMARISED},
    )
    return [row[0] for row in rows]


async def transfer_ops(ctx: HubContext, caller: str, req: TransferOps) -> Handoff:
    """Hand the role over. A retry with the same ``handoff_id`` returns the first handoff."""
    if req.from_ops != caller:
        raise Forbidden("from_ops must be the caller: an identity can only hand over its own role")
    if req.to_agent == caller:
        raise InvalidRequest("to_agent must be another member")
    handoff_id = req.handoff_id or new_id("h")
    if (found := await _existing(ctx, handoff_id)) is not None:
        if found.from_ops != caller:
            raise NotFound(f"handoff {handoff_id} not found")
        return found
    role = await role_in(ctx, caller, req.group_id)
    if role is None:
        raise NotFound(f"group {req.group_id} not found")
    if role != "ops":
        raise Forbidden(f"only the ops of {req.group_id} may hand the role over")
    if await role_in(ctx, req.to_agent, req.group_id) is None:
        raise NotFound(f"{req.to_agent} is not a member of {req.group_id}")
    summarised = req.bead_ids or await _default_summarised(ctx, req.group_id)
    for _ in range(MAX_RETRIES):
        from_state, _ = await load_state(ctx, caller)
        to_state, to_version = await load_state(ctx, req.to_agent)
        now = now_ms()
        bead_id = new_id("b")
        bead = {
            "bead_id": bead_id, "idem": f"{caller}:{handoff_id}", "title": f"Ops handoff: {caller} → {req.to_agent}",
            "content": req.context_summary, "content_hash": content_hash(req.context_summary), "bead_type": "handoff",
            "importance": 9, "tags": ["handoff"], "created_at": now, "updated_at": now, "accessed_at": now,
            "created_by": caller, "group_id": req.group_id, "visibility": "group",
            "metadata": json.dumps({"handoff_id": handoff_id, "to_ops": req.to_agent}), "status": "active",
            "provenance": "authored", "corroborated_by": [],
        }
        rows = await ctx.graph.query(
            "MATCH (from:AI {ai_id: $caller})-[fr:MEMBER_OF {role: 'ops'}]->(g:Group {group_id: $group_id}) "
            "MATCH (to:AI {ai_id: $to})-[tr:MEMBER_OF]->(g) "
            "OPTIONAL MATCH (taken:Handoff {handoff_id: $handoff_id}) "
            "WITH fr, to, tr, taken WHERE taken IS NULL AND coalesce(to.state_version, 0) = $to_version "
            "SET fr.role = 'agent', tr.role = 'ops', "
            "to.state = $to_state, to.state_updated_at = $now, to.state_version = $to_version + 1 "
            "CREATE (h:Bead) SET h = $bead "
            "CREATE (ho:Handoff {handoff_id: $handoff_id, group_id: $group_id, from_ops: $caller, to_ops: $to, "
            "handoff_bead_id: $bead_id, status: 'pending', created_at: $now}) "
            "WITH h, ho OPTIONAL MATCH (s:Bead) WHERE s.bead_id IN $summarised AND s.group_id = $group_id "
            "AND s.visibility = 'group' "
            "WITH h, ho, collect(s) AS covered "
            "FOREACH (x IN covered | MERGE (h)-[r:RELATED_TO]->(x) ON CREATE SET r.created_at = $now, "
            "r.created_by = $caller, r.metadata = '{\"summarises\": true}') "
            "RETURN ho, h",
            {
                "caller": caller, "to": req.to_agent, "group_id": req.group_id, "handoff_id": handoff_id,
                "bead_id": bead_id, "bead": bead, "now": now, "summarised": summarised,
                "to_version": to_version, "to_state": state_json(merged(to_state, from_state)),
            },
        )
        if rows:
            handoff = _handoff(rows[0][0])
            await _after_transfer(ctx, handoff, rows[0][1].properties)
            return handoff
        if (found := await _existing(ctx, handoff_id)) is not None:
            return found
        if await role_in(ctx, caller, req.group_id) != "ops":
            raise Forbidden(f"only the ops of {req.group_id} may hand the role over")
    raise Conflict("the new ops' state changed concurrently; retry")


async def _after_transfer(ctx: HubContext, handoff: Handoff, bead: dict[str, Any]) -> None:
    """Committed already: embed the handoff bead, log the change, deliver the brief to the new ops."""
    try:
        await index_beads(ctx, [bead])
        await ctx.feed.bead_changed(handoff.from_ops, None, bead)
        brief = await handoff_brief(ctx, handoff.to_ops, GetHandoffBrief(group_id=handoff.group_id))
        await ctx.feed.notify(handoff.to_ops, Notification(kind="handoff", handoff=handoff, brief=brief))
    except Exception:
        log.exception("post-handoff work for %s incomplete", handoff.handoff_id)


async def acknowledge_handoff(ctx: HubContext, caller: str, req: AcknowledgeHandoff) -> Handoff:
    rows = await ctx.graph.query(
        "MATCH (h:Handoff {handoff_id: $id}) WHERE h.to_ops = $caller "
        "SET h.status = 'acknowledged', h.acknowledged_at = coalesce(h.acknowledged_at, $now) RETURN h",
        {"id": req.handoff_id, "caller": caller, "now": now_ms()},
    )
    if not rows:
        raise NotFound(f"handoff {req.handoff_id} not found")
    return _handoff(rows[0][0])


async def handoff_brief(ctx: HubContext, caller: str, req: GetHandoffBrief) -> HandoffBrief:
    """The latest handoff of the group, its most important and recent memory within the budget,
    open todos, and (for the new ops) the state handed over."""
    if await role_in(ctx, caller, req.group_id) is None:
        raise NotFound(f"group {req.group_id} not found")
    rows = await ctx.graph.ro_query(
        "MATCH (h:Handoff {group_id: $group_id}) RETURN h ORDER BY h.created_at DESC LIMIT 1",
        {"group_id": req.group_id},
    )
    handoff = _handoff(rows[0][0]) if rows else None
    rows = await ctx.graph.ro_query(
        "MATCH (b:Bead {group_id: $group_id}) WHERE b.visibility = 'group' AND b.status = 'active' "
        "RETURN b ORDER BY b.importance DESC, b.created_at DESC LIMIT 100",
        {"group_id": req.group_id},
    )
    beads = [bead_from_node(row[0]) for row in rows]
    hits = [SearchHit(bead=b, score=b.importance, explanation=ScoreExplanation(relevance=0, prior=1)) for b in beads]
    kept, _ = pack(hits, req.max_tokens, max_per_source=2)
    state = (await load_state(ctx, caller))[0] if handoff and handoff.to_ops == caller else None
    todos = [t for t in (state.todos if state else []) if not t.done]
    todos += [Todo(text=b.title, bead_id=b.bead_id) for b in beads if b.bead_type.value == "todo"]
    return HandoffBrief(
        group_id=req.group_id,
        handoff=handoff,
        text="\n\n".join(render(h.bead) for h in kept),
        bead_ids=[h.bead.bead_id for h in kept],
        tokens=sum(count_tokens(render(h.bead)) + 1 for h in kept),
        open_todos=todos,
        state=state,
    )
