"""What a bench run measured: ingest throughput, per-operation latency with the in-process hub's share
of it, and the report that gathers them with the data, the machine and the configuration."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime

from recall_hub.bench.config import BenchConfig
from recall_hub.bench.corpus import DatasetSummary
from recall_hub.bench.machine import MachineInfo
from recall_hub.bench.stats import mean, percentile


@dataclass(frozen=True)
class HubTime:
    """Where an operation's time went, in means per request (ms), so the parts add up: the client's round
    trip, the in-process hub's time in FalkorDB, the embedder and the vector sets, and the rest (NATS,
    (de)serialisation, the hub's own code and the event loop)."""

    mean_ms: float
    """The client's round trip."""
    graph_queries: float
    graph_ms: float
    """FalkorDB calls as the hub sees them: round trip + parsing of the reply."""
    falkordb_exec_ms: float
    """FalkorDB's own reported execution time, within ``graph_ms``."""
    client_parse_ms: float
    """``graph_ms`` less the round trips alone: the reading of the replies."""
    embed_ms: float
    vectors_ms: float
    rest_ms: float


@dataclass
class OpResult:
    name: str
    op: str
    samples_ms: list[float] = field(repr=False)
    errors: int = 0
    request_bytes: int = 0
    reply_bytes: int = 0
    result_size: float = 0.0
    result_unit: str = ""
    target_ms: float | None = None
    hub_ms: dict[str, list[float]] = field(default_factory=dict, repr=False)
    """Per bucket of :data:`~recall_hub.bench.probes.PROBE_BUCKETS`, per sample: the in-process hub's time
    there (ms)."""
    graph_queries: float = 0.0
    """Mean FalkorDB queries per request (in-process hub only)."""

    @property
    def n(self) -> int:
        return len(self.samples_ms)

    def p(self, q: float) -> float:
        return percentile(self.samples_ms, q)

    def hub_time(self) -> HubTime | None:
        """The round trip split between the hub's parts; None without an in-process hub's probe."""
        if not self.hub_ms:
            return None
        total, graph = mean(self.samples_ms), mean(self.hub_ms["graph"])
        embed, vectors = mean(self.hub_ms["embed"]), mean(self.hub_ms["vectors"])
        return HubTime(
            mean_ms=total,
            graph_queries=self.graph_queries,
            graph_ms=graph,
            falkordb_exec_ms=mean(self.hub_ms["falkordb"]),
            client_parse_ms=graph - mean(self.hub_ms["graph_rt"]),
            embed_ms=embed,
            vectors_ms=vectors,
            rest_ms=total - graph - embed - vectors,
        )


@dataclass
class Throughput:
    name: str
    count: int
    seconds: float
    errors: int
    latencies_ms: list[float] = field(repr=False)

    @property
    def per_second(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else math.nan


@dataclass
class BenchReport:
    config: BenchConfig
    machine: MachineInfo
    dataset: DatasetSummary
    setup: str
    started_at: datetime
    duration_s: float
    ingest: list[Throughput]
    floor: OpResult
    ops: list[OpResult]
    command: str
    gc_pauses: list[tuple[int, float]] = field(default_factory=list, repr=False)
    """(generation, ms) of each Python garbage collection while latency was timed."""
