"""Adopting the first release's Redis keys into a graph's namespace (``recall upgrade``).

The first release kept key-value memory, change logs, audit streams and vector sets under ``recall:``
for whichever graph the hub served, and applied event ids in one never-expiring set. Each such key is
renamed to the graph's own key (nothing is copied or re-embedded); a key whose new name is already
taken is left where it is and counted, never overwritten.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from redis.asyncio import Redis

from recall_hub.store.applied import AppliedEvents
from recall_hub.store.keys import LEGACY_APPLIED_EVENTS, LEGACY_PATTERNS, Keys, is_legacy_key

log = logging.getLogger(__name__)


@dataclass
class Adopted:
    keys: int = 0
    """Keys renamed into the graph's namespace."""
    conflicts: int = 0
    """Keys left in place because the graph already has a key of that name."""
    applied_events: int = 0
    """Applied event ids carried over (each now expires like the graph's own)."""


async def legacy_keys_present(redis: Redis) -> bool:
    for pattern in LEGACY_PATTERNS:
        async for raw in redis.scan_iter(match=pattern, count=1000):
            if is_legacy_key(raw.decode(errors="replace")):
                return True
    return bool(await redis.exists(LEGACY_APPLIED_EVENTS))


async def adopt_legacy_keys(redis: Redis, keys: Keys, applied_event_ttl_s: int) -> Adopted:
    """Rename every first-release key into ``keys``' namespace; safe to run again (finds nothing)."""
    done = Adopted()
    applied = AppliedEvents(redis, keys)
    for pattern in LEGACY_PATTERNS:
        async for raw in redis.scan_iter(match=pattern, count=1000):
            old = raw.decode(errors="replace")
            new = keys.from_legacy(old)
            if new is None:
                continue
            if await redis.renamenx(old, new):
                done.keys += 1
            else:
                done.conflicts += 1
                log.warning("%s left in place: %s already exists", old, new)
    cursor = 0
    while True:
        cursor, members = await redis.sscan(LEGACY_APPLIED_EVENTS, cursor, count=1000)
        pairs = [_publisher_and_event(member) for member in members]
        await applied.mark_many_applied(pairs, applied_event_ttl_s)
        done.applied_events += len(members)
        if cursor == 0:
            break
    await redis.delete(LEGACY_APPLIED_EVENTS)
    return done


def _publisher_and_event(member: bytes | str) -> tuple[str, str]:
    text = member.decode(errors="replace") if isinstance(member, bytes) else member
    publisher, _, event_id = text.partition(":")
    return publisher, event_id
