"""Whether this hub process can serve: what ``/readyz`` reports (``/healthz`` only says it is alive).

Ready means: connected to NATS, the graph and Redis answer PING, the keyword index is built, the endpoints
are subscribed and the event consumer runs. Each check is bounded, so a store that hangs makes the hub
unready instead of making the probe time out.

The PINGs go through the pools requests use, whose connections a restarted server closed are opened again
when taken, before anything is sent on them (:mod:`recall_hub.store.connections`): ready after a Redis
restart means the requests that follow find working connections, not the old ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from recall_hub.service.endpoints import HubService
from recall_hub.store.liveness import redis_answers

CHECK_TIMEOUT_S = 2.0

Check = Callable[[], Awaitable[str | None]]
"""A readiness check: None when fine, else what is wrong."""


class Readiness:
    def __init__(self, service: HubService) -> None:
        self.service = service
        self.checks: dict[str, Check] = {
            "nats": self._nats,
            "graph": self._graph,
            "redis": self._redis,
            "keyword_index": self._keyword_index,
            "endpoints": self._endpoints,
            "events": self._events,
        }

    async def problems(self) -> dict[str, str]:
        """What keeps this process from serving, by check; empty when it is ready."""
        found = await asyncio.gather(*(_bounded(check) for check in self.checks.values()))
        return {name: problem for name, problem in zip(self.checks, found, strict=True) if problem is not None}

    async def _nats(self) -> str | None:
        nc = self.service.nc
        if nc.is_connected:
            return None
        return "connection closed" if nc.is_closed else "not connected (reconnecting)"

    async def _graph(self) -> str | None:
        await self.service.ctx.graph.ping()
        return None

    async def _redis(self) -> str | None:
        await redis_answers(self.service.ctx.redis)
        return None

    async def _keyword_index(self) -> str | None:
        return None if self.service.ctx.keywords.ready else "not built yet"

    async def _endpoints(self) -> str | None:
        return None if self.service.serving else "not subscribed"

    async def _events(self) -> str | None:
        consumer = self.service.events
        return None if consumer is not None and consumer.running else "event consumer not running"


async def _bounded(check: Check) -> str | None:
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_S):
            return await check()
    except TimeoutError:
        return f"no answer within {CHECK_TIMEOUT_S:g} s"
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"[:300]
