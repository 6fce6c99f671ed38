"""Agent state on the identity's ``(:AI)`` node: todos, working notes, context summary, custom state.

A caller reads and writes its own state; another identity's state only while the two share a group,
checked inside the same query. Writes are compare-and-set on ``state_version``, so concurrent saves
never lose each other's fields.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from recall_schemas.coordination import AIState

from recall_hub.store.graph import GraphStore
from recall_hub.timeutil import from_ms, now_ms

# Binds ``a``, the node of ``$ai_id``, when it is the caller or shares a group with it.
_REACHABLE = (
    "MATCH (a:AI {ai_id: $ai_id}) WHERE a.ai_id = $caller OR "
    "(:AI {ai_id: $caller})-[:MEMBER_OF]->(:Group)<-[:MEMBER_OF]-(a) "
)


def state_from(ai_id: str, raw: str | None, updated_at: int | None, version: int) -> AIState:
    data: dict[str, Any] = json.loads(raw) if raw else {}
    data.pop("version", None)
    return AIState(ai_id=ai_id, updated_at=from_ms(updated_at) if updated_at else None, version=version, **data)


def state_json(state: AIState) -> str:
    return state.model_dump_json(exclude={"ai_id", "updated_at", "version"})


class AgentStore:
    def __init__(self, graph: GraphStore) -> None:
        self.graph = graph

    # --- reads, as a caller -------------------------------------------------------------------

    async def shares_group(self, caller: str, other: str) -> bool:
        """Whether the caller and ``other`` are members of a common group."""
        rows = await self.graph.ro_query(
            "MATCH (:AI {ai_id: $caller})-[:MEMBER_OF]->(g:Group)<-[:MEMBER_OF]-(:AI {ai_id: $other}) "
            "RETURN count(g)",
            {"caller": caller, "other": other},
        )
        return bool(rows and rows[0][0])

    async def own_state(self, caller: str) -> tuple[AIState, int]:
        """``(state, version)`` of the caller; the empty state, version 0, when it never saved any."""
        found = await self._state(caller, caller)
        return found if found is not None else (AIState(ai_id=caller), 0)

    async def peer_state(self, caller: str, ai_id: str) -> tuple[AIState, int] | None:
        """``(state, version)`` of ``ai_id`` if it is the caller or shares a group with it; else None."""
        return await self._state(caller, ai_id)

    async def _state(self, caller: str, ai_id: str) -> tuple[AIState, int] | None:
        rows = await self.graph.ro_query(
            _REACHABLE + "RETURN a.state, a.state_updated_at, coalesce(a.state_version, 0)",
            {"caller": caller, "ai_id": ai_id},
        )
        if not rows:
            return None
        raw, updated_at, version = rows[0]
        return state_from(ai_id, raw, updated_at, int(version)), int(version)

    # --- writes, as a caller --------------------------------------------------------------------

    async def compare_and_set(
        self, caller: str, state: AIState, version: int, ai_id: str | None = None
    ) -> Literal["ok", "stale", "unreachable"]:
        """Store ``state`` for the caller (or for ``ai_id``, which must share a group with the caller,
        checked in the same query) if its version is still ``version``."""
        ai_id = ai_id or caller
        if ai_id == caller:
            cypher = "MERGE (a:AI {ai_id: $ai_id}) WITH a "
        else:
            cypher = _REACHABLE + "WITH a "
        rows = await self.graph.query(
            cypher + "WITH a, coalesce(a.state_version, 0) = $version AS current "
            "FOREACH (_ IN CASE WHEN current THEN [1] ELSE [] END | "
            "SET a.state = $state, a.state_updated_at = $now, a.state_version = $version + 1) "
            "RETURN current",
            {"caller": caller, "ai_id": ai_id, "state": state_json(state), "version": version, "now": now_ms()},
        )
        if not rows:
            return "unreachable"
        return "ok" if rows[0][0] else "stale"

