"""Ending asyncio tasks and NATS connections for certain.

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

from nats.aio.client import Client as NATS

log = logging.getLogger(__name__)

CANCEL_AGAIN_S = 0.05
"""How long one cancellation is given before the next."""


async def stop_tasks(tasks: Iterable[asyncio.Future[Any]], within: float = 10.0) -> set[asyncio.Future[Any]]:
    """Cancel every task and wait until each has ended, cancelling again those that run on; within ``within``
    seconds. The tasks still running then (a task that ignores cancellation), which are logged. A task's own
    failure is logged too, not raised: stopping it is what the caller asked for."""
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


async def close_nats(nc: NATS, within: float = 10.0) -> None:
    """Drain ``nc`` (or close it when it is not connected: nats-py refuses to drain a reconnecting connection),
    then make sure its reconnect loop has ended: nats-py cancels it once, and a loop that lost that cancellation
    retries a server that is gone forever."""
    try:
        if nc.is_connected:
            await nc.drain()
    finally:
        if not nc.is_closed:
            await nc.close()
        reconnecting = getattr(nc, "_reconnection_task", None)  # nats-py's; absent in another version
        if isinstance(reconnecting, asyncio.Future):
            await stop_tasks([reconnecting], within)


def _name(task: asyncio.Future[Any]) -> str:
    return task.get_name() if isinstance(task, asyncio.Task) else repr(task)
