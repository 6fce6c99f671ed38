"""Fairness between identities, bounded buffers and request deadlines.

What must hold: one identity sending more than the hub can take — many large requests at once — gets
``unavailable`` ("busy") replies at once for what is over its limits, while every other identity keeps
being served promptly; the hub's NATS connection survives (a NATS server disconnects a reader that falls
64 MB behind, and then every caller fails); and work whose caller has given up is not done: a request
whose ``Recall-Deadline`` passed — before it arrived, or while it waited for a slot — is answered
``timeout`` and changes nothing.

The flood tests run their own nats-server (with its monitoring port, to read the server's slow-consumer
count) and a hub in its own process with small per-identity limits, as in production: the flood comes
through the bus, not through the hub's event loop. The deadline tests use the session's hub.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import nats
import pytest
from conftest import ClientFactory, new_ai
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from recall_client import RecallClient
from recall_hub.context import HubContext
from recall_hub.service.endpoints import INGEST_OPERATIONS, HubService
from recall_hub.timeutil import now_ms
from recall_hub.tooling.stack import EmbeddedStack, free_port
from recall_schemas import OPERATIONS, ErrorCode, ErrorReply, NotFound, RecallError, RecallTimeout
from recall_schemas.requests import DEADLINE_HEADER
from recall_schemas.subjects import request_subject

pytestmark = pytest.mark.timeout(240)

ERROR_CODE_HEADER = "Nats-Service-Error-Code"
BLOB = "y" * 480_000
"""Metadata that makes a create ~480 KB on the wire but gives the embedder nothing to do."""
HUB_LIMITS = {
    "RECALL_MAX_CONCURRENCY": "16",
    "RECALL_CALLER_MAX_RUNNING": "2",
    "RECALL_CALLER_MAX_BYTES": str(2 << 20),
    "RECALL_EMBEDDER__KIND": "hash",
}


def error_of(msg: Msg) -> ErrorReply | None:
    if not msg.headers or ERROR_CODE_HEADER not in msg.headers:
        return None
    return ErrorReply.model_validate_json(msg.data)


# --- a stack with a monitoring port, and a hub in its own process ------------------------------------


@dataclass
class FloodHub:
    stack: EmbeddedStack
    monitor: str
    log: list[str] = field(default_factory=list)

    def monitoring(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.monitor}/{path}", timeout=10) as response:
            result: dict[str, Any] = json.load(response)
            return result

    def hub_connections(self) -> list[int]:
        """Client ids of the hub's connections at the server (its main one and its ingest one: two, unless one
        was cut off and came back)."""
        names = ("recall-hub", "recall-hub-ingest")
        return sorted(c["cid"] for c in self.monitoring("connz?limit=1024")["connections"] if c.get("name") in names)


@pytest.fixture(scope="module")
def flood_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmbeddedStack, str]]:
    base = tmp_path_factory.mktemp("limits")
    http_port = free_port()
    config = base / "nats-server.conf"
    config.write_text(f"http: 127.0.0.1:{http_port}\n")
    with EmbeddedStack(base / "stack", nats_config=config) as stack:
        yield stack, f"http://127.0.0.1:{http_port}"


@pytest.fixture(scope="module")
async def flood_hub(flood_stack: tuple[EmbeddedStack, str]) -> AsyncIterator[FloodHub]:
    stack, monitor = flood_stack
    env = {
        **os.environ,
        "RECALL_NATS_URL": stack.nats_url,
        "RECALL_FALKORDB_URL": stack.redis_url,
        "RECALL_REDIS_URL": stack.redis_url,
        "RECALL_GRAPH_NAME": f"recall_limits_{secrets.token_hex(4)}",
        **HUB_LIMITS,
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "recall_hub.tooling.cli", "hub",
        env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    hub = FloodHub(stack, monitor)
    draining: asyncio.Task[None] | None = None
    try:
        async with asyncio.timeout(90):
            while not any("hub serving" in line for line in hub.log):
                line = await proc.stderr.readline()
                assert line, f"the hub ended early: {hub.log[-20:]}"
                hub.log.append(line.decode())

        async def drain(stream: asyncio.StreamReader) -> None:
            while line := await stream.readline():
                hub.log.append(line.decode())

        draining = asyncio.create_task(drain(proc.stderr))
        yield hub
    finally:
        if proc.returncode is None:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 30)
        if draining is not None:
            await draining


@pytest.fixture
async def flood_clients(flood_hub: FloodHub) -> AsyncIterator[list[RecallClient]]:
    opened: list[RecallClient] = []
    yield opened
    for client in opened:
        await client.close()


async def open_client(opened: list[RecallClient], url: str, **options: Any) -> RecallClient:
    client = RecallClient(new_ai(), url, **options)
    await client.connect()
    opened.append(client)
    return client


async def probe_while(flood: asyncio.Future[Any], probe: RecallClient) -> list[float]:
    """Another identity's ordinary work, as long as the flood lasts (at least 5 rounds): each round must
    succeed, first time, within the client's timeout. Returns the latency of each round."""
    latencies: list[float] = []
    round_ = 0
    while round_ < 5 or not flood.done():
        started = time.perf_counter()
        bead = await probe.create_bead(f"probe {round_}", "an ordinary memory")
        assert (await probe.get_bead(bead.bead_id)).title == f"probe {round_}"
        latencies.append(time.perf_counter() - started)
        round_ += 1
    return latencies


# --- floods --------------------------------------------------------------------------------------------


async def test_two_hundred_large_creates_at_once_from_one_client_neither_cut_off_the_hub_nor_others(
    flood_hub: FloodHub, flood_clients: list[RecallClient]
) -> None:
    """The reported failure: ~96 MB of creates fired at once by one client got the hub disconnected as a
    slow consumer, and every client failed after it."""
    url = flood_hub.stack.nats_url
    flooder = await open_client(flood_clients, url, timeout=5.0, retries=0)
    probe = await open_client(flood_clients, url, timeout=5.0, retries=0)
    await probe.get_recent(1)
    hub_before = flood_hub.hub_connections()
    assert len(hub_before) == 2

    async def create(i: int) -> str:
        try:
            await flooder.create_bead(f"flood {i}", "big on the wire", metadata={"blob": BLOB})
            return "ok"
        except RecallError as exc:  # typed refusals are fine: busy, or given up on in time
            return exc.code.value

    flood = asyncio.gather(*(create(i) for i in range(200)))
    latencies = await probe_while(flood, probe)
    outcomes = Counter(await flood)

    assert set(outcomes) <= {"ok", ErrorCode.UNAVAILABLE.value, ErrorCode.TIMEOUT.value}, outcomes
    assert outcomes["ok"] >= 1, outcomes
    assert max(latencies) < probe.timeout, latencies
    varz = flood_hub.monitoring("varz")
    assert varz["slow_consumers"] == 0, varz.get("slow_consumer_stats")
    assert flood_hub.hub_connections() == hub_before, "the hub's connection was cut off and came back"
    assert not any("NATS: disconnected" in line for line in flood_hub.log), flood_hub.log[-20:]
    # And the flooder, once its burst is over, is served like anyone else.
    assert (await flooder.create_bead("after the flood")).title == "after the flood"


async def test_a_raw_burst_of_large_creates_neither_cuts_off_the_hub_nor_fails_another(
    flood_hub: FloodHub, flood_clients: list[RecallClient]
) -> None:
    """600 creates of 500 KB (300 MB) at once from a process of its own, as raw requests from an identity that
    ignores the client library's flow control: far more than nats-server holds for a connection by default
    (64 MB). The hub serves such writes on a connection of their own, which the embedded stack lets fall 512 MB
    behind; no connection of the hub is cut off, and another identity is served throughout."""
    url = flood_hub.stack.nats_url
    probe = await open_client(flood_clients, url, timeout=5.0, retries=0)
    hub_before = flood_hub.hub_connections()
    agent = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "recall_hub.bench.flood", "hub", url, "600", "500000",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )
    assert agent.stdin is not None and agent.stdout is not None
    assert (await agent.stdout.readline()).startswith(b"ready")
    agent.stdin.write(b"go\n")
    await agent.stdin.drain()
    flood = asyncio.ensure_future(agent.stdout.readline())
    latencies = await probe_while(flood, probe)
    answers = json.loads(await flood)["outcomes"]
    await agent.wait()
    # Stored, or refused busy at once; what the agent gave up on (its timeout is 1 s) was never dropped by the bus.
    assert set(answers) <= {"stored", "unavailable (busy)", "TimeoutError"} and answers.get("stored"), answers
    assert max(latencies) < probe.timeout, latencies
    assert flood_hub.monitoring("varz")["slow_consumers"] == 0
    assert flood_hub.hub_connections() == hub_before, "a connection of the hub was cut off and came back"


async def test_an_identity_over_its_limits_is_told_busy_at_once_and_no_other_identity_is(
    flood_hub: FloodHub, flood_clients: list[RecallClient]
) -> None:
    """Raw requests, as a client without the library's own flow control would send them."""
    url = flood_hub.stack.nats_url
    raw = await nats.connect(url, connect_timeout=10)
    try:
        probe = await open_client(flood_clients, url, timeout=5.0, retries=0)
        flooder, neighbour = new_ai(), new_ai()
        limit = int(HUB_LIMITS["RECALL_CALLER_MAX_BYTES"])

        async def create(caller: str, i: int) -> tuple[Msg, float]:
            body = json.dumps({"title": f"raw {i}", "metadata": {"blob": BLOB}}).encode()
            started = time.perf_counter()
            msg = await raw.request(request_subject(caller, "create_bead"), body, timeout=60)
            return msg, time.perf_counter() - started

        flood = asyncio.gather(
            *(create(flooder, i) for i in range(40)),  # ~19 MB: ten times the flooder's byte limit
            *(create(neighbour, i) for i in range(3)),  # ~1.4 MB: within the neighbour's own limit
        )
        latencies = await probe_while(flood, probe)
        replies = await flood
    finally:
        await raw.close()

    flooded, neighbours = replies[:40], replies[40:]
    size = len(json.dumps({"title": "raw 10", "metadata": {"blob": BLOB}}).encode())
    refusals = [e for e in (error_of(m) for m, _ in flooded) if e is not None]
    assert 1 <= len(refusals) < len(flooded), "some refused, some served"
    for error in refusals:
        details = error.error.details
        assert error.error.code is ErrorCode.UNAVAILABLE and details["reason"] == "busy", error
        assert details["max_bytes"] == limit
        # Refused at once, while the flooder's admitted requests were in progress, and only because this
        # one would have taken it over its limit — which it never exceeded.
        assert details["in_progress"] >= 1
        assert details["in_progress_bytes"] <= limit < details["in_progress_bytes"] + size + 2, details
    for msg, _ in neighbours:
        assert error_of(msg) is None, msg.data[:300]
    assert max(latencies) < probe.timeout, latencies
    assert flood_hub.monitoring("varz")["slow_consumers"] == 0


# --- deadlines -----------------------------------------------------------------------------------------


WRITES: list[tuple[str, dict[str, Any]]] = [
    ("create_bead", {"title": "written after its caller gave up"}),
    ("learn", {"key": "late", "value": "written after its caller gave up"}),
    ("ai_state_save", {"working_notes": "written after its caller gave up"}),
]


async def nothing_written_by(hub: HubContext, client: RecallClient) -> None:
    rows = await hub.graph.ro_query("MATCH (b:Bead {created_by: $c}) RETURN count(b)", {"c": client.ai_id})
    assert rows[0][0] == 0
    with pytest.raises(NotFound):
        await client.recall("late")
    assert (await client.ai_state_get()).working_notes == ""


@pytest.fixture
async def raw(hub: HubContext, stack: EmbeddedStack) -> AsyncIterator[NATS]:
    nc = await nats.connect(stack.nats_url, connect_timeout=10)
    yield nc
    await nc.drain()


async def test_a_request_whose_deadline_has_passed_is_answered_timeout_and_not_executed(
    raw: NATS, hub: HubContext, connect: ClientFactory
) -> None:
    caller = await connect(new_ai())
    past = str(now_ms() - 60_000)
    for op, body in WRITES:
        msg = await raw.request(
            request_subject(caller.ai_id, op), json.dumps(body).encode(), timeout=10, headers={DEADLINE_HEADER: past}
        )
        error = error_of(msg)
        assert error is not None and error.error.code is ErrorCode.TIMEOUT, (op, msg.data[:300])
        assert error.error.details["reason"] == "deadline" and error.error.details["stage"] == "arrival"
    await nothing_written_by(hub, caller)
    # A malformed deadline is refused, not ignored.
    msg = await raw.request(
        request_subject(caller.ai_id, "get_recent"), b"{}", timeout=10, headers={DEADLINE_HEADER: "soon"}
    )
    error = error_of(msg)
    assert error is not None and error.error.code is ErrorCode.INVALID and DEADLINE_HEADER in error.error.message


async def test_a_request_whose_caller_gave_up_while_it_waited_for_a_slot_is_skipped(
    raw: NATS, hub_service: HubService, connect: ClientFactory
) -> None:
    caller = await connect(new_ai())
    settings = hub_service.ctx.settings
    slots = hub_service._slots
    for _ in range(settings.max_concurrency):  # every slot taken: admitted requests wait in line
        await slots.acquire()
    held = settings.max_concurrency
    try:
        deadline = now_ms() + 1000
        replies = [
            asyncio.ensure_future(
                raw.request(
                    request_subject(caller.ai_id, op), json.dumps(body).encode(), timeout=30,
                    headers={DEADLINE_HEADER: str(deadline)},
                )
            )
            for op, body in WRITES
        ]
        # The property is about time: let the deadline (and the hub's allowance for clock skew) pass.
        await asyncio.sleep(max(0.0, (deadline + settings.deadline_grace_ms + 50 - now_ms()) / 1000))
        assert hub_service.limits.in_progress(caller.ai_id)[0] == len(WRITES), "admitted, waiting for a slot"
        for _ in range(held):
            slots.release()
        held = 0
        for (op, _), reply in zip(WRITES, await asyncio.gather(*replies), strict=True):
            error = error_of(reply)
            assert error is not None and error.error.code is ErrorCode.TIMEOUT, (op, reply.data[:300])
            assert error.error.details["stage"] == "queued", error
    finally:
        for _ in range(held):
            slots.release()
    await nothing_written_by(hub_service.ctx, caller)


async def test_the_client_sends_its_deadline_with_every_attempt(raw: NATS, connect: ClientFactory) -> None:
    client = await connect(new_ai(), timeout=2.5, retries=1)
    seen: asyncio.Queue[tuple[int, int]] = asyncio.Queue()

    async def listen(msg: Msg) -> None:  # a plain subscriber gets a copy of what the hub's queue group gets
        seen.put_nowait((now_ms(), int((msg.headers or {})[DEADLINE_HEADER])))

    copies = await raw.subscribe(request_subject(client.ai_id, "get_recent"), cb=listen)
    await raw.flush()
    await client.get_recent(limit=1)
    try:
        received, deadline = await asyncio.wait_for(seen.get(), 10)
    except TimeoutError:  # seen twice in full runs, never alone: what the subscriber's connection knew then
        pytest.fail(f"no copy of the request within 10 s: subscriber connected {raw.is_connected}, its stats "
                    f"{raw.stats}, the subscription's pending {copies.pending_msgs}, received {copies._received}")
    assert 2000 <= deadline - received <= 2600, (received, deadline)
    assert seen.empty()


async def test_a_client_that_gives_up_leaves_nothing_behind_at_the_hub(
    hub_service: HubService, connect: ClientFactory
) -> None:
    """The reported failure: beads stored after their callers had timed out (and retried)."""
    caller = await connect(new_ai(), timeout=0.4, retries=1)
    settings = hub_service.ctx.settings
    slots = hub_service._slots
    for _ in range(settings.max_concurrency):
        await slots.acquire()
    held = settings.max_concurrency
    try:
        started = now_ms()
        with pytest.raises(RecallTimeout):
            await caller.create_bead("nobody waits for me")  # two attempts, both given up on
        # The last attempt's deadline, plus the hub's allowance for clock skew, must pass.
        await asyncio.sleep(max(0.0, (started + 2 * 400 + 200 + settings.deadline_grace_ms - now_ms()) / 1000))
        assert hub_service.limits.in_progress(caller.ai_id)[0] == 2, "both attempts are waiting at the hub"
        for _ in range(held):
            slots.release()
        held = 0
    finally:
        for _ in range(held):
            slots.release()
    # The two creates were first in line for a slot, so by the time this request is answered they were
    # dealt with: skipped at once, as their callers had given up (run, they would still be in progress).
    patient = await connect(caller.ai_id, timeout=10)
    await patient.ai_state_get()
    assert hub_service.limits.in_progress(caller.ai_id) == (0, 0)
    rows = await hub_service.ctx.graph.ro_query("MATCH (b:Bead {created_by: $c}) RETURN count(b)", {"c": caller.ai_id})
    assert rows[0][0] == 0, "a create ran after its caller had given up"


def test_bulk_writes_are_served_on_the_ingest_connection_and_everything_else_on_the_main_one(
    hub_service: HubService,
) -> None:
    assert INGEST_OPERATIONS <= set(OPERATIONS)
    # Every operation whose request can carry 64 KiB of text in one field is an ingest operation.
    bulky = {
        name for name, op in OPERATIONS.items()
        if any(_max_length(field) >= 64 << 10 for field in _fields(op.request))
    }
    assert bulky <= INGEST_OPERATIONS, bulky - INGEST_OPERATIONS
    assert hub_service.ingest is not hub_service.nc
    for name, endpoint in hub_service.endpoints.items():
        assert endpoint.nc is (hub_service.ingest if name in INGEST_OPERATIONS else hub_service.nc), name


def _fields(model: type[BaseModel], seen: frozenset[type[BaseModel]] = frozenset()) -> list[FieldInfo]:
    """The fields of ``model`` and of the models nested in it (lists of them too)."""
    found: list[FieldInfo] = []
    for info in model.model_fields.values():
        found.append(info)
        for inner in _models_in(info.annotation):
            if inner not in seen:
                found += _fields(inner, seen | {model})
    return found


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in getattr(annotation, "__args__", ()) for m in _models_in(arg)]


def _max_length(info: FieldInfo) -> int:
    """The largest ``max_length`` a field declares, directly or on an optional ``Annotated`` type."""
    constraints = list(info.metadata)
    for arg in getattr(info.annotation, "__args__", ()):  # Annotated[str, Field(max_length=...)] | None
        for meta in getattr(arg, "__metadata__", ()):
            constraints += [meta, *getattr(meta, "metadata", ())]
    return max((int(m.max_length) for m in constraints if getattr(m, "max_length", None) is not None), default=0)
