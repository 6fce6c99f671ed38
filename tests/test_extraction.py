"""remember_extracted and remember_topics: facts stored PART_OF topic hubs, through the client on real servers.

* the outline extraction (no LLM configured): topics from headings and salient words, one atomic store,
  reruns store nothing new, hubs reused per topic name and scope;
* hubs are left out of search and context, and a query that matches only hubs answers with their facts;
* visibility of hubs and facts on every path, for every kind of outsider; bad input changes nothing;
* the LLM path against a real HTTP server speaking ``/v1/chat/completions`` (scripted: a good answer,
  malformed JSON, a timeout, a 500), on a hub of its own whose extractor points there.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import uvicorn
from conftest import ClientFactory, new_ai
from recall_client import RecallClient
from recall_hub.config import HubSettings
from recall_hub.context import HubContext
from recall_hub.embedders import EmbedderConfig
from recall_hub.extractors import ExtractorConfig, make_extractor
from recall_hub.extractors.llm import LLMExtractor
from recall_hub.service.server import running_hub
from recall_hub.tooling.stack import EmbeddedStack, free_port
from recall_schemas import (
    BeadType,
    Direction,
    InvalidRequest,
    NotFound,
    RelType,
    RememberedTopics,
    Unavailable,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

pytestmark = pytest.mark.timeout(180)


def word() -> str:
    """A word no other test uses, so keyword search finds exactly what a test stored."""
    return "zq" + secrets.token_hex(4)


def ids(result: RememberedTopics) -> list[str]:
    return [fact.bead_id for topic in result.topics for fact in topic.facts]


def hub_ids(result: RememberedTopics) -> list[str]:
    return [topic.hub.bead_id for topic in result.topics]


async def part_of(client: RecallClient, bead_id: str) -> list[str]:
    edges = await client.get_relationships(bead_id, rel_type="PART_OF", direction="out")
    return [edge.to_id for edge in edges]


# --- the outline extraction ------------------------------------------------------------------------------


async def test_outline_extraction_stores_each_fact_part_of_its_topic_hub_once(connect: ClientFactory) -> None:
    a = await connect()
    text = (
        "# Payments\n\nRetries use exponential backoff. The limit is three tries.\n"
        "- Every charge carries an idempotency key\n\n"
        "Deploy\n======\nWe deploy with Helm charts. Staging goes first.\n"
    )
    first = await a.remember_extracted(text)
    assert first.extractor == "outline" and first.fallback_reason is None and not first.replayed
    assert [t.name for t in first.topics] == ["Payments", "Deploy"]
    assert [f.title for f in first.topics[0].facts] == [
        "Retries use exponential backoff.", "The limit is three tries.", "Every charge carries an idempotency key",
    ]
    assert first.created == 5 + 2 and all(f.created for t in first.topics for f in t.facts)
    for topic in first.topics:
        hub = await a.get_bead(topic.hub.bead_id)
        assert hub.bead_type is BeadType.TOPIC and hub.title == topic.name and hub.visibility.value == "private"
        for fact in topic.facts:
            bead = await a.get_bead(fact.bead_id)
            assert bead.bead_type is BeadType.FACT and bead.metadata["topic"] == topic.name
            assert bead.metadata["extracted_by"] == "outline" and bead.provenance.value == "recorded"
            assert await part_of(a, fact.bead_id) == [topic.hub.bead_id]

    again = await a.remember_extracted(text)
    assert again.replayed and again.created == 0
    assert ids(again) == ids(first) and hub_ids(again) == hub_ids(first)
    assert len([b for b in await a.get_recent(limit=50) if b.created_by == a.ai_id]) == 7  # nothing new

    # The same topic in another text (another spelling of its name) is the same hub.
    more = await a.remember_extracted("## payments:\n\nRefunds settle within two days.")
    assert hub_ids(more) == [first.topics[0].hub.bead_id] and more.created == 1
    assert not more.topics[0].hub.created


async def test_text_without_headings_is_filed_under_its_salient_words(connect: ClientFactory) -> None:
    a = await connect()
    result = await a.remember_extracted(
        "The Redis cluster failed over at noon. Redis kept every key.\n\n"
        "Kubernetes pods restarted twice. Kubernetes autoscaling was off.",
        max_facts=3,
    )
    assert [(t.name, len(t.facts)) for t in result.topics] == [("Redis cluster", 2), ("Kubernetes pods", 1)]


async def test_hubs_are_shared_within_a_scope_and_distinct_across_scopes(connect: ClientFactory) -> None:
    ops, b = await connect(new_ai("o")), await connect()
    group = await ops.create_group("capture")
    await ops.add_member(group.group_id, b.ai_id)
    name = word()
    in_group = await ops.remember_extracted(f"# {name}\n\nThe ops wrote this.", visibility="group",
                                            group_id=group.group_id)
    from_b = await b.remember_extracted(f"# {name}\n\nThe agent wrote that.", visibility="group",
                                        group_id=group.group_id)
    assert hub_ids(from_b) == hub_ids(in_group) and not from_b.topics[0].hub.created
    ops_private = await ops.remember_extracted(f"# {name}\n\nA private note of the ops.")
    b_private = await b.remember_extracted(f"# {name}\n\nA private note of the agent.")
    hubs = {*hub_ids(in_group), *hub_ids(ops_private), *hub_ids(b_private)}
    assert len(hubs) == 3
    with pytest.raises(NotFound):
        await b.get_bead(hub_ids(ops_private)[0])


# --- search: hubs left out, their facts stand in ---------------------------------------------------------------


async def test_a_query_matching_only_hubs_answers_with_their_facts(connect: ClientFactory) -> None:
    a = await connect()
    name = word()
    stored = await a.remember_extracted(f"# {name}\n\nThe quarterly report is due on Friday. Finance signs it off.")
    hub = stored.topics[0].hub.bead_id
    facts = set(ids(stored))
    for mode in ("hybrid", "keyword"):
        # Other tests' global beads may come up as weak vector matches; only the caller's own are judged.
        hits = [h for h in (await a.search_beads(name, mode=mode)).hits if h.bead.created_by == a.ai_id]
        assert hits, mode
        assert {h.bead.bead_id for h in hits} <= facts and hub not in {h.bead.bead_id for h in hits}, mode
        assert {h.bead.bead_id for h in hits} == facts, mode
    with_hubs = await a.search_beads(name, include_hubs=True, mode="keyword")
    assert with_hubs.hits[0].bead.bead_id == hub
    # A budget that holds every candidate: other tests' global beads, weak vector matches of a made-up word
    # under the test embedder, can come before the facts (half the hub's relevance) and fill a small one.
    block = await a.context(name, max_tokens=4000)
    assert facts <= set(block.bead_ids) and hub not in block.bead_ids
    assert hub in (await a.context(name, max_tokens=4000, include_hubs=True)).bead_ids
    # Asking for topic beads by type is asking for hubs.
    typed = await a.search_beads(name, filters={"bead_types": ["topic"]}, mode="keyword")
    assert [h.bead.bead_id for h in typed.hits] == [hub]


# --- visibility ---------------------------------------------------------------------------------------------


async def test_collected_group_facts_and_hubs_are_invisible_to_every_outsider(connect: ClientFactory) -> None:
    ops, member, leaver, stranger = await connect(new_ai("o")), await connect(), await connect(), await connect()
    group = await ops.create_group("secret capture")
    for client in (member, leaver):
        await ops.add_member(group.group_id, client.ai_id)
    name = word()
    stored = await member.remember_extracted(
        f"# {name}\n\nThe vault code rotates weekly.", visibility="group", group_id=group.group_id
    )
    own_private = await stranger.remember_extracted(f"# {name}\n\nThe stranger keeps this to itself.")
    await ops.remove_member(group.group_id, leaver.ai_id)
    hidden = [*ids(stored), *hub_ids(stored)]

    found = (await ops.search_beads(name, limit=50)).hits  # past other tests' weak matches (see above)
    assert {h.bead.bead_id for h in found if h.bead.group_id == group.group_id} == set(ids(stored))
    for outsider, own in ((leaver, set()), (stranger, {*ids(own_private), *hub_ids(own_private)})):
        for bead_id in hidden:
            with pytest.raises(NotFound):
                await outsider.get_bead(bead_id)
            with pytest.raises(NotFound):
                await outsider.traverse_graph(bead_id)
        found = {h.bead.bead_id for h in (await outsider.search_beads(name, include_hubs=True)).hits}
        assert not found & set(hidden)
        assert found >= set(hub_ids(own_private) if own else [])  # its own hub of that name, found by its words
        assert not set((await outsider.context(name)).bead_ids) & set(hidden)
        assert not {b.bead_id for b in await outsider.get_recent(limit=100)} & set(hidden)
        where = await outsider.recall_where(name)
        assert not {i for kind in (where.files, where.sessions) for p in kind for i in p.bead_ids} & set(hidden)
        with pytest.raises(NotFound):  # writing into the group is refused, and writes nothing
            await outsider.remember_extracted(f"# {name}\n\nInjected.", visibility="group", group_id=group.group_id)
    assert len(await ops.get_by_group(group.group_id)) == len(hidden)
    # The member's private hub of the same name is not the group's, and the group's facts never reach it.
    for fact in ids(own_private):
        assert await part_of(stranger, fact) == hub_ids(own_private)
    assert await member.traverse_graph(hub_ids(stored)[0], rel_types=[RelType.PART_OF], direction=Direction.IN)


# --- bad input ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"text": ""}, "text"),
        ({"text": "x", "visibility": "group"}, "group_id"),
        ({"text": "x", "max_facts": 0}, "max_facts"),
        ({"text": "x", "colour": "red"}, "colour"),
    ],
)
async def test_bad_extraction_requests_are_refused_by_name(
    connect: ClientFactory, fields: dict[str, Any], says: str
) -> None:
    a = await connect()
    text = fields.pop("text")
    with pytest.raises(InvalidRequest, match=says):
        await a.remember_extracted(text, **fields)


async def test_a_refused_topics_request_stores_nothing(connect: ClientFactory) -> None:
    a = await connect()
    good = {"name": "Fine", "facts": [{"title": "A fine fact"}]}
    for topics, fields, says in (
        ([good, {"name": "Bad", "facts": [{"title": "x", "metadata": {"_recall_x": 1}}]}], {}, "reserved"),
        ([good], {"bead_type": "topic"}, "topic"),
        ([good, {"name": " ", "facts": [{"title": "x"}]}], {}, "name"),
        ([good, {"name": "###", "facts": [{"title": "x"}]}], {}, "letters or digits"),
    ):
        with pytest.raises(InvalidRequest, match=says):
            await a.remember_topics(topics, **fields)
    assert [b for b in await a.get_recent(limit=10) if b.created_by == a.ai_id] == []


async def test_keyed_facts_update_in_place_and_unchanged_ones_stay(connect: ClientFactory) -> None:
    a = await connect()
    topics = [{"name": "Runbook", "facts": [
        {"title": "Restart", "content": "systemctl restart api", "key": "runbook.restart"},
        {"title": "Logs", "content": "journalctl -u api", "key": "runbook.logs"},
    ]}]
    first = await a.remember_topics(topics)
    assert first.extractor == "given" and first.created == 3 and first.updated == 0
    same = await a.remember_topics(topics)
    assert same.created == 0 and same.updated == 0 and ids(same) == ids(first)
    topics[0]["facts"][0]["content"] = "systemctl restart api --now"
    changed = await a.remember_topics(topics)
    assert changed.created == 0 and changed.updated == 1 and ids(changed) == ids(first)
    bead = await a.get_bead(ids(first)[0])
    assert bead.content == "systemctl restart api --now" and bead.version == 2
    assert (await a.get_bead(ids(first)[1])).version == 1


async def test_every_capture_request_is_audited(connect: ClientFactory, hub: HubContext) -> None:
    a = await connect()
    stored = await a.remember_extracted(f"# {word()}\n\nAudited fact.")
    with pytest.raises(InvalidRequest):
        await a.remember_topics([{"name": "x", "facts": [{"title": "y", "metadata": {"_recall": 1}}]}])
    await a.recall_where("audited")
    entries = await hub.audit.entries(ai_id=a.ai_id)
    by_op = {(e.op, e.allowed): e for e in entries}
    assert set(by_op[("remember_extracted", True)].bead_ids) == {*ids(stored), *hub_ids(stored)}
    assert by_op[("remember_topics", False)].code == "invalid"
    assert ("recall_where", True) in by_op


# --- the LLM path, against a scripted OpenAI-compatible server ---------------------------------------------------


class ScriptedLLM:
    """A real HTTP server speaking ``POST /v1/chat/completions``; ``mode`` says how it answers next."""

    def __init__(self) -> None:
        self.mode = "good"
        self.answer: dict[str, Any] = {}
        self.requests: list[dict[str, Any]] = []
        self.port = free_port()
        app = Starlette(routes=[Route("/v1/chat/completions", self.complete, methods=["POST"])])
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))

    async def complete(self, request: Request) -> JSONResponse:
        self.requests.append(await request.json())
        if self.mode == "error":
            return JSONResponse({"error": {"message": "model crashed"}}, status_code=500)
        if self.mode == "slow":
            await asyncio.sleep(5)  # the fault under test: longer than the extractor's timeout
        content = json.dumps(self.answer) if self.mode == "good" else "Sure! Here are the facts: {topics: [oops"
        return JSONResponse({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "scripted",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
        })


@pytest.fixture(scope="module")
async def llm() -> AsyncIterator[ScriptedLLM]:
    scripted = ScriptedLLM()
    task = asyncio.create_task(scripted.server.serve())
    while not scripted.server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.02)
    yield scripted
    scripted.server.should_exit = True
    await task


@pytest.fixture(scope="module")
def llm_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStack]:
    with EmbeddedStack(tmp_path_factory.mktemp("llm-stack")) as running:
        yield running


@pytest.fixture(scope="module")
async def llm_client(llm: ScriptedLLM, llm_stack: EmbeddedStack) -> AsyncIterator[RecallClient]:
    """A client of a hub whose extractor is the scripted server (1 s timeout, no retries)."""
    settings = HubSettings(
        nats_url=llm_stack.nats_url, falkordb_url=llm_stack.redis_url, redis_url=llm_stack.redis_url,
        graph_name=f"recall_llm_{secrets.token_hex(4)}", embedder=EmbedderConfig(kind="hash"),
        extractor=ExtractorConfig(url=f"http://127.0.0.1:{llm.port}/v1", model="scripted", timeout_s=1, max_retries=0),
    )
    async with running_hub(settings), RecallClient(new_ai(), llm_stack.nats_url, timeout=10) as client:
        yield client


async def test_the_llm_answer_becomes_facts_under_its_topics(llm: ScriptedLLM, llm_client: RecallClient) -> None:
    llm.mode = "good"
    llm.answer = {"topics": [
        {"name": "Billing", "facts": ["Invoices are sent on the 1st.", "VAT is 20% in France."]},
        {"name": "On-call", "facts": ["Alice is on call this week."]},
    ]}
    text = f"Meeting notes {word()}: invoices go out on the first; VAT in France is 20%; Alice is on call."
    result = await llm_client.remember_extracted(text)
    assert result.extractor == "llm" and result.fallback_reason is None
    assert [(t.name, [f.title for f in t.facts]) for t in result.topics] == [
        ("Billing", ["Invoices are sent on the 1st.", "VAT is 20% in France."]),
        ("On-call", ["Alice is on call this week."]),
    ]
    sent = llm.requests[-1]
    assert sent["model"] == "scripted" and sent["messages"][-1]["content"] == text
    bead = await llm_client.get_bead(ids(result)[0])
    assert bead.provenance.value == "derived" and bead.metadata["extracted_by"] == "llm"
    asked = len(llm.requests)
    again = await llm_client.remember_extracted(text)
    assert again.replayed and again.extractor == "llm" and ids(again) == ids(result)
    assert len(llm.requests) == asked  # a rerun does not ask the LLM again


async def test_a_malformed_llm_answer_falls_back_to_the_outline_and_says_so(
    llm: ScriptedLLM, llm_client: RecallClient
) -> None:
    llm.mode = "malformed"
    result = await llm_client.remember_extracted(f"# Fallback {word()}\n\nThe outline still works.")
    assert result.extractor == "outline" and result.fallback_reason and "not JSON" in result.fallback_reason
    assert [f.title for t in result.topics for f in t.facts] == ["The outline still works."]


@pytest.mark.parametrize(("mode", "says"), [("slow", "did not answer within 1s"), ("error", "HTTP 500")])
async def test_an_llm_that_fails_is_unavailable_and_nothing_is_stored(
    llm: ScriptedLLM, llm_client: RecallClient, mode: str, says: str
) -> None:
    llm.mode = mode
    name = word()
    with pytest.raises(Unavailable, match=says):
        await llm_client.remember_extracted(f"# {name}\n\nThis must not be stored.")
    assert (await llm_client.search_beads(name, include_hubs=True, mode="keyword")).hits == []
    llm.mode = "good"
    llm.answer = {"topics": [{"name": name, "facts": ["Stored once the LLM is back."]}]}
    back = await llm_client.remember_extracted(f"# {name}\n\nThis must not be stored.")
    assert back.extractor == "llm" and back.created == 2


def test_the_extractor_is_configured_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert HubSettings().extractor.url is None and make_extractor(HubSettings().extractor) is None
    monkeypatch.setenv("RECALL_EXTRACTOR__URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("RECALL_EXTRACTOR__MODEL", "llama3")
    monkeypatch.setenv("RECALL_EXTRACTOR__TIMEOUT_S", "2.5")
    config = HubSettings().extractor
    assert (config.url, config.model, config.timeout_s) == ("http://127.0.0.1:9/v1", "llama3", 2.5)
    assert isinstance(make_extractor(config), LLMExtractor)
