"""After-commit work a request hands off instead of waiting for it (``RECALL_CREATE_SETTLE=background``).

At most ``limit`` pieces run at once; a request that finds them all busy does its work inline, so a
flood of writes slows down instead of piling work up. A read that must see earlier writes whole (their
vectors too) waits for the work handed off before it arrived (:meth:`BackgroundWork.wait_for_earlier`).
A crash loses nothing: the work is recorded in the outbox, and the sweep finishes it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


class BackgroundWork:
    def __init__(self, limit: int = 64) -> None:
        self._slots = asyncio.Semaphore(limit)
        self._tasks: set[asyncio.Task[None]] = set()

    def try_hand_off(self, work: Callable[[], Awaitable[None]], name: str = "recall-background") -> bool:
        """Start ``work`` in the background; False (nothing started) when every slot is taken."""
        if self._slots.locked():
            return False

        async def run() -> None:
            async with self._slots:
                await work()

        task = asyncio.create_task(run(), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def wait_for_earlier(self) -> None:
        """Until every piece of work handed off before now is done."""
        if self._tasks:
            await asyncio.wait(list(self._tasks))

    @property
    def pending(self) -> int:
        return len(self._tasks)
