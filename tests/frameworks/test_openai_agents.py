"""RecallSession: the OpenAI Agents SDK's session memory on a real hub — one bead per conversation item, in a hub
session of the identity's own, private unless the caller names a group."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.items import ModelResponse, TResponseInputItem, TResponseOutputItem, TResponseStreamEvent
from agents.memory import Session, SessionSettings
from agents.models.interface import Model
from agents.usage import Usage
from conftest import ClientFactory, new_ai, roster_bundle, team
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
from recall_client import Forbidden, NotFound, RecallClient
from recall_client.integrations.openai_agents import RecallSession, hub_session_id
from recall_hub.service.endpoints import HubService
from recall_hub.tooling.auth import AuthBundle, format_creds, read_creds
from recall_hub.tooling.stack import EmbeddedStack
from recall_schemas import Unauthorized

pytestmark = pytest.mark.timeout(180)


def said(role: str, text: str) -> TResponseInputItem:
    return {"role": role, "content": text}  # type: ignore[return-value,misc]


def conversation_id() -> str:
    return f"conversation-{secrets.token_hex(4)}"


# --- every operation ---------------------------------------------------------------------------------


async def test_items_are_added_read_popped_and_cleared_in_conversation_order(connect: ClientFactory) -> None:
    session = RecallSession(await connect(), conversation_id())
    assert isinstance(session, Session)
    assert await session.get_items() == [] and await session.pop_item() is None

    first = [said("user", f"question {i}") for i in range(5)]
    await session.add_items(first)  # one request; the hub back-dates a batch's beads, the order still holds
    await session.add_items([said("assistant", "answer")])
    await session.add_items([])
    assert await session.get_items() == [*first, said("assistant", "answer")]
    assert await session.get_items(limit=2) == [said("user", "question 4"), said("assistant", "answer")]
    assert await session.get_items(limit=0) == []

    assert await session.pop_item() == said("assistant", "answer")
    assert await session.get_items() == first
    await session.clear_session()
    assert await session.get_items() == []


async def test_each_item_is_a_recorded_bead_of_the_conversation_s_hub_session(connect: ClientFactory) -> None:
    client = await connect()
    session = RecallSession(client, "support ticket #42")
    assert session.session_id == "support ticket #42" and session.hub_session_id == hub_session_id("support ticket #42")
    assert RecallSession(client, "s_abcd1234").hub_session_id == "s_abcd1234"  # a hub session id is used as is

    await session.add_items([said("user", "Where do we deploy the API?"), said("assistant", "To Oslo.")])
    question, answer = await client.get_by_session(session.hub_session_id)
    assert (question.title, answer.title) == ("user: Where do we deploy the API?", "assistant: To Oslo.")
    assert json.loads(answer.content) == {"role": "assistant", "content": "To Oslo."}
    assert {question.visibility.value, question.bead_type.value, question.provenance.value} == {
        "private", "event", "recorded"
    }
    assert question.metadata["session"] == "support ticket #42" and "openai-agents" in question.tags
    # The hub chains a session's beads, so a turn is found with the one before it.
    links = await client.get_relationships(answer.bead_id, rel_type="FOLLOWS_FROM", direction="out")
    assert [link.to_id for link in links] == [question.bead_id]
    found = await client.search_beads("deploy API Oslo", filters={"session_id": session.hub_session_id})
    assert {hit.bead.bead_id for hit in found.hits} == {question.bead_id, answer.bead_id}


async def test_the_settings_limit_is_the_default_of_get_items(connect: ClientFactory) -> None:
    session = RecallSession(await connect(), conversation_id(), session_settings=SessionSettings(limit=1))
    await session.add_items([said("user", "one"), said("user", "two")])
    assert await session.get_items() == [said("user", "two")]
    assert len(await session.get_items(limit=5)) == 2


# --- who sees what -----------------------------------------------------------------------------------


async def test_another_agent_cannot_read_a_private_conversation(connect: ClientFactory) -> None:
    alice_client, bob_client = await connect(), await connect()
    conversation = conversation_id()
    alice, bob = RecallSession(alice_client, conversation), RecallSession(bob_client, conversation)
    await alice.add_items([said("user", "My password hint is the cat's name")])

    assert await bob.get_items() == [] and await bob.pop_item() is None
    found = await bob_client.search_beads("password hint cat")
    assert [h for h in found.hits if h.bead.created_by == alice_client.ai_id] == []
    # The same id is Bob's own conversation: his items and hers never mix.
    await bob.add_items([said("user", "Bob here")])
    assert await bob.get_items() == [said("user", "Bob here")]
    assert await alice.get_items() == [said("user", "My password hint is the cat's name")]


async def test_a_group_conversation_is_read_by_the_group_s_members_and_changed_by_its_writer(
    connect: ClientFactory,
) -> None:
    _, group_id, (alice_client, bob_client) = await team(connect)
    conversation = conversation_id()
    alice = RecallSession(alice_client, conversation, group_id=group_id)
    await alice.add_items([said("user", "Deploy the API to Oslo"), said("assistant", "Deploying to Oslo")])

    bob = RecallSession(bob_client, conversation)  # a member reading Alice's conversation
    assert await bob.get_items() == [said("user", "Deploy the API to Oslo"), said("assistant", "Deploying to Oslo")]
    bob_client.read_after(alice_client.index_position)
    found = await bob_client.search_beads("deploy API Oslo", filters={"group_id": group_id})
    assert {h.bead.title for h in found.hits} == {"user: Deploy the API to Oslo", "assistant: Deploying to Oslo"}
    with pytest.raises(Forbidden):
        await bob.pop_item()
    with pytest.raises(Forbidden):
        await bob.clear_session()

    outsider_client = await connect()
    assert await RecallSession(outsider_client, conversation).get_items() == []
    with pytest.raises(NotFound):  # not a member: the hub does not even say the group exists
        await RecallSession(outsider_client, conversation, group_id=group_id).add_items([said("user", "hi")])
    assert len(await alice.get_items()) == 2


# --- refused credentials -----------------------------------------------------------------------------

ALICE, BOB = new_ai(), new_ai()


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> AuthBundle:
    return roster_bundle(tmp_path_factory.mktemp("openai-agents-secure"), [new_ai("o")], [ALICE, BOB])


async def test_refused_credentials_fail_the_session_s_first_call_clearly(
    secure_stack: EmbeddedStack, secure_hub: HubService, bundle: AuthBundle, tmp_path: Path
) -> None:
    url = secure_stack.nats_url
    alice_client = RecallClient(ALICE, url, creds=str(bundle.creds[ALICE]))
    bob_client = RecallClient(BOB, url, creds=str(bundle.creds[BOB]))
    try:
        alice, bob = RecallSession(alice_client, "c-1"), RecallSession(bob_client, "c-1")
        await alice.add_items([said("user", "for Alice only")])
        assert await alice.get_items() == [said("user", "for Alice only")]
        assert await bob.get_items() == []

        with pytest.raises(Unauthorized, match=BOB):  # Bob's credentials presented as Alice
            await RecallSession(RecallClient(ALICE, url, creds=str(bundle.creds[BOB])), "c-1").get_items()
        forged = tmp_path / "forged.creds"  # Alice's JWT with a key the account never signed
        forged.write_text(format_creds(read_creds(bundle.creds[ALICE])[0], _new_user_seed()))
        with pytest.raises(Unauthorized, match="refused"):
            await RecallSession(RecallClient(ALICE, url, creds=str(forged)), "c-1").add_items([said("user", "x")])
    finally:
        await alice_client.close()
        await bob_client.close()


def _new_user_seed() -> str:
    import nkeys

    return bytes(nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_USER)).decode()


# --- an agent run end to end -------------------------------------------------------------------------


class ScriptedModel(Model):
    """A model that answers with the next of its scripted turns and keeps the input it was given: the run, the
    tools and the session are the SDK's own, only the LLM is canned."""

    def __init__(self, turns: list[list[TResponseOutputItem]]) -> None:
        self.turns = turns
        self.inputs: list[str | list[TResponseInputItem]] = []

    async def get_response(self, system_instructions: str | None, input: str | list[TResponseInputItem],
                           *args: Any, **kwargs: Any) -> ModelResponse:
        self.inputs.append(input)
        return ModelResponse(output=self.turns.pop(0), usage=Usage(), response_id=None)

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError
        yield  # an async generator, as the interface has it


def tool_call(name: str, arguments: dict[str, Any]) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(id="fc_" + secrets.token_hex(4), call_id="call_" + secrets.token_hex(4),
                                    name=name, arguments=json.dumps(arguments), type="function_call")


def reply(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(id="msg_" + secrets.token_hex(4), role="assistant", status="completed",
                                 type="message", content=[ResponseOutputText(text=text, type="output_text",
                                                                              annotations=[])])


@function_tool
def deploy_target(service: str) -> str:
    """Where a service is deployed."""
    return {"api": "Oslo", "worker": "Bergen"}.get(service, "unknown")


async def test_a_runner_keeps_its_conversation_in_the_hub_session(connect: ClientFactory) -> None:
    _, group_id, (assistant_client, reviewer_client) = await team(connect)
    conversation = conversation_id()
    model = ScriptedModel([
        [tool_call("deploy_target", {"service": "api"})],
        [reply("The API deploys to Oslo.")],
        [reply("The worker deploys to Bergen, the API to Oslo.")],
    ])
    agent = Agent(name="ops-assistant", instructions="Answer deployment questions.", model=model, tools=[deploy_target])
    session = RecallSession(assistant_client, conversation, group_id=group_id)
    config = RunConfig(tracing_disabled=True)

    first = await Runner.run(agent, "Where does the API deploy?", session=session, run_config=config)
    assert first.final_output == "The API deploys to Oslo."
    items = await session.get_items()
    assert [(i.get("type"), i.get("role")) for i in items] == [
        (None, "user"), ("function_call", None), ("function_call_output", None), ("message", "assistant")
    ]
    assert items[2]["output"] == "Oslo"  # type: ignore[typeddict-item]

    second = await Runner.run(agent, "And the worker?", session=session, run_config=config)
    assert second.final_output == "The worker deploys to Bergen, the API to Oslo."
    history = model.inputs[-1]
    assert isinstance(history, list) and history[:4] == items  # the second turn was given the first from the hub
    assert len(await session.get_items()) == 6

    # The reviewer, a member of the group, reads the whole conversation from the hub.
    reviewed = await RecallSession(reviewer_client, conversation).get_items()
    assert [i.get("role") for i in reviewed if i.get("role")] == ["user", "assistant", "user", "assistant"]
