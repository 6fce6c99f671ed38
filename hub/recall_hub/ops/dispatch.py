"""Operation name -> domain function, derived from the operation table.

Every operation of :data:`recall_schemas.OPERATIONS` is served by the async function of the same
name in exactly one module of :data:`MODULES`; the table is built from that rule when this module is
imported, so an operation without a handler (or with two) stops the hub from starting. Transport-free:
tests call :func:`dispatch` directly.

Each call is one request scope (:func:`recall_hub.store.replica.request_scope`): the operations of
:data:`STALE_READS` may read from a replica, and a request that wrote returns once the replicas have it.
A Redis outage met anywhere in a call is ``unavailable`` (:func:`recall_hub.outages.as_unavailable`).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import Any

from pydantic import BaseModel
from recall_schemas import OPERATIONS

from recall_hub.context import HubContext
from recall_hub.ops import (
    agent_state,
    audit,
    beads,
    capture,
    changes,
    forget,
    groups,
    handoff,
    history,
    kv,
    listing,
    maintenance,
    places,
    relationships,
    sessions,
    trust,
)
from recall_hub.outages import as_unavailable
from recall_hub.retrieval import search
from recall_hub.store.replica import request_scope

Handler = Callable[[HubContext, str, Any], Awaitable[BaseModel]]

MODULES: tuple[ModuleType, ...] = (
    capture, places,
    agent_state, beads, changes, forget, groups, handoff, kv, listing, maintenance, relationships, search, sessions,
    history, trust, audit,
)


def _handlers() -> dict[str, Handler]:
    table: dict[str, Handler] = {}
    for name in OPERATIONS:
        found = [
            handler for module in MODULES
            if inspect.iscoroutinefunction(handler := getattr(module, name, None))
            and handler.__module__ == module.__name__
        ]
        if len(found) != 1:
            raise ImportError(f"operation {name!r} needs exactly one handler in {[m.__name__ for m in MODULES]}")
        table[name] = found[0]
    return table


HANDLERS: dict[str, Handler] = _handlers()

STALE_READS = frozenset({
    "search_beads", "find_similar", "why", "context", "unified_recall",
    "get_by_session", "get_by_group", "get_by_tag", "get_recent", "rank_by_importance",
    "get_relationships", "get_edges", "traverse_graph",
})
"""Operations whose reads a replica may serve: searches, listings, traversal, why and context. Every other
operation reads the primary: writes, reads that guard a write (membership, versions), and reads a caller
uses to check what it has just done (``get_bead`` after a create, ``list_members`` after ``add_member``)."""


async def dispatch(ctx: HubContext, caller: str, op: str, request: BaseModel) -> BaseModel:
    """Run one operation. A store that cannot reach Redis fails it as ``unavailable`` (the one place that maps
    it: no store needs to, and none can leak an outage as an internal error)."""
    with as_unavailable():
        async with request_scope(stale_reads=op in STALE_READS):
            return await HANDLERS[op](ctx, caller, request)
