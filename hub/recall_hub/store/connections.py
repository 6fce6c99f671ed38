"""The hub process's connections to Redis and FalkorDB: every pool it opens is made here, and so is what
happens to a pooled connection the server has closed (a restarted Redis, a server that dropped an idle client).

- **Checked when taken.** redis-py checks a connection when it is taken from the pool and opens one the
  server closed again, before anything is sent on it — so no command, read or write, meets it. Except that
  redis-py 8.1 skips the check when its "maintenance notifications" are on, which they are by default over
  RESP3 (redis/redis-py#4252): the first commands after a Redis restart then failed with "Connection closed
  by server" while ``/readyz`` already said ready. They serve Redis Cloud/Enterprise failovers and are off
  here, which brings the check back.
- **A read is sent once more.** A read whose connection breaks anyway (the server died after the check, or
  its close had not reached this process yet) is sent again, once, on a fresh connection: see
  :func:`once_more_if_broken`. Only reads: a write whose connection broke after it was sent may have been
  applied, and sent again an XADD or INCR would be applied twice. (Some graph writes would be safe to send
  again — a MERGE on an idempotency key — but a query cannot be told from a CREATE here, so none is.) A
  write fails as any store outage does.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis.exceptions
from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis
from redis.maint_notifications import MaintNotificationsConfig

log = logging.getLogger(__name__)
_T = TypeVar("_T")

POOL_WAIT_S = 10.0
"""How long a command waits for a free connection of a full pool before it fails."""

READS = frozenset({
    "PING", "INFO", "EXISTS", "TYPE", "TTL", "PTTL", "SCAN",
    "GET", "MGET", "STRLEN",
    "HGET", "HMGET", "HGETALL", "HKEYS", "HVALS", "HLEN", "HEXISTS", "HSCAN",
    "SMEMBERS", "SISMEMBER", "SMISMEMBER", "SCARD", "SSCAN",
    "ZRANGE", "ZRANGEBYSCORE", "ZREVRANGE", "ZSCORE", "ZCARD", "ZCOUNT", "ZSCAN",
    "LRANGE", "LLEN", "LINDEX",
    "XRANGE", "XREVRANGE", "XREAD", "XLEN", "XINFO",
    "VSIM", "VEMB", "VCARD", "VDIM", "VINFO", "VGETATTR", "VLINKS", "VRANDMEMBER", "VRANGE",
    "GRAPH.RO_QUERY", "GRAPH.EXPLAIN", "GRAPH.LIST",
})
"""Commands that change nothing on the server, so sending one twice is the same as sending it once. (EVAL and
EVALSHA are not here, though some scripts only read: redis-py cannot tell which.)"""


def pool(url: str, *, max_connections: int | None = None, **options: Any) -> ConnectionPool:
    """A pool of connections to ``url`` (``options``: redis-py's connection settings). With ``max_connections``
    a burst beyond it waits up to :data:`POOL_WAIT_S` for a free connection instead of failing (redis-py's
    default pool raises "Too many connections" past its maximum); without, it is unbounded."""
    options["maint_notifications_config"] = MaintNotificationsConfig(enabled=False)  # see the module docstring
    if max_connections is None:
        return ConnectionPool.from_url(url, **options)
    return BlockingConnectionPool.from_url(url, max_connections=max_connections, timeout=POOL_WAIT_S, **options)


class Client(Redis):
    """redis-py's client, whose reads (:data:`READS`) are sent once more when their connection broke."""

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        send: Callable[..., Awaitable[Any]] = super().execute_command
        if str(args[0]).split(" ", 1)[0].upper() not in READS:  # "XINFO STREAM": the command is its first word
            return await send(*args, **options)
        return await once_more_if_broken(lambda: send(*args, **options))


def client(url: str, *, max_connections: int | None = None, **options: Any) -> Client:
    """A :class:`Client` on a :func:`pool` of its own, which closing the client closes."""
    made = Client.from_pool(pool(url, max_connections=max_connections, **options))
    assert isinstance(made, Client)
    return made


async def once_more_if_broken(read: Callable[[], Awaitable[_T]]) -> _T:
    """``read()``; once more if it failed because its connection broke (:func:`broke`). Only for work that
    changes nothing (a read), which is the same done twice: see the module docstring.

    redis-py has closed the broken connection by then and gives it back to the pool, so the second attempt
    opens a fresh one (or takes another that passed the pool's check)."""
    try:
        return await read()
    except Exception as exc:
        if not broke(exc):
            raise
        log.info("a read's connection broke (%s); sending it once more on a fresh connection", exc)
    return await read()


def broke(exc: BaseException) -> bool:
    """Whether ``exc``, or the redis-py error it was raised from (a store's ``Unavailable``), says the
    connection a command was sent on broke: closed by the server, reset, refused. Not its subclasses — the
    server answered (loading its data, refusing a password) — nor a wait for a free connection of a full
    pool that timed out (no connection was used, and a second wait would only double the first)."""
    error = exc if isinstance(exc, redis.exceptions.ConnectionError) else exc.__cause__
    return type(error) is redis.exceptions.ConnectionError and not isinstance(error.__cause__, TimeoutError)
