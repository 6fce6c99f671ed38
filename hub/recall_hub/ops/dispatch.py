"""Operation name -> domain function, derived from the operation table.

Every operation of :data:`recall_schemas.OPERATIONS` is served by the async function of the same
name in exactly one module of :data:`MODULES`; the table is built from that rule when this module is
imported, so an operation without a handler (or with two) stops the hub from starting. Transport-free:
tests call :func:`dispatch` directly.
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
    beads,
    changes,
    groups,
    handoff,
    kv,
    listing,
    maintenance,
    relationships,
    sessions,
)
from recall_hub.retrieval import search

Handler = Callable[[HubContext, str, Any], Awaitable[BaseModel]]

MODULES: tuple[ModuleType, ...] = (
    agent_state, beads, changes, groups, handoff, kv, listing, maintenance, relationships, search, sessions,
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


async def dispatch(ctx: HubContext, caller: str, op: str, request: BaseModel) -> BaseModel:
    return await HANDLERS[op](ctx, caller, request)
