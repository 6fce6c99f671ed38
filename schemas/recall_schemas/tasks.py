"""Ending asyncio tasks for certain, in the hub and in its clients.

One ``task.cancel()`` can be lost: on Python 3.11, ``asyncio.wait_for`` returns the result of the awaitable it
guards when that result arrives together with the cancellation, and redis-py wraps a socket write in it, nats-py
a connect, a request and a fetch. A loop that polls a store or the bus then goes on as if never cancelled, and
whoever awaits it waits forever (a hub's shutdown hung so behind its replica watcher). So a task is cancelled
again until it has ended, within a bound."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

log = logging.getLogger(__name__)

CANCEL_AGAIN_S = 0.05
"""How long one cancellation is given before the next."""


async def stop_tasks(tasks: Iterable[asyncio.Future[Any]], within: float = 10.0) -> set[asyncio.Future[Any]]:
    """Cancel every task and wait until each has ended, cancelling again those that run on; within ``within``
    seconds. Returns the tasks still running then (a task that ignores cancellation), and logs them. A task's own
    failure is logged, not raised: stopping it is what the caller asked for."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    stopped = set(tasks)
    running = {task for task in stopped if not task.done()}
    stopped -= running
    while running:
        for task in running:
            task.cancel()
        remaining = deadline - loop.time()
        if remaining <= 0:
            log.warning("tasks still running %.1f s after they were cancelled: %s", within,
                        [_name(task) for task in running])
            break
        ended, running = await asyncio.wait(running, timeout=min(CANCEL_AGAIN_S, remaining))
        stopped |= ended
    for task in stopped:
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.warning("%s ended with %s: %s", _name(task), type(exc).__name__, exc)
    return running


def _name(task: asyncio.Future[Any]) -> str:
    return task.get_name() if isinstance(task, asyncio.Task) else repr(task)
