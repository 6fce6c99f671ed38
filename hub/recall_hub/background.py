"""After-commit work a request hands off instead of waiting for it (``RECALL_CREATE_SETTLE=background``).

At most ``limit`` pieces run at once; a request that finds them all busy does its work inline, so a
flood of writes slows down instead of piling work up. A read that must see earlier writes whole (their
vectors too) waits for the work handed off before it arrived: this process's as it finishes
(:meth:`BackgroundWork.wait_for`), the other hubs' by their marks in Redis.
A crash loses nothing: the work is recorded in the outbox, and the sweep finishes it. Work a store's failure
interrupted is tried again here, with a pause between tries (:meth:`BackgroundWork.pause`) until the process closes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable


class BackgroundWork:
    def __init__(self, limit: int = 64) -> None:
        self._slots = asyncio.Semaphore(limit)
        self._tasks: set[asyncio.Task[None]] = set()
        self._by_key: dict[str, asyncio.Task[None]] = {}
        self._closing = asyncio.Event()

    def try_hand_off(
        self, work: Callable[[], Awaitable[object]], name: str = "recall-background", key: str | None = None
    ) -> bool:
        """Start ``work`` in the background, known by ``key`` (:meth:`wait_for`) while it runs; False (nothing
        started) when every slot is taken."""
        if self._slots.locked():
            return False

        async def run() -> None:
            async with self._slots:
                await work()

        task = asyncio.create_task(run(), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if key is not None:
            self._by_key[key] = task
            task.add_done_callback(lambda _: self._by_key.pop(key, None))
        return True

    async def pause(self, seconds: float) -> bool:
        """Wait ``seconds`` before trying work again; False (at once) when the process is closing."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._closing.wait()
        return not self._closing.is_set()

    async def wait_for_earlier(self) -> None:
        """Until every piece of work handed off before now is done."""
        if self._tasks:
            await asyncio.wait(list(self._tasks))

    async def close(self) -> None:
        """:meth:`wait_for_earlier`, with work that waits to be tried again giving up (the sweep takes it)."""
        self._closing.set()
        await self.wait_for_earlier()

    async def wait_for(self, keys: Iterable[str]) -> None:
        """Until the pieces of work of ``keys`` that run here are done (the others: not this process's, or
        over)."""
        running = [task for key in keys if (task := self._by_key.get(key)) is not None]
        if running:
            await asyncio.wait(running)

    def running(self, key: str) -> bool:
        """Whether work known by ``key`` runs here."""
        return key in self._by_key

    @property
    def pending(self) -> int:
        return len(self._tasks)
