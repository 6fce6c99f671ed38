"""Simple key-value memory per AI id, recall over it and beads together, and promotion of a
key-value memory to a bead. The Redis side is ``store/kv.py``.

Bounded per identity: at most ``kv_max_keys`` keys and ``kv_max_bytes`` bytes (keys + stored
values and metadata); a write past either is refused with ``too_large`` and changes nothing, while
updating an existing key within the limits always works. ``unified_recall`` looks at the keys the
query names exactly plus at most ``kv_recall_scan_max`` entries (docs/operations.md)."""

from __future__ import annotations

import hashlib
import json
import re

from recall_schemas import Conflict, CreateBead, MemoryBead, NotFound, PayloadTooLarge, SearchBeads
from recall_schemas.coordination import KVEntry, Learn, PromoteToBead, Recall, UnifiedRecall, UnifiedRecallResult

from recall_hub.context import HubContext
from recall_hub.ops.beads import create_bead
from recall_hub.retrieval.search import search_beads
from recall_hub.timeutil import from_ms, now_ms

_WORD = re.compile(r"\w+")
MAX_QUERY_KEYS = 64
"""Words of a query also tried as exact keys."""
MAX_SCAN_BYTES = 1 << 20
"""unified_recall also stops examining entries once their stored values reach this many bytes."""


def _entry(key: str, raw: bytes | str) -> KVEntry:
    data = json.loads(raw)
    return KVEntry(
        key=key, value=data["value"], metadata=data["metadata"], updated_at=from_ms(data["updated_at"]),
        version=data.get("version", 1),
    )


async def learn(ctx: HubContext, caller: str, req: Learn) -> KVEntry:
    """Store a value under a key; with ``if_version``, only while the key is at that version (0: new)."""
    now = now_ms()
    record = json.dumps({"value": req.value, "metadata": req.metadata, "updated_at": now})
    settings = ctx.settings
    result = await ctx.kv.put(
        caller, req.key, record, max_keys=settings.kv_max_keys, max_bytes=settings.kv_max_bytes,
        if_version=req.if_version,
    )
    if result.refused == "stale":
        now_at = f"at version {result.version}" if result.version else "not learnt yet"
        raise Conflict(
            f"key {req.key!r} is {now_at}, not at version {req.if_version}: read it again",
            {"version": result.version},
        )
    if result.refused == "keys":
        raise PayloadTooLarge(
            f"key-value memory is full: {result.usage.keys} keys, the limit is {settings.kv_max_keys}; "
            "update an existing key instead",
            {"limit": "kv_max_keys", "max": settings.kv_max_keys, "keys": result.usage.keys},
        )
    if result.refused == "bytes":
        raise PayloadTooLarge(
            f"key-value memory is full: {result.usage.bytes} bytes stored, the limit is {settings.kv_max_bytes}",
            {"limit": "kv_max_bytes", "max": settings.kv_max_bytes, "bytes": result.usage.bytes},
        )
    return KVEntry(
        key=req.key, value=req.value, metadata=req.metadata, updated_at=from_ms(now), version=result.version
    )


async def recall(ctx: HubContext, caller: str, req: Recall) -> KVEntry:
    raw = await ctx.kv.get(caller, req.key)
    if raw is None:
        raise NotFound(f"nothing learnt under {req.key!r}")
    entry = _entry(req.key, raw)
    if req.max_length is not None and len(entry.value) > req.max_length:
        entry = entry.model_copy(update={"value": entry.value[: req.max_length]})
    return entry


async def unified_recall(ctx: HubContext, caller: str, req: UnifiedRecall) -> UnifiedRecallResult:
    """Key-value memories whose key or value shares a word with the query (most shared first),
    and the beads that search_beads finds for it.

    Bounded: the query itself and its first words are looked up as exact keys, then at most
    ``kv_recall_scan_max`` entries (and at most MAX_SCAN_BYTES of them) are examined — all of them
    for an identity with fewer."""
    tokens = _WORD.findall(req.query)
    words = {w.lower() for w in tokens}
    query = req.query.lower()
    exact = await ctx.kv.get_many(caller, [req.query, *list(dict.fromkeys(tokens))[:MAX_QUERY_KEYS]])
    candidates = dict(await ctx.kv.scan(caller, ctx.settings.kv_recall_scan_max, MAX_SCAN_BYTES))
    candidates.update(exact)
    scored: list[tuple[int, str, bytes]] = []
    for key, raw in candidates.items():
        value = json.loads(raw)["value"]
        text = f"{key} {value}".lower()
        if not (query in text or any(w in text for w in words)):
            continue  # shares no word for certain: not tokenised
        shared = len(words & {w.lower() for w in _WORD.findall(text)})
        if shared or query in text:
            scored.append((shared, key, raw))
    scored.sort(key=lambda item: (-item[0], item[1]))
    beads = await search_beads(ctx, caller, SearchBeads(query=req.query, limit=req.limit, filters=req.filters))
    return UnifiedRecallResult(entries=[_entry(key, raw) for _, key, raw in scored[: req.limit]], beads=beads)


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
