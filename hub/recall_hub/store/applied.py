"""Which events have been applied, so a copy delivered twice (or to two hubs) is applied once.

An event id is claimed for the time one attempt may take, then marked applied for a retention
window; a failed attempt releases its claim so the redelivery can try again.
"""

from __future__ import annotations

from redis.asyncio import Redis

from recall_hub.store.keys import Keys

_APPLIED = b"1"
_CLAIMED = b"claimed"


class AppliedEvents:
    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys

    async def claim(self, publisher: str, event_id: str, ttl_s: int) -> bool:
        """True when this attempt may apply the event: nobody applied it or is applying it now."""
        return bool(await self.redis.set(self.keys.applied_event(publisher, event_id), _CLAIMED, nx=True, ex=ttl_s))

    async def release(self, publisher: str, event_id: str) -> None:
        await self.redis.delete(self.keys.applied_event(publisher, event_id))

    async def mark_applied(self, publisher: str, event_id: str, ttl_s: int) -> None:
        await self.redis.set(self.keys.applied_event(publisher, event_id), _APPLIED, ex=ttl_s)


    async def mark_many_applied(self, pairs: list[tuple[str, str]], ttl_s: int) -> None:
        """Mark ``(publisher, event_id)`` pairs applied, in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for publisher, event_id in pairs:
            pipe.set(self.keys.applied_event(publisher, event_id), _APPLIED, ex=ttl_s)
        await pipe.execute()
