"""A 3-node JetStream cluster with two hub processes loses a NATS node and a hub under load.

Writers create beads and publish session events through the client library while the node leading
the events stream and one hub are killed with SIGKILL, kept down, and started again
(:mod:`recall_hub.bench.failover`, which ``recall bench --suite failover`` runs with longer phases).
Afterwards every acknowledged create is stored exactly once and every acknowledged event applied,
read back through the public API; callers saw no error: the library's bounded retry covered the fault.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats
import pytest
from recall_hub.bench.failover import FailoverConfig, render, run_failover
from recall_hub.config import HubSettings
from recall_hub.context import HubContext
from recall_hub.embedders import HashEmbedder
from recall_hub.service.events import EventConsumer
from recall_hub.tooling.stack import EmbeddedStack

from tests.conftest import until

pytestmark = pytest.mark.timeout(300)


async def test_losing_a_nats_node_and_a_hub_under_load_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    # Each phase runs until 30 more creates are acknowledged: the fault phase proves progress without
    # the lost node and hub. Attempts of 4 s, 3 retries: more than a stream leader election takes.
    config = FailoverConfig(writers=3, phase_s=0, phase_creates=30, timeout_s=4.0, retries=3)
    report = await run_failover(config, tmp_path)
    print(render(report))
    assert report.killed[1] == "hub-1" and report.killed[0].startswith("nats-")
    assert report.creates_acknowledged >= 90
    assert report.creates_missing == []
    assert report.titles_stored_twice == []
    assert report.events_acknowledged >= 9 and report.events_missing == []
    assert [p.errors for p in report.phases] == [0, 0, 0], report.errors
    assert report.phases[1].requests > 0 and report.phases[2].requests > 0


async def test_a_hub_started_while_its_cluster_has_no_quorum_waits_for_jetstream(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two of three NATS nodes down: JetStream has no quorum and does not answer (a cluster electing leaders after
    losing a node is the same for seconds). A hub starting then asks again until it answers, instead of exiting
    with the first timeout; its event consumer runs once the nodes are back."""
    with EmbeddedStack(tmp_path / "stack", nats_nodes=3, hubs=0) as stack:
        settings = HubSettings(nats_url=stack.nats_url, falkordb_url=stack.redis_url, redis_url=stack.redis_url,
                               graph_name="quorum")
        ctx = await HubContext.connect(settings, embedder=HashEmbedder())
        first = await nats.connect(stack.nats_url.split(","))
        survivor = await nats.connect(f"nats://127.0.0.1:{stack.nats_ports[0]}")
        consumer = EventConsumer(ctx, survivor)
        starting: asyncio.Task[None] | None = None
        try:
            earlier = EventConsumer(ctx, first)  # the streams and the consumer exist, as after any hub's start
            await earlier.start()
            await earlier.stop()
            for node in ("nats-2", "nats-3"):
                stack.kill(node)
            starting = asyncio.create_task(consumer.start())
            await until("JetStream asked again", lambda: "did not answer" in caplog.text or starting.done())
            assert not starting.done()
            for node in ("nats-2", "nats-3"):
                await asyncio.to_thread(stack.respawn, node)
            async with asyncio.timeout(120):
                await starting
            assert consumer.running
        finally:
            if starting is not None and not starting.done():
                starting.cancel()
            await consumer.stop()
            await first.close()
            await survivor.close()
            await ctx.aclose()
