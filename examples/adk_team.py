"""A team of Google ADK agents sharing one memory on the Nexus Recall hub — no LLM needed.

Run it against a running hub without NATS auth (``recall up``), where each agent simply claims its id::

    pip install 'recall-client[adk]'          # or: make test-frameworks, then .venv-frameworks/bin/python
    recall up &                                # NATS on 4222
    python examples/adk_team.py                # --nats-url URL or RECALL_NATS_URL for another hub

What happens: an ops identity creates a group for a planner and a coder, each an ADK ``LlmAgent`` with an
identity of its own and a ``RecallMemoryService`` writing to the group. The planner is told about the release
schedule; its session goes to memory. The coder, asked about the code freeze in a session of its own, gets the
planner's words through ADK's ``preload_memory`` tool, which searches the hub. A note the planner keeps
privately stays out of the coder's reach. Finally the ops hands its role in the group to the planner
(``transfer_ops``), who acknowledges it.

The "model" is a stand-in (a ``BaseLlm`` subclass): it answers from the past conversations ADK put into its
request, so every answer printed here comes from the hub's memory, not from an LLM. Exits 0 when all went as
described, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import secrets
import sys
from collections.abc import AsyncGenerator

from google.adk.agents import LlmAgent
from google.adk.events.event import Event
from google.adk.models import BaseLlm, LlmRequest, LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService, Session
from google.adk.tools import preload_memory
from google.genai import types
from recall_client import RecallClient, Unavailable
from recall_client.integrations.adk import RecallMemoryService

USER = "dana"


class MemoryReadingModel(BaseLlm):
    """Stands in for an LLM: answers with the past conversations ADK's ``preload_memory`` put into the request
    (the lines between ``<PAST_CONVERSATIONS>`` tags), or acknowledges what the user said when there are none."""

    model: str = "memory-reader"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        texts = [part.text for content in llm_request.contents for part in content.parts or [] if part.text]
        recalled = [
            line for text in texts
            for block in re.findall(r"<PAST_CONVERSATIONS>\n(.*?)</PAST_CONVERSATIONS>", text, re.S)
            for line in block.splitlines() if line and not line.startswith("Time: ")
        ]
        answer = "From the team's memory: " + " / ".join(recalled) if recalled else f"Noted: {texts[-1]}"
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=answer)]))


class Agent:
    """One ADK agent with a hub identity of its own: an ``LlmAgent`` run by a ``Runner`` with Recall memory."""

    def __init__(self, name: str, client: RecallClient, memory: RecallMemoryService) -> None:
        self.name, self.client, self.memory = name, client, memory
        self.sessions = InMemorySessionService()
        llm_agent = LlmAgent(name=name, model=MemoryReadingModel(), instruction="Help.", tools=[preload_memory])
        self.runner = Runner(agent=llm_agent, app_name=name, session_service=self.sessions, memory_service=memory)

    async def talk(self, text: str) -> str:
        """One turn in a new session, which then goes to memory; the agent's answer."""
        session = await self.sessions.create_session(app_name=self.name, user_id=USER)
        message = types.Content(role="user", parts=[types.Part(text=text)])
        answer = " ".join([
            part.text
            async for event in self.runner.run_async(user_id=USER, session_id=session.id, new_message=message)
            if event.content is not None and event.author == self.name
            for part in event.content.parts or [] if part.text
        ])
        done = await self.sessions.get_session(app_name=self.name, user_id=USER, session_id=session.id)
        assert done is not None
        await self.memory.add_session_to_memory(done)
        return answer


async def main(nats_url: str) -> int:
    suffix = secrets.token_hex(3)
    ops, planner_id, coder_id = f"o_lead{suffix}", f"a_planner{suffix}", f"a_coder{suffix}"
    clients = [await RecallClient(ai_id, nats_url).connect() for ai_id in (ops, planner_id, coder_id)]
    ops_client, planner_client, coder_client = clients
    ok = True
    try:
        group = await ops_client.create_group(f"ADK team {suffix}")
        for member in (planner_id, coder_id):
            await ops_client.add_member(group.group_id, member)
        print(f"{ops} created {group.group_id} with the agents {planner_id} (planner) and {coder_id} (coder)")

        # scope="user": the agents are apps of their own serving one user, so each finds the other's memories.
        planner = Agent("planner", planner_client, RecallMemoryService(
            planner_client, group_id=group.group_id, scope="user"))
        coder = Agent("coder", coder_client, RecallMemoryService(coder_client, group_id=group.group_id, scope="user"))

        told = "The release train leaves on Thursdays; the code freeze is Wednesday noon."
        print(f"\n{USER} → planner: {told}\nplanner: {await planner.talk(told)}")
        print(f"  (the session is now in {group.group_id}'s memory, as {planner_id})")

        coder_client.read_after(planner_client.index_position)  # "I wrote it": the coder's searches find it
        asked = "When is the code freeze?"
        answer = await coder.talk(asked)
        print(f"\n{USER} → coder: {asked}\ncoder: {answer}")
        ok &= "Wednesday noon" in answer

        private = RecallMemoryService(planner_client)  # no group: private to the planner
        await private.add_session_to_memory(await _session_of(planner, "My own reminder: the staging password rotates"))
        coder_client.read_after(planner_client.index_position)
        seen = await RecallMemoryService(coder_client, scope="all").search_memory(
            app_name="coder", user_id=USER, query="staging password rotates")
        leaked = any("password" in (p.text or "") for m in seen.memories for p in m.content.parts or [])
        print(f"\nthe coder searches for the planner's private reminder: {len(seen.memories)} memories found, "
              f"{'the reminder among them' if leaked else 'none of them the reminder'}")
        ok &= not leaked

        handoff = await ops_client.transfer_ops(
            group.group_id, planner_id, "Release schedule is in memory; the planner runs the train from now on.")
        await planner_client.acknowledge_handoff(handoff.handoff_id)
        roles = {m.ai_id: m.role.value for m in (await planner_client.list_members(group.group_id)).members}
        print(f"\n{ops} handed the ops role of {group.group_id} to {planner_id}; members now: {roles}")
        ok &= roles.get(planner_id) == "ops"
    finally:
        for client in clients:
            await client.close()
    print("\nall as described" if ok else "\nSOMETHING DIFFERED (see above)")
    return 0 if ok else 1


async def _session_of(agent: Agent, text: str) -> Session:
    """A session of ``agent`` holding one user message (without running the agent)."""
    session = await agent.sessions.create_session(app_name=agent.name, user_id=USER)
    await agent.sessions.append_event(session, Event(
        author="user", content=types.Content(role="user", parts=[types.Part(text=text)])))
    return session


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nats-url", default=os.environ.get("RECALL_NATS_URL", "nats://127.0.0.1:4222"),
                        help="NATS URL of the hub (RECALL_NATS_URL; default nats://127.0.0.1:4222)")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("google_adk").setLevel(logging.ERROR)  # "missing token usage": the stand-in counts none
    logging.getLogger("recall_client.client").setLevel(logging.ERROR)  # connect retries; a failure is raised
    url = parser.parse_args().nats_url
    try:
        sys.exit(asyncio.run(main(url)))
    except Unavailable as exc:
        sys.exit(f"{exc}: is a hub running there? Start one with `recall up` (or pass --nats-url)")
