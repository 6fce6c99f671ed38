"""A team of OpenAI Agents SDK agents keeping their conversations on the Nexus Recall hub — no LLM needed.

Run it against a running hub without NATS auth (``recall up``), where each agent simply claims its id::

    pip install 'recall-client[openai-agents]'  # or: make test-frameworks, then .venv-frameworks/bin/python
    recall up &                                  # NATS on 4222
    python examples/openai_agents_team.py        # --nats-url URL or RECALL_NATS_URL for another hub

What happens: an ops identity creates a group for a support agent and a reviewer, each with an identity of its
own. The support agent is an SDK ``Agent`` with a tool, run by ``Runner.run(..., session=RecallSession(...))`` in a
conversation kept in the group's memory: the user's questions, the tool call, its output and the answers become
beads of one hub session. Asked in a second run what was asked before, the agent answers from the history the
session read back from the hub. The reviewer reads the whole conversation with a ``RecallSession`` of the same id
but may not change it; a conversation the support agent keeps privately stays out of the reviewer's reach.
Finally the ops hands its role in the group to the reviewer (``transfer_ops``), who acknowledges it.

The model is a stand-in (an ``agents.models.interface.Model`` subclass): it calls the tool when asked where
something deploys, answers from the tool's output, and otherwise repeats the questions it finds in the
conversation history the SDK gave it — so what it says about earlier turns comes from the hub, not from an LLM.
Exits 0 when all went as described, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import secrets
import sys
from collections.abc import AsyncIterator
from typing import Any

from agents import Agent, RunConfig, Runner, function_tool
from agents.items import ModelResponse, TResponseInputItem, TResponseOutputItem, TResponseStreamEvent
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
from recall_client import Forbidden, RecallClient
from recall_client.integrations.openai_agents import RecallSession

SERVICES = {"api": "Oslo", "worker": "Bergen"}


@function_tool
def deploy_target(service: str) -> str:
    """Where a service is deployed."""
    return SERVICES.get(service, "nowhere yet")


def _said(item: Any) -> str:
    content = item.get("content")
    return content if isinstance(content, str) else " ".join(p.get("text", "") for p in content or [])


class StandInModel(Model):
    """Stands in for an LLM, reading only what the SDK gives it: the conversation so far."""

    async def get_response(self, system_instructions: str | None, input: str | list[TResponseInputItem],
                           *args: Any, **kwargs: Any) -> ModelResponse:
        items: list[dict[str, Any]] = (
            [{"role": "user", "content": input}] if isinstance(input, str) else [dict(i) for i in input]
        )
        last = items[-1]
        output: TResponseOutputItem
        if last.get("type") == "function_call_output":
            call = next(i for i in reversed(items) if i.get("type") == "function_call")
            service = json.loads(call["arguments"])["service"]
            output = _message(f"The {service} deploys to {last['output']}.")
        elif "deploy" in _said(last).lower():
            service = next((s for s in SERVICES if s in _said(last).lower()), "api")
            output = ResponseFunctionToolCall(id=_id("fc"), call_id=_id("call"), name="deploy_target",
                                              arguments=json.dumps({"service": service}), type="function_call")
        else:
            asked = [_said(i) for i in items[:-1] if i.get("role") == "user"]
            output = _message("Before, you asked: " + " / ".join(asked) if asked else "This is our first talk.")
        return ModelResponse(output=[output], usage=Usage(), response_id=None)

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("the stand-in does not stream")
        yield


def _id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(4)}"


def _message(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(id=_id("msg"), role="assistant", status="completed", type="message",
                                 content=[ResponseOutputText(text=text, type="output_text", annotations=[])])


async def main(nats_url: str) -> int:
    suffix = secrets.token_hex(3)
    ops, support_id, reviewer_id = f"o_lead{suffix}", f"a_support{suffix}", f"a_review{suffix}"
    clients = [await RecallClient(ai_id, nats_url).connect() for ai_id in (ops, support_id, reviewer_id)]
    ops_client, support_client, reviewer_client = clients
    ok = True
    try:
        group = await ops_client.create_group(f"Agents SDK team {suffix}")
        for member in (support_id, reviewer_id):
            await ops_client.add_member(group.group_id, member)
        print(f"{ops} created {group.group_id} with {support_id} (support) and {reviewer_id} (reviewer)")

        agent = Agent(name="support", instructions="Answer deployment questions.", model=StandInModel(),
                      tools=[deploy_target])
        conversation = f"ticket-{suffix}"
        session = RecallSession(support_client, conversation, group_id=group.group_id)
        config = RunConfig(tracing_disabled=True)
        for question in ("Where does the worker deploy?", "What did I ask you before?"):
            result = await Runner.run(agent, question, session=session, run_config=config)
            print(f"\nuser → support: {question}\nsupport: {result.final_output}")
        ok &= result.final_output == "Before, you asked: Where does the worker deploy?"
        print(f"\nthe conversation {conversation!r} is hub session {session.hub_session_id} of {support_id}, "
              f"visible to {group.group_id}")

        transcript = await RecallSession(reviewer_client, conversation).get_items()
        print(f"\nthe reviewer reads it from the hub ({len(transcript)} items):")
        for item in transcript:
            fields = dict(item)
            kind = fields.get("type", "message")
            text = _said(fields) if kind == "message" else fields.get("arguments") or fields.get("output")
            print(f"  {fields.get('role') or kind}: {text}")
        ok &= len(transcript) == 6
        try:
            await RecallSession(reviewer_client, conversation).pop_item()
            print("the reviewer removed an item (it should not have)")
            ok = False
        except Forbidden as exc:
            print(f"the reviewer tries to remove the last item: refused ({exc.message})")

        private = RecallSession(support_client, f"notes-{suffix}")  # no group: private to the support agent
        await private.add_items([{"role": "user", "content": "Remind me: the worker's TLS cert expires Monday"}])
        seen = await RecallSession(reviewer_client, f"notes-{suffix}").get_items()
        print(f"\nthe reviewer reads the support agent's private notes: {len(seen)} items")
        ok &= seen == [] and len(await private.get_items()) == 1

        handoff = await ops_client.transfer_ops(
            group.group_id, reviewer_id, "Ticket conversations are in memory; the reviewer runs support now.")
        await reviewer_client.acknowledge_handoff(handoff.handoff_id)
        roles = {m.ai_id: m.role.value for m in (await reviewer_client.list_members(group.group_id)).members}
        print(f"\n{ops} handed the ops role of {group.group_id} to {reviewer_id}; members now: {roles}")
        ok &= roles.get(reviewer_id) == "ops"
    finally:
        for client in clients:
            await client.close()
    print("\nall as described" if ok else "\nSOMETHING DIFFERED (see above)")
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nats-url", default=os.environ.get("RECALL_NATS_URL", "nats://127.0.0.1:4222"),
                        help="NATS URL of the hub (RECALL_NATS_URL; default nats://127.0.0.1:4222)")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    sys.exit(asyncio.run(main(parser.parse_args().nats_url)))
