"""A team of AutoGen agents sharing one memory on the Nexus Recall hub — no LLM needed.

Run it against a running hub without NATS auth (``recall up``), where each agent simply claims its id::

    pip install 'recall-client[autogen]'      # or: make test-frameworks, then .venv-frameworks/bin/python
    recall up &                                # NATS on 4222
    python examples/autogen_team.py            # --nats-url URL or RECALL_NATS_URL for another hub

What happens: an ops identity creates a group for a researcher and a writer, two ``RoutedAgent`` s on an
autogen-core ``SingleThreadedAgentRuntime``, each with an identity of its own and a ``RecallMemory`` named
"findings" writing to the group. The researcher stores what it finds; the writer, asked a question, lets the
memory put the relevant findings into its model context (``update_context``) and answers from that context. A
note the researcher keeps in a private memory of the same name stays out of the writer's reach. The memory
is dumped as an AutoGen component (a connection, not a live client) and loaded again. Finally the ops hands its
role in the group to the researcher (``transfer_ops``), who acknowledges it.

No model is called: autogen-core alone has no model client to script (that is autogen-ext), so the writer
"answers" with the memory lines its context holds — what an LLM would be given. Exits 0 when all went as
described, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import secrets
import sys
from dataclasses import dataclass

from autogen_core import AgentId, MessageContext, RoutedAgent, SingleThreadedAgentRuntime, message_handler
from autogen_core.memory import MemoryContent, MemoryMimeType
from autogen_core.model_context import BufferedChatCompletionContext
from autogen_core.models import UserMessage
from recall_client import RecallClient, Unavailable
from recall_client.integrations.autogen import RecallMemory


@dataclass
class Finding:
    text: str
    source: str


@dataclass
class Noted:
    bead_count: int
    read_after: str | None
    """How far the hub's index must be to show the researcher's writes: passed on with the question."""


@dataclass
class Question:
    text: str
    read_after: str | None


@dataclass
class Answer:
    text: str
    context: list[str]


class Researcher(RoutedAgent):
    def __init__(self, memory: RecallMemory) -> None:
        super().__init__("stores findings in the team's memory")
        self.memory = memory
        self.stored = 0

    @message_handler
    async def on_finding(self, message: Finding, ctx: MessageContext) -> Noted:
        content = MemoryContent(content=message.text, mime_type=MemoryMimeType.TEXT, metadata={"from": message.source})
        await self.memory.add(content, ctx.cancellation_token)
        self.stored += 1
        return Noted(bead_count=self.stored, read_after=self.memory.client.index_position)


class Writer(RoutedAgent):
    def __init__(self, memory: RecallMemory) -> None:
        super().__init__("answers from the team's memory")
        self.memory = memory
        self.context = BufferedChatCompletionContext(buffer_size=10)

    @message_handler
    async def on_question(self, message: Question, ctx: MessageContext) -> Answer:
        self.memory.client.read_after(message.read_after)
        await self.context.add_message(UserMessage(content=message.text, source="user"))
        recalled = (await self.memory.update_context(self.context)).memories.results  # now in the context too
        messages = await self.context.get_messages()
        text = " ".join(str(m.content) for m in recalled) or "Nothing in the team's memory about that."
        return Answer(text=text, context=[f"{type(m).__name__}: {m.content!r}" for m in messages])


async def main(nats_url: str) -> int:
    suffix = secrets.token_hex(3)
    ops, researcher_id, writer_id = f"o_lead{suffix}", f"a_researcher{suffix}", f"a_writer{suffix}"
    clients = [await RecallClient(ai_id, nats_url).connect() for ai_id in (ops, researcher_id, writer_id)]
    ops_client, researcher_client, writer_client = clients
    ok = True
    runtime, started = SingleThreadedAgentRuntime(), False
    try:
        group = await ops_client.create_group(f"AutoGen team {suffix}")
        for member in (researcher_id, writer_id):
            await ops_client.add_member(group.group_id, member)
        print(f"{ops} created {group.group_id} with the agents {researcher_id} and {writer_id}")

        team = {"name": "findings", "group_id": group.group_id}
        researcher_memory, writer_memory = RecallMemory(researcher_client, **team), RecallMemory(writer_client, **team)
        await Researcher.register(runtime, "researcher", lambda: Researcher(researcher_memory))
        await Writer.register(runtime, "writer", lambda: Writer(writer_memory))
        runtime.start()
        started = True

        noted = None
        for text, source in (
            ("The checkout outage on Monday came from an expired TLS certificate on the payments proxy.", "incident"),
            ("Certificates are now renewed by a weekly job; the proxy alerts 14 days before expiry.", "runbook"),
        ):
            noted = await runtime.send_message(Finding(text, source), AgentId("researcher", "default"))
            print(f"researcher stored: {text}")
        assert noted is not None

        private = RecallMemory(researcher_client, name="findings")  # the same name, but no group: private
        await private.add(MemoryContent(content="Personal: ask about the certificate budget", mime_type="text/plain"))
        print("researcher kept a private note: 'Personal: ask about the certificate budget'")

        question = "What caused the checkout outage, and how is it prevented now?"
        answer = await runtime.send_message(
            Question(question, researcher_client.index_position), AgentId("writer", "default"))
        print(f"\nuser → writer: {question}\nwriter: {answer.text}")
        print("the writer's model context:\n  " + "\n  ".join(answer.context))
        ok &= "expired TLS certificate" in answer.text and "weekly job" in answer.text
        ok &= "budget" not in answer.text

        dumped = writer_memory.dump_component()
        print(f"\nthe writer's memory as an AutoGen component: {json.dumps(dumped.config)}")
        loaded = RecallMemory.load_component(dumped)  # a client of its own, connected on first use
        loaded.client.read_after(researcher_client.index_position)
        try:
            found = await loaded.query("certificate renewal")
            print(f"loaded again, it finds {len(found.results)} findings for 'certificate renewal'")
            ok &= len(found.results) == 2
        finally:
            await loaded.close()

        handoff = await ops_client.transfer_ops(
            group.group_id, researcher_id, "Incident findings are in the 'findings' memory; the researcher leads now.")
        await researcher_client.acknowledge_handoff(handoff.handoff_id)
        roles = {m.ai_id: m.role.value for m in (await researcher_client.list_members(group.group_id)).members}
        print(f"\n{ops} handed the ops role of {group.group_id} to {researcher_id}; members now: {roles}")
        ok &= roles.get(researcher_id) == "ops"
    finally:
        if started:
            await runtime.stop_when_idle()
        for client in clients:
            await client.close()
    print("\nall as described" if ok else "\nSOMETHING DIFFERED (see above)")
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nats-url", default=os.environ.get("RECALL_NATS_URL", "nats://127.0.0.1:4222"),
                        help="NATS URL of the hub (RECALL_NATS_URL; default nats://127.0.0.1:4222)")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("recall_client.client").setLevel(logging.ERROR)  # connect retries; a failure is raised
    url = parser.parse_args().nats_url
    try:
        sys.exit(asyncio.run(main(url)))
    except Unavailable as exc:
        sys.exit(f"{exc}: is a hub running there? Start one with `recall up` (or pass --nats-url)")
