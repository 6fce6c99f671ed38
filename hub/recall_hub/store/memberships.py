"""The groups of a caller, read from the graph once per membership change instead of on every search.

Every membership change (a group created, a member added or removed, by any hub) increments one counter
in Redis after its graph write; a hub keeps each caller's groups with the counter value it read before
reading them, and reads the graph again when the counter has moved. So a search pays one Redis GET
instead of one graph query, and sees a change as soon as its writer has replied.

This only chooses which scopes a search reads (and screens its candidates in, on the keyword index).
Visibility itself is never taken from here: every bead a reply holds is read with the membership graph
checked in the same query.
"""

from __future__ import annotations

import redis.exceptions
from redis.asyncio import Redis

from recall_hub.store.beads import BeadStore
from recall_hub.store.keys import Keys
from recall_hub.store.replica import fresh_reads

MAX_CALLERS = 10_000
"""Callers whose groups a hub keeps; the least recently read are forgotten first."""


class MembershipCache:
    def __init__(self, beads: BeadStore, redis: Redis, keys: Keys) -> None:
        self.beads = beads
        self.redis = redis
        self._key = keys.membership_version()
        self._groups: dict[str, tuple[object, list[str]]] = {}

    async def groups_of(self, caller: str) -> list[str]:
        try:
            version: object = await self.redis.get(self._key)
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
            # No counter to trust (the primary is away): read the groups, not kept — from the replica when
            # it serves this request's reads, which is what lets a search go on while the primary is down.
            return await self.beads.my_groups(caller)
        known = self._groups.pop(caller, None)
        if known is not None and known[0] == version:
            groups = known[1]
        else:
            with fresh_reads():  # from the primary: a replica could still hold the groups before this version
                groups = await self.beads.my_groups(caller)
        self._groups[caller] = (version, groups)  # re-inserted: the most recently read last
        if len(self._groups) > MAX_CALLERS:
            del self._groups[next(iter(self._groups))]
        return list(groups)

    def last_read(self, caller: str) -> list[str] | None:
        """The caller's groups as this hub last read them, unchecked (None: not read yet). A search may start with
        them while :meth:`groups_of` checks the counter, and must start again if they were not current."""
        known = self._groups.get(caller)
        return None if known is None else list(known[1])

    async def changed(self) -> None:
        """After a membership write, before its reply: every hub reads its callers' groups afresh."""
        await self.redis.incr(self._key)
