"""Work locks shared by every hub on one Redis: ``SET NX PX`` with a token, renewed while held.

A lock's holder renews it every third of its time to live while its block runs; a hub killed mid-work
stops renewing, so its locks free within ``ttl_s``. A lock is released only where it is still its
holder's (one that outlived its time may be another's by now). A release that fails (Redis away, or restarted
from its files with the lock in them) is remembered: the next time this process asks for that lock it takes it
over if it still holds the old token, instead of waiting out a lock nobody holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import RedisError

from recall_hub.store.keys import Keys

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
UNRELEASED_MAX = 10_000
"""Locks whose release failed that a process remembers (the oldest forgotten first: they free by themselves)."""


class Locks:
    def __init__(self, redis: Redis, keys: Keys, ttl_s: float = LOCK_TTL_S) -> None:
        self.redis = redis
        self.keys = keys
        self.ttl_s = ttl_s
        self._unreleased: dict[str, str] = {}
        """Lock key -> the token its failed release left there."""

    @contextlib.asynccontextmanager
    async def try_many(self, names: Sequence[str]) -> AsyncIterator[list[str]]:
        """Try every lock of ``names`` at once, without waiting; yields the names whose lock is held."""
        tokens = {name: uuid.uuid4().hex for name in names}
        pipe = self.redis.pipeline(transaction=False)
        for name, token in tokens.items():
            self._take(pipe, self.keys.lock(name), token)
        held = [name for name, ok in zip(tokens, await pipe.execute(), strict=True) if ok]
        async with self._leased({name: tokens[name] for name in held}):
            yield held

    @contextlib.asynccontextmanager
    async def hold(self, name: str, wait_s: float = 30.0) -> AsyncIterator[bool]:
        """Hold the lock ``name``; yields False if it stays busy for ``wait_s`` (0: try once)."""
        token, key = uuid.uuid4().hex, self.keys.lock(name)
        deadline = time.monotonic() + wait_s
        while not await self._take(self.redis, key, token):
            if time.monotonic() >= deadline:
                yield False
                return
            await asyncio.sleep(LOCK_POLL_S)
        async with self._leased({name: token}):
            yield True

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
