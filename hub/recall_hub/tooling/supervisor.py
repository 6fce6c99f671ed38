"""Keep the embedded stack's processes running: a process that dies is started again on the same data
and ports; one that keeps dying, or cannot start again, ends the stack with a message saying why."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from recall_hub.tooling.stack import Child, EmbeddedStack, StackError

log = logging.getLogger(__name__)


def describe_exit(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


@dataclass
class Supervisor:
    stack: EmbeddedStack
    max_restarts: int = 3
    """Restarts of one process allowed within ``window_s``; one more and the stack gives up."""
    window_s: float = 60.0
    report: Callable[[str], None] = log.warning

    async def run(self) -> str:
        """Watch until cancelled; returns why it gave up when a process cannot be kept running."""
        deaths: asyncio.Queue[Child] = asyncio.Queue()
        watches: dict[str, Callable[[], None]] = {}
        try:
            for child in self.stack.children:
                watches[child.name] = _watch(child, deaths.put_nowait)
            while True:
                child = await deaths.get()
                watches.pop(child.name)()
                assert child.proc is not None
                how = describe_exit(child.proc.wait())
                now = time.monotonic()
                recent = [t for t in child.starts if now - t < self.window_s]
                if len(recent) > self.max_restarts:
                    return (f"{child.name} {how} after {len(recent)} starts within {self.window_s:.0f} s; see "
                            f"{self.stack.data_dir / 'logs' / (child.name + '.log')}")
                self.report(f"{child.name} {how}; starting it again")
                try:
                    await asyncio.to_thread(self.stack.respawn, child.name)
                except StackError as exc:
                    return f"{child.name} {how} and could not start again: {exc}"
                self.report(f"{child.name} is back (pid {child.pid})")
                watches[child.name] = _watch(child, deaths.put_nowait)
        finally:
            for unwatch in watches.values():
                unwatch()


def _watch(child: Child, died: Callable[[Child], None]) -> Callable[[], None]:
    """Call ``died(child)`` once when its process exits; returns what stops watching. A pidfd tells the
    event loop at once (Linux); elsewhere a thread waits for it."""
    assert child.proc is not None
    loop = asyncio.get_running_loop()
    try:
        fd = os.pidfd_open(child.proc.pid)
    except (AttributeError, OSError):
        return _wait_in_thread(child, died)

    def exited() -> None:
        loop.remove_reader(fd)
        died(child)

    loop.add_reader(fd, exited)

    def unwatch() -> None:
        loop.remove_reader(fd)
        os.close(fd)

    return unwatch


def _wait_in_thread(child: Child, died: Callable[[Child], None]) -> Callable[[], None]:
    assert child.proc is not None
    waiting = asyncio.get_running_loop().run_in_executor(None, child.proc.wait)
    waiting.add_done_callback(lambda _: died(child) if not waiting.cancelled() else None)

    def unwatch() -> None:
        waiting.cancel()

    return unwatch
