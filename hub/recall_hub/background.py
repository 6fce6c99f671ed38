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
        self._tasks: dict[int, tuple[int, asyncio.Task[None]]] = {}
        self._next = 0

    def try_hand_off(self, work: Callable[[], Awaitable[None]], at: int, name: str = "recall-background") -> bool:
        """Start ``work`` in the background; False (nothing started) when every slot is taken. ``at``: when the
        write it follows was committed (epoch ms), what :meth:`wait_for_earlier` is bounded by."""
        if self._slots.locked():
            return False
        ticket = self._next
        self._next += 1

        async def run() -> None:
            async with self._slots:
                await work()

        task = asyncio.create_task(run(), name=name)
        self._tasks[ticket] = (at, task)
        task.add_done_callback(lambda _: self._tasks.pop(ticket, None))
        return True

    async def wait_for_earlier(self, until: int | None = None) -> None:
        """Until every piece of work handed off before now (``until``: of writes recorded at or before then,
        epoch ms) is done."""
        earlier = [task for at, task in self._tasks.values() if until is None or at <= until]
        if earlier:
            await asyncio.wait(earlier)

    @property
    def pending(self) -> int:
        return len(self._tasks)
