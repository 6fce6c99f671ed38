"""Work locks shared by every hub on one Redis: ``SET NX PX`` with a token, renewed while held.

A lock's holder renews it every third of its time to live while its block runs; a hub killed mid-work
stops renewing, so its locks free within ``ttl_s``. A lock is released only where it is still its
holder's (one that outlived its time may be another's by now). A release that fails (Redis away, or restarted
from its files with the lock in them) is remembered: the next time this process asks for that lock it takes it
over if it still holds the old token, instead of waiting out a lock nobody holds. A lock's token names the
hub that holds it: one held by a hub that is gone (no connection to Redis left: :mod:`recall_hub.store.presence`)
is taken over at once by the next that asks for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import RedisError

from recall_hub.store.keys import Keys
from recall_hub.store.presence import gone, running_hubs

log = logging.getLogger(__name__)

_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
_RENEW = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0"
)
_TAKE_OVER = (
    "local v = redis.call('get', KEYS[1]) if v == ARGV[1] or not v then "
    "redis.call('set', KEYS[1], ARGV[2], 'PX', ARGV[3]) return 1 end return 0"
)
LOCK_TTL_S = 5.0
"""A lock lives this long unless its holder renews it (every third of it, while working)."""
LOCK_POLL_S = 0.05
GONE_CHECK_S = 1.0
"""While a lock stays busy, whether its holder is gone is asked when it is first found busy, then this often."""
UNRELEASED_MAX = 10_000
"""Locks whose release failed that a process remembers (the oldest forgotten first: they free by themselves)."""


class Locks:
    """``owner``: the hub whose locks these are (store/presence.py; empty: a process no other can tell gone)."""

    def __init__(self, redis: Redis, keys: Keys, ttl_s: float = LOCK_TTL_S, owner: str = "") -> None:
        self.redis = redis
        self.keys = keys
        self.ttl_s = ttl_s
        self.owner = owner
        self._unreleased: dict[str, str] = {}
        """Lock key -> the token its failed release left there."""

    @contextlib.asynccontextmanager
    async def try_many(self, names: Sequence[str]) -> AsyncIterator[list[str]]:
        """Try every lock of ``names`` at once, without waiting; yields the names whose lock is held."""
        tokens = {name: self._token() for name in names}
        pipe = self.redis.pipeline(transaction=False)
        for name, token in tokens.items():
            self._take(pipe, self.keys.lock(name), token)
        held = [name for name, ok in zip(tokens, await pipe.execute(), strict=True) if ok]
        async with self._leased({name: tokens[name] for name in held}):
            yield held

    @contextlib.asynccontextmanager
    async def hold(self, name: str, wait_s: float = 30.0) -> AsyncIterator[bool]:
        """Hold the lock ``name``; yields False if it stays busy for ``wait_s`` (0: try once)."""
        token, key = self._token(), self.keys.lock(name)
        deadline = time.monotonic() + wait_s
        ask_holder = 0.0
        while not await self._take(self.redis, key, token):
            if time.monotonic() >= ask_holder:
                if await self._take_from_gone(key, token):
                    break
                ask_holder = time.monotonic() + GONE_CHECK_S
            if time.monotonic() >= deadline:
                yield False
                return
            await asyncio.sleep(LOCK_POLL_S)
        async with self._leased({name: token}):
            yield True

    def _token(self) -> str:
        return f"{self.owner}/{uuid.uuid4().hex}"

    async def _take_from_gone(self, key: str, token: str) -> bool:
        """Take ``key`` for ``token`` if the hub its token names is gone."""
        held = await self.redis.get(key)
        if held is None:
            return False  # freed meanwhile: the next try takes it
        left = held.decode() if isinstance(held, bytes) else str(held)
        holder = left.partition("/")[0] if "/" in left else ""
        if holder == self.owner or not gone(holder, await running_hubs(self.redis)):
            return False
        if not await self.redis.eval(_TAKE_OVER, 1, key, left, token, self._ttl_ms):
            return False
        log.info("lock %s of hub %s, which is gone, taken over", key, holder)
        return True

    @property
    def _ttl_ms(self) -> int:
        return int(self.ttl_s * 1000)

    def _take(self, client: Redis | Pipeline, key: str, token: str) -> Any:
        """Take ``key`` for ``token`` — free, or left there by this process's failed release — on ``client`` (a
        pipeline queues the command; Redis gives its reply to await)."""
        left = self._unreleased.pop(key, None)
        if left is None:
            return client.set(key, token, nx=True, px=self._ttl_ms)
        return client.eval(_TAKE_OVER, 1, key, left, token, self._ttl_ms)

    @contextlib.asynccontextmanager
    async def _leased(self, tokens: dict[str, str]) -> AsyncIterator[None]:
        """Keep the held locks (name -> token) alive while the block runs, then release them."""
        keys = {self.keys.lock(name): token for name, token in tokens.items()}

        released = False

        async def renew() -> None:
            # Ends on the flag too: a cancellation lost in the pipeline's write (recall_schemas.tasks) would
            # otherwise leave it renewing forever, and the release need not wait for it (a create's path).
            while True:
                await asyncio.sleep(self.ttl_s / 3)
                if released:
                    return
                with contextlib.suppress(RedisError):
                    pipe = self.redis.pipeline(transaction=False)
                    for key, token in keys.items():
                        pipe.eval(_RENEW, 1, key, token, self._ttl_ms)
                    await pipe.execute()

        keeper = asyncio.create_task(renew(), name="recall-locks") if keys else None
        try:
            yield
        finally:
            released = True
            if keeper is not None:
                keeper.cancel()
            try:
                pipe = self.redis.pipeline(transaction=False)
                for key, token in keys.items():
                    pipe.eval(_RELEASE, 1, key, token)
                await pipe.execute()
            except RedisError:
                self._unreleased.update(keys)
                while len(self._unreleased) > UNRELEASED_MAX:
                    del self._unreleased[next(iter(self._unreleased))]
