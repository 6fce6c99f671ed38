"""Operation name -> domain function. Transport-free: tests call :func:`dispatch` directly."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel
from recall_schemas import OPERATIONS

from . import agent_state, beads, changes, groups, handoff, kv, listing, maintenance, relationships, search, sessions
from .context import HubContext

Handler = Callable[[HubContext, str, Any], Awaitable[BaseModel]]

HANDLERS: dict[str, Handler] = {
    "create_bead": beads.create_bead,
    "get_bead": beads.get_bead,
    "update_bead": beads.update_bead,
    "delete_bead": beads.delete_bead,
    "search_beads": search.search_beads,
    "find_similar": search.find_similar,
    "why": search.why,
    "context": search.context,
    "get_by_session": listing.get_by_session,
    "get_by_group": listing.get_by_group,
    "get_by_tag": listing.get_by_tag,
    "get_recent": listing.get_recent,
    "add_relationship": relationships.add_relationship,
    "get_relationships": relationships.get_relationships,
    "traverse_graph": relationships.traverse_graph,
    "deduplicate_beads": maintenance.deduplicate_beads,
    "rank_by_importance": maintenance.rank_by_importance,
    "decay_old_memories": maintenance.decay_old_memories,
    "create_group": groups.create_group,
    "add_member": groups.add_member,
    "remove_member": groups.remove_member,
    "list_members": groups.list_members,
    "list_groups": groups.list_groups,
    "get_session": sessions.get_session,
    "migrate_session_with_memories": sessions.migrate_session_with_memories,
    "check_session": sessions.check_session,
    "ai_state_save": agent_state.ai_state_save,
    "ai_state_get": agent_state.ai_state_get,
    "ai_state_transfer": agent_state.ai_state_transfer,
    "transfer_ops": handoff.transfer_ops,
    "acknowledge_handoff": handoff.acknowledge_handoff,
    "handoff_brief": handoff.handoff_brief,
    "learn": kv.learn,
    "recall": kv.recall,
    "unified_recall": kv.unified_recall,
    "promote_to_bead": kv.promote_to_bead,
    "changes_since": changes.changes_since,
}

assert HANDLERS.keys() == OPERATIONS.keys(), "every operation needs exactly one handler"


async def dispatch(ctx: HubContext, caller: str, op: str, request: BaseModel) -> BaseModel:
    return await HANDLERS[op](ctx, caller, request)
