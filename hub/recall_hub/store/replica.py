"""A read replica: which server a read goes to, and how a write waits for the replica.

The rule (docs/operations.md, "Replicas and failover"):

- Writes always go to the primary. So do reads, unless the request is one whose reads may be stale
  (searches, listings, traversal, why, context: :data:`recall_hub.ops.dispatch.STALE_READS`) and the
  replica is *serving*. Reads a store marks :func:`fresh_reads` (e.g. the membership cache) and reads
  outside a request (the outbox worker, the keyword index) use the primary too.
- Read-your-writes: a request that wrote returns only after every replica of the primary has
  acknowledged its writes (``WAIT``, at most ``RECALL_REPLICA_ACK_TIMEOUT_MS``). A replica that does
  not acknowledge in time stops serving at once, so a writer's next read — on any hub — finds its
  write on whichever server it is sent to.
- Staleness for everyone else: the replica serves while its link to the primary is up and it has
  applied everything the primary had written one check earlier (a check every ``RECALL_REPLICA_CHECK_S``),
  so a read sees other writers' changes at most about two checks late.
- A replica that is unreachable, lagging or failing a read stops serving, logged once; reads go to the
  primary and no caller sees an error. It serves again after a check finds its link up and a later check
  finds it caught up to the primary (no write can slip between the two without waiting for it).
- The primary unreachable: the replica serves the stale-tolerant reads (it holds everything acknowledged
  with the replica serving); writes, and every other read, answer ``unavailable``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import AsyncIterator, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field

import redis.exceptions
from recall_schemas.tasks import stop_tasks
from redis.asyncio import Redis

from recall_hub.store.connections import pool

log = logging.getLogger(__name__)

REPLICA_READ_FAILURES = (
    redis.exceptions.ConnectionError,  # also BusyLoadingError: a replica loading its copy
    redis.exceptions.TimeoutError,
    redis.exceptions.MasterDownError,  # replica-serve-stale-data no, link down
)
"""Errors of a read on the replica that send it (and the reads after it) to the primary."""


class Role(enum.Enum):
    PRIMARY = "primary"
    """The replica serves nothing; writes do not wait for it."""
    JOINING = "joining"
    """Writes wait for the replica; reads still go to the primary until a check finds it caught up."""
    SERVING = "serving"
    """Stale-tolerant reads go to the replica."""


@dataclass
class _Request:
    stale_reads: bool
    wrote: set[ReplicaRoute] = field(default_factory=set)


_request: ContextVar[_Request | None] = ContextVar("recall_request", default=None)
_fresh: ContextVar[bool] = ContextVar("recall_fresh_reads", default=False)


@contextlib.asynccontextmanager
async def request_scope(*, stale_reads: bool) -> AsyncIterator[None]:
    """One request (or one piece of handed-off work): whether its reads may come from a replica; when it
    succeeds, it returns once the replicas have acknowledged what it wrote."""
    scope = _Request(stale_reads)
    token = _request.set(scope)
    try:
        yield
    finally:
        _request.reset(token)
    for route in scope.wrote:
        await route.barrier()


@contextlib.contextmanager
def fresh_reads() -> Iterator[None]:
    """Reads in this block go to the primary, even in a request whose reads may be stale."""
    token = _fresh.set(True)
    try:
        yield
    finally:
        _fresh.reset(token)


def stale_reads_allowed() -> bool:
    scope = _request.get()
    return scope is not None and scope.stale_reads and not _fresh.get()


class ReplicaRoute:
    """One primary and its read replica (the graph's, or the vector sets' Redis)."""

    def __init__(
        self,
        name: str,
        primary_url: str,
        replica_url: str,
        barrier_key: str,
        *,
        check_s: float = 0.5,
        ack_timeout_ms: int = 100,
        max_connections: int = 64,
    ) -> None:
        self.name = name
        self.replica_url = replica_url
        # No retries (a failed read goes to the primary at once) and bounded waits (a hung replica is a failed one).
        self.replica = Redis(connection_pool=pool(
            replica_url, max_connections=max_connections, socket_connect_timeout=2, socket_timeout=10,
        ))
        self._primary = Redis.from_pool(pool(
            primary_url, socket_connect_timeout=2, socket_timeout=5 + ack_timeout_ms / 1000
        ))
        self._barrier_key = barrier_key
        self.check_s = check_s
        self.ack_timeout_ms = ack_timeout_ms
        self.role = Role.PRIMARY
        self.reason = "not checked yet"
        self._primary_offset_before: int | None = None
        self._replicas = 1
        self._watcher: asyncio.Task[None] | None = None

    # --- routing ------------------------------------------------------------------------------------

    def serves_this_read(self) -> bool:
        return self.role is Role.SERVING and stale_reads_allowed()

    def note_write(self) -> None:
        scope = _request.get()
        if scope is not None:
            scope.wrote.add(self)

    def read_failed(self, exc: BaseException) -> None:
        """A read on the replica failed: this and the next reads go to the primary."""
        self._become(Role.PRIMARY, f"a read failed ({type(exc).__name__}: {exc})")

    async def barrier(self) -> None:
        """Wait until every replica has what this request wrote (or stop reading from the replica)."""
        if self.role is Role.PRIMARY:
            return
        pipe = self._primary.pipeline(transaction=False)
        pipe.incr(self._barrier_key)  # WAIT counts this connection's writes: this one follows the request's
        pipe.execute_command("WAIT", self._replicas, self.ack_timeout_ms)
        try:
            _, acknowledged = await pipe.execute()
        except redis.exceptions.RedisError as exc:
            log.debug("%s: no barrier, the primary is unreachable (%s)", self.name, exc)
            return  # the write itself failed then, or the next check tells
        if int(acknowledged) < self._replicas:
            self._become(Role.PRIMARY, f"did not acknowledge a write within {self.ack_timeout_ms} ms")

    # --- health -------------------------------------------------------------------------------------

    async def check(self) -> None:
        """Read both servers' replication state and decide whether the replica serves."""
        try:
            primary = await self._primary.info("replication")
        except redis.exceptions.RedisError:
            primary = None
        try:
            replica = await self.replica.info("replication")
        except redis.exceptions.RedisError as exc:
            self._become(Role.PRIMARY, f"unreachable ({type(exc).__name__})")
            return
        if replica.get("role") != "slave":
            self._become(Role.PRIMARY, "is not a replica (role master): promoted? point the hub at it as primary")
            return
        if primary is None:
            self._become(
                Role.SERVING, "the primary is unreachable: stale-tolerant reads from the replica, writes fail"
            )
            self._primary_offset_before = None
            return
        self._replicas = max(1, int(primary.get("connected_slaves", 1)))
        primary_offset = int(primary["master_repl_offset"])
        applied = int(replica.get("slave_repl_offset", replica.get("master_repl_offset", -1)))
        if replica.get("master_link_status") != "up":
            self._become(Role.PRIMARY, "its link to the primary is down")
        elif self.role is Role.PRIMARY:
            self._become(Role.JOINING, "link up; writes wait for it from now on")
        elif self.role is Role.JOINING:
            # primary_offset was read after the last write that did not wait for the replica.
            if applied >= primary_offset:
                self._become(Role.SERVING, "caught up with the primary")
        else:
            # Serving: it must have applied what the primary had one check ago (all of it, right after
            # the primary was unreachable).
            floor = primary_offset if self._primary_offset_before is None else self._primary_offset_before
            if applied < floor:
                self._become(Role.PRIMARY, f"lagging: applied offset {applied} is behind {floor}")
        self._primary_offset_before = primary_offset

    def _become(self, role: Role, reason: str) -> None:
        if role is self.role:
            return
        previous, self.role, self.reason = self.role, role, reason
        level = logging.WARNING if role is Role.PRIMARY and previous is Role.SERVING else logging.INFO
        log.log(level, "%s replica %s: %s -> %s: %s", self.name, self.replica_url, previous.value, role.value, reason)

    def start(self) -> None:
        if self._watcher is None:
            self._watcher = asyncio.create_task(self._watch(), name=f"recall-replica-{self.name}")

    async def _watch(self) -> None:
        while True:
            try:
                await self.check()
            except Exception:
                log.exception("%s replica check failed", self.name)
            await asyncio.sleep(self.check_s)  # a period, not a wait for anything

    async def aclose(self) -> None:
        if self._watcher is not None:
            await stop_tasks([self._watcher])
            self._watcher = None
        await self.replica.aclose()
        await self._primary.aclose()


def replica_routes(
    *,
    falkordb: tuple[str, str | None],
    redis: tuple[str, str | None],
    barrier_key: str,
    check_s: float,
    ack_timeout_ms: int,
) -> tuple[ReplicaRoute | None, ReplicaRoute | None]:
    """The graph's and the vector sets' routes from ``(primary URL, replica URL or None)``; one shared
    route when both name the same servers (the embedded layout: one Redis with the FalkorDB module)."""

    def route(name: str, urls: tuple[str, str | None]) -> ReplicaRoute | None:
        primary, replica = urls
        if not replica:
            return None
        return ReplicaRoute(name, primary, replica, barrier_key, check_s=check_s, ack_timeout_ms=ack_timeout_ms)

    graph = route("graph", falkordb)
    if graph is not None and redis == falkordb:
        return graph, graph
    return graph, route("vectors", redis)
