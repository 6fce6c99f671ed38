"""Google ADK memory on the hub (``recall_client.integrations.adk``), against google-adk and a real hub.

What must hold: an ADK session added to memory becomes beads of one hub session that ``search_memory`` finds
with their author, text and time; adding it again stores nothing twice; the hub, not the adapter, decides who
finds what (a private memory stays its writer's, a group's memory is every member's); refused credentials are
a clear error; and an ``LlmAgent`` run by a ``Runner`` with this memory service recalls an earlier session
through ADK's own memory tools (a scripted model stands in for the LLM).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncGenerator
from datetime import datetime
from pathlib import Path

import nkeys
import pytest
from conftest import ClientFactory, new_ai, roster_bundle
from google.adk.agents import LlmAgent
from google.adk.events.event import Event
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.models import BaseLlm, LlmRequest, LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService, Session
from google.adk.tools import load_memory, preload_memory
from google.genai import types
from pydantic import Field
from recall_client import NotFound, RecallClient
from recall_client.integrations.adk import RecallMemoryService, hub_session_id, scope_tag
from recall_hub.service.endpoints import HubService
from recall_hub.tooling.auth import AuthBundle, format_creds, read_creds
from recall_hub.tooling.stack import EmbeddedStack
from recall_schemas import Unauthorized

APP, USER = "planner", "user_1"


def said(author: str, text: str, role: str | None = None) -> Event:
    return Event(author=author, content=types.Content(role=role or author, parts=[types.Part(text=text)]))


async def session_with(sessions: InMemorySessionService, *events: Event, app: str = APP, user: str = USER) -> Session:
    """An ADK session holding ``events``, as a runner would have left it."""
    session = await sessions.create_session(app_name=app, user_id=user)
    for event in events:
        await sessions.append_event(session, event)
    found = await sessions.get_session(app_name=app, user_id=user, session_id=session.id)
    assert found is not None
    return found


def texts(entries: list[MemoryEntry]) -> list[str]:
    return [" ".join(p.text or "" for p in entry.content.parts or []) for entry in entries]


# --- round trip ------------------------------------------------------------------------------------------------


async def test_a_session_added_to_memory_is_found_with_its_author_text_and_time(connect: ClientFactory) -> None:
    word = "kx" + secrets.token_hex(4)
    memory = RecallMemoryService(await connect())
    session = await session_with(
        InMemorySessionService(),
        said("user", f"We chose the {word} database for the ledger"),
        said("planner", f"Noted: the ledger runs on {word}.", role="model"),
    )
    await memory.add_session_to_memory(session)

    found = await memory.search_memory(app_name=APP, user_id=USER, query=f"which database for the ledger {word}")
    assert sorted(texts(found.memories)) == sorted([f"We chose the {word} database for the ledger",
                                                    f"Noted: the ledger runs on {word}."])
    by_author = {entry.author: entry for entry in found.memories}
    assert by_author["user"].content.role == "user" and by_author["planner"].content.role == "model"
    for entry, event in ((by_author["user"], session.events[0]), (by_author["planner"], session.events[1])):
        assert entry.timestamp is not None
        assert abs(datetime.fromisoformat(entry.timestamp).timestamp() - event.timestamp) < 0.001  # the event's
        assert entry.id is not None and entry.id.startswith("b_")
        assert entry.custom_metadata["session_id"] == session.id

    beads = await memory.client.get_by_session(hub_session_id(APP, USER, session.id))
    assert [b.created_by for b in beads] == [memory.client.ai_id] * 2
    assert {b.visibility.value for b in beads} == {"private"}
    assert {scope_tag("app", APP), scope_tag("user", USER), "adk"} <= set(beads[0].tags)


async def test_adding_the_same_session_again_stores_only_its_new_events(connect: ClientFactory) -> None:
    word = "kx" + secrets.token_hex(4)
    memory = RecallMemoryService(await connect())
    sessions = InMemorySessionService()
    session = await session_with(sessions, said("user", f"first {word}"))
    await memory.add_session_to_memory(session)
    await memory.add_session_to_memory(session)
    await sessions.append_event(session, said("planner", f"second {word}", role="model"))
    await memory.add_session_to_memory(session)

    beads = await memory.client.get_by_session(hub_session_id(APP, USER, session.id))
    assert [b.content for b in beads] == [f"first {word}", f"second {word}"]


async def test_events_and_explicit_memories_are_added_and_a_memory_is_deleted_by_its_id(
    connect: ClientFactory,
) -> None:
    word = "kx" + secrets.token_hex(4)
    memory = RecallMemoryService(await connect())
    await memory.add_events_to_memory(
        app_name=APP, user_id=USER, session_id="turn-7", events=[said("user", f"the {word} build is green")],
        custom_metadata={"ticket": "T-1"},
    )
    entry = MemoryEntry(id="pref-1", author="planner", timestamp="2026-05-01T09:00:00+00:00",
                        content=types.Content(role="model", parts=[types.Part(text=f"the user prefers {word} tea")]))
    await memory.add_memory(app_name=APP, user_id=USER, memories=[entry])
    await memory.add_memory(app_name=APP, user_id=USER, memories=[entry])  # the same id: stored once

    found = await memory.search_memory(app_name=APP, user_id=USER, query=word)
    assert set(texts(found.memories)) == {f"the user prefers {word} tea", f"the {word} build is green"}
    tea = next(e for e in found.memories if "tea" in texts([e])[0])
    assert tea.author == "planner" and tea.timestamp == "2026-05-01T09:00:00+00:00"
    build = (await memory.client.get_bead(next(e.id for e in found.memories if e is not tea)))  # type: ignore[arg-type]
    assert build.metadata["adk_custom"] == {"ticket": "T-1"}
    assert build.session_id == hub_session_id(APP, USER, "turn-7")

    assert tea.id is not None
    with pytest.raises(NotFound):  # another user's memory service may not delete it
        await memory.delete_memory(app_name=APP, user_id="someone_else", memory_id=tea.id)
    await memory.delete_memory(app_name=APP, user_id=USER, memory_id=tea.id)
    after = await memory.search_memory(app_name=APP, user_id=USER, query=word)
    assert texts(after.memories) == [f"the {word} build is green"]


async def test_a_deleted_event_comes_back_with_its_session_unless_the_service_forgets_it(
    connect: ClientFactory,
) -> None:
    word = "kx" + secrets.token_hex(4)
    client = await connect()
    sessions = InMemorySessionService()
    for forgets, kept in ((False, True), (True, False)):
        memory = RecallMemoryService(client, delete_forgets=forgets)
        session = await session_with(sessions, said("user", f"{word} {forgets} secret"), said("user", f"{word} kept"))
        await memory.add_session_to_memory(session)
        secret = next(e for e in (await memory.search_memory(app_name=APP, user_id=USER, query=f"{word} secret"))
                      .memories if texts([e]) == [f"{word} {forgets} secret"])
        assert secret.id is not None
        await memory.delete_memory(app_name=APP, user_id=USER, memory_id=secret.id)
        await memory.add_session_to_memory(session)  # deleted: the hub freed its key; forgotten: refused, quietly
        beads = await client.get_by_session(hub_session_id(APP, USER, session.id))
        assert (f"{word} {forgets} secret" in [b.content for b in beads]) is kept
        assert f"{word} kept" in [b.content for b in beads]


async def test_a_search_keeps_to_the_app_and_user_it_is_asked_for(connect: ClientFactory) -> None:
    word = "kx" + secrets.token_hex(4)
    client = await connect()
    memory = RecallMemoryService(client)
    sessions = InMemorySessionService()
    await memory.add_session_to_memory(await session_with(sessions, said("user", f"{word} for the planner")))
    await memory.add_session_to_memory(
        await session_with(sessions, said("user", f"{word} for the coder"), app="coder app/π")  # not a valid tag
    )
    assert texts((await memory.search_memory(app_name=APP, user_id=USER, query=word)).memories) == [
        f"{word} for the planner"
    ]
    assert texts((await memory.search_memory(app_name="coder app/π", user_id=USER, query=word)).memories) == [
        f"{word} for the coder"
    ]
    assert (await memory.search_memory(app_name=APP, user_id="user_2", query=word)).memories == []
    across_apps = RecallMemoryService(client, scope="user")
    assert len((await across_apps.search_memory(app_name=APP, user_id=USER, query=word)).memories) == 2


# --- who finds what: the hub decides ----------------------------------------------------------------------------


async def test_an_agent_cannot_find_another_agent_s_private_memory(connect: ClientFactory) -> None:
    word = "kx" + secrets.token_hex(4)
    alice, bob = await connect(), await connect()
    await RecallMemoryService(alice).add_session_to_memory(
        await session_with(InMemorySessionService(), said("user", f"the vault code is {word}"))
    )
    bob.read_after(alice.index_position)  # bob's searches wait for alice's write: its absence is not a lag
    for scope in ("app_user", "all"):
        found = await RecallMemoryService(bob, scope=scope).search_memory(app_name=APP, user_id=USER, query=word)
        assert found.memories == []
    assert texts((await RecallMemoryService(alice).search_memory(app_name=APP, user_id=USER, query=word)).memories)


async def test_a_group_s_members_share_the_memory_written_to_the_group(connect: ClientFactory) -> None:
    word = "kx" + secrets.token_hex(4)
    ops, alice, bob, outsider = await connect(new_ai("o")), await connect(), await connect(), await connect()
    group = await ops.create_group("adk team")
    for member in (alice, bob):
        await ops.add_member(group.group_id, member.ai_id)

    await RecallMemoryService(alice, group_id=group.group_id).add_session_to_memory(
        await session_with(InMemorySessionService(), said("user", f"release {word} ships on Friday"))
    )
    for reader in (bob, outsider):
        reader.read_after(alice.index_position)
    found = await RecallMemoryService(bob, group_id=group.group_id).search_memory(
        app_name=APP, user_id=USER, query=f"when does {word} ship"
    )
    assert texts(found.memories) == [f"release {word} ships on Friday"]
    assert found.memories[0].custom_metadata["created_by"] == alice.ai_id
    assert found.memories[0].custom_metadata["group_id"] == group.group_id
    assert (await RecallMemoryService(outsider).search_memory(app_name=APP, user_id=USER, query=word)).memories == []

    await ops.remove_member(group.group_id, bob.ai_id)  # leaving the group ends access at once
    assert (await RecallMemoryService(bob).search_memory(app_name=APP, user_id=USER, query=word)).memories == []


async def test_writing_to_a_group_the_identity_is_not_in_is_refused(connect: ClientFactory) -> None:
    ops, stranger = await connect(new_ai("o")), await connect()
    group = await ops.create_group("closed")
    memory = RecallMemoryService(stranger, group_id=group.group_id)
    with pytest.raises(NotFound, match=group.group_id):
        await memory.add_session_to_memory(await session_with(InMemorySessionService(), said("user", "hello")))


# --- credentials ------------------------------------------------------------------------------------------------

OPS, A, B = new_ai("o"), new_ai("a"), new_ai("a")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> AuthBundle:
    return roster_bundle(tmp_path_factory.mktemp("adk-secure"), [OPS], [A, B])


async def test_the_service_connects_its_client_with_the_identity_s_own_credentials(
    secure_stack: EmbeddedStack, secure_hub: HubService, bundle: AuthBundle
) -> None:
    memory = RecallMemoryService(RecallClient(A, secure_stack.nats_url, creds=str(bundle.creds[A])))
    try:
        await memory.add_session_to_memory(
            await session_with(InMemorySessionService(), said("user", "the secure hub remembers"))
        )
        found = await memory.search_memory(app_name=APP, user_id=USER, query="secure hub remembers")
        assert texts(found.memories) == ["the secure hub remembers"]
    finally:
        await memory.close()


async def test_credentials_of_another_identity_or_refused_ones_are_a_clear_error(
    secure_stack: EmbeddedStack, secure_hub: HubService, bundle: AuthBundle, tmp_path: Path
) -> None:
    borrowed = RecallMemoryService(RecallClient(A, secure_stack.nats_url, creds=str(bundle.creds[B])))
    with pytest.raises(Unauthorized, match=f"cannot act as {A}: .*belong to {B}"):
        await borrowed.search_memory(app_name=APP, user_id=USER, query="anything")

    stolen = tmp_path / "stolen.creds"  # A's JWT with a key the account never signed
    seed = bytes(nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_USER)).decode()
    stolen.write_text(format_creds(read_creds(bundle.creds[A])[0], seed))
    refused = RecallMemoryService(RecallClient(A, secure_stack.nats_url, creds=str(stolen)))
    with pytest.raises(Unauthorized, match=f"cannot act as {A}: .*refused"):
        await refused.add_session_to_memory(await session_with(InMemorySessionService(), said("user", "x")))


# --- an agent end to end ------------------------------------------------------------------------------------------


class ScriptedModel(BaseLlm):
    """A stand-in for the LLM: answers each request with the next scripted response and keeps the requests."""

    model: str = "scripted"
    script: list[LlmResponse]
    requests: list[LlmRequest] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(llm_request)
        yield self.script.pop(0)


def reply(text: str) -> LlmResponse:
    return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))


def call_tool(name: str, **args: object) -> LlmResponse:
    call = types.FunctionCall(name=name, args=args)
    return LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))


def request_text(request: LlmRequest) -> str:
    return json.dumps([c.model_dump(mode="json", exclude_none=True) for c in request.contents])


async def test_an_llm_agent_recalls_an_earlier_session_through_adk_s_memory_tools(connect: ClientFactory) -> None:
    word = "kx" + secrets.token_hex(4)
    memory = RecallMemoryService(await connect())
    model = ScriptedModel(script=[
        reply(f"Noted: we deploy to the {word} cluster in Oslo."),  # session 1
        call_tool("load_memory", query=f"{word} cluster"),  # session 2: the model looks memory up
        reply(f"You deploy to the {word} cluster in Oslo."),
    ])
    agent = LlmAgent(name="planner", model=model, instruction="Help the user.", tools=[preload_memory, load_memory])
    sessions = InMemorySessionService()
    runner = Runner(agent=agent, app_name=APP, session_service=sessions, memory_service=memory)

    async def ask(session_id: str, text: str) -> str:
        message = types.Content(role="user", parts=[types.Part(text=text)])
        answers = [
            part.text
            async for event in runner.run_async(user_id=USER, session_id=session_id, new_message=message)
            if event.content is not None and event.author == "planner"
            for part in event.content.parts or []
            if part.text
        ]
        return " ".join(answers)

    first = await sessions.create_session(app_name=APP, user_id=USER)
    assert word in await ask(first.id, f"Our deploy target is the {word} cluster in Oslo.")
    done = await sessions.get_session(app_name=APP, user_id=USER, session_id=first.id)
    assert done is not None
    await memory.add_session_to_memory(done)

    second = await sessions.create_session(app_name=APP, user_id=USER)
    answer = await ask(second.id, f"Where do we deploy the {word} cluster?")
    assert answer == f"You deploy to the {word} cluster in Oslo."
    preloaded, after_tool = model.requests[1], model.requests[2]
    assert "PAST_CONVERSATIONS" in request_text(preloaded)  # preload_memory searched the hub before the turn
    assert f"user: Our deploy target is the {word} cluster in Oslo." in request_text(preloaded)
    assert f"Noted: we deploy to the {word} cluster in Oslo." in request_text(after_tool)  # load_memory's answer
    assert "load_memory" in request_text(after_tool)
