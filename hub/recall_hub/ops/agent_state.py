"""Agent state (todos, working notes, context summary, custom state), private to its AI id
except through a transfer. Stored on the identity's node in the graph
(:class:`recall_hub.store.agents.AgentStore`), so an ops handoff can move it in the same atomic
query as the role."""

from __future__ import annotations

from recall_schemas import Conflict, NotFound
from recall_schemas.coordination import AIState, GetAIState, SaveAIState, TransferAIState

from recall_hub.context import HubContext

MAX_RETRIES = 5


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


def stale_state(version: int, expected: int) -> Conflict:
    return Conflict(
        f"agent state is at version {version}, not {expected}: read it again", {"version": version}
    )


async def ai_state_save(ctx: HubContext, caller: str, req: SaveAIState) -> AIState:
    """Replace the fields given. With ``if_version``, only while the state is at that version (one
    compare-and-set); without it the fields given win over any concurrent save, and the other fields of
    a concurrent save survive."""
    changes = req.model_dump(exclude_unset=True, exclude={"if_version"})
    for _ in range(MAX_RETRIES):
        state, version = await ctx.agents.own_state(caller)
        if req.if_version is not None and version != req.if_version:
            raise stale_state(version, req.if_version)
        updated = state.model_copy(update={k: getattr(req, k) for k in changes})
        if await ctx.agents.compare_and_set(caller, updated, version) == "ok":
            return (await ctx.agents.own_state(caller))[0]
        if req.if_version is not None:
            raise stale_state((await ctx.agents.own_state(caller))[1], req.if_version)
    raise Conflict("agent state changed concurrently; retry")


async def ai_state_get(ctx: HubContext, caller: str, req: GetAIState) -> AIState:
    return (await ctx.agents.own_state(caller))[0]


async def ai_state_transfer(ctx: HubContext, caller: str, req: TransferAIState) -> AIState:
    """Merge the caller's state into a peer's (who must share a group with the caller)."""
    not_found = NotFound(f"{req.to_ai_id} is not a member of any of your groups")
    if req.to_ai_id == caller or not await ctx.agents.shares_group(caller, req.to_ai_id):
        raise not_found
    mine, _ = await ctx.agents.own_state(caller)
    for _ in range(MAX_RETRIES):
        found = await ctx.agents.peer_state(caller, req.to_ai_id)
        if found is None:
            raise not_found
        theirs, version = found
        outcome = await ctx.agents.compare_and_set(caller, merged(theirs, mine), version, ai_id=req.to_ai_id)
        if outcome == "ok":
            return mine  # the sender sees what it handed over, never the peer's own state
        if outcome == "unreachable":
            raise not_found
    raise Conflict("agent state changed concurrently; retry")
