"""FalkorDB access: one connection pool, the schema (indexes), and error mapping.

Every query the hub runs goes through :meth:`GraphStore.query` with parameters; no caller text is
ever spliced into Cypher. With a read replica (:mod:`recall_hub.store.replica`) read-only queries may
be served by it: writes, and reads that must see them, go to the primary.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis.exceptions
from falkordb.asyncio import FalkorDB
from recall_schemas import InvalidRequest, Unavailable
from redis.asyncio import Redis

from recall_hub.store.connections import once_more_if_broken, pool
from recall_hub.store.replica import REPLICA_READ_FAILURES, ReplicaRoute

log = logging.getLogger(__name__)
_T = TypeVar("_T")

VERBATIM_ABOVE_US = 1_000_000_000
"""FalkorDB's ``EFFECTS_THRESHOLD`` the hub needs: above it, a write query reaches the AOF and replicas as its
*effects* instead of its text. FalkorDB 4.x numbers a new property name while a query runs, before it commits,
so two writes that create names at once can commit in the other order; effects name properties by number, and a
replay (a restart from the AOF, a replica) then files values under the wrong names. Replicated as text, every
write is replayed in commit order and numbers its names again. So every write goes as text: no write takes
1,000 s."""

FALKORDB_ARGS = ("CMD_INFO", "no", "EFFECTS_THRESHOLD", str(VERBATIM_ABOVE_US))
"""The module arguments every FalkorDB the hub's tooling starts gets: no query telemetry (it would keep every
query's parameters, bead text included, in a stream) and writes replicated as text (:data:`VERBATIM_ABOVE_US`)."""


def params_header(params: dict[str, Any]) -> str:
    """The ``CYPHER name=value …`` header that carries a query's parameters (as FalkorDB's own client writes it,
    owned here so that the compact read path does not lean on the client's private method)."""
    return "CYPHER " + "".join(f"`{_identifier(name)}`={cypher_literal(value)} " for name, value in params.items())


def cypher_literal(value: Any) -> str:
    """A parameter value as a Cypher literal: strings quoted and escaped, maps with backticked keys."""
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(cypher_literal(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"`{_identifier(key)}`:{cypher_literal(item)}" for key, item in value.items()) + "}"
    return str(value)


def _identifier(name: Any) -> str:
    text = str(name)
    if not text or "`" in text:  # FalkorDB's header parser has no escape for a backtick
        raise InvalidRequest(f"not a usable parameter or key name: {text!r}")
    return text

INDEXES = [
    "CREATE INDEX FOR (b:Bead) ON (b.bead_id)",
    "CREATE INDEX FOR (b:Bead) ON (b.idem)",
    "CREATE INDEX FOR (b:Bead) ON (b.group_id)",
    "CREATE INDEX FOR (b:Bead) ON (b.session_id)",
    "CREATE INDEX FOR (b:Bead) ON (b.created_by)",
    "CREATE INDEX FOR (b:Bead) ON (b.created_at)",
    "CREATE INDEX FOR (b:Bead) ON (b.tags)",
    "CREATE INDEX FOR (b:Bead) ON (b.content_hash)",
    "CREATE INDEX FOR (b:Bead) ON (b.visibility)",
    "CREATE INDEX FOR (a:AI) ON (a.ai_id)",
    "CREATE INDEX FOR (g:Group) ON (g.group_id)",
    "CREATE INDEX FOR (s:Session) ON (s.session_id)",
    "CREATE INDEX FOR (o:Outbox) ON (o.bead_id)",
    "CREATE INDEX FOR (o:Outbox) ON (o.entry_id)",
    "CREATE INDEX FOR (o:Outbox) ON (o.at)",
    "CREATE INDEX FOR (t:Tombstone) ON (t.bead_id)",
    "CREATE INDEX FOR (t:Tombstone) ON (t.deny_scope)",
]
DROP_FULLTEXT = "CALL db.idx.fulltext.drop('Bead')"
"""The first release kept a full-text index of beads in the graph; keyword search is tantivy's now
(:mod:`recall_hub.store.keyword_index`), so the graph index only slowed every write."""


QUERY_REPLY_TIMEOUT_S = 30.0
"""How long a graph query may take before the graph store counts as unreachable (redis-py would give up
after 5 s: a large read — a backup's snapshot, a reindex page — or a loaded machine can take longer)."""


class GraphStore:
    def __init__(
        self, url: str, graph_name: str, max_connections: int = 32, replica: ReplicaRoute | None = None
    ) -> None:
        self._pool = pool(url, max_connections=max_connections, socket_timeout=QUERY_REPLY_TIMEOUT_S)
        self._db = FalkorDB(connection_pool=self._pool)
        self.graph = self._db.select_graph(graph_name)
        self.graph_name = graph_name
        self.replica = replica
        self._replica_graph = (
            None if replica is None
            else FalkorDB(connection_pool=replica.replica.connection_pool).select_graph(graph_name)
        )

    async def ensure_schema(self) -> None:
        """Writes replicated as text (:data:`VERBATIM_ABOVE_US`), then the indexes."""
        await self._ensure_writes_replicated_as_text()
        existing = await self._existing_indexes()
        for statement in INDEXES:
            label, prop = _index_target(statement)
            if (label, prop) not in existing:
                try:
                    await self.query(statement)
                except redis.exceptions.ResponseError as exc:
                    if "already indexed" not in str(exc):  # another hub starting beside this one made it
                        raise
        if ("Bead", "title", "fulltext") in existing:
            await self.query(DROP_FULLTEXT)

    async def _ensure_writes_replicated_as_text(self) -> None:
        try:
            if await self.replicates_writes_as_text():
                return
            await self.replicate_writes_as_text()
        except redis.exceptions.ResponseError as exc:
            log.error(
                "FalkorDB replicates long writes as effects and refused EFFECTS_THRESHOLD %d (%s): after a restart "
                "from its AOF, or on a replica, properties written by concurrent queries can carry the wrong names. "
                "Start it with `EFFECTS_THRESHOLD %d`.", VERBATIM_ABOVE_US, exc, VERBATIM_ABOVE_US,
            )
            return
        log.warning(
            "FalkorDB was started replicating long writes as effects, which a restart from its AOF or a replica can "
            "replay with properties under the wrong names; the hub set EFFECTS_THRESHOLD %d until it restarts. "
            "Start it with `EFFECTS_THRESHOLD %d` (the embedded stack and compose/ do).",
            VERBATIM_ABOVE_US, VERBATIM_ABOVE_US,
        )

    async def _existing_indexes(self) -> set[tuple[str, ...]]:
        found: set[tuple[str, ...]] = set()
        try:
            result = await self.graph.ro_query("CALL db.indexes() YIELD label, properties, types")
        except redis.exceptions.ResponseError:
            return found  # the graph does not exist yet
        for label, props, types in result.result_set:
            for prop in props:
                found.add((label, prop))
                kinds = types.get(prop, []) if isinstance(types, dict) else []
                if "FULLTEXT" in kinds:
                    found.add((label, prop, "fulltext"))
        return found

    async def query(self, cypher: str, params: dict[str, Any] | None = None) -> list[list[Any]]:
        """Run a (possibly writing) query on the primary; its rows."""
        self._note_write()
        return await self._run(self.graph.query, cypher, params)

    async def ro_query(self, cypher: str, params: dict[str, Any] | None = None) -> list[list[Any]]:
        """Run a read-only query (on the replica when this read may be stale); its rows."""
        return await self._read(lambda graph: self._run(graph.ro_query, cypher, params))

    async def _read(self, run: Callable[[Any], Awaitable[_T]]) -> _T:
        """``run(graph)`` on the replica's graph when the replica serves this read — on the primary's if
        that fails (the replica then stops serving) — else on the primary's, once more if its connection broke
        (a read changes nothing: the same done twice)."""
        replica = self.replica
        if self._replica_graph is not None and replica is not None and replica.serves_this_read():
            try:
                return await run(self._replica_graph)
            except (Unavailable, *REPLICA_READ_FAILURES) as exc:
                replica.read_failed(exc.__cause__ or exc)
        return await once_more_if_broken(lambda: run(self.graph))

    def _note_write(self) -> None:
        if self.replica is not None:
            self.replica.note_write()

    async def _run(self, execute: Any, cypher: str, params: dict[str, Any] | None) -> list[list[Any]]:
        _reject_nul(params)
        try:
            result = await execute(cypher, params or {})
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            raise Unavailable(f"graph store unreachable: {exc}") from exc
        return list(result.result_set)

    async def values(
        self, cypher: str, params: dict[str, Any] | None = None, *, read_only: bool = True
    ) -> Rows:
        """Run a query whose columns are plain values (strings, numbers, booleans, lists, maps — never nodes
        or edges: return ``properties(b)``); its rows, read by :func:`compact_value` without the FalkorDB client's
        coroutine per value (20 beads as property maps: about a third less time than as nodes)."""
        _reject_nul(params)
        query = params_header(params or {}) + cypher
        if not read_only:
            self._note_write()
            return await self._values(self.graph, "GRAPH.QUERY", query)
        return await self._read(lambda graph: self._values(graph, "GRAPH.RO_QUERY", query))

    async def _values(self, graph: Any, command: str, query: str) -> Rows:
        try:
            reply = await graph.execute_command(command, self.graph_name, query, "--compact")
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            raise Unavailable(f"graph store unreachable: {exc}") from exc
        rows = Rows(compact_rows(reply))
        rows.exec_ms = _execution_ms(reply[-1])
        return rows

    @property
    def server(self) -> Redis:
        """A client of the primary server itself, for what is not a graph query (its configuration, logs and
        files)."""
        return self._db.connection  # type: ignore[no-any-return]

    async def records_telemetry(self) -> bool:
        """Whether FalkorDB records every query of this server, parameters included, in a stream per graph
        (``CMD_INFO``, on by default: the embedded stack starts it off)."""
        return await self._setting("CMD_INFO") in (1, True, "yes", b"yes")  # None: a FalkorDB without it

    async def replicates_writes_as_text(self) -> bool:
        """Whether every write reaches the AOF and replicas as its query text (:data:`VERBATIM_ABOVE_US`)."""
        setting = await self._setting("EFFECTS_THRESHOLD")
        return setting is None or int(setting) >= VERBATIM_ABOVE_US  # None: a FalkorDB without effects

    async def _setting(self, name: str) -> Any:
        """A FalkorDB module setting (``GRAPH.CONFIG GET``); None where this FalkorDB has no such setting."""
        try:
            return await self._db.config_get(name)
        except redis.exceptions.ResponseError:
            return None

    async def replicate_writes_as_text(self) -> None:
        """Set :data:`VERBATIM_ABOVE_US` on the running server (it lasts until the server restarts)."""
        await self._db.config_set("EFFECTS_THRESHOLD", VERBATIM_ABOVE_US)

    async def ping(self) -> None:
        try:
            await once_more_if_broken(self._db.connection.ping)
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            raise Unavailable(f"graph store unreachable: {exc}") from exc

    async def aclose(self) -> None:
        await self._pool.disconnect()


class Rows(list[list[Any]]):
    """Result rows of :meth:`GraphStore.values`, with FalkorDB's own execution time (for measurements)."""

    exec_ms: float = 0.0


def _execution_ms(stats: list[Any]) -> float:
    for stat in stats:
        text = stat.decode() if isinstance(stat, bytes) else str(stat)
        if "internal execution time" in text:
            return float(text.split(": ")[1].split(" ")[0])
    return 0.0


_NULL, _STRING, _INTEGER, _BOOLEAN, _DOUBLE, _ARRAY, _MAP = 1, 2, 3, 4, 5, 6, 10


def compact_rows(reply: list[Any]) -> list[list[Any]]:
    """The rows of a ``--compact`` query reply, as plain values (none when the query returns no columns)."""
    return [[compact_value(cell) for cell in row] for row in reply[1]] if len(reply) == 3 else []


def compact_value(cell: list[Any]) -> Any:
    """One value of FalkorDB's compact result set: ``[type, payload]``."""
    kind, payload = cell
    if kind == _STRING:
        return payload.decode() if type(payload) is bytes else payload
    if kind == _INTEGER:
        return int(payload)
    if kind == _MAP:  # the common case (properties of a bead) read inline: most of its values are scalars
        found = {}
        pairs = iter(payload)
        for key, (value_kind, value) in zip(pairs, pairs, strict=True):
            name = key.decode() if type(key) is bytes else key
            if value_kind == _STRING:
                found[name] = value.decode() if type(value) is bytes else value
            elif value_kind == _INTEGER:
                found[name] = int(value)
            else:
                found[name] = compact_value([value_kind, value])
        return found
    if kind == _NULL:
        return None
    if kind == _ARRAY:
        return [compact_value(item) for item in payload]
    if kind == _BOOLEAN:
        return payload in (b"true", "true")
    if kind == _DOUBLE:
        return float(payload)
    raise TypeError(f"values() reads plain values only, not FalkorDB type {kind}")


def _reject_nul(value: Any) -> None:
    """The FalkorDB client inlines parameters into the query text, where a NUL would end it."""
    if isinstance(value, str):
        if "\x00" in value:
            raise InvalidRequest("NUL characters cannot be stored")
    elif isinstance(value, dict):
        for item in value.values():
            _reject_nul(item)
    elif isinstance(value, list | tuple):
        for item in value:
            _reject_nul(item)


def _index_target(statement: str) -> tuple[str, str]:
    # "CREATE INDEX FOR (b:Bead) ON (b.bead_id)" -> ("Bead", "bead_id")
    label = statement.split(":", 1)[1].split(")", 1)[0]
    prop = statement.rsplit(".", 1)[1].rstrip(")")
    return label, prop
