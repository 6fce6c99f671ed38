"""The records of a backup file, one JSON object a line: a header, the graph's nodes, then its edges,
then the Redis keys a backup holds, then a footer with the checksum of everything before it.

A node keeps the id it had in the graph the backup was read from only so that edges can name their
endpoints; restoring gives it a new one. Redis keys are named relative to the graph's namespace
(``kv:a_x``, ``changes:global``, ``audit:bead:<id>``), so a backup restores under any graph name. A
large hash or stream is split over several records, each holding a page of it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

FORMAT: Literal["nexus-recall-backup"] = "nexus-recall-backup"
VERSION = 1
"""The version of the record layout; a restore refuses any other."""

Consistency = Literal["one-transaction", "graph-then-redis"]
"""``one-transaction``: the graph and the Redis keys were read in one MULTI/EXEC (one server);
``graph-then-redis``: FalkorDB and Redis are separate servers, each read at its own instant."""


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Counts(_Record):
    nodes: dict[str, int] = Field(default_factory=dict, description="Nodes by label")
    edges: dict[str, int] = Field(default_factory=dict, description="Edges by type")
    keys: dict[str, int] = Field(default_factory=dict, description="Redis keys by family")


class Header(_Record):
    kind: Literal["header"] = "header"
    format: Literal["nexus-recall-backup"] = "nexus-recall-backup"
    version: int = VERSION
    graph: str = Field(description="The graph the backup was read from")
    created_at: datetime
    consistency: Consistency
    embedder_models: dict[str, int] = Field(
        default_factory=dict, description="Beads by the model their vector was made with (vectors are not kept)"
    )
    counts: Counts


class NodeRecord(_Record):
    kind: Literal["node"] = "node"
    id: int = Field(description="The node's id in the graph read; edges name their endpoints by it")
    labels: list[str]
    props: dict[str, Any]


class EdgeRecord(_Record):
    kind: Literal["edge"] = "edge"
    type: str
    start: int
    end: int
    props: dict[str, Any]


class HashRecord(_Record):
    kind: Literal["hash"] = "hash"
    name: str
    ttl_ms: int | None = None
    fields: dict[str, str]


class StreamRecord(_Record):
    kind: Literal["stream"] = "stream"
    name: str
    ttl_ms: int | None = None
    entries: list[tuple[str, dict[str, str]]] = Field(description="(entry id, fields), oldest first")


class StringRecord(_Record):
    kind: Literal["string"] = "string"
    name: str
    ttl_ms: int | None = None
    value: str


class Footer(_Record):
    kind: Literal["end"] = "end"
    records: int = Field(description="Records before this one, the header included")
    sha256: str = Field(description="Of those records' lines, newline included, as written")


KeyRecord = HashRecord | StreamRecord | StringRecord
Record = Annotated[
    Header | NodeRecord | EdgeRecord | HashRecord | StreamRecord | StringRecord | Footer, Field(discriminator="kind")
]
RECORD: TypeAdapter[Record] = TypeAdapter(Record)

