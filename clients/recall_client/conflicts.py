"""Retrying a read-modify-write that lost a race.

Every write that replaces state — ``update_bead``, ``delete_bead``, ``edit_bead`` (beads), ``learn``
(key-value memory), ``ai_state_save`` (agent state) — can carry ``if_version``: the hub applies it only
while the state is still at that version and otherwise answers :class:`~recall_schemas.Conflict` with the
current version in ``details["version"]``. :func:`retry_on_conflict` runs such a read-modify-write again
from a fresh read until it lands.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from recall_schemas import Conflict

T = TypeVar("T")

DEFAULT_ATTEMPTS = 20


async def retry_on_conflict(attempt: Callable[[], Awaitable[T]], attempts: int = DEFAULT_ATTEMPTS) -> T:
    """Await ``attempt()`` (which reads, then writes with ``if_version``) until it does not raise
    :class:`~recall_schemas.Conflict`, backing off a little more after each lost race; the last attempt's
    conflict is raised. For example, appending to agent state without losing a concurrent save::

        async def add_todo() -> AIState:
            state = await client.ai_state_get()
            todos = [*state.todos, {"text": "review the schema"}]
            return await client.ai_state_save(todos=todos, if_version=state.version)

        await retry_on_conflict(add_todo)
    """
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    for tried in range(1, attempts + 1):
        try:
            return await attempt()
        except Conflict:
            if tried == attempts:
                raise
            await asyncio.sleep(random.uniform(0, 0.005 * tried))
    raise AssertionError("unreachable")
