"""What one `recall bench` run is asked to do: data size, sampling, servers and the hub's settings."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class BenchConfig:
    beads: int = 10_000
    samples: int = 1000
    """Timed samples per operation."""
    concurrency: int = 32
    """Requests in flight during ingest."""
    nats_url: str | None = None
    falkordb_url: str | None = None
    redis_url: str | None = None
    """All three None: start an embedded stack in a temporary directory (or ``data_dir``)."""
    data_dir: Path | None = None
    """Where the embedded stack keeps its data; None: a temporary directory removed at the end."""
    seed: int = 7
    in_process_hub: bool = True
    """Serve the hub inside this process; False: a hub must already serve ``nats_url``."""
    graph_name: str | None = None
    """None: a fresh ``bench_<hex>`` graph (deleted at the end when the FalkorDB is external)."""
    warmup: int = 20
    """Untimed calls per operation before sampling."""
    rounds: int = 5
    """Samples are taken in this many interleaved rounds, so drift affects every operation alike."""
    related_per_bead: float = 2.0
    """Random RELATED_TO edges per bead, beside the FOLLOWS_FROM chains of sessions."""
    timeout: float = 30.0
    """Per-request timeout of the bench client (no retries: a failure is counted, not hidden)."""
    embedder: str | None = None
    """The in-process hub's embedder kind (``local``, ``hash``, ``openai``); None: the hub's default."""
    durability: str = "default"
    """The embedded stack's fsync settings (``tooling.stack.DURABILITY``): ``default`` or ``strict``."""
    create_settle: str = "background"
    """The in-process hub's ``create_settle``: ``background`` (the hub's default) or ``inline``."""

    def command(self) -> str:
        """The ``recall bench`` command line of this configuration (options left at their default omitted)."""
        parts = ["recall bench", f"--beads {self.beads}"]
        defaults = BenchConfig()
        for name in ("samples", "concurrency", "seed", "embedder", "durability", "create_settle"):
            value = getattr(self, name)
            if value != getattr(defaults, name):
                parts.append(f"--{name.replace('_', '-')} {value}")
        return " ".join(parts)
