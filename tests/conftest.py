"""Real servers for the tests: nats-server and redis-server+FalkorDB from their wheels, started once
per test session on free ports in a temporary directory, and one hub process serving them.

``tests/frameworks/`` holds the agent-framework adapters' tests, marked ``frameworks`` and run by ``make
test-frameworks`` in a venv of their own (the frameworks are heavy); where they are not installed — the default
venv — those files are not collected."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import importlib.util
import inspect
import json
import secrets
import sys
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import nats.aio.client
import pytest
from recall_client import RecallClient
from recall_client.connections import close_nats
from recall_hub.config import HubSettings
from recall_hub.context import HubContext
from recall_hub.embedders import EmbedderConfig
from recall_hub.service.endpoints import HubService
from recall_hub.service.server import running_hub
from recall_hub.store import bead_cache
from recall_hub.tooling.auth import AuthBundle, generate
from recall_hub.tooling.stack import EmbeddedStack
from recall_schemas import MemoryBead, RecallError, Visibility
from recall_schemas.tasks import stop_tasks

# Every read that uses a hub's held bead properties is checked against a full read: a write that changes a bead
# without moving its version or updated_at fails the test that makes it.
bead_cache.VERIFY = True

FRAMEWORKS = ("langgraph", "google.adk", "autogen_core", "agents")


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is missing
        return False


collect_ignore_glob = [] if all(_installed(m) for m in FRAMEWORKS) else ["frameworks/*"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.parent.name == "frameworks":
            item.add_marker(pytest.mark.frameworks)


@pytest.fixture(scope="session", autouse=True)
async def _no_connection_left_open() -> AsyncIterator[None]:
    """A NATS connection left open retries its stopped server forever, and closing the session's event loop
    then waits on its reconnect task: whatever is still open when the session ends is named and closed."""
    yield
    left = [c for c in gc.get_objects() if isinstance(c, nats.aio.client.Client) and not c.is_closed]
    if left:
        warnings.warn(f"NATS connections left open by tests: {[c.options.get('name') for c in left]}", stacklevel=1)
    for client in left:
        with contextlib.suppress(Exception):
            await close_nats(client)
    # Whatever still runs (a connection's reconnect loop nobody holds any more) is stopped here, for certain:
    # closing the loop cancels each task only once and then waits for all of them.
    await stop_tasks(t for t in asyncio.all_tasks() if t is not asyncio.current_task())


@pytest.fixture(autouse=True)
async def _tasks_shown_when_a_test_hangs(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """When the threads' stacks are written (``faulthandler_timeout``), the event loop's tasks are too: a test
    hung in an await shows only an idle loop in the threads' stacks, its tasks say what each waits for."""
    after = float(request.config.getini("faulthandler_timeout") or 0)
    if after <= 0:
        yield
        return
    handle = asyncio.get_running_loop().call_later(after, _print_tasks, request.node.nodeid)
    yield
    handle.cancel()


def _print_tasks(test: str) -> None:
    """Each task with the chain of awaits it is suspended in, outermost first."""
    print(f"+++ {test}: the event loop's tasks +++", file=sys.stderr)
    for task in asyncio.all_tasks():
        print(f"{task.get_name()}:", file=sys.stderr)
        awaiting: Any = task.get_coro()
        while awaiting is not None:
            frame = getattr(awaiting, "cr_frame", None) or getattr(awaiting, "gi_frame", None)
            if frame is not None:
                print(f"  {frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}", file=sys.stderr)
            awaiting = getattr(awaiting, "cr_await", None) or getattr(awaiting, "gi_yieldfrom", None)


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStack]:
    with EmbeddedStack(tmp_path_factory.mktemp("stack")) as running:
        yield running


@pytest.fixture(scope="session")
def settings(stack: EmbeddedStack) -> HubSettings:
    return HubSettings(
        nats_url=stack.nats_url,
        falkordb_url=stack.redis_url,
        redis_url=stack.redis_url,
        graph_name="recall_test",
    )


@pytest.fixture(scope="session")
async def hub_service(settings: HubSettings) -> AsyncIterator[HubService]:
    """The serving hub process (endpoints, event consumer)."""
    async with running_hub(settings) as service:
        yield service


@pytest.fixture(scope="session")
async def hub(hub_service: HubService) -> HubContext:
    """The serving hub's context, so tests can also call domain functions directly."""
    return hub_service.ctx


@pytest.fixture(scope="module")
async def two_hubs(settings: HubSettings, hub: HubContext) -> AsyncIterator[tuple[HubContext, HubContext]]:
    """The tests' hub and a second hub process on the same graph, for a test module: the bus hands each request to
    either. Starts once the tests' hub has done the work earlier tests handed it and the second hub has built its
    keyword index: a reader waits for the embedding of the creates before its read only so long
    (``index_wait_s``), and a test is to meet its own backlog, not theirs."""
    await hub.background.wait_for_earlier()
    async with running_hub(settings) as second:
        await second.ctx.keywords.catch_up()  # its keyword index built from the graph before the tests start
        yield hub, second.ctx
        for ctx in (hub, second.ctx):
            await ctx.background.wait_for_earlier()


def new_ai(kind: str = "a") -> str:
    return f"{kind}_{secrets.token_hex(6)}"


ClientFactory = Callable[..., Awaitable[RecallClient]]


@pytest.fixture
async def connect(stack: EmbeddedStack, hub: HubContext) -> AsyncIterator[ClientFactory]:
    """``await connect("a_x")`` gives a connected client for that AI id; all are closed after the test."""
    clients: list[RecallClient] = []

    async def factory(ai_id: str | None = None, **options: object) -> RecallClient:
        client = RecallClient(ai_id or new_ai(), stack.nats_url, **options)  # type: ignore[arg-type]
        await client.connect()
        clients.append(client)
        return client

    yield factory
    for client in clients:
        await client.close()


@pytest.fixture(scope="module")
def secure_stack(tmp_path_factory: pytest.TempPathFactory, bundle: AuthBundle) -> Iterator[EmbeddedStack]:
    """A stack whose nats-server runs the generated secure configuration of the module's ``bundle`` fixture."""
    with EmbeddedStack(tmp_path_factory.mktemp("secure-stack"), nats_config=bundle.server_config) as running:
        yield running


@pytest.fixture(scope="module")
async def secure_hub(
    request: pytest.FixtureRequest, secure_stack: EmbeddedStack, bundle: AuthBundle
) -> AsyncIterator[HubService]:
    """A hub with the module's generated hub credentials, on :func:`secure_stack`."""
    prefix = "recall_" + request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    async with secure_hub_on(secure_stack, bundle, prefix) as service:
        yield service


@asynccontextmanager
async def secure_hub_on(stack: EmbeddedStack, bundle: AuthBundle, graph_prefix: str) -> AsyncIterator[HubService]:
    """A hub with the generated hub credentials on a stack whose nats-server runs the generated config."""
    settings = HubSettings(
        nats_url=stack.nats_url,
        nats_creds=str(bundle.hub_creds),
        falkordb_url=stack.redis_url,
        redis_url=stack.redis_url,
        graph_name=f"{graph_prefix}_{secrets.token_hex(4)}",
        auth_required=True,
        embedder=EmbedderConfig(kind="hash"),
    )
    async with running_hub(settings) as service:
        yield service


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


def roster_bundle(base: Path, ops: list[str], agents: list[str]) -> AuthBundle:
    """NATS credentials for a roster of these identities (``recall auth init``'s code), generated under ``base``:
    what a module's ``bundle`` fixture returns for :func:`secure_stack` and :func:`secure_hub`."""
    roster = base / "roster.yaml"
    roster.write_text(json.dumps({"ops": ops, "agents": agents}))  # JSON is YAML
    return generate(roster, base / "auth")


async def team(
    connect: ClientFactory, members: int = 2, name: str = "team"
) -> tuple[RecallClient, str, list[RecallClient]]:
    """An ops, the group it created, and ``members`` agents it added to it."""
    ops = await connect(new_ai("o"))
    group = await ops.create_group(name)
    agents = [await connect() for _ in range(members)]
    for agent in agents:
        await ops.add_member(group.group_id, agent.ai_id)
    return ops, group.group_id, agents


async def until(what: str, check: Callable[[], object], within: float = 60.0) -> None:
    """Wait for a condition of the outside world (a process serving, a replica caught up, a gauge at
    zero), bounded: ``check`` returns a truth value or an awaitable of one; a RecallError or OSError
    while asking counts as not yet."""
    deadline = time.monotonic() + within
    while True:
        try:
            result = check()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return
        except (RecallError, OSError):
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within} s: {what}")
        await asyncio.sleep(0.05)


class World:
    """A group with its ops, a bead's creator, a member, an ex-member (removed), and an outsider."""

    def __init__(self, ops: RecallClient, group_id: str, creator: RecallClient, member: RecallClient,
                 ex_member: RecallClient, outsider: RecallClient) -> None:
        self.ops, self.group_id, self.creator, self.member = ops, group_id, creator, member
        self.ex_member, self.outsider = ex_member, outsider

    async def bead(self, visibility: Visibility, title: str = "A fact to check", **fields: object) -> MemoryBead:
        group = {"group_id": self.group_id} if visibility is Visibility.GROUP else {}
        return await self.creator.create_bead(title, visibility=visibility.value, **group, **fields)  # type: ignore[arg-type]


@pytest.fixture
async def world(connect: ClientFactory) -> World:
    ops = await connect(new_ai("o"))
    group = await ops.create_group("world")
    creator, member, ex_member, outsider = [await connect() for _ in range(4)]
    for agent in (creator, member, ex_member):
        await ops.add_member(group.group_id, agent.ai_id)
    await ops.remove_member(group.group_id, ex_member.ai_id)
    return World(ops, group.group_id, creator, member, ex_member, outsider)


_ROLE: contextvars.ContextVar[str] = contextvars.ContextVar("role", default="")


class Interleaved:
    """Another writer's operation, ``other``, lands right after the ``after``-th graph query of the operation under
    test (or after that operation, if it makes fewer): each query boundary a place where another hub's write can
    land. ``other`` runs as its own task until its first write is committed; what it does after that (after-commit
    work that may wait for the locks of the operation under test) goes on beside it, and :meth:`run` waits for it at
    the end. Only the queries of the two operations count — not those of the hubs' background work. ``hubs``: the
    hub contexts the two operations run in (the other may run in a second one, a hub process of its own)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, hubs: HubContext | Sequence[HubContext], after: int,
                 other: Callable[[], Awaitable[object]]) -> None:
        self.after, self.other, self.calls = after, other, 0
        self.task: asyncio.Task[object] | None = None
        self.wrote = asyncio.Event()

        def writes(kwargs: dict[str, object]) -> bool:
            return not kwargs.get("read_only", True)

        for graph in {id(h.graph): h.graph for h in ([hubs] if isinstance(hubs, HubContext) else hubs)}.values():
            monkeypatch.setattr(graph, "query", self._wrap(graph.query, lambda kwargs: True))
            monkeypatch.setattr(graph, "values", self._wrap(graph.values, writes))
            monkeypatch.setattr(graph, "ro_query", self._wrap(graph.ro_query, lambda kwargs: False))

    def _wrap(self, original: Callable[..., Awaitable[object]],
              writes: Callable[[dict[str, object]], bool]) -> Callable[..., Awaitable[object]]:
        async def wrapped(*args: object, **kwargs: object) -> object:
            if _ROLE.get() == "under test":
                if self.task is None and self.calls == self.after:
                    await self._land()
                self.calls += 1
            result = await original(*args, **kwargs)
            if _ROLE.get() == "other" and writes(kwargs):
                self.wrote.set()
            return result
        return wrapped

    async def _land(self) -> None:
        context = contextvars.copy_context()
        context.run(_ROLE.set, "other")
        self.task = asyncio.create_task(self.other(), context=context)  # type: ignore[arg-type]
        wrote = asyncio.create_task(self.wrote.wait())
        await asyncio.wait({self.task, wrote}, return_when=asyncio.FIRST_COMPLETED)
        wrote.cancel()

    async def run(self, operation: Callable[[], Awaitable[object]]) -> None:
        token = _ROLE.set("under test")
        try:
            await operation()
        finally:
            _ROLE.reset(token)
        if self.task is None:
            await self._land()
        assert self.task is not None
        await self.task
