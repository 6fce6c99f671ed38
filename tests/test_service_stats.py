"""``$SRV.STATS``: the NATS micro statistics count each request when it is answered, with the time the hub
really spent on it and whether the answer was an error — not the microseconds it takes to hand a request
to its task, with no errors ever (what ``nats.micro`` measures on its own, since the hub answers from a task).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from importlib.metadata import version
from typing import Any

import nats
import pytest
from conftest import ClientFactory, new_ai
from nats.aio.client import Client as NATS
from recall_hub.context import HubContext
from recall_hub.tooling.stack import EmbeddedStack
from recall_schemas import NotFound, new_id
from recall_schemas.subjects import SERVICE_NAME


@pytest.fixture
async def raw(stack: EmbeddedStack, hub: HubContext) -> AsyncIterator[NATS]:
    nc = await nats.connect(stack.nats_url, connect_timeout=10)
    yield nc
    await nc.drain()


async def endpoint_stats(nc: NATS) -> dict[str, dict[str, Any]]:
    msg = await nc.request(f"$SRV.STATS.{SERVICE_NAME}", b"", timeout=10)
    stats = json.loads(msg.data)
    assert stats["name"] == SERVICE_NAME
    return {e["name"]: e for e in stats["endpoints"]}


async def test_srv_stats_count_real_processing_time_and_errors(raw: NATS, connect: ClientFactory) -> None:
    client = await connect(new_ai())
    before = await endpoint_stats(raw)

    waited = 0.0
    started = time.perf_counter()
    bead = await client.create_bead("counted", "a bead for the statistics")
    created_in = time.perf_counter() - started
    for _ in range(2):
        started = time.perf_counter()
        assert (await client.get_bead(bead.bead_id)).title == "counted"
        waited += time.perf_counter() - started
    started = time.perf_counter()
    with pytest.raises(NotFound):
        await client.get_bead(new_id("b"))
    waited += time.perf_counter() - started

    after = await endpoint_stats(raw)
    get, create = after["get_bead"], after["create_bead"]
    assert get["num_requests"] - before["get_bead"]["num_requests"] == 3
    assert get["num_errors"] - before["get_bead"]["num_errors"] == 1
    assert "not_found" in get["last_error"]
    assert create["num_requests"] - before["create_bead"]["num_requests"] == 1
    assert create["num_errors"] == before["create_bead"]["num_errors"]

    # The time counted is the hub's work: a store round trip at least (≥ 0.1 ms per request), and never
    # more than the caller saw end to end.
    get_ns = get["processing_time"] - before["get_bead"]["processing_time"]
    create_ns = create["processing_time"] - before["create_bead"]["processing_time"]
    assert 3 * 100_000 <= get_ns <= waited * 1e9, (get_ns, waited)
    assert 1_000_000 <= create_ns <= created_in * 1e9, (create_ns, created_in)
    assert get["average_processing_time"] == get["processing_time"] // get["num_requests"]


async def test_srv_info_reports_the_installed_package_version(raw: NATS) -> None:
    msg = await raw.request(f"$SRV.INFO.{SERVICE_NAME}", b"", timeout=10)
    info = json.loads(msg.data)
    assert info["version"] == version("nexus-recall")
    assert {e["name"] for e in info["endpoints"]} >= {"get_bead", "create_bead", "search_beads"}


async def test_each_hub_process_answers_the_micro_protocol_on_every_level_of_subject(raw: NATS) -> None:
    ping = json.loads((await raw.request(f"$SRV.PING.{SERVICE_NAME}", b"", timeout=10)).data)
    assert ping["type"] == "io.nats.micro.v1.ping_response"
    assert ping["name"] == SERVICE_NAME and ping["version"] == version("nexus-recall")
    for verb, kind in (("PING", "ping"), ("INFO", "info"), ("STATS", "stats")):
        for subject in (f"$SRV.{verb}", f"$SRV.{verb}.{SERVICE_NAME}.{ping['id']}"):
            answer = json.loads((await raw.request(subject, b"", timeout=10)).data)
            assert answer["type"] == f"io.nats.micro.v1.{kind}_response", subject
            assert answer["name"] == SERVICE_NAME, subject
        addressed = json.loads((await raw.request(f"$SRV.{verb}.{SERVICE_NAME}.{ping['id']}", b"", timeout=10)).data)
        assert addressed["id"] == ping["id"]
