"""Replies always fit the bus.

What must hold: NATS refuses a message over its ``max_payload``, and a reply it refuses never arrives (the
caller times out and retries, forever the same). So every reply fits: a list reply too large is cut to
what fits and says ``truncated`` — listings give ``next_cursor`` to continue after their last bead, a
change batch's ``cursor`` is its last change — and a reply that cannot be cut is a typed ``too_large``
error. The client pages for its caller: a listing (or ``changes()``) returns every bead exactly once.

These tests run a nats-server with a 64 KiB ``max_payload`` (the default is 1 MiB), so ~60 beads of 3 KB
are enough to overflow every reply that carries beads.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import nats
import pytest
from conftest import new_ai
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from pydantic import BaseModel
from recall_client import RecallClient
from recall_hub.config import HubSettings
from recall_hub.embedders import EmbedderConfig
from recall_hub.service.endpoints import HubService
from recall_hub.service.server import running_hub
from recall_hub.tooling.stack import EmbeddedStack
from recall_schemas import (
    BeadList,
    ContextBlock,
    ErrorCode,
    ErrorReply,
    PayloadTooLarge,
    SearchResult,
    Subgraph,
    WhyResult,
    new_id,
)
from recall_schemas.coordination import ChangeBatch, UnifiedRecallResult
from recall_schemas.requests import MAX_LIMIT
from recall_schemas.subjects import request_subject

pytestmark = pytest.mark.timeout(180)

MAX_PAYLOAD = 64 * 1024
BEADS = 60
ERROR_CODE_HEADER = "Nats-Service-Error-Code"


@pytest.fixture(scope="module")
def small_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStack]:
    base = tmp_path_factory.mktemp("replies")
    config = base / "nats-server.conf"
    config.write_text(f"max_payload: {MAX_PAYLOAD}\n")
    with EmbeddedStack(base / "stack", nats_config=config) as stack:
        yield stack


@pytest.fixture(scope="module")
async def small_hub(small_stack: EmbeddedStack) -> AsyncIterator[HubService]:
    settings = HubSettings(
        nats_url=small_stack.nats_url,
        falkordb_url=small_stack.redis_url,
        redis_url=small_stack.redis_url,
        graph_name=f"recall_replies_{secrets.token_hex(4)}",
        embedder=EmbedderConfig(kind="hash"),
        max_payload_bytes=MAX_PAYLOAD,
    )
    async with running_hub(settings) as service:
        assert service.nc.max_payload == MAX_PAYLOAD
        yield service


@dataclass
class World:
    url: str
    owner: RecallClient
    group_id: str
    session_id: str
    tag: str
    hub_id: str
    """A bead RELATED_TO every other one: the graph around it is larger than a reply."""
    bead_ids: list[str] = field(default_factory=list)
    """Every bead of the group, oldest first (the hub bead last)."""
    clients: list[RecallClient] = field(default_factory=list)

    async def client(self, ai_id: str | None = None, **options: Any) -> RecallClient:
        client = RecallClient(ai_id or new_ai(), self.url, **options)
        await client.connect()
        self.clients.append(client)
        return client


def filler(i: int) -> str:
    return " ".join(f"payments retry backoff note{i} word{j}" for j in range(90))  # ~3 KB


@pytest.fixture(scope="module")
async def world(small_stack: EmbeddedStack, small_hub: HubService) -> AsyncIterator[World]:
    owner = RecallClient(new_ai("o"), small_stack.nats_url, timeout=10)
    await owner.connect()
    group = await owner.create_group("large replies")
    session, tag = new_id("s"), f"big{secrets.token_hex(3)}"
    w = World(small_stack.nats_url, owner, group.group_id, session, tag, hub_id="", clients=[owner])
    for i in range(BEADS):
        bead = await owner.create_bead(
            f"payments retry note {i}", filler(i), group_id=group.group_id, visibility="group",
            session_id=session, tags=[tag], importance=i % 11,
        )
        w.bead_ids.append(bead.bead_id)
    hub_bead = await owner.create_bead("payments retry hub", "links them all", group_id=group.group_id,
                                       visibility="group")
    w.hub_id = hub_bead.bead_id
    for bead_id in w.bead_ids:
        await owner.add_relationship(hub_bead.bead_id, bead_id, "RELATED_TO", strength=0.5)
    w.bead_ids.append(hub_bead.bead_id)
    await small_hub.ctx.keywords.catch_up()  # raw requests below carry no index position
    yield w
    for client in w.clients:
        await client.close()


@pytest.fixture
async def raw(small_stack: EmbeddedStack, small_hub: HubService) -> AsyncIterator[NATS]:
    nc = await nats.connect(small_stack.nats_url, connect_timeout=10)
    yield nc
    await nc.drain()


async def ask(nc: NATS, caller: str, op: str, body: dict[str, Any]) -> Msg:
    """A raw request: the reply must arrive (a refused reply would time out here) and fit the bus."""
    msg = await nc.request(request_subject(caller, op), json.dumps(body).encode(), timeout=15)
    assert len(msg.data) + 1024 <= MAX_PAYLOAD, (op, len(msg.data))
    return msg


# --- every reply that carries beads is cut to fit, and says so -------------------------------------------


def cases(w: World) -> list[tuple[str, dict[str, Any], type[BaseModel], Any]]:
    """(op, request, reply model, how many items the reply holds) for every reply that lists beads."""
    query = "payments retry backoff"
    return [
        ("get_recent", {"limit": 500}, BeadList, lambda r: len(r.beads)),
        ("get_by_session", {"session_id": w.session_id, "limit": 500}, BeadList, lambda r: len(r.beads)),
        ("get_by_group", {"group_id": w.group_id, "limit": 500}, BeadList, lambda r: len(r.beads)),
        ("get_by_tag", {"tag": w.tag, "limit": 500}, BeadList, lambda r: len(r.beads)),
        ("rank_by_importance", {"bead_ids": w.bead_ids}, BeadList, lambda r: len(r.beads)),
        ("search_beads", {"query": query, "limit": 100}, SearchResult, lambda r: len(r.hits)),
        ("search_beads", {"query": query, "limit": 100, "mode": "keyword"}, SearchResult, lambda r: len(r.hits)),
        ("find_similar", {"bead_id": w.bead_ids[0], "threshold": -1, "limit": 100}, SearchResult,
         lambda r: len(r.hits)),
        ("traverse_graph", {"start_id": w.hub_id, "max_depth": 2, "limit": 500}, Subgraph, lambda r: len(r.nodes)),
        ("why", {"query": query, "hops": 2, "limit": 500}, WhyResult, lambda r: len(r.graph.nodes)),
        ("context", {"query": query, "max_tokens": 200_000, "max_per_source": 50}, ContextBlock,
         lambda r: len(r.bead_ids)),
        ("unified_recall", {"query": query, "limit": 100}, UnifiedRecallResult, lambda r: len(r.beads.hits)),
        ("changes_since", {"scope": w.group_id, "limit": 1000}, ChangeBatch, lambda r: len(r.changes)),
    ]


async def test_every_reply_that_lists_beads_arrives_cut_to_fit_and_says_truncated(world: World, raw: NATS) -> None:
    caller = world.owner.ai_id
    for op, body, model, count in cases(world):
        msg = await ask(raw, caller, op, body)
        assert not (msg.headers and ERROR_CODE_HEADER in msg.headers), (op, msg.data[:300])
        reply = model.model_validate_json(msg.data)
        assert reply.truncated, (op, body)  # type: ignore[attr-defined]
        assert 1 <= count(reply) < len(world.bead_ids), (op, count(reply))
        if op == "traverse_graph" or op == "why":
            graph: Subgraph = reply.graph if isinstance(reply, WhyResult) else reply  # type: ignore[assignment]
            kept = {n.bead.bead_id for n in graph.nodes}
            assert all(e.from_id in kept and e.to_id in kept for e in graph.edges), "no edge to a node left out"
            assert graph.truncated
        if isinstance(reply, ContextBlock):
            assert reply.text and all(f"| {b}]" in reply.text for b in reply.bead_ids)
            assert reply.tokens <= reply.max_tokens
        if isinstance(reply, ChangeBatch):
            assert reply.cursor == reply.changes[-1].cursor
        if isinstance(reply, BeadList) and op != "rank_by_importance":
            assert reply.next_cursor is not None


async def test_a_listing_without_cutting_says_whether_more_follow(world: World, raw: NATS) -> None:
    caller = world.owner.ai_id
    first = BeadList.model_validate_json(
        (await ask(raw, caller, "get_by_group", {"group_id": world.group_id, "limit": 3})).data
    )
    assert len(first.beads) == 3 and not first.truncated and first.next_cursor is not None
    rest = BeadList.model_validate_json(
        (await ask(raw, caller, "get_by_group", {"group_id": world.group_id, "limit": 3,
                                                "cursor": first.next_cursor})).data
    )
    assert {b.bead_id for b in rest.beads}.isdisjoint(b.bead_id for b in first.beads)
    assert [b.created_at for b in first.beads + rest.beads] == sorted(
        (b.created_at for b in first.beads + rest.beads), reverse=True
    )
    last = BeadList.model_validate_json(
        (await ask(raw, caller, "get_by_session", {"session_id": world.session_id, "limit": 500,
                                                  "cursor": f"{0}:{world.bead_ids[0]}"})).data
    )
    assert last.truncated  # a cursor before everything still pages
    bad = await ask(raw, caller, "get_recent", {"cursor": "not a cursor"})
    error = ErrorReply.model_validate_json(bad.data)
    assert error.error.code is ErrorCode.INVALID


# --- the client pages for its caller -----------------------------------------------------------------------


async def test_the_client_pages_listings_and_returns_every_bead_exactly_once(world: World) -> None:
    member = await world.client(timeout=10, retries=0)
    await world.owner.add_member(world.group_id, member.ai_id)
    everything = set(world.bead_ids)
    in_session = world.bead_ids[:-1]

    recent = await member.get_recent(limit=500)
    assert sorted(b.bead_id for b in recent) == sorted(everything)
    assert [b.created_at for b in recent] == sorted((b.created_at for b in recent), reverse=True)
    by_group = await member.get_by_group(world.group_id, limit=500)
    assert [b.bead_id for b in by_group] == [b.bead_id for b in recent]
    by_session = await member.get_by_session(world.session_id, limit=500)
    assert [b.bead_id for b in by_session] == in_session  # oldest first, each once
    by_tag = await member.get_by_tag(world.tag, limit=500)
    assert [b.bead_id for b in by_tag] == in_session[::-1]
    # The caller's limit is met exactly, across pages.
    assert [b.bead_id for b in await member.get_recent(limit=25)] == [b.bead_id for b in recent[:25]]
    ranked = await member.rank_by_importance(world.bead_ids)
    assert sorted(b.bead_id for b in ranked) == sorted(everything)
    assert [b.importance for b in ranked] == sorted((b.importance for b in ranked), reverse=True)


async def test_a_limit_beyond_one_request_s_is_paged_not_refused(world: World) -> None:
    member = await world.client(timeout=10, retries=0)
    await world.owner.add_member(world.group_id, member.ai_id)
    beyond = MAX_LIMIT * 2
    assert [b.bead_id for b in await member.get_by_tag(world.tag, limit=beyond)] == world.bead_ids[:-1][::-1]
    assert len(await member.get_recent(limit=beyond)) == len(world.bead_ids)


async def test_the_change_feed_replays_every_change_exactly_once_across_cut_batches(world: World) -> None:
    member = await world.client(timeout=10, retries=0)
    await world.owner.add_member(world.group_id, member.ai_id)
    seen: list[str] = []
    async with asyncio.timeout(60):
        async for change in member.changes(world.group_id):
            assert change.action == "created" and change.bead is not None
            seen.append(change.bead_id)
            if len(seen) == len(world.bead_ids):
                break
    assert seen == world.bead_ids


# --- what cannot be cut -----------------------------------------------------------------------------------


async def test_a_reply_that_cannot_fit_is_a_typed_error_and_a_notification_or_change_loses_only_its_bead(
    world: World,
) -> None:
    owner = await world.client(new_ai("o"), timeout=10, retries=0)
    member = await world.client(timeout=10, retries=0)
    group = await owner.create_group("one huge bead")
    await owner.add_member(group.group_id, member.ai_id)
    huge = "h" * (MAX_PAYLOAD - 1500)  # the request fits the bus; the bead with all its fields does not
    async with member.notifications() as stream:
        with pytest.raises(PayloadTooLarge) as refused:
            await owner.create_bead("huge", huge, group_id=group.group_id, visibility="group", importance=9)
        assert refused.value.details["reason"] == "reply_too_large"
        note = await asyncio.wait_for(anext(stream), 15)
    assert note.kind == "change" and note.change is not None and note.change.bead is None  # fetched on demand
    with pytest.raises(PayloadTooLarge):  # not a timeout: the caller learns at once
        await member.get_bead(note.change.bead_id)
    with pytest.raises(PayloadTooLarge):
        await member.get_by_group(group.group_id)  # not even one bead fits a page
    batch = await member.changes_since(group.group_id)  # the feed still moves on past it
    assert batch.truncated and len(batch.changes) == 1 and batch.changes[0].bead is None
    assert batch.cursor == batch.changes[0].cursor
