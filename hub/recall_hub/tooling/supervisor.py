"""Keep the embedded stack's processes running: a process that dies is started again on the same data
and ports; one that keeps dying — more than ``max_restarts`` deaths within ``window_s``, counted in a
window that slides with the clock — or cannot start again ends the stack with a message saying why."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from recall_hub.tooling.stack import Child, EmbeddedStack, StackError

log = logging.getLogger(__name__)


def describe_exit(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


@dataclass
class DeathWindow:
    """When each process died lately, by name: how many of its deaths fall within the last ``window_s``
    seconds of ``clock``. Deaths, not starts: a process's first start says nothing of how often it dies."""

    window_s: float
    clock: Callable[[], float] = time.monotonic
    _times: dict[str, deque[float]] = field(default_factory=dict)

    def died(self, name: str) -> int:
        """Count a death of ``name`` now; its deaths within the window, this one included."""
        now = self.clock()
        times = self._times.setdefault(name, deque())
        times.append(now)
        while now - times[0] >= self.window_s:
            times.popleft()
        return len(times)


@dataclass
class Supervisor:
    stack: EmbeddedStack
    max_restarts: int = 3
    """Deaths of one process within ``window_s`` that are restarted; one more within it ends the stack."""
    window_s: float = 60.0
    report: Callable[[str], None] = log.warning
    clock: Callable[[], float] = time.monotonic
    """Seconds, monotonic: when a death happened (a test passes a clock of its own, to age the stack at will)."""

    async def run(self) -> str:
        """Watch until cancelled; returns why it gave up when a process cannot be kept running."""
        deaths: asyncio.Queue[Child] = asyncio.Queue()
        recent = DeathWindow(self.window_s, self.clock)
        watches: dict[str, Callable[[], None]] = {}
        try:
            for child in self.stack.children:
                watches[child.name] = _watch(child, deaths.put_nowait)
            while True:
                child = await deaths.get()
                watches.pop(child.name)()
                assert child.proc is not None
                how = describe_exit(child.proc.wait())
                died = recent.died(child.name)
                if died > self.max_restarts:
                    return (f"{child.name} {how}: {died} deaths within {self.window_s:g} s, more than the "
                            f"{self.max_restarts} restarts allowed; see "
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
