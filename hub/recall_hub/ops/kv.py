"""Simple key-value memory per AI id (Redis), recall over it and beads together, and promotion of
a key-value memory to a bead."""

from __future__ import annotations

import hashlib
import json
import re

from recall_schemas import CreateBead, MemoryBead, NotFound, SearchBeads
from recall_schemas.coordination import KVEntry, Learn, PromoteToBead, Recall, UnifiedRecall, UnifiedRecallResult

from recall_hub.context import HubContext
from recall_hub.ops.beads import create_bead
from recall_hub.retrieval.search import search_beads
from recall_hub.timeutil import from_ms, now_ms

_WORD = re.compile(r"\w+")


def _entry(key: str, raw: bytes | str) -> KVEntry:
    data = json.loads(raw)
    return KVEntry(key=key, value=data["value"], metadata=data["metadata"], updated_at=from_ms(data["updated_at"]))


async def learn(ctx: HubContext, caller: str, req: Learn) -> KVEntry:
    now = now_ms()
    record = {"value": req.value, "metadata": req.metadata, "updated_at": now}
    await ctx.redis.hset(ctx.keys.kv(caller), req.key, json.dumps(record))
    return KVEntry(key=req.key, value=req.value, metadata=req.metadata, updated_at=from_ms(now))


async def recall(ctx: HubContext, caller: str, req: Recall) -> KVEntry:
    raw = await ctx.redis.hget(ctx.keys.kv(caller), req.key)
    if raw is None:
        raise NotFound(f"nothing learnt under {req.key!r}")
    entry = _entry(req.key, raw)
    if req.max_length is not None and len(entry.value) > req.max_length:
        entry = entry.model_copy(update={"value": entry.value[: req.max_length]})
    return entry


async def unified_recall(ctx: HubContext, caller: str, req: UnifiedRecall) -> UnifiedRecallResult:
    """Key-value memories whose key or value shares a word with the query (most shared first),
    and the beads that search_beads finds for it."""
    words = {w.lower() for w in _WORD.findall(req.query)}
    scored: list[tuple[int, KVEntry]] = []
    async for key, raw in ctx.redis.hscan_iter(ctx.keys.kv(caller)):
        entry = _entry(key.decode() if isinstance(key, bytes) else key, raw)
        text = f"{entry.key} {entry.value}".lower()
        shared = len(words & {w.lower() for w in _WORD.findall(text)})
        if shared or req.query.lower() in text:
            scored.append((shared, entry))
    scored.sort(key=lambda item: (-item[0], item[1].key))
    beads = await search_beads(ctx, caller, SearchBeads(query=req.query, limit=req.limit, filters=req.filters))
    return UnifiedRecallResult(entries=[e for _, e in scored[: req.limit]], beads=beads)


async def promote_to_bead(ctx: HubContext, caller: str, req: PromoteToBead) -> MemoryBead:
    entry = await recall(ctx, caller, Recall(key=req.key))
    return await create_bead(
        ctx,
        caller,
        CreateBead(
            title=req.key,
            content=entry.value,
            bead_type=req.bead_type,
            importance=req.importance,
            tags=req.tags,
            visibility=req.visibility,
            group_id=req.group_id,
            metadata={**entry.metadata, "promoted_from": req.key},
            idempotency_key="promote-" + hashlib.sha1(f"{req.key}@{entry.updated_at.isoformat()}".encode()).hexdigest(),
        ),
    )
