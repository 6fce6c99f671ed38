"""Audit: every request is recorded per AI id and per bead it touched — who, what, when, and
whether it was allowed (with the error code when not). Kept in Redis streams, newest last.

Bounded (docs/operations.md): each identity's stream keeps ``audit_maxlen`` entries; each bead's
stream keeps ``audit_bead_maxlen`` and expires ``audit_bead_ttl_s`` after its last entry. A bead's
stream exists only for a bead that exists: an entry goes to a bead's stream when that stream
already exists (one round trip, ``XADD NOMKSTREAM``) or, for its first entry, when the graph holds
the bead. Ids that name nothing — any number of them, in any request, allowed or refused — are kept
only in the caller's own entry, so they create no key."""

from __future__ import annotations

import asyncio
import functools
import logging
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel
from recall_schemas import MemoryBead
from redis.asyncio import Redis

from recall_hub.outages import log_failure
from recall_hub.store.graph import GraphStore
from recall_hub.store.keys import Keys
from recall_hub.timeutil import from_ms, now_ms

log = logging.getLogger(__name__)

BEAD_ID_FIELDS = ("bead_id", "from_id", "to_id", "start_id", "handoff_bead_id", "old_id", "new_id")
MAX_IDS = 50


@dataclass(frozen=True)
class AuditEntry:
    at: datetime
    ai_id: str
    op: str
    allowed: bool
    code: str
    bead_ids: list[str]


def bead_ids_of(*messages: BaseModel | None, held: set[str] | None = None) -> list[str]:
    """Every bead id named in the messages (requests and replies), in order, without repeats; with ``held``,
    the ids of the beads they hold whole (``MemoryBead``: read or written a moment ago, so they exist) are
    added to it."""
    found: dict[str, None] = {}

    def walk(value: Any) -> None:
        # Walks the models themselves (no serialisation: this runs on every request), entering only
        # the fields that can hold a bead id (see _id_fields), stopping once enough ids are found.
        if len(found) >= MAX_IDS:
            return
        if isinstance(value, list):
            for item in value:
                walk(item)
            return
        if not isinstance(value, BaseModel):
            return
        model: type[BaseModel] = type(value)
        if held is not None and isinstance(value, MemoryBead):
            held.add(value.bead_id)
        for key, kind in _id_fields(model):
            item = getattr(value, key)
            if kind == "id" and isinstance(item, str):
                found[item] = None
            elif kind == "ids" and isinstance(item, list):
                found.update((i, None) for i in item if isinstance(i, str))
            elif kind == "nested":
                walk(item)

    for message in messages:
        walk(message)
    return list(found)[:MAX_IDS]


@functools.cache
def _id_fields(model: type[BaseModel]) -> tuple[tuple[str, str], ...]:
    """The fields of ``model`` that name a bead ("id"), list bead ids ("ids"), or hold models that may
    ("nested"); a bead's tags, texts and metadata are never walked, nor models that cannot name a bead
    (a search hit's score explanation)."""
    fields = []
    for key, info in model.model_fields.items():
        if key in BEAD_ID_FIELDS:
            fields.append((key, "id"))
        elif key in ("bead_ids", "seeds"):
            fields.append((key, "ids"))
        elif any(_may_name_beads(nested) for nested in _models_in(info.annotation)):
            fields.append((key, "nested"))
    return tuple(fields)


def _may_name_beads(model: type[BaseModel], entered: frozenset[type[BaseModel]] = frozenset()) -> bool:
    """Whether a value of ``model`` can hold a bead id at any depth (a model met again on the way cannot add
    one the first meeting does not)."""
    if model in entered:
        return False
    for key, info in model.model_fields.items():
        if key in BEAD_ID_FIELDS or key in ("bead_ids", "seeds"):
            return True
        if any(_may_name_beads(nested, entered | {model}) for nested in _models_in(info.annotation)):
            return True
    return False


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in typing.get_args(annotation) for model in _models_in(arg)]


_RECORD = """
local fields = {}
for i = 5, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', unpack(fields))
local held = tonumber(ARGV[4])
local missing = {}
for i = 2, #KEYS do
  if i <= held + 1 then
    redis.call('XADD', KEYS[i], 'MAXLEN', '~', ARGV[2], '*', unpack(fields))
    redis.call('EXPIRE', KEYS[i], ARGV[3])
  elseif redis.call('XADD', KEYS[i], 'NOMKSTREAM', 'MAXLEN', '~', ARGV[2], '*', unpack(fields)) then
    redis.call('EXPIRE', KEYS[i], ARGV[3])
  else
    missing[#missing + 1] = i - 1
  end
end
return missing
"""
"""The identity's entry, the entry of every bead known to exist (the first ``ARGV[4]`` bead keys: streams
started if need be), and of every other named bead that has an audit stream (refreshing each expiry);
returns the positions of the beads without one."""


class AuditLog:
    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        maxlen: int = 100_000,
        *,
        graph: GraphStore | None = None,
        bead_maxlen: int = 1_000,
        bead_ttl_s: int = 90 * 86_400,
    ) -> None:
        """``graph`` tells which beads exist; without it (a reader such as ``recall audit``) no
        bead's stream is ever started."""
        self.redis = redis
        self.keys = keys
        self.maxlen = maxlen
        self.graph = graph
        self.bead_maxlen = bead_maxlen
        self.bead_ttl_s = bead_ttl_s
        self._pending: set[asyncio.Task[None]] = set()

    async def record(
        self, ai_id: str, op: str, allowed: bool, code: str, bead_ids: Iterable[str], held: Iterable[str] = ()
    ) -> None:
        """Send the entry of one request. Returns once it is written to Redis's connection, without waiting
        for Redis's answer: the hub replies meanwhile, and any command sent after this returns — by anyone
        the reply reached — is read by Redis after it. ``held``: those of ``bead_ids`` known to exist (the
        beads a reply holds), whose streams it starts at once. The answer is read in the background (and for
        other beads without an audit stream yet, the graph asked whether they exist); :meth:`settled` waits
        for it."""
        known = set(held)
        named = list(dict.fromkeys(bead_ids))[:MAX_IDS]
        existing = [b for b in named if b in known]  # first: the script starts their streams
        ids = existing + [b for b in named if b not in known]
        held_count = len(existing)
        fields = {
            "at": now_ms(), "ai": ai_id, "op": op, "allowed": int(allowed), "code": code, "beads": ",".join(named),
        }
        flat = [str(x) for pair in fields.items() for x in pair]
        keys = [self.keys.audit_ai(ai_id), *(self.keys.audit_bead(b) for b in ids)]
        pool = self.redis.connection_pool
        try:
            connection = await pool.get_connection()  # type: ignore[no-untyped-call]
        except Exception as exc:
            log_failure(log, f"audit record lost for {ai_id} {op}", exc)
            return
        try:
            # One command to pack and one round trip, however many beads a reply named (a search names 20).
            await connection.send_command(
                "EVAL", _RECORD, len(keys), *keys, self.maxlen, self.bead_maxlen, self.bead_ttl_s, held_count, *flat
            )
        except Exception as exc:
            await connection.disconnect()
            await pool.release(connection)
            log_failure(log, f"audit record lost for {ai_id} {op}", exc)
            return
        task = asyncio.create_task(self._confirm(connection, ai_id, op, ids, fields))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def settled(self) -> None:
        """Every entry sent so far answered by Redis (and the new bead streams started)."""
        while self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)

    async def _confirm(
        self, connection: Any, ai_id: str, op: str, ids: list[str], fields: dict[str, Any]
    ) -> None:
        try:
            try:
                missing = await connection.read_response()
            finally:
                await self.redis.connection_pool.release(connection)
            # A bead without a stream yet gets one only if it exists (ids in requests are the caller's).
            new = [ids[int(i) - 1] for i in missing or []]
            if new:
                existing = await self._existing(new)
                if existing:
                    pipe = self.redis.pipeline(transaction=False)
                    for bead_id in existing:
                        key = self.keys.audit_bead(bead_id)
                        pipe.xadd(key, fields, maxlen=self.bead_maxlen, approximate=True)  # type: ignore[arg-type]
                        pipe.expire(key, self.bead_ttl_s)
                    await pipe.execute()
        except Exception as exc:
            log_failure(log, f"audit record lost for {ai_id} {op}", exc)

    async def _existing(self, bead_ids: list[str]) -> list[str]:
        if self.graph is None:
            return []
        rows = await self.graph.ro_query(
            "UNWIND $ids AS id MATCH (b:Bead {bead_id: id}) RETURN b.bead_id", {"ids": bead_ids}
        )
        found = {row[0] for row in rows}
        return [bead_id for bead_id in bead_ids if bead_id in found]

    async def group_beads(self, caller: str, group_id: str, bead_ids: Iterable[str]) -> set[str]:
        """Which of ``bead_ids`` are beads of ``group_id`` with group visibility, read as ``caller``: empty
        unless the caller is the group's ops (its audit trail is the ops' to read)."""
        ids = list(dict.fromkeys(bead_ids))
        if self.graph is None or not ids:
            return set()
        rows = await self.graph.ro_query(
            "MATCH (:AI {ai_id: $caller})-[:MEMBER_OF {role: 'ops'}]->(:Group {group_id: $group_id}) "
            "UNWIND $ids AS id MATCH (b:Bead {bead_id: id}) "
            "WHERE b.group_id = $group_id AND b.visibility = 'group' RETURN b.bead_id",
            {"caller": caller, "group_id": group_id, "ids": ids},
        )
        return {row[0] for row in rows}

    async def entries(
        self, *, ai_id: str | None = None, bead_id: str | None = None, limit: int = 100
    ) -> list[AuditEntry]:
        if (ai_id is None) == (bead_id is None):
            raise ValueError("give exactly one of ai_id or bead_id")
        await self.settled()  # what this process has sent is there
        key = self.keys.audit_ai(ai_id) if ai_id else self.keys.audit_bead(str(bead_id))
        rows: list[tuple[bytes, dict[bytes, bytes]]] = await self.redis.xrevrange(key, count=limit)  # type: ignore[assignment]
        entries = []
        for _, fields in reversed(rows):
            f = {k.decode(): v.decode() for k, v in fields.items()}
            entries.append(
                AuditEntry(
                    at=from_ms(int(f["at"])),
                    ai_id=f["ai"],
                    op=f["op"],
                    allowed=f["allowed"] == "1",
                    code=f["code"],
                    bead_ids=[b for b in f["beads"].split(",") if b],
                )
            )
        return entries
