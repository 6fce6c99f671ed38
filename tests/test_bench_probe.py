"""The bench's probe times a hub's store calls in place and, detached, leaves the hub as it found it."""

from __future__ import annotations

from recall_hub.bench.probes import HubProbe
from recall_hub.context import HubContext


async def test_a_detached_probe_leaves_every_store_call_working(hub: HubContext) -> None:
    graph = hub.graph.graph
    own_before = dict(vars(graph))
    probe = HubProbe.attach(hub)
    assert (await hub.graph.ro_query("RETURN 1"))[0][0] == 1
    assert probe.ns["graph"] > 0 and probe.ns["graph_rt"] > 0 and probe.queries == 1
    assert probe.ns["falkordb"] > 0  # the execution time FalkorDB reported
    probe.detach()
    assert vars(graph) == own_before  # what the client held itself (its bound execute_command) is back
    assert (await hub.graph.ro_query("RETURN 2"))[0][0] == 2
    assert (await hub.graph.values("RETURN 3"))[0][0] == 3
