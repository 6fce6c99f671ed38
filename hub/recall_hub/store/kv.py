"""Key-value memory in Redis: one hash per identity (``Keys.kv``), field = key, value = the stored
record (JSON). Every Redis command of key-value memory is here; the domain rules are in ``ops/kv.py``.

Each hash is bounded in keys and bytes. Its usage (``<keys>:<bytes>``, bytes = keys + records) lives
in the same hash under :data:`USAGE_FIELD`, a field no key can be (a key must start with a
non-whitespace character), and is checked and updated with the write in one script, so concurrent
writes cannot overshoot a limit. A hash written before the limits existed is counted once, on its
first write.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from recall_hub.store.keys import Keys

USAGE_FIELD = " usage"
"""Where a hash keeps its own usage; the leading space keeps it apart from every valid key."""

_PUT = """
local usage = redis.call('HGET', KEYS[1], ARGV[5])
local count, bytes = 0, 0
if usage then
  local sep = string.find(usage, ':', 1, true)
  count = tonumber(string.sub(usage, 1, sep - 1))
  bytes = tonumber(string.sub(usage, sep + 1))
else
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    count = count + 1
    bytes = bytes + #all[i] + #all[i + 1]
  end
end
local old = redis.call('HGET', KEYS[1], ARGV[1])
local version = 0
if old then version = tonumber(cjson.decode(old)['version']) or 1 end
if ARGV[6] ~= '' and tonumber(ARGV[6]) ~= version then return {3, count, bytes, version} end
local record = string.sub(ARGV[2], 1, -2) .. ', "version": ' .. (version + 1) .. '}'
local new_count, new_bytes = count, bytes + #ARGV[1] + #record
if old then
  new_bytes = new_bytes - #ARGV[1] - #old
else
  new_count = count + 1
  if new_count > tonumber(ARGV[3]) then return {1, count, bytes, version} end
end
if new_bytes > tonumber(ARGV[4]) and new_bytes > bytes then return {2, count, bytes, version} end
redis.call('HSET', KEYS[1], ARGV[1], record, ARGV[5], new_count .. ':' .. new_bytes)
return {0, new_count, new_bytes, version + 1}
"""
"""ARGV: key, record (a JSON object; the script adds its ``version``), max keys, max bytes, the usage field,
the expected version (empty: any). Returns ``{status, keys, bytes, version}``: status 0 stored (``version``
the new one), 1 too many keys, 2 too many bytes, 3 stale (``version`` the current one, 0 for none)."""


@dataclass(frozen=True)
class Usage:
    keys: int
    bytes: int


@dataclass(frozen=True)
class PutResult:
    stored: bool
    refused: str | None
    """None when stored; ``"keys"`` or ``"bytes"``: the limit the write would have passed; ``"stale"``: the key
    is not at the expected version."""
    usage: Usage
    """After the write, or as it stays when refused."""
    version: int
    """The key's version after the write, or as it stays when refused (0: nothing is stored under it)."""


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _bytes(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else value


class KVStore:
    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys
        self._put = redis.register_script(_PUT)

    async def put(
        self, ai_id: str, key: str, record: str, *, max_keys: int, max_bytes: int, if_version: int | None = None
    ) -> PutResult:
        """Store ``record`` (a JSON object, to which the key's next ``version`` is added) under ``key`` unless a
        new key passes ``max_keys``, the identity's bytes grow past ``max_bytes`` (a write that shrinks usage is
        always allowed), or the key is not at ``if_version`` (0: not stored yet) — one atomic script."""
        if key == USAGE_FIELD:
            raise ValueError("reserved key")
        expected = "" if if_version is None else str(if_version)
        status, count, size, version = await self._put(
            keys=[self.keys.kv(ai_id)], args=[key, record, max_keys, max_bytes, USAGE_FIELD, expected]
        )
        refused = {0: None, 1: "keys", 2: "bytes", 3: "stale"}[int(status)]
        return PutResult(refused is None, refused, Usage(int(count), int(size)), int(version))

    async def get(self, ai_id: str, key: str) -> bytes | None:
        if key == USAGE_FIELD:
            return None
        value: Any = await self.redis.hget(self.keys.kv(ai_id), key)
        return _bytes(value) if value is not None else None

    async def get_many(self, ai_id: str, keys: list[str]) -> dict[str, bytes]:
        wanted = [k for k in dict.fromkeys(keys) if k != USAGE_FIELD]
        if not wanted:
            return {}
        values: Any = await self.redis.hmget(self.keys.kv(ai_id), wanted)
        return {k: _bytes(v) for k, v in zip(wanted, values, strict=True) if v is not None}

    async def scan(self, ai_id: str, limit: int, max_bytes: int | None = None) -> list[tuple[str, bytes]]:
        """At most ``limit`` entries (and, given ``max_bytes``, stopping once their values reach that
        many bytes), in the hash's own order: HSCAN pages, never one unbounded call."""
        name = self.keys.kv(ai_id)
        found: list[tuple[str, bytes]] = []
        size = 0
        cursor = 0
        while True:
            reply: Any = await self.redis.hscan(name, cursor, count=min(500, max(10, limit)))
            cursor, page = reply
            for field, value in page.items():
                key = _text(field)
                if key != USAGE_FIELD:
                    found.append((key, _bytes(value)))
                    size += len(value)
                    if len(found) >= limit or (max_bytes is not None and size >= max_bytes):
                        return found
            if cursor == 0:
                return found

    async def usage(self, ai_id: str) -> Usage:
        name = self.keys.kv(ai_id)
        raw: Any = await self.redis.hget(name, USAGE_FIELD)
        if raw is None:  # not written since the limits exist: count it
            entries: Any = await self.redis.hgetall(name)
            return Usage(len(entries), sum(len(_bytes(k)) + len(_bytes(v)) for k, v in entries.items()))
        count, size = _text(raw).split(":")
        return Usage(int(count), int(size))
