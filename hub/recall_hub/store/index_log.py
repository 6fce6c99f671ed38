"""The record of which beads changed, in commit order, for the indexes each hub keeps in memory.

One Redis stream per graph: an entry names a bead whose keyword-index document may have changed
(created, edited, moved, deleted). It is written by the durable outbox's worker, so every committed
write gets its entry even across crashes. Every hub process reads the whole stream and applies it to
its own index; an entry says only *which* bead changed — the applier reads the bead's current state,
so applying an entry twice, or out of order with the write, gives the same index.

Entry ids (``<ms>-<n>``) are the sequence a writer's reply carries so that its next read can ask the
hub to have applied at least that much (read your own writes across hubs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from recall_schemas.requests import index_seq_key as seq_key
from redis.asyncio import Redis

from recall_hub.store.keys import Keys

ZERO = "0-0"
REBUILD = ""
"""The bead id of a rebuild request (``recall reindex``)."""


@dataclass(frozen=True)
class LogState:
    last: str
    """The id of the newest entry ever written (``0-0`` for none)."""
    trimmed_through: str
    """Entries up to this id were trimmed away: an applier behind it must rebuild."""


class IndexLog:
    def __init__(self, redis: Redis, keys: Keys, maxlen: int) -> None:
        self.redis = redis
        self.key = keys.index_log()
        self.maxlen = maxlen
        self.last_appended = ZERO
        """The newest id this process appended: a reply carries it so the writer can wait for it."""

    async def append(self, bead_id: str) -> str:
        seq = await self.redis.xadd(self.key, {"b": bead_id}, maxlen=self.maxlen, approximate=True)
        seq = seq.decode() if isinstance(seq, bytes) else str(seq)
        if seq_key(seq) > seq_key(self.last_appended):
            self.last_appended = seq
        return seq

    async def request_rebuild(self) -> str:
        """An entry that names no bead: every hub that reads it rebuilds its index from the graph."""
        return await self.append(REBUILD)

    async def append_many(self, bead_ids: list[str]) -> None:
        pipe = self.redis.pipeline(transaction=False)
        for bead_id in bead_ids:
            pipe.xadd(self.key, {"b": bead_id}, maxlen=self.maxlen, approximate=True)
        for seq in await pipe.execute():
            seq = _text(seq)
            if seq_key(seq) > seq_key(self.last_appended):
                self.last_appended = seq

    async def state(self) -> LogState:
        try:
            info = await self.redis.xinfo_stream(self.key)
        except Exception as exc:  # no such key: nothing was ever written
            if "no such key" in str(exc).lower():
                return LogState(ZERO, ZERO)
            raise
        return LogState(_text(info.get("last-generated-id", ZERO)), _text(info.get("max-deleted-entry-id", ZERO)))

    async def after(self, seq: str, count: int) -> list[tuple[str, str]]:
        """Up to ``count`` entries strictly after ``seq``, oldest first: ``(id, bead_id)``."""
        rows: list[Any] = await self.redis.xrange(self.key, min=f"({seq}", max="+", count=count) or []
        return [(_text(entry_id), _text((fields or {}).get(b"b", b""))) for entry_id, fields in rows]

    async def backlog(self, seq: str, count_max: int) -> tuple[int, int | None]:
        """``(entries, first_ms)``: how many entries follow ``seq`` (counted up to ``count_max``) and when the
        first of them was written (epoch ms; None when there is none)."""
        rows: list[Any] = await self.redis.xrange(self.key, min=f"({seq}", max="+", count=count_max) or []
        if not rows:
            return 0, None
        return len(rows), seq_key(_text(rows[0][0]))[0]

    async def wait_after(self, seq: str, block_ms: int) -> bool:
        """Block up to ``block_ms`` until an entry after ``seq`` exists; True when there is one."""
        reply = await self.redis.xread({self.key: seq}, count=1, block=block_ms)
        return bool(reply)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
