"""Which hub processes are running, as Redis sees them.

Every hub names its connections to Redis after itself (``recall-hub:<hub id>``, :func:`client_name`), and a
process that dies — killed, crashed, its machine's kernel still up — loses its connections at once: its kernel
closes them, and Redis drops them from ``CLIENT LIST``. So what a dead hub left behind (a lock it held, the
work of a create it had replied to) can be taken over at once by another hub instead of waited out
(:mod:`recall_hub.store.locks`, :mod:`recall_hub.retrieval.freshness`).

Only a hub with no connection at all counts as gone. A hub cut off from Redis without its connections
closing (its machine lost, the network split) still shows until Redis notices, and what it left frees with
the locks' time to live, as before. A running hub can show no connection for a moment (just after a Redis
restart, before it sends its next command): work taken from it then is done twice, which the work allows
(each step is idempotent; the change feed logs an outbox entry once).
"""

from __future__ import annotations

import logging

from recall_schemas import new_id
from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

log = logging.getLogger(__name__)

CLIENT_PREFIX = "recall-hub:"


def new_hub_id() -> str:
    """A name for one hub process (or one hub context), fresh each time it starts."""
    return new_id("hub")


def client_name(hub_id: str) -> str:
    """What a hub's connections are called (redis-py names each connection as it opens it)."""
    return f"{CLIENT_PREFIX}{hub_id}"


async def names_allowed(redis: Redis) -> bool:
    """Whether ``redis`` (a client whose connections are named) may name its connections: an ACL can refuse
    ``CLIENT SETNAME``, and then no connection of it would open. Redis unreachable now: assumed so."""
    try:
        await redis.ping()
    except ResponseError as exc:
        log.warning("Redis refuses to name this hub's connections (%s): other hubs cannot tell when it is gone, "
                    "and its locks free by their time to live", exc)
        return False
    except RedisError:
        return True
    return True


async def running_hubs(redis: Redis) -> frozenset[str] | None:
    """The hubs with a connection to ``redis`` now; None when Redis will not say (``CLIENT LIST`` refused by an
    ACL): then no hub can be told gone."""
    try:
        clients = await redis.client_list(_type="normal")
    except ResponseError as exc:
        log.debug("CLIENT LIST refused (%s): no hub can be told gone", exc)
        return None
    return frozenset(
        name.removeprefix(CLIENT_PREFIX) for c in clients if (name := c.get("name", "")).startswith(CLIENT_PREFIX)
    )


def gone(hub_id: str, running: frozenset[str] | None) -> bool:
    """Whether ``hub_id`` (empty: unknown, as left by a hub before names) is known to have stopped."""
    return bool(hub_id) and running is not None and hub_id not in running
