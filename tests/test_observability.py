"""Observability of a hub process: Prometheus metrics, /healthz and /readyz, JSON log lines that name the
request, and OpenTelemetry traces continued from the client.

The hubs here run on stacks of their own, so no other hub in the queue group answers (and counts) a request.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from conftest import new_ai, repo_root, until
from prometheus_client.parser import text_string_to_metric_families
from recall_client import RecallClient
from recall_hub import logs
from recall_hub.config import HubSettings
from recall_hub.context import HubContext
from recall_hub.embedders import EmbedderConfig
from recall_hub.service.endpoints import HubService
from recall_hub.service.events import EventConsumer
from recall_hub.service.health import Readiness
from recall_hub.service.server import connect_nats, running_hub
from recall_hub.service.status_server import StatusServer
from recall_hub.tooling.stack import EmbeddedStack
from recall_schemas import ErrorCode, ErrorReply, NotFound, new_id
from recall_schemas.requests import DEADLINE_HEADER, REQUEST_ID_HEADER
from recall_schemas.subjects import request_subject

DASHBOARD = repo_root() / "compose" / "grafana" / "recall-hub.json"


def hub_settings(stack: EmbeddedStack, **overrides: Any) -> HubSettings:
    return HubSettings(
        nats_url=stack.nats_url,
        falkordb_url=stack.redis_url,
        redis_url=stack.redis_url,
        graph_name=f"recall_obs_{secrets.token_hex(4)}",
        embedder=EmbedderConfig(kind="hash"),
        metrics_port=0,
        **overrides,
    )


@pytest.fixture(scope="module")
def obs_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStack]:
    with EmbeddedStack(tmp_path_factory.mktemp("observability")) as running:
        yield running


@pytest.fixture(scope="module")
async def obs_hub(obs_stack: EmbeddedStack) -> AsyncIterator[HubService]:
    # One request of an identity at a time: a burst of one caller is refused `busy` beyond the first.
    settings = hub_settings(obs_stack, tracing=True, caller_max_requests=1, caller_max_running=1)
    async with running_hub(settings) as service:
        yield service


ClientOf = Callable[..., Awaitable[RecallClient]]


@pytest.fixture
async def client_of(obs_stack: EmbeddedStack, obs_hub: HubService) -> AsyncIterator[ClientOf]:
    clients: list[RecallClient] = []

    async def factory(ai_id: str | None = None, **options: Any) -> RecallClient:
        client = await RecallClient(ai_id or new_ai(), obs_stack.nats_url, **options).connect()
        clients.append(client)
        return client

    yield factory
    for client in clients:
        await client.close()


# --- HTTP and exposition helpers ----------------------------------------------------------------------


async def http_get(url: str) -> tuple[int, bytes]:
    def fetch() -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(url, timeout=10) as reply:
                return reply.status, reply.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    return await asyncio.to_thread(fetch)


class Scrape:
    """One read of ``/metrics``: sample values by name and labels, and the names of every exported series."""

    def __init__(self, text: str) -> None:
        self.families = list(text_string_to_metric_families(text))

    def value(self, name: str, **labels: str) -> float:
        found = [
            s.value for f in self.families for s in f.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        ]
        return sum(found)

    def series_names(self) -> set[str]:
        """Every sample name the exposition declares, including families that have no samples yet."""
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}
        names = {s.name for f in self.families for s in f.samples}
        for family in self.families:
            names.update(family.name + suffix for suffix in suffixes.get(family.type, ("",)))
        return names


async def scrape(service: HubService) -> Scrape:
    assert service.metrics_url is not None
    status, body = await http_get(f"{service.metrics_url}/metrics")
    assert status == 200
    return Scrape(body.decode())


async def readyz(url: str) -> tuple[int, dict[str, Any]]:
    status, body = await http_get(f"{url}/readyz")
    return status, json.loads(body)


# --- metrics ------------------------------------------------------------------------------------------


async def test_every_request_is_timed_under_its_operation(obs_hub: HubService, client_of: ClientOf) -> None:
    client = await client_of()
    bead = await client.create_bead("timed", "a bead whose reads are counted")
    before = await scrape(obs_hub)
    for _ in range(5):
        await client.get_bead(bead.bead_id)
    after = await scrape(obs_hub)

    count = "recall_request_duration_seconds_count"
    assert after.value(count, op="get_bead") - before.value(count, op="get_bead") == 5
    assert after.value(count, op="create_bead") == before.value(count, op="create_bead")
    spent = after.value("recall_request_duration_seconds_sum", op="get_bead") - before.value(
        "recall_request_duration_seconds_sum", op="get_bead"
    )
    assert spent > 0
    assert after.value("recall_requests_in_flight") == 0  # every admitted request was answered


async def test_errors_are_counted_by_operation_and_code(obs_hub: HubService, client_of: ClientOf) -> None:
    client = await client_of()
    before = await scrape(obs_hub)
    with pytest.raises(NotFound):
        await client.get_bead(new_id("b"))
    reply = await client.nc.request(request_subject(client.ai_id, "get_bead"), b'{"bead": "misspelt"}', timeout=10)
    assert ErrorReply.model_validate_json(reply.data).error.code is ErrorCode.INVALID
    after = await scrape(obs_hub)

    def rise(name: str, **labels: str) -> float:
        return after.value(name, **labels) - before.value(name, **labels)

    assert rise("recall_request_errors_total", op="get_bead", code="invalid") == 1
    assert rise("recall_request_errors_total", op="get_bead", code="not_found") == 1
    assert rise("recall_request_duration_seconds_count", op="get_bead") == 2  # errors are timed too


async def test_limiter_rejections_count_busy_and_deadline_refusals(obs_hub: HubService, client_of: ClientOf) -> None:
    client = await client_of()
    before = await scrape(obs_hub)

    past = str(int(time.time() * 1000) - 60_000)
    late = await client.nc.request(
        request_subject(client.ai_id, "get_recent"), b"{}", timeout=10, headers={DEADLINE_HEADER: past}
    )
    assert ErrorReply.model_validate_json(late.data).error.details["reason"] == "deadline"

    # A burst of one identity arrives faster than the hub answers its first request: the rest are busy.
    burst = await asyncio.gather(
        *(client.nc.request(request_subject(client.ai_id, "get_recent"), b"{}", timeout=10) for _ in range(30))
    )
    busy = sum(
        1 for msg in burst
        if msg.headers and "Nats-Service-Error-Code" in msg.headers
        and ErrorReply.model_validate_json(msg.data).error.details.get("reason") == "busy"
    )
    assert busy > 0
    after = await scrape(obs_hub)

    rejections = "recall_limiter_rejections_total"
    assert after.value(rejections, reason="deadline") - before.value(rejections, reason="deadline") == 1
    assert after.value(rejections, reason="busy") - before.value(rejections, reason="busy") == busy
    assert after.value("recall_requests_in_flight") == 0
    assert "recall_requests_dropped_total" in after.series_names()


async def test_backlog_gauges_read_the_outbox_the_index_log_and_the_event_consumer(
    obs_hub: HubService, client_of: ClientOf
) -> None:
    ctx = obs_hub.ctx
    client = await client_of()

    # The outbox: an entry left for later (its retry time far ahead) is waiting work.
    base = (await scrape(obs_hub)).value("recall_outbox_depth")
    entry = f"obs-{secrets.token_hex(4)}"
    await ctx.graph.query(
        "CREATE (:Outbox {entry_id: $id, at: 0, kind: 'created', bead_id: $id, by: 'a_obs', attempts: 0, "
        "retry_at: 9999999999999, error: ''})",
        {"id": entry},
    )
    try:
        assert (await scrape(obs_hub)).value("recall_outbox_depth") == base + 1
    finally:
        await ctx.outbox.system_done(entry, entry)
    assert (await scrape(obs_hub)).value("recall_outbox_depth") == base

    # The keyword index: entries appended while its applier is held back are behind it.
    await until("the keyword index up to date", lambda: _gauge_is(obs_hub, "recall_keyword_index_lag_entries", 0))
    async with ctx.keywords._lock:
        for _ in range(3):
            await ctx.index_log.append(new_id("b"))
        held = await scrape(obs_hub)
        assert held.value("recall_keyword_index_lag_entries") == 3
        assert held.value("recall_keyword_index_lag_seconds") >= 0
    await until("the keyword index caught up",
                lambda: _gauge_is(obs_hub, "recall_keyword_index_lag_entries", 0))
    caught_up = await scrape(obs_hub)
    assert caught_up.value("recall_keyword_index_lag_seconds") == 0
    assert caught_up.value("recall_keyword_index_commits") > held.value("recall_keyword_index_commits")

    # The event consumer: events published while it is stopped wait for it, and the hub is not ready.
    consumer: EventConsumer = obs_hub.events
    await consumer.stop()
    try:
        js = obs_hub.nc.jetstream()
        await until("the stopped consumer's last pull expired",
                    lambda: _no_pull_waiting(js))
        for _ in range(3):
            await client.events.session_started(new_id("s"))
        waiting = await scrape(obs_hub)
        assert waiting.value("recall_event_consumer_pending") + waiting.value("recall_event_consumer_ack_pending") >= 3
        status, body = await readyz(obs_hub.metrics_url or "")
        assert status == 503 and list(body["not_ready"]) == ["events"]
    finally:
        await consumer.start()
    await until("the consumer settled the events", lambda: _events_settled(obs_hub))
    assert (await readyz(obs_hub.metrics_url or ""))[0] == 200


async def _gauge_is(service: HubService, name: str, value: float) -> bool:
    return (await scrape(service)).value(name) == value


async def _no_pull_waiting(js: Any) -> bool:
    from recall_schemas.subjects import EVENTS_STREAM, HUB_EVENTS_CONSUMER

    info = await js.consumer_info(EVENTS_STREAM, HUB_EVENTS_CONSUMER)
    return not info.num_waiting


async def _events_settled(service: HubService) -> bool:
    now = await scrape(service)
    return now.value("recall_event_consumer_pending") + now.value("recall_event_consumer_ack_pending") == 0


async def test_the_dashboard_uses_only_metrics_the_hub_exports(obs_hub: HubService, client_of: ClientOf) -> None:
    client = await client_of()
    await client.get_recent()
    exported = (await scrape(obs_hub)).series_names()

    dashboard = json.loads(DASHBOARD.read_text())
    expressions = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    named = {name for expr in expressions for name in re.findall(r"\brecall_[a-z0-9_]+", expr)}
    assert named, "the dashboard queries no recall_ metric"
    assert named - exported == set(), "the dashboard names metrics the hub does not export"
    wanted = {
        "recall_request_duration_seconds_bucket", "recall_request_duration_seconds_count",
        "recall_request_errors_total", "recall_requests_in_flight", "recall_limiter_rejections_total",
        "recall_event_consumer_pending", "recall_outbox_depth", "recall_keyword_index_lag_entries",
    }
    assert wanted <= named, "a measurement has no panel"


async def test_metrics_are_off_unless_a_port_is_set(hub_service: HubService) -> None:
    assert hub_service.ctx.settings.metrics_port is None and hub_service.metrics_url is None
    assert HubSettings(metrics_port="off").metrics_port is None  # type: ignore[arg-type]
    assert HubSettings(metrics_port="").metrics_port is None  # type: ignore[arg-type]


# --- health ---------------------------------------------------------------------------------------------


async def test_readyz_names_what_is_missing_until_the_hub_serves(tmp_path: Path) -> None:
    with EmbeddedStack(tmp_path / "stack") as stack:
        settings = hub_settings(stack)
        ctx = await HubContext.connect(settings)
        nc = await connect_nats(settings)
        service = HubService(ctx, nc)
        consumer = EventConsumer(ctx, nc)
        service.events = consumer
        status = StatusServer("127.0.0.1", 0, service.metrics.exposition, Readiness(service).problems)
        await status.start()
        try:
            assert (await http_get(f"{status.url}/healthz"))[0] == 200
            code, body = await readyz(status.url)
            assert code == 503 and body["ready"] is False
            assert set(body["not_ready"]) == {"keyword_index", "endpoints", "events"}  # NATS, graph, Redis answer

            await ctx.keywords.rebuild()
            await service.start()
            assert set((await readyz(status.url))[1]["not_ready"]) == {"events"}
            await consumer.start()
            assert await readyz(status.url) == (200, {"ready": True, "not_ready": {}})
        finally:
            await status.stop()
            await consumer.stop()
            await service.stop()
            await nc.drain()
            await ctx.aclose()


async def test_readyz_turns_unready_while_the_servers_are_down_and_ready_when_they_are_back(tmp_path: Path) -> None:
    stack = EmbeddedStack(tmp_path / "stack").start()
    try:
        settings = hub_settings(stack)
        async with running_hub(settings) as service:
            url = service.metrics_url
            assert url is not None
            assert (await readyz(url))[0] == 200

            ports = (stack.nats_port, stack.redis_port)
            await asyncio.to_thread(stack.stop)
            down: dict[str, Any] = {}

            async def unready() -> bool:
                code, body = await readyz(url)
                down.update(body["not_ready"])
                return code == 503 and {"nats", "graph", "redis"} <= set(body["not_ready"])

            await until("/readyz names NATS, the graph and Redis", unready)
            assert (await http_get(f"{url}/healthz"))[0] == 200  # alive all the same
            assert (await http_get(f"{url}/metrics"))[0] == 200  # and still measurable

            stack = EmbeddedStack(tmp_path / "stack", nats_port=ports[0], redis_port=ports[1])
            await asyncio.to_thread(stack.start)

            async def ready() -> bool:
                return (await readyz(url))[0] == 200

            await until("the hub ready again", ready)
    finally:
        await asyncio.to_thread(stack.stop)


# --- logs -------------------------------------------------------------------------------------------------


async def test_a_json_log_line_names_the_request_its_caller_and_operation(
    obs_hub: HubService, client_of: ClientOf
) -> None:
    client = await client_of()
    bead = await client.create_bead("logged", "a bead read with logging on")
    out = io.StringIO()
    handler = logs.handler("json", out)
    hub_log = logging.getLogger("recall_hub")
    endpoint_log = logging.getLogger("recall_hub.service.endpoints")
    level = endpoint_log.level
    hub_log.addHandler(handler)
    endpoint_log.setLevel(logging.DEBUG)
    try:
        await client.get_bead(bead.bead_id)
        await client.nc.request(
            request_subject(client.ai_id, "get_bead"),
            json.dumps({"bead_id": bead.bead_id}).encode(),
            timeout=10,
            headers={REQUEST_ID_HEADER: "req-chosen-by-caller"},
        )
    finally:
        hub_log.removeHandler(handler)
        endpoint_log.setLevel(level)

    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    served = [line for line in lines if line.get("op") == "get_bead" and line.get("caller") == client.ai_id]
    assert len(served) == 2, lines
    for line in served:
        assert {"time", "level", "logger", "message", "request_id"} <= set(line)
        assert line["level"] == "DEBUG" and line["logger"] == "recall_hub.service.endpoints"
    assert re.fullmatch(r"[0-9a-f]{32}", served[0]["request_id"])  # the client's own id
    assert served[1]["request_id"] == "req-chosen-by-caller"


def test_json_lines_outside_a_request_carry_no_request_fields() -> None:
    out = io.StringIO()
    logger = logging.getLogger("recall_hub.test_observability")
    handler = logs.handler("json", out)
    logger.addHandler(handler)
    try:
        logger.warning("plain %s", "line")
        with logs.serving("r1", "a_someone", "get_bead"):
            try:
                raise ValueError("boom")
            except ValueError:
                logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    plain, failed = (json.loads(line) for line in out.getvalue().splitlines())
    assert plain["message"] == "plain line" and plain["level"] == "WARNING"
    assert not {"request_id", "caller", "op"} & set(plain)
    assert (failed["request_id"], failed["caller"], failed["op"]) == ("r1", "a_someone", "get_bead")
    assert "ValueError: boom" in failed["exception"]


def test_the_log_format_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RECALL_LOG_FORMAT", raising=False)
    assert logs.format_from_env() == "text"
    monkeypatch.setenv("RECALL_LOG_FORMAT", "JSON")
    assert logs.format_from_env() == "json"
    assert HubSettings(log_format="json").log_format == "json"
    monkeypatch.setenv("RECALL_LOG_FORMAT", "xml")
    with pytest.raises(ValueError, match="RECALL_LOG_FORMAT"):
        logs.format_from_env()


# --- traces -----------------------------------------------------------------------------------------------


async def test_the_hub_span_continues_the_client_trace(obs_hub: HubService, client_of: ClientOf) -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind

    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    client = await client_of(tracing=True)
    bead = await client.create_bead("traced", "a bead read in a trace")
    await client.get_bead(bead.bead_id)
    with pytest.raises(NotFound):
        await client.get_bead(new_id("b"))

    def spans(kind: SpanKind) -> list[Any]:
        return [
            s for s in exporter.get_finished_spans()
            if s.kind is kind and s.name == "get_bead" and s.attributes.get("recall.caller") == client.ai_id
        ]

    async def both_served() -> bool:
        return len(spans(SpanKind.SERVER)) == 2

    await until("the hub's spans of both requests", both_served)
    clients, servers = spans(SpanKind.CLIENT), spans(SpanKind.SERVER)
    assert len(clients) == 2
    for client_span, server_span in zip(clients, servers, strict=True):
        assert server_span.context.trace_id == client_span.context.trace_id
        assert server_span.parent is not None and server_span.parent.span_id == client_span.context.span_id
    assert servers[1].attributes["recall.error_code"] == "not_found"
    assert clients[1].attributes["recall.error_code"] == "not_found"
    assert "recall.error_code" not in servers[0].attributes


async def test_without_tracing_no_trace_header_is_sent(obs_stack: EmbeddedStack, obs_hub: HubService) -> None:
    seen: asyncio.Queue[dict[str, str]] = asyncio.Queue()
    ai = new_ai()
    spy = await nats.connect(obs_stack.nats_url)
    try:
        async def note(msg: Any) -> None:
            seen.put_nowait(dict(msg.headers or {}))

        await spy.subscribe(request_subject(ai, "get_recent"), cb=note)
        await spy.flush()
        async with RecallClient(ai, obs_stack.nats_url, tracing=False) as client:
            await client.get_recent()
        headers = await asyncio.wait_for(seen.get(), 10)
    finally:
        await spy.close()
    assert "traceparent" not in headers
    assert re.fullmatch(r"[0-9a-f]{32}", headers[REQUEST_ID_HEADER])


def test_tracing_does_nothing_without_opentelemetry() -> None:
    """Both ends import and run with OpenTelemetry absent (blocked here), tracing asked for or not."""
    script = """
import sys
sys.modules["opentelemetry"] = None  # as if the [otel] extra were not installed
from recall_client.tracing import client_span
from recall_hub.service.tracing import Tracing
with client_span("get_bead", "a_x", True) as headers:
    assert headers == {}
tracing = Tracing(True)
assert not tracing.enabled
with tracing.server_span("get_bead", "a_x", {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}) as span:
    span.finish("not_found")
print("no-op")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "no-op"

