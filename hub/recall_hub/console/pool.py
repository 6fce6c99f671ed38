"""The console's hub connections: one connected :class:`RecallClient` per identity in use, shared by that
identity's browser sessions, and bounded.

A request holds its identity's client from :func:`state.client_of` until its response is done (a live
feed's stream included; :class:`ReleaseClients` lets go). A client nobody holds is *idle*: it is closed
once idle for ``idle_s``, and when ``max_clients`` are open a new identity replaces the one idle the
longest — or, when every one is held, is refused with :class:`CannotConnect`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from recall_client import RecallClient
from recall_schemas import RecallError, Unauthorized
from recall_schemas.tasks import stop_tasks
from starlette.types import ASGIApp, Receive, Scope, Send

from .auth import Identities

log = logging.getLogger(__name__)

HELD_CLIENTS = "recall_console.held_clients"
"""The scope key of the clients a request holds, released by :class:`ReleaseClients`."""
MAX_SWEEP_PERIOD_S = 60.0


class CannotConnect(Exception):
    """The console cannot act as an identity now. ``message`` is fit for a browser: the detail (a credentials
    file's path, the hub's address) goes to the console's log only."""

    def __init__(self, message: str, status: int = 503) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


@dataclass
class _Connection:
    client: RecallClient
    last_used: float
    holders: int = 0


class ClientPool:
    def __init__(self, nats_url: str, identities: Identities, *, max_clients: int = 64, idle_s: float = 600.0,
                 timeout: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.nats_url = nats_url
        self.identities = identities
        self.max_clients = max_clients
        self.idle_s = idle_s
        self.timeout = timeout
        self.clock = clock
        self._open: dict[str, _Connection] = {}
        self._lock = asyncio.Lock()
        self._sweeper: asyncio.Task[None] | None = None

    @property
    def connected(self) -> list[str]:
        """The identities with an open connection."""
        return list(self._open)

    async def hold(self, ai_id: str) -> RecallClient:
        """The identity's connected client (connecting it first if need be), held until :meth:`release`."""
        self._start_sweeping()
        found = self._open.get(ai_id)
        if found is None:
            async with self._lock:
                found = self._open.get(ai_id) or await self._connect(ai_id)
        found.holders += 1
        found.last_used = self.clock()
        return found.client

    def release(self, client: RecallClient) -> None:
        found = self._open.get(client.ai_id)
        if found is not None and found.client is client:
            found.holders = max(0, found.holders - 1)
            found.last_used = self.clock()

    @contextlib.asynccontextmanager
    async def holding(self, ai_id: str) -> AsyncIterator[RecallClient]:
        client = await self.hold(ai_id)
        try:
            yield client
        finally:
            self.release(client)

    async def client(self, ai_id: str) -> RecallClient:
        """The identity's connected client, not held: it is closed once idle (for scripts and tests)."""
        async with self.holding(ai_id) as client:
            return client

    async def _connect(self, ai_id: str) -> _Connection:
        if len(self._open) >= self.max_clients:
            await self._make_room(ai_id)
        client = RecallClient(ai_id, self.nats_url, creds=self.identities.creds_for(ai_id), timeout=self.timeout)
        try:
            await client.connect()
        except Unauthorized as exc:
            log.warning("console cannot connect as %s: %s", ai_id, exc)
            raise CannotConnect(
                f"The console cannot connect as {ai_id}: its credentials are missing, unreadable, issued to "
                "another identity or refused by the hub. The console's log says which.", 403,
            ) from exc
        except RecallError as exc:
            log.warning("console cannot connect as %s: %s", ai_id, exc)
            raise CannotConnect("The console cannot reach the hub right now; try again in a moment.") from exc
        log.info("console connected as %s (%d of at most %d connections)", ai_id, len(self._open) + 1,
                 self.max_clients)
        connection = self._open[ai_id] = _Connection(client, self.clock())
        return connection

    async def _make_room(self, ai_id: str) -> None:
        idle = [c for c in self._open.values() if c.holders == 0]
        if not idle:
            log.warning("console refused %s: all %d connections are in use", ai_id, self.max_clients)
            raise CannotConnect(
                f"The console is serving as many identities as it may ({self.max_clients}), all of them busy; "
                "try again in a moment."
            )
        oldest = min(idle, key=lambda c: c.last_used)
        del self._open[oldest.client.ai_id]
        await self._close(oldest.client, f"to make room for {ai_id}")

    async def close_idle(self) -> list[str]:
        """Close the connections idle for ``idle_s`` or longer; their identities."""
        now = self.clock()
        stale = [ai for ai, c in self._open.items() if c.holders == 0 and now - c.last_used >= self.idle_s]
        for client in [self._open.pop(ai).client for ai in stale]:
            await self._close(client, "idle")
        return stale

    def _start_sweeping(self) -> None:
        # Started by the first request, on the loop that serves them (the app may run without a lifespan).
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    async def _sweep(self) -> None:
        period = min(max(self.idle_s / 4, 0.01), MAX_SWEEP_PERIOD_S)
        while True:
            await asyncio.sleep(period)
            try:
                await self.close_idle()
            except Exception:
                log.exception("closing the console's idle connections")

    async def _close(self, client: RecallClient, why: str) -> None:
        log.info("console closes its connection as %s (%s)", client.ai_id, why)
        try:
            await client.close()
        except Exception:
            log.exception("closing the console's client of %s", client.ai_id)

    async def close(self) -> None:
        if self._sweeper is not None:
            await stop_tasks([self._sweeper])
            self._sweeper = None
        clients, self._open = [c.client for c in self._open.values()], {}
        for client in clients:
            await self._close(client, "the console stops")


class ReleaseClients:
    """ASGI middleware: when a response is done — a stream when it ends — the pool gets back the clients
    the request held."""

    def __init__(self, app: ASGIApp, pool: ClientPool) -> None:
        self.app = app
        self.pool = pool

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        held: list[RecallClient] = []
        scope[HELD_CLIENTS] = held
        try:
            await self.app(scope, receive, send)
        finally:
            for client in held:
                self.pool.release(client)
