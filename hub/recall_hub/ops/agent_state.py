"""Agent state (todos, working notes, context summary, custom state), private to its AI id
except through a transfer. Stored on the identity's node in the graph, so an ops handoff can move
it in the same atomic query as the role."""

from __future__ import annotations

import json
from typing import Any

from recall_schemas import Conflict, NotFound
from recall_schemas.coordination import AIState, GetAIState, SaveAIState, TransferAIState

from recall_hub.context import HubContext
from recall_hub.timeutil import from_ms, now_ms

MAX_RETRIES = 5


def state_from(ai_id: str, raw: str | None, updated_at: int | None) -> AIState:
    data: dict[str, Any] = json.loads(raw) if raw else {}
    return AIState(ai_id=ai_id, updated_at=from_ms(updated_at) if updated_at else None, **data)


def state_json(state: AIState) -> str:
    return state.model_dump_json(exclude={"ai_id", "updated_at"})


def merged(into: AIState, incoming: AIState) -> AIState:
    """``into`` with ``incoming``'s open todos, notes and summary added (nothing of ``into`` is lost)."""
    seen = {t.text for t in into.todos}
    todos = into.todos + [t for t in incoming.todos if not t.done and t.text not in seen]

    def join(mine: str, theirs: str, label: str) -> str:
        if not theirs:
            return mine
        block = f"[{label} from {incoming.ai_id}]\n{theirs}"
        return f"{mine}\n\n{block}" if mine else block

    return into.model_copy(
        update={
            "todos": todos,
            "working_notes": join(into.working_notes, incoming.working_notes, "notes"),
            "context_summary": join(into.context_summary, incoming.context_summary, "summary"),
            "custom_state": {
                **into.custom_state,
                **{f"{incoming.ai_id}.{k}": v for k, v in incoming.custom_state.items()},
            },
            "inherited_from": sorted({*into.inherited_from, incoming.ai_id}),
        }
    )


async def load_state(ctx: HubContext, ai_id: str) -> tuple[AIState, int]:
    rows = await ctx.graph.ro_query(
        "MATCH (a:AI {ai_id: $ai_id}) RETURN a.state, a.state_updated_at, coalesce(a.state_version, 0)",
        {"ai_id": ai_id},
    )
    if not rows:
        return AIState(ai_id=ai_id), 0
    raw, updated_at, version = rows[0]
    return state_from(ai_id, raw, updated_at), int(version)


async def _store(ctx: HubContext, ai_id: str, state: AIState, version: int) -> bool:
    """Compare-and-set on ``state_version``: concurrent saves never lose each other's fields."""
    rows = await ctx.graph.query(
        "MERGE (a:AI {ai_id: $ai_id}) WITH a WHERE coalesce(a.state_version, 0) = $version "
        "SET a.state = $state, a.state_updated_at = $now, a.state_version = $version + 1 RETURN a.ai_id",
        {"ai_id": ai_id, "state": state_json(state), "version": version, "now": now_ms()},
    )
    return bool(rows)


async def ai_state_save(ctx: HubContext, caller: str, req: SaveAIState) -> AIState:
    changes = req.model_dump(exclude_unset=True)
    for _ in range(MAX_RETRIES):
        state, version = await load_state(ctx, caller)
        updated = state.model_copy(update={k: getattr(req, k) for k in changes})
        if await _store(ctx, caller, updated, version):
            return (await load_state(ctx, caller))[0]
    raise Conflict("agent state changed concurrently; retry")


async def ai_state_get(ctx: HubContext, caller: str, req: GetAIState) -> AIState:
    return (await load_state(ctx, caller))[0]


async def shares_group(ctx: HubContext, a: str, b: str) -> bool:
    rows = await ctx.graph.ro_query(
        "MATCH (:AI {ai_id: $a})-[:MEMBER_OF]->(g:Group)<-[:MEMBER_OF]-(:AI {ai_id: $b}) RETURN count(g)",
        {"a": a, "b": b},
    )
    return bool(rows and rows[0][0])


async def ai_state_transfer(ctx: HubContext, caller: str, req: TransferAIState) -> AIState:
    """Merge the caller's state into a peer's (who must share a group with the caller)."""
    if req.to_ai_id == caller or not await shares_group(ctx, caller, req.to_ai_id):
        raise NotFound(f"{req.to_ai_id} is not a member of any of your groups")
    mine, _ = await load_state(ctx, caller)
    for _ in range(MAX_RETRIES):
        theirs, version = await load_state(ctx, req.to_ai_id)
        if await _store(ctx, req.to_ai_id, merged(theirs, mine), version):
            return mine  # the sender sees what it handed over, never the peer's own state
    raise Conflict("agent state changed concurrently; retry")
