"""AutoGen memory on the hub (``recall_client.integrations.autogen``), against autogen-core and a real hub.

What must hold: what an agent adds (text, markdown, JSON, with its metadata) comes back from ``query`` as it went
in; ``update_context`` gives the model the memories relevant to the last user message as one system message;
``clear`` removes what this memory wrote and nothing else; the hub, not the adapter, decides who finds what (a
private memory stays its writer's, a group's memory is every member's); the memory is an AutoGen component whose
config holds a connection, not a client; refused credentials are a clear error; and agents on an AutoGen runtime
share a memory through the hub. autogen-core has no scripted model client (that is in autogen-ext), so the
end-to-end test asserts on the model context an LLM would be given.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path

import nkeys
import pytest
from autogen_core import AgentId, MessageContext, RoutedAgent, SingleThreadedAgentRuntime, message_handler
from autogen_core.memory import Memory, MemoryContent, MemoryMimeType
from autogen_core.model_context import BufferedChatCompletionContext, UnboundedChatCompletionContext
from autogen_core.models import AssistantMessage, SystemMessage, UserMessage
from conftest import ClientFactory, new_ai, roster_bundle
from recall_client import InvalidRequest, RecallClient
from recall_client.integrations.autogen import RecallMemory, memory_tag
from recall_hub.service.endpoints import HubService
from recall_hub.tooling.auth import AuthBundle, format_creds, read_creds
from recall_hub.tooling.stack import EmbeddedStack
from recall_schemas import Unauthorized


def text(content: str, **metadata: object) -> MemoryContent:
    return MemoryContent(content=content, mime_type=MemoryMimeType.TEXT, metadata=metadata or None)


def contents(memories: list[MemoryContent]) -> list[object]:
    return [m.content for m in memories]


# --- round trip ------------------------------------------------------------------------------------------------


async def test_text_markdown_and_json_come_back_from_a_query_as_they_were_added(connect: ClientFactory) -> None:
    word = "zk" + secrets.token_hex(4)
    memory = RecallMemory(await connect(), name="prefs-" + word)
    await memory.add(text(f"The user writes {word} in British English", source="onboarding"))
    await memory.add(MemoryContent(content=f"# Style\n- {word}: short sentences", mime_type=MemoryMimeType.MARKDOWN))
    await memory.add(MemoryContent(content={"word": word, "units": "metric", "n": 3}, mime_type="application/json"))

    found = (await memory.query(word)).results
    assert sorted(map(json.dumps, contents(found))) == sorted(map(json.dumps, [
        f"The user writes {word} in British English", f"# Style\n- {word}: short sentences",
        {"n": 3, "units": "metric", "word": word},
    ]))
    by_type = {m.mime_type: m for m in found}
    assert set(by_type) == {MemoryMimeType.TEXT, MemoryMimeType.MARKDOWN, MemoryMimeType.JSON}
    plain = by_type[MemoryMimeType.TEXT].metadata or {}
    assert plain["source"] == "onboarding" and plain["created_by"] == memory.client.ai_id
    assert plain["bead_id"].startswith("b_") and isinstance(plain["score"], float)

    bead = await memory.client.get_bead(plain["bead_id"])
    assert bead.visibility.value == "private" and memory_tag(memory.name) in bead.tags
    assert bead.metadata == {"source": "onboarding", "autogen": {"memory": memory.name, "mime_type": "text/plain"}}

    assert len((await memory.query(MemoryContent(content=word, mime_type="text/plain"), k=1)).results) == 1


async def test_images_and_bytes_are_refused_with_a_clear_error(connect: ClientFactory) -> None:
    memory = RecallMemory(await connect())
    with pytest.raises(InvalidRequest, match="text, markdown and JSON; not application/octet-stream"):
        await memory.add(MemoryContent(content=b"\x00\x01", mime_type=MemoryMimeType.BINARY))


async def test_update_context_adds_the_memories_of_the_last_user_message_as_one_system_message(
    connect: ClientFactory,
) -> None:
    word = "zk" + secrets.token_hex(4)
    memory = RecallMemory(await connect(), name="ctx-" + word)
    await memory.add(text(f"The {word} service is deployed with blue-green releases"))
    context = UnboundedChatCompletionContext()
    await context.add_message(UserMessage(content="hello", source="user"))
    await context.add_message(AssistantMessage(content="Hi, what do you need?", source="assistant"))
    await context.add_message(UserMessage(content=f"How is {word} deployed?", source="user"))

    result = await memory.update_context(context)
    assert contents(result.memories.results) == [f"The {word} service is deployed with blue-green releases"]
    messages = await context.get_messages()
    assert len(messages) == 4 and isinstance(messages[-1], SystemMessage)
    expected = f"\nRelevant memory content:\n1. The {word} service is deployed with blue-green releases"
    assert messages[-1].content == expected

    empty = UnboundedChatCompletionContext()
    await empty.add_message(AssistantMessage(content="no user yet", source="assistant"))
    assert (await memory.update_context(empty)).memories.results == []
    assert len(await empty.get_messages()) == 1


async def test_clear_removes_what_this_memory_wrote_and_nothing_else(connect: ClientFactory) -> None:
    word = "zk" + secrets.token_hex(4)
    client = await connect()
    memory, other_name = RecallMemory(client, name="a-" + word), RecallMemory(client, name="b-" + word)
    await memory.add(text(f"{word} one"))
    await memory.add(text(f"{word} two"))
    await other_name.add(text(f"{word} kept"))
    await memory.clear()
    assert (await memory.query(word)).results == []
    assert contents((await other_name.query(word)).results) == [f"{word} kept"]
    await memory.clear()  # nothing left: nothing to do


# --- who finds what: the hub decides ----------------------------------------------------------------------------


async def test_an_agent_cannot_find_another_agent_s_private_memory(connect: ClientFactory) -> None:
    word, name = "zk" + secrets.token_hex(4), "shared-name"
    alice, bob = await connect(), await connect()
    await RecallMemory(alice, name=name).add(text(f"alice's {word} password hint"))
    bob.read_after(alice.index_position)  # bob's searches wait for alice's write: its absence is not a lag
    bobs = RecallMemory(bob, name=name)
    assert (await bobs.query(word)).results == []
    await bobs.clear()  # the same name, another identity: alice's bead is not bob's to clear
    assert contents((await RecallMemory(alice, name=name).query(word)).results) == [f"alice's {word} password hint"]


async def test_a_group_s_members_share_a_memory_and_each_clears_only_its_own(connect: ClientFactory) -> None:
    word = "zk" + secrets.token_hex(4)
    ops, alice, bob, outsider = await connect(new_ai("o")), await connect(), await connect(), await connect()
    group = await ops.create_group("autogen team")
    for member in (alice, bob):
        await ops.add_member(group.group_id, member.ai_id)
    alices = RecallMemory(alice, name="team", group_id=group.group_id)
    bobs = RecallMemory(bob, name="team", group_id=group.group_id)
    await alices.add(text(f"{word}: the staging database is read-only on Sundays"))
    await bobs.add(text(f"{word}: deploys need two approvals"))

    for reader in (alice, bob, outsider):
        reader.read_after(alice.index_position)
        reader.read_after(bob.index_position)
    everything = {f"{word}: the staging database is read-only on Sundays", f"{word}: deploys need two approvals"}
    assert set(contents((await bobs.query(word)).results)) == everything
    assert set(contents((await alices.query(word)).results)) == everything
    assert (await RecallMemory(outsider, name="team").query(word)).results == []

    await alices.clear()
    assert contents((await bobs.query(word)).results) == [f"{word}: deploys need two approvals"]


# --- a component, and credentials ---------------------------------------------------------------------------------

OPS, A, B = new_ai("o"), new_ai("a"), new_ai("a")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> AuthBundle:
    return roster_bundle(tmp_path_factory.mktemp("autogen-secure"), [OPS], [A, B])


async def test_a_dumped_memory_holds_the_connection_and_loads_as_a_working_memory(
    secure_stack: EmbeddedStack, secure_hub: HubService, bundle: AuthBundle
) -> None:
    original = RecallMemory(RecallClient(A, secure_stack.nats_url, creds=str(bundle.creds[A])), name="notes", k=3)
    dumped = original.dump_component()
    assert dumped.provider == "recall_client.integrations.autogen.RecallMemory"
    assert dumped.config == {"ai_id": A, "nats_url": secure_stack.nats_url, "creds": str(bundle.creds[A]),
                             "name": "notes", "k": 3}

    loaded = Memory.load_component(json.loads(dumped.model_dump_json()))
    assert isinstance(loaded, RecallMemory) and loaded.client is not original.client
    try:
        await loaded.add(text("loaded from its config"))
        assert contents((await loaded.query("loaded from its config")).results) == ["loaded from its config"]
    finally:
        await loaded.close()


async def test_credentials_of_another_identity_or_refused_ones_are_a_clear_error(
    secure_stack: EmbeddedStack, secure_hub: HubService, bundle: AuthBundle, tmp_path: Path
) -> None:
    borrowed = RecallMemory(RecallClient(A, secure_stack.nats_url, creds=str(bundle.creds[B])), name="notes")
    with pytest.raises(Unauthorized, match=f"'notes' cannot act as {A}: .*belong to {B}"):
        await borrowed.add(text("anything"))

    stolen = tmp_path / "stolen.creds"  # A's JWT with a key the account never signed
    seed = bytes(nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_USER)).decode()
    stolen.write_text(format_creds(read_creds(bundle.creds[A])[0], seed))
    loaded = RecallMemory.load_component({
        "provider": "recall_client.integrations.autogen.RecallMemory",
        "config": {"ai_id": A, "nats_url": secure_stack.nats_url, "creds": str(stolen)},
    })
    with pytest.raises(Unauthorized, match=f"cannot act as {A}: .*refused"):
        await loaded.query("anything")


# --- agents on an AutoGen runtime ----------------------------------------------------------------------------------


@dataclass
class Finding:
    text: str


@dataclass
class Question:
    text: str
    read_after: str | None
    """The index position of the writes the asker knows of: the answerer's searches find them."""


@dataclass
class Noted:
    read_after: str | None


@dataclass
class Prompt:
    messages: list[str]
    """What the model would be given: the context after ``update_context``."""


class Researcher(RoutedAgent):
    """Writes what it finds to the team's memory."""

    def __init__(self, memory: RecallMemory) -> None:
        super().__init__("writes findings to the team memory")
        self.memory = memory

    @message_handler
    async def on_finding(self, message: Finding, ctx: MessageContext) -> Noted:
        await self.memory.add(text(message.text, agent="researcher"), ctx.cancellation_token)
        return Noted(read_after=self.memory.client.index_position)


class Writer(RoutedAgent):
    """Answers with the team's memory in its model context (no LLM: it returns the prompt it would send)."""

    def __init__(self, memory: RecallMemory) -> None:
        super().__init__("answers with the team memory")
        self.memory = memory
        self.context = BufferedChatCompletionContext(buffer_size=8)

    @message_handler
    async def on_question(self, message: Question, ctx: MessageContext) -> Prompt:
        self.memory.client.read_after(message.read_after)
        await self.context.add_message(UserMessage(content=message.text, source="user"))
        await self.memory.update_context(self.context)
        return Prompt(messages=[str(m.content) for m in await self.context.get_messages()])


async def test_agents_on_a_runtime_share_findings_through_the_group_memory(connect: ClientFactory) -> None:
    word = "zk" + secrets.token_hex(4)
    ops, researcher, writer = await connect(new_ai("o")), await connect(), await connect()
    group = await ops.create_group("runtime team")
    for member in (researcher, writer):
        await ops.add_member(group.group_id, member.ai_id)

    runtime = SingleThreadedAgentRuntime()
    team_memory = {"name": "findings", "group_id": group.group_id}
    await Researcher.register(runtime, "researcher", lambda: Researcher(RecallMemory(researcher, **team_memory)))
    await Writer.register(runtime, "writer", lambda: Writer(RecallMemory(writer, **team_memory)))
    runtime.start()
    try:
        noted = await runtime.send_message(
            Finding(f"The {word} outage was caused by an expired TLS certificate"), AgentId("researcher", "default")
        )
        prompt = await runtime.send_message(
            Question(f"What caused the {word} outage?", noted.read_after), AgentId("writer", "default")
        )
    finally:
        await runtime.stop_when_idle()
    assert prompt.messages == [
        f"What caused the {word} outage?",
        f"\nRelevant memory content:\n1. The {word} outage was caused by an expired TLS certificate",
    ]
