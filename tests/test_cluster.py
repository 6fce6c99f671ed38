"""A 3-node JetStream cluster with two hub processes loses a NATS node and a hub under load.

Writers create beads and publish session events through the client library while the node leading
the events stream and one hub are killed with SIGKILL, kept down, and started again
(:mod:`recall_hub.bench.failover`, which ``recall bench --suite failover`` runs with longer phases).
Afterwards every acknowledged create is stored exactly once and every acknowledged event applied,
read back through the public API; callers saw no error: the library's bounded retry covered the fault.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from recall_hub.bench.failover import FailoverConfig, render, run_failover

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
