"""kill -9 during writes: of the hub, of redis/FalkorDB, of the whole `recall up`.

Writers create beads (global, group and private, in sessions) as fast as they can; mid-run a
process is killed with SIGKILL and started again. Afterwards every acknowledged create is stored
exactly once and its after-commit work is complete: a vector in its scope, its FOLLOWS_FROM link,
exactly one `created` entry in its change log; nothing is left in the outbox. No title is ever
stored twice, acknowledged or not.

Underneath, the graph FalkorDB replays from its AOF is the graph that was written, even when concurrent
writes introduce property names, labels and relationship types at once (replicated as effects, FalkorDB 4.x
replays those under the wrong names: the hub has every write replicated as its text).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from unittest.mock import ANY

import pytest
import redis.exceptions
from conftest import new_ai, until
from recall_client import RecallClient
from recall_hub.config import HubSettings
from recall_hub.context import HubContext
from recall_hub.embedders import EmbedderConfig, HashEmbedder
from recall_hub.ops.after_commit import take_over_forever
from recall_hub.retrieval.freshness import handed_off_work_done
from recall_hub.retrieval.search import search_beads
from recall_hub.store.feed import feed_scope
from recall_hub.store.graph import VERBATIM_ABOVE_US, GraphStore, params_header
from recall_hub.store.keys import Keys
from recall_hub.store.vectors import scope_of
from recall_hub.tooling.stack import EmbeddedStack, free_port
from recall_schemas import RecallError, SearchBeads, SearchMode, new_id
from recall_schemas.tasks import stop_tasks
from redis import Redis as SyncRedis
from redis.asyncio import Redis

from tests.test_embedders import FakeEmbeddingsServer

EMBEDDER = {"RECALL_EMBEDDER__KIND": "hash"}  # the same in the hub processes and in the checks below
WRITERS = 4
BEFORE_CRASH = 30
AFTER_CRASH = 30


def _env() -> dict[str, str]:
    return {**os.environ, **EMBEDDER}


def _spawn(args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "recall_hub.tooling.cli", *args], env={**_env(), **(env or {})},
        stdin=subprocess.DEVNULL, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
    )


@dataclass
class Load:
    """Writers creating beads until told to stop; what was acknowledged, by title."""

    nats_url: str
    group_id: str = ""
    acked: dict[str, str] = field(default_factory=dict)
    errors: int = 0
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def start(self, ops: RecallClient, agents: list[str]) -> None:
        self.group_id = (await ops.create_group("crash crew")).group_id
        for ai in agents:
            await ops.add_member(self.group_id, ai)
        self.tasks = [asyncio.create_task(self._write(ai, n)) for n, ai in enumerate(agents)]

    async def _write(self, ai_id: str, n: int) -> None:
        session = new_id("s")
        async with RecallClient(ai_id, self.nats_url, timeout=2.0, retries=1) as client:
            i = 0
            while not self.stop.is_set():
                title = f"crash {n}-{i} {new_id('t')[2:]}"
                kind = ("global", "group", "private")[i % 3]
                try:
                    bead = await client.create_bead(
                        title, f"written by {ai_id} as number {i}", session_id=session, visibility=kind,
                        group_id=self.group_id if kind == "group" else None,
                    )
                    self.acked[title] = bead.bead_id
                except RecallError:
                    self.errors += 1
                    await asyncio.sleep(0.05)  # the hub is down: do not spin
                i += 1

    async def reach(self, count: int) -> None:
        await until(f"{count} acknowledged creates", lambda: len(self.acked) >= count, within=120)

    async def finish(self) -> None:
        self.stop.set()
        await asyncio.gather(*self.tasks)


async def _check(settings: HubSettings, load: Load) -> None:
    ctx = await HubContext.connect(settings, embedder=HashEmbedder())
    try:
        await until("the outbox drained by the restarted hub", lambda: _drained(ctx), within=90)
        rows = await ctx.graph.ro_query("MATCH (b:Bead) WHERE b.title STARTS WITH 'crash ' RETURN b")
        stored: dict[str, list[dict]] = {}
        for (node,) in rows:
            stored.setdefault(node.properties["title"], []).append(node.properties)
        assert [t for t, beads in stored.items() if len(beads) > 1] == []  # never twice
        assert [t for t in load.acked if t not in stored] == []  # no acknowledged bead lost
        for title, bead_id in load.acked.items():
            props = stored[title][0]
            assert props["bead_id"] == bead_id
            assert props.get("vec_scope") == scope_of(props), title
            assert await ctx.vectors.vector(bead_id, scope_of(props)) is not None, title
        feed: dict[str, list[str]] = {}
        for scope in ("global", load.group_id):
            for change in await ctx.feed.read(scope, None, 100_000):
                if change.action == "created":
                    feed.setdefault(change.bead_id, []).append(scope)
        for props in (beads[0] for beads in stored.values()):
            scope = feed_scope(props)
            assert feed.get(props["bead_id"], []) == ([scope] if scope else []), props["title"]
        links = await ctx.graph.ro_query(
            "MATCH (b:Bead) WHERE b.title STARTS WITH 'crash ' OPTIONAL MATCH (b)-[:FOLLOWS_FROM]->(p:Bead) "
            "RETURN b.bead_id, b.session_id, b.created_at, count(p)"
        )
        firsts = {}
        for bead_id, session, created, _ in links:
            if session not in firsts or (created, bead_id) < firsts[session]:
                firsts[session] = (created, bead_id)
        unlinked = [b for b, s, _, n in links if n == 0 and firsts[s][1] != b]
        assert unlinked == []
    finally:
        await ctx.aclose()


async def _drained(ctx: HubContext) -> bool:
    return await ctx.outbox.system_depth() == 0


async def _serving(client: RecallClient) -> bool:
    await client.list_groups()
    return True


@contextlib.asynccontextmanager
async def _writers(nats_url: str) -> AsyncIterator[Load]:
    load = Load(nats_url)
    async with RecallClient(new_ai("o"), nats_url, timeout=10) as ops:
        await until("a hub serving", lambda: _serving(ops))
        await load.start(ops, [new_ai() for _ in range(WRITERS)])
        try:
            yield load
        finally:
            await load.finish()


def _settings(stack_nats: str, redis_url: str, graph: str) -> HubSettings:
    return HubSettings(nats_url=stack_nats, falkordb_url=redis_url, redis_url=redis_url, graph_name=graph)


def _hub_args(settings: HubSettings) -> list[str]:
    return ["hub", "--nats", settings.nats_url, "--falkordb", settings.falkordb_url, "--redis", settings.redis_url,
            "--graph", settings.graph_name]


def _kill(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


async def test_kill_9_of_the_hub_during_writes_loses_and_duplicates_nothing(tmp_path: Path):
    with EmbeddedStack(tmp_path / "stack") as stack:
        settings = _settings(stack.nats_url, stack.redis_url, "crash_hub")
        hub = _spawn(_hub_args(settings), tmp_path / "hub.log")
        try:
            async with _writers(stack.nats_url) as load:
                await load.reach(BEFORE_CRASH)
                _kill(hub)
                hub = _spawn(_hub_args(settings), tmp_path / "hub.log")
                await load.reach(len(load.acked) + AFTER_CRASH)
            await _check(settings, load)
        finally:
            _stop(hub)


async def test_kill_9_of_redis_and_falkordb_during_writes_loses_and_duplicates_nothing(tmp_path: Path):
    with EmbeddedStack(tmp_path / "stack") as stack:
        settings = _settings(stack.nats_url, stack.redis_url, "crash_redis")
        hub = _spawn(_hub_args(settings), tmp_path / "hub.log")
        try:
            async with _writers(stack.nats_url) as load:
                await load.reach(BEFORE_CRASH)
                stack.restart("redis-server", kill=True)
                await load.reach(len(load.acked) + AFTER_CRASH)
            await _check(settings, load)
        finally:
            _stop(hub)
    # The work Redis's crash interrupted was tried again as soon as it was back: no read waited its whole budget
    # for it (the hub says so when one does).
    assert "still without their vectors" not in (tmp_path / "hub.log").read_text()


async def _write_new_names(redis_url: str, writer: int, queries: int) -> None:
    """Writes that each bring property names, a label and a relationship type no earlier write used."""
    client = Redis.from_url(redis_url)
    try:
        for i in range(queries):
            props = {"k": f"{writer}-{i}", f"w{writer}_{i % 40}": i, f"shared_{(writer * 7 + i) % 90}": "x" * (i % 30)}
            await client.execute_command(  # type: ignore[no-untyped-call]
                "GRAPH.QUERY", "replayed", params_header({"p": props}) +
                "MERGE (n:N {k: $p.k}) ON CREATE SET n += $p WITH n FOREACH (_ IN [1] | "
                f"CREATE (n)-[:R{writer}_{i % 5} {{at: {i}}}]->(:L{i % 9} {{v{writer}_{i % 7}: $p.k}}))",
            )
    finally:
        await client.aclose()


def _graph_as_written(redis_url: str) -> list[tuple[object, ...]]:
    client = SyncRedis.from_url(redis_url)
    try:
        rows = client.execute_command(
            "GRAPH.RO_QUERY", "replayed",
            "MATCH (n:N)-[r]->(m) RETURN n.k, properties(n), type(r), properties(r), labels(m), properties(m) "
            "ORDER BY n.k",
        )
    finally:
        client.close()
    return [tuple(row) for row in rows[1]]


async def test_a_graph_replayed_from_its_aof_is_the_graph_that_was_written(tmp_path: Path):
    with EmbeddedStack(tmp_path / "stack") as stack:
        try:
            await asyncio.gather(*(_write_new_names(stack.redis_url, writer, 150) for writer in range(12)))
        except redis.exceptions.ConnectionError as exc:  # seen once in a full run: say what the server logged
            pytest.fail(f"the server closed a writer's connection ({exc}){stack.log_tail('redis-server')}")
        written = _graph_as_written(stack.redis_url)
        stack.restart("redis-server", kill=True)
        replayed = _graph_as_written(stack.redis_url)
    assert len(written) == 12 * 150
    assert [row for row, again in zip(written, replayed, strict=True) if row != again] == []


async def test_the_hub_has_every_write_replicated_as_its_text(stack: EmbeddedStack, caplog: pytest.LogCaptureFixture):
    """A FalkorDB started without the setting (one the hub did not start) gets it from the first hub that
    connects, with a warning saying how to start it."""
    graph = GraphStore(stack.redis_url, "replication_setting")
    try:
        await graph.server.execute_command("GRAPH.CONFIG", "SET", "EFFECTS_THRESHOLD", 300)  # FalkorDB's default
        assert not await graph.replicates_writes_as_text()
        await graph.ensure_schema()
        assert await graph.replicates_writes_as_text()
        reply = await graph.server.execute_command("GRAPH.CONFIG", "GET", "EFFECTS_THRESHOLD")
        assert int(reply[1]) == VERBATIM_ABOVE_US
        assert "Start it with `EFFECTS_THRESHOLD" in caplog.text
    finally:
        await graph.aclose()


async def test_work_a_killed_hub_left_is_taken_over_by_the_next_read_at_another_hub(tmp_path: Path):
    """A hub is killed while its model embeds a create it has replied to: its lock on the bead, its mark of the
    hand-off and the bead's outbox entry stay. A read at another hub waits for that work (the create was
    acknowledged before it asked): it finds the hub gone, the work is taken over there and the read goes on — in
    well under its 30 s budget, with no sweep running — and a search finds the bead by meaning."""
    model = FakeEmbeddingsServer()
    model.start()
    embedder = EmbedderConfig(kind="openai", openai_base_url=model.base_url, openai_model="m", openai_api_key="k")
    env = {"RECALL_EMBEDDER__KIND": "openai", "RECALL_EMBEDDER__OPENAI_BASE_URL": model.base_url,
           "RECALL_EMBEDDER__OPENAI_MODEL": "m", "RECALL_EMBEDDER__OPENAI_API_KEY": "k"}
    with EmbeddedStack(tmp_path / "stack") as stack:
        settings = _settings(stack.nats_url, stack.redis_url, "gone_hub").model_copy(
            update={"embedder": embedder, "index_wait_s": 30.0}
        )
        hub = _spawn(_hub_args(settings), tmp_path / "hub.log", env)
        heir: asyncio.Task[None] | None = None
        other: HubContext | None = None
        redis = Redis.from_url(stack.redis_url)
        try:
            async with RecallClient(new_ai(), stack.nats_url, timeout=10) as client:
                await until("a hub serving", lambda: _serving(client))
                model.mode = "stall"
                bead = await client.create_bead("the lighthouse keeper's logbook", "kept by the hub killed",
                                                visibility="global")
            lock = Keys(settings.graph_name).lock(f"bead:{bead.bead_id}")
            await until("the hub working on it", lambda: redis.exists(lock))
            _kill(hub)
            model.mode = "ok"
            other = await HubContext.connect(settings)
            heir = asyncio.create_task(take_over_forever(other))
            began = time.monotonic()
            await handed_off_work_done(other)  # what every read of the work waits for first
            waited = time.monotonic() - began
            assert waited < 3.0, f"the read waited {waited:.1f} s"
            found = await search_beads(other, new_ai(), SearchBeads(query=bead.title, mode=SearchMode.VECTOR))
            assert bead.bead_id in [hit.bead.bead_id for hit in found.hits]
            assert await other.outbox.system_pending(bead.bead_id) == []
            assert await other.outbox.handed_off_before() == (ANY, [])
        finally:
            model.release.set()
            if heir is not None:
                await stop_tasks([heir])
            if other is not None:
                await other.aclose()
            await redis.aclose()
            _stop(hub)
            model.stop()



def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


async def test_kill_9_of_recall_up_during_writes_loses_and_duplicates_nothing(tmp_path: Path):
    nats_port, redis_port = free_port(), free_port()
    args = ["up", "--data-dir", str(tmp_path / "up"), "--nats-port", str(nats_port), "--redis-port", str(redis_port)]
    nats_url, redis_url = f"nats://127.0.0.1:{nats_port}", f"redis://127.0.0.1:{redis_port}"
    up = _spawn(args, tmp_path / "up.log")
    try:
        async with _writers(nats_url) as load:
            await load.reach(BEFORE_CRASH)
            _kill(up)  # its servers get SIGTERM from the kernel (they die with their parent)
            await until("the old servers gone", lambda: _port_free(nats_port) and _port_free(redis_port))
            up = _spawn(args, tmp_path / "up.log")
            await load.reach(len(load.acked) + AFTER_CRASH)
        await _check(_settings(nats_url, redis_url, HubSettings().graph_name), load)
    finally:
        _stop(up)


pytestmark = pytest.mark.timeout(240)
