"""A team of LangGraph graphs sharing one memory on the Nexus Recall hub — no LLM needed.

Run it against a running hub without NATS auth (``recall up``), where each agent simply claims its id::

    pip install 'recall-client[langgraph]'     # or: make test-frameworks, then .venv-frameworks/bin/python
    recall up &                                 # NATS on 4222
    python examples/langgraph_team.py           # --nats-url URL or RECALL_NATS_URL for another hub

What happens: an ops identity creates a group for a researcher and a writer, each a compiled ``StateGraph`` with
a ``RecallStore`` of its own identity as its ``store``; the nodes are plain functions. The researcher's graph puts
its findings into the group's namespace and a scratch note into its private one (from a sync node, which LangGraph
runs in a thread). The writer's graph searches the group's findings by meaning, drafts from them and files the
draft; the researcher's private note stays out of its reach, and the hub refuses it a change to the researcher's
finding. Then the ops hands its role in the group to the writer (``transfer_ops``), who acknowledges it — and, as
the group's ops now, may annotate the finding. Exits 0 when all went as described, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import secrets
import sys
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore
from recall_client import Forbidden, RecallClient
from recall_client.integrations.langgraph import RecallStore

FINDINGS = [
    ("latency", "p50 search latency is 9 ms on two cores; the vector stage dominates"),
    ("storage", "FalkorDB holds the graph, Redis 8 vector sets hold the embeddings"),
    ("cafeteria", "the cafeteria closes at 3 pm on Fridays"),
]


class Research(TypedDict, total=False):
    group_id: str
    filed: list[str]


class Writing(TypedDict, total=False):
    group_id: str
    question: str
    sources: list[str]
    draft: str


def researcher_graph(store: RecallStore) -> Any:
    async def investigate(state: Research, *, store: BaseStore) -> dict[str, Any]:
        for key, text in FINDINGS:
            await store.aput(("group", state["group_id"], "findings"), key, {"text": text, "by": "researcher"})
        return {"filed": [key for key, _ in FINDINGS]}

    def scratch(state: Research, *, store: BaseStore) -> dict[str, Any]:  # sync: runs in a thread of its own
        store.put(("private", "scratch"), "hunch", {"text": "the reranker may be what costs the latency"})
        return {}

    graph = StateGraph(Research)
    graph.add_node("investigate", investigate)
    graph.add_node("scratch", scratch)
    graph.add_edge(START, "investigate")
    graph.add_edge("investigate", "scratch")
    graph.add_edge("scratch", END)
    return graph.compile(store=store)


def writer_graph(store: RecallStore) -> Any:
    async def gather(state: Writing, *, store: BaseStore) -> dict[str, Any]:
        hits = await store.asearch(("group", state["group_id"], "findings"), query=state["question"], limit=2)
        return {"sources": [f"{h.value['text']} (score {h.score:.2f})" for h in hits]}

    async def draft(state: Writing, *, store: BaseStore) -> dict[str, Any]:
        text = f"{state['question']} — " + "; ".join(s.rsplit(" (score", 1)[0] for s in state["sources"])
        await store.aput(("group", state["group_id"], "drafts"), "performance", {"text": text, "by": "writer"})
        return {"draft": text}

    graph = StateGraph(Writing)
    graph.add_node("gather", gather)
    graph.add_node("draft", draft)
    graph.add_edge(START, "gather")
    graph.add_edge("gather", "draft")
    graph.add_edge("draft", END)
    return graph.compile(store=store)


async def main(nats_url: str) -> int:
    suffix = secrets.token_hex(3)
    ops, researcher_id, writer_id = f"o_lead{suffix}", f"a_research{suffix}", f"a_writer{suffix}"
    clients = [await RecallClient(ai_id, nats_url).connect() for ai_id in (ops, researcher_id, writer_id)]
    ops_client, researcher_client, writer_client = clients
    ok = True
    try:
        group = await ops_client.create_group(f"LangGraph team {suffix}")
        for member in (researcher_id, writer_id):
            await ops_client.add_member(group.group_id, member)
        print(f"{ops} created {group.group_id} with {researcher_id} (researcher) and {writer_id} (writer)")
        findings = ("group", group.group_id, "findings")
        researcher_store, writer_store = RecallStore(researcher_client), RecallStore(writer_client)

        research = await researcher_graph(researcher_store).ainvoke({"group_id": group.group_id})
        print(f"\nresearcher's graph filed {research['filed']} under {findings}, and a private scratch note")

        writer_client.read_after(researcher_client.index_position)  # "I wrote it": the writer's searches find it
        question = "How fast is search and where is the data stored?"
        written = await writer_graph(writer_store).ainvoke({"group_id": group.group_id, "question": question})
        print(f"\nwriter's graph searched the findings for {question!r}:")
        for source in written["sources"]:
            print(f"  - {source}")
        print(f"and filed the draft: {written['draft']}")
        ok &= not any("cafeteria" in s for s in written["sources"])

        hunch = await writer_store.aget(("private", "scratch"), "hunch")
        print(f"\nthe writer reads the researcher's private scratch note: {'found' if hunch else 'nothing'}")
        ok &= hunch is None and await researcher_store.aget(("private", "scratch"), "hunch") is not None
        try:
            await writer_store.aput(findings, "latency", {"text": "reviewed", "by": "writer"})
            print("the writer changed the researcher's finding (it should not have)")
            ok = False
        except Forbidden as exc:
            print(f"the writer tries to change the researcher's finding: refused ({exc.message})")

        handoff = await ops_client.transfer_ops(
            group.group_id, writer_id, "Findings and the draft are in memory; the writer leads the report now.")
        await writer_client.acknowledge_handoff(handoff.handoff_id)
        roles = {m.ai_id: m.role.value for m in (await writer_client.list_members(group.group_id)).members}
        print(f"\n{ops} handed the ops role of {group.group_id} to {writer_id}; members now: {roles}")
        ok &= roles.get(writer_id) == "ops"

        latency = await writer_store.aget(findings, "latency")
        assert latency is not None
        await writer_store.aput(findings, "latency", {**latency.value, "reviewed_by": "writer"})
        after = await researcher_store.aget(findings, "latency")
        print(f"as the group's ops, the writer annotates the finding; the researcher now reads: "
              f"{after.value if after else None}")
        ok &= after is not None and after.value.get("reviewed_by") == "writer"
        print(f"\nthe team's namespaces: {await writer_store.alist_namespaces(prefix=('group', group.group_id))}")
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
