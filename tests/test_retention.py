"""Nothing grows without bound: the event streams have limits, applied-event ids expire after the
stream forgets the event, audit streams exist only for beads that exist and are capped, and
key-value memory is capped per identity (docs/operations.md)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from collections.abc import Iterator

import pytest
from pydantic import ValidationError
from recall_client import InvalidRequest, NotFound, PayloadTooLarge
from recall_hub.config import HubSettings
from recall_hub.context import HubContext
from recall_hub.ops import kv as kv_ops
from recall_hub.service.endpoints import HubService
from recall_hub.store.audit import AuditLog
from recall_hub.store.kv import USAGE_FIELD
from recall_schemas import new_id
from recall_schemas.coordination import Learn, UnifiedRecall
from recall_schemas.subjects import DEAD_LETTER_STREAM, EVENTS_STREAM

from tests.conftest import new_ai

# --- event streams ---------------------------------------------------------------------------------


async def test_event_streams_are_bounded_and_applied_ids_outlive_them(connect, hub_service: HubService):
    settings = hub_service.ctx.settings
    js = hub_service.events.js
    events = (await js.stream_info(EVENTS_STREAM)).config
    assert (events.max_age, events.max_bytes, events.max_msg_size) == (
        settings.events_max_age_s, settings.events_max_bytes, settings.event_max_bytes)
    letters = (await js.stream_info(DEAD_LETTER_STREAM)).config
    assert letters.max_age == settings.dead_letters_max_age_s and letters.max_bytes == settings.dead_letters_max_bytes
    assert letters.max_msg_size is not None and 0 < letters.max_msg_size <= 1 << 20

    agent = await connect()
    event_id = uuid.uuid4().hex
    await agent.events.session_started(new_id("s"), event_id=event_id)
    assert await hub_service.events.wait_for(event_id, publisher=agent.ai_id) == ["applied"]
    ttl = await hub_service.ctx.redis.ttl(hub_service.ctx.keys.applied_event(agent.ai_id, event_id))
    # Remembered as long as the stream could deliver the event again, and not forever.
    assert settings.events_max_age_s < ttl <= settings.applied_event_ttl_s


def test_an_applied_id_must_outlive_the_events_stream() -> None:
    with pytest.raises(ValidationError, match="applied_event_ttl_s"):
        HubSettings(events_max_age_s=7 * 86_400, applied_event_ttl_s=7 * 86_400)
    assert HubSettings(events_max_age_s=3600, applied_event_ttl_s=3601).applied_event_ttl_s == 3601


# --- audit -------------------------------------------------------------------------------------------


async def _bead_audit_keys(hub: HubContext) -> int:
    return len([k async for k in hub.redis.scan_iter(match=hub.keys.audit_bead("*"), count=1000)])


async def test_requests_naming_missing_beads_create_no_audit_keys(connect, hub: HubContext):
    agent = await connect()
    before = await _bead_audit_keys(hub)
    named: list[str] = []

    async def rank(i: int) -> None:
        ids = [new_id("b") for _ in range(50)]
        named.extend(ids)
        assert await agent.rank_by_importance(ids) == []  # allowed, and names 50 beads that do not exist

    async def get(i: int) -> None:
        bead_id = new_id("b")
        named.append(bead_id)
        with pytest.raises(NotFound):
            await agent.get_bead(bead_id)  # refused

    for start in range(0, 200, 20):
        await asyncio.gather(*(rank(i) for i in range(start, start + 20)), *(get(i) for i in range(20)))
    assert len(named) == 200 * 50 + 200
    pipe = hub.redis.pipeline(transaction=False)
    for bead_id in named:
        pipe.exists(hub.keys.audit_bead(bead_id))
    assert sum(await pipe.execute()) == 0
    assert await _bead_audit_keys(hub) == before
    # ... while the identity's own stream has every one of those requests, with the ids it named.
    entries = await hub.audit.entries(ai_id=agent.ai_id, limit=1000)
    assert len(entries) == 400 and {e.op for e in entries} == {"rank_by_importance", "get_bead"}


async def test_a_beads_audit_stream_is_capped_and_expires(connect, hub: HubContext):
    agent, stranger = await connect(), await connect()
    bead = await agent.create_bead("audited", "kept for a while", visibility="private")
    key = hub.keys.audit_bead(bead.bead_id)
    assert 0 < await hub.redis.ttl(key) <= hub.settings.audit_bead_ttl_s
    with pytest.raises(NotFound):
        await stranger.get_bead(bead.bead_id)  # a refusal on an existing bead is on its record
    assert [(e.ai_id, e.allowed) for e in await hub.audit.entries(bead_id=bead.bead_id)] == [
        (agent.ai_id, True), (stranger.ai_id, False)]

    small = AuditLog(hub.redis, hub.keys, 100, graph=hub.graph, bead_maxlen=100, bead_ttl_s=600)
    ai_id = new_ai()
    for _ in range(10):
        await asyncio.gather(*(small.record(ai_id, "get_bead", True, "ok", [bead.bead_id]) for _ in range(100)))
    # XADD MAXLEN ~ trims whole stream nodes (100 entries each), so a stream stays within about 2x its cap.
    assert 100 <= await hub.redis.xlen(key) <= 200
    assert 100 <= await hub.redis.xlen(hub.keys.audit_ai(ai_id)) <= 200
    assert 0 < await hub.redis.ttl(key) <= 600


# --- key-value memory ---------------------------------------------------------------------------------


@pytest.fixture
def limited(hub: HubContext) -> Iterator[HubSettings]:
    """The serving hub's settings with small key-value limits for one test (then restored)."""
    saved = {name: getattr(hub.settings, name) for name in ("kv_max_keys", "kv_max_bytes", "kv_recall_scan_max")}
    hub.settings.kv_max_keys, hub.settings.kv_max_bytes, hub.settings.kv_recall_scan_max = 3, 4096, 10
    try:
        yield hub.settings
    finally:
        for name, value in saved.items():
            setattr(hub.settings, name, value)


async def test_key_value_memory_is_capped_per_identity(connect, hub: HubContext, limited: HubSettings):
    agent, other = await connect(), await connect()
    for key in ("k1", "k2", "k3"):
        await agent.learn(key, f"value of {key}")
    with pytest.raises(PayloadTooLarge) as refused:
        await agent.learn("k4", "one too many")
    assert refused.value.details["limit"] == "kv_max_keys"
    with pytest.raises(NotFound):
        await agent.recall("k4")
    await agent.learn("k1", "an existing key can still change")  # updating stays possible at the cap
    assert (await agent.recall("k1")).value == "an existing key can still change"
    await other.learn("k4", "the cap is per identity")

    with pytest.raises(PayloadTooLarge) as refused:
        await agent.learn("k2", "x" * 5000)  # past kv_max_bytes
    assert refused.value.details["limit"] == "kv_max_bytes"
    assert (await agent.recall("k2")).value == "value of k2"  # a refused write changes nothing
    await agent.learn("k2", "x" * 3000)  # within the limit
    with pytest.raises(PayloadTooLarge):
        await agent.learn("k3", "y" * 1000)  # 3000 + 1000 + the rest > 4096
    await agent.learn("k2", "shorter")  # shrinking always works
    await agent.learn("k3", "y" * 1000)
    usage = await hub.kv.usage(agent.ai_id)
    assert usage.keys == 3 and usage.bytes <= limited.kv_max_bytes

    # The usage record is no key: not recallable, not recalled, not learnable.
    with pytest.raises(InvalidRequest):
        await agent.recall(USAGE_FIELD)
    with pytest.raises(InvalidRequest):
        await agent.learn(USAGE_FIELD, "3:0")
    assert all(e.key != USAGE_FIELD for e in (await agent.unified_recall("usage k1 k2 k3")).entries)


async def test_concurrent_writes_cannot_pass_the_key_limit(hub: HubContext, limited: HubSettings):
    caller = new_ai()
    results = await asyncio.gather(
        *(kv_ops.learn(hub, caller, Learn(key=f"key{i}", value="v")) for i in range(20)), return_exceptions=True)
    assert sum(not isinstance(r, BaseException) for r in results) == limited.kv_max_keys
    assert all(isinstance(r, PayloadTooLarge) for r in results if isinstance(r, BaseException))
    assert (await hub.kv.usage(caller)).keys == limited.kv_max_keys == await hub.redis.hlen(hub.keys.kv(caller)) - 1


async def test_memory_learnt_before_the_limits_counts_against_them(hub: HubContext, limited: HubSettings):
    caller = new_ai()
    record = json.dumps({"value": "old", "metadata": {}, "updated_at": 0})
    await hub.redis.hset(hub.keys.kv(caller), mapping={f"old{i}": record for i in range(5)})  # no usage field
    with pytest.raises(PayloadTooLarge):
        await kv_ops.learn(hub, caller, Learn(key="new", value="v"))
    await kv_ops.learn(hub, caller, Learn(key="old1", value="updated"))
    assert (await hub.kv.usage(caller)).keys == 5


async def test_unified_recall_examines_a_bounded_number_of_entries(hub: HubContext, limited: HubSettings):
    caller = new_ai()
    roomy = limited.model_copy(update={"kv_max_keys": 1000, "kv_max_bytes": 1 << 20})
    generous = dataclasses.replace(hub, settings=roomy)
    for i in range(200):
        await kv_ops.learn(generous, caller, Learn(key=f"note{i:03d}", value=f"filler text {i}"))
    await kv_ops.learn(generous, caller, Learn(key="needle", value="the one we want"))
    assert len(await hub.kv.scan(caller, limited.kv_recall_scan_max)) == limited.kv_recall_scan_max
    assert len(await hub.kv.scan(caller, 10_000)) == 201
    assert 1 <= len(await hub.kv.scan(caller, 10_000, max_bytes=500)) < 20  # each record is ~60 bytes
    # Beyond what is scanned, a key the query names is still found.
    result = await kv_ops.unified_recall(hub, caller, UnifiedRecall(query="needle"))
    assert [e.key for e in result.entries] == ["needle"]


def test_every_setting_is_documented_in_the_readme() -> None:
    """A setting an operator cannot find does not exist for them: each ``RECALL_*`` variable has a row."""
    from pathlib import Path

    from recall_hub.embedders import EmbedderConfig
    from recall_hub.extractors.base import ExtractorConfig
    from recall_hub.rerankers import RerankerConfig

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    nested = {"embedder": EmbedderConfig, "extractor": ExtractorConfig, "reranker": RerankerConfig}
    names = [f"RECALL_{n.upper()}" for n in HubSettings.model_fields if n not in nested]
    for prefix, config in nested.items():
        names += [f"RECALL_{prefix.upper()}__{n.upper()}" for n in config.model_fields]
    assert [n for n in names if f"`{n}`" not in readme] == []


async def test_read_times_are_written_in_batches_and_decay_counts_them(connect, hub: HubContext):
    """get_bead no longer writes to the graph on its path: the read time is noted and written with the
    others in one query (RECALL_ACCESS_FLUSH_S); the decay pass writes the noted ones first."""
    me = await connect()
    bead = await me.create_bead("read now and then", visibility="private")
    ten_days = 10 * 86_400_000
    await hub.accessed.flush()
    await hub.graph.query(
        "MATCH (b:Bead {bead_id: $id}) SET b.accessed_at = b.accessed_at - $ms, b.updated_at = b.updated_at - $ms",
        {"id": bead.bead_id, "ms": ten_days},
    )
    read = await me.get_bead(bead.bead_id)
    assert read.accessed_at > bead.created_at  # the reply says when it was read
    report = await me.decay_old_memories(threshold_days=5)
    assert bead.bead_id not in report.archived  # just read: not untouched, though not yet written by the timer
    stored = await hub.graph.values("MATCH (b:Bead {bead_id: $id}) RETURN b.accessed_at", {"id": bead.bead_id})
    assert stored[0][0] == int(read.accessed_at.timestamp() * 1000)
