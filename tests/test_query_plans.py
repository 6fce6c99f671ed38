"""No request on an agent's hot path scans every bead.

A query whose planner cannot use an index walks all beads: harmless in a small test graph, the
slowest thing in the hub at 100k beads (a session link matched on ``b.session_id`` instead of a
parameter did exactly that, and every create grew with the store). So the requests agents make all
the time run here once each, every graph query they send is recorded, and FalkorDB's plan of each
(``GRAPH.EXPLAIN``, same text and parameters) must read beads through an index or from a bead
already found — never a label scan over ``:Bead``.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from recall_hub.context import HubContext
from recall_hub.store.graph import GraphStore
from recall_schemas import Visibility
from recall_schemas.ids import new_id

from tests.conftest import World

WALKS_EVERY_BEAD = re.compile(r"Label Scan \| \(\w*:Bead\)|All Node Scan")


async def _plan(graph: GraphStore, cypher: str, params: dict[str, Any] | None) -> str:
    query = graph.graph._build_params_header(params or {}) + cypher
    steps = await graph.graph.execute_command("GRAPH.EXPLAIN", graph.graph_name, query)
    return "\n".join(step.decode() if isinstance(step, bytes) else str(step) for step in steps)


async def test_the_hot_path_reads_beads_through_indexes(
    world: World, hub: HubContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: dict[str, dict[str, Any] | None] = {}
    graph = hub.graph
    for name in ("query", "ro_query", "values"):
        original = getattr(graph, name)

        def recorder(original: Any = original) -> Any:
            async def record(cypher: str, params: dict[str, Any] | None = None, **options: Any) -> Any:
                sent.setdefault(cypher, params)
                return await original(cypher, params, **options)
            return record

        monkeypatch.setattr(graph, name, recorder())

    creator, member, group = world.creator, world.member, world.group_id
    session = new_id("s")
    first = await world.bead(Visibility.GROUP, "deploys run from the build host", session_id=session)
    second = await creator.create_bead("the build host is in rack four", session_id=session)
    await creator.create_beads([{"title": f"batch note {i} about the build host", "session_id": session}
                                for i in range(3)])
    await creator.add_relationship(second.bead_id, first.bead_id, "RELATED_TO")
    await creator.update_bead(second.bead_id, importance=8)
    await member.get_bead(first.bead_id)
    for mode in ("keyword", "vector", "hybrid"):
        await creator.search_beads("build host", mode=mode)
    await member.search_beads("build host", filters={"group_id": group})
    await creator.why("where do deploys run")
    await creator.traverse_graph(first.bead_id, max_depth=2)
    await creator.find_similar(first.bead_id)
    monkeypatch.undo()

    assert len(sent) > 10, "the workload reached the graph"
    scans = {}
    for cypher, params in sent.items():
        plan = await _plan(graph, cypher, params)
        if WALKS_EVERY_BEAD.search(plan):
            scans[cypher[:200]] = plan
    assert not scans, scans


PREDECESSOR_READS = re.compile(r"Node By Index Scan \| \((?:p|n):Bead\) \| Records produced: (\d+)")


async def test_a_create_finds_its_sessions_previous_bead_among_the_sessions_beads_only(
    connect: Any, hub: HubContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A create links its bead to the author's previous one of the session in its own query; the lookup must go
    through the session's index. Through the author's or the creation time's (what FalkorDB chose for an earlier
    form of the query) it reads every bead of the author, or every earlier one, and grows with the memory."""
    author = await connect()
    session = new_id("s")
    await author.create_beads([{"title": f"elsewhere {i}", "session_id": new_id("s")} for i in range(30)])
    await author.create_beads([{"title": f"before {i}", "session_id": session} for i in range(3)])
    sent: list[tuple[str, dict[str, Any]]] = []
    original = hub.graph.values

    async def record(cypher: str, params: dict[str, Any] | None = None, **options: Any) -> Any:
        if "MERGE (b:Bead {idem: $idem})" in cypher:
            sent.append((cypher, dict(params or {})))
        return await original(cypher, params, **options)

    monkeypatch.setattr(hub.graph, "values", record)
    await author.create_bead("the next step", session_id=session)
    monkeypatch.undo()
    assert sent, "the create reached the graph"
    cypher, params = sent[0]
    assert "FOLLOWS_FROM" in cypher, "the create links its bead itself"
    # The same write again, as a new bead: FalkorDB's profile counts what each step read.
    bead_id = new_id("b")
    params |= {"props": {**params["props"], "bead_id": bead_id, "created_at": params["props"]["created_at"] + 1},
               "idem": f"{author.ai_id}:{bead_id}"}
    query = hub.graph.graph._build_params_header(params) + cypher
    steps = await hub.graph.graph.execute_command("GRAPH.PROFILE", hub.graph.graph_name, query)
    profile = "\n".join(step.decode() if isinstance(step, bytes) else str(step) for step in steps)
    read = [int(n) for n in PREDECESSOR_READS.findall(profile)]
    assert read, profile
    assert max(read) <= 4 + 1, profile  # the session's beads (and the new one), not the author's 34
