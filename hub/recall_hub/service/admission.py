"""Fairness between identities: what one caller may have in progress in a hub process (:class:`CallerLimits`)."""

from __future__ import annotations

import asyncio

from recall_schemas import Unavailable


class CallerState:
    """What one identity has in progress in this process."""

    __slots__ = ("bytes", "requests", "running")

    def __init__(self, max_running: int) -> None:
        self.requests = 0
        self.bytes = 0
        self.running = asyncio.Semaphore(max_running)


class CallerLimits:
    """Per-identity admission: the requests and payload bytes one caller may have in progress (running or
    waiting) are capped — beyond, :class:`Unavailable` with ``details.reason == "busy"`` at once — and only
    ``max_running`` of them run at the same time, so one identity's flood never takes every slot.

    A request is always admitted when its caller has nothing else in progress, whatever its size (the
    payload limit bounds it). Callers with nothing in progress are forgotten.
    """

    def __init__(self, max_running: int, max_requests: int, max_bytes: int) -> None:
        self.max_running = max_running
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self._callers: dict[str, CallerState] = {}

    def admit(self, caller: str, size: int) -> CallerState:
        state = self._callers.get(caller)
        if state is None:
            state = self._callers[caller] = CallerState(self.max_running)
        elif state.requests >= self.max_requests or state.bytes + size > self.max_bytes:
            raise Unavailable(
                f"busy: {caller} already has {state.requests} requests ({state.bytes} bytes) in progress "
                f"at this hub (limits {self.max_requests} requests, {self.max_bytes} bytes); retry later",
                {
                    "reason": "busy",
                    "in_progress": state.requests,
                    "in_progress_bytes": state.bytes,
                    "max_requests": self.max_requests,
                    "max_bytes": self.max_bytes,
                },
            )
        state.requests += 1
        state.bytes += size
        return state

    def release(self, caller: str, state: CallerState, size: int) -> None:
        state.requests -= 1
        state.bytes -= size
        if state.requests == 0 and self._callers.get(caller) is state:
            del self._callers[caller]

    def in_progress(self, caller: str) -> tuple[int, int]:
        """``(requests, bytes)`` the caller has in progress."""
        state = self._callers.get(caller)
        return (state.requests, state.bytes) if state else (0, 0)
