"""Whether the Redis the hub keeps its derived state in answers (a hub's readiness)."""

from __future__ import annotations

from redis.asyncio import Redis


async def redis_answers(redis: Redis) -> None:
    """Returns when Redis answers PING; raises what the client raises otherwise."""
    await redis.ping()
