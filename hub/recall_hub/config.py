"""Hub configuration, from arguments or `RECALL_*` environment variables."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from recall_hub.embedders import EmbedderConfig
from recall_hub.extractors.base import ExtractorConfig
from recall_hub.rerankers.base import RerankerConfig


class HubSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RECALL_", env_nested_delimiter="__", extra="ignore")

    nats_url: str = "nats://127.0.0.1:4222"
    nats_creds: str | None = Field(default=None, description="Path to the hub's NATS credentials file")
    nats_user: str | None = None
    nats_password: str | None = None
    falkordb_url: str = "redis://127.0.0.1:6379"
    redis_url: str = "redis://127.0.0.1:6379"
    # --- read replicas (docs/operations.md "Replicas and failover"); unset: every read on the primary ---
    falkordb_replica_url: str | None = Field(
        default=None,
        description="A replica of falkordb_url; searches, listings, traversal, why and context read from it",
    )
    redis_replica_url: str | None = Field(
        default=None, description="A replica of redis_url; vector searches (VSIM) read from it"
    )
    replica_check_s: float = Field(
        default=0.5, gt=0, le=10,
        description="How often a hub checks its replicas' link and offset; a serving replica is at most "
        "about two checks behind other writers",
    )
    replica_ack_timeout_ms: int = Field(
        default=100, ge=1, le=10_000,
        description="How long a write request waits (WAIT) for the replicas to have its writes; one that "
        "does not acknowledge in time stops serving reads until it has caught up",
    )
    graph_name: str = Field(
        default="recall", pattern=r"^[A-Za-z0-9_\-]{1,64}$",
        description="Names the graph and prefixes every Redis key: one Redis can hold several isolated hubs",
    )
    max_payload_bytes: int = Field(default=512 * 1024, description="Requests larger than this are refused")
    max_concurrency: int = Field(default=64, description="Requests handled at once by one hub process")
    # --- fairness between identities (per hub process; docs/protocol.md "Limits and deadlines") ---
    caller_max_running: int = Field(
        default=4, ge=1,
        description="Requests of one identity a hub process runs at once; its others wait their turn in line",
    )
    caller_max_requests: int = Field(
        default=1024, ge=1,
        description="Requests of one identity a hub process holds (running or waiting); more: `unavailable` (busy)",
    )
    caller_max_bytes: int = Field(
        default=8 << 20, ge=1,
        description="Payload bytes of the requests one identity has in a hub process; more: `unavailable` (busy). "
        "A request is always admitted when its caller has nothing else in progress",
    )
    bulk_max_running: int = Field(
        default=1, ge=1,
        description="Requests over 64 KiB a hub process runs at once, whoever sends them (the others wait their turn)",
    )
    deadline_grace_ms: int = Field(
        default=250, ge=0,
        description="How far a caller's clock may lag the hub's: a request is skipped once its Recall-Deadline "
        "plus this has passed",
    )
    endpoint_pending_msgs: int = Field(
        default=4096, ge=16,
        description="Requests one endpoint's subscription buffers before the hub drops (NATS slow consumer)",
    )
    endpoint_pending_bytes: int = Field(
        default=32 << 20, ge=1 << 20,
        description="Bytes one endpoint's subscription buffers before the hub drops (NATS slow consumer)",
    )
    auth_required: bool = Field(default=False, description="False only in the embedded dev mode")
    embedder: EmbedderConfig = Field(
        default_factory=EmbedderConfig, description="RECALL_EMBEDDER__KIND=local|e5-small|openai|hash, …"
    )
    reranker: RerankerConfig = Field(
        default_factory=RerankerConfig,
        description="RECALL_RERANKER__URL/__MODEL/__API_KEY/__API/__TIMEOUT_MS/__TOP_N/__MAX_CHARS: a cross-encoder "
        "behind <url>/rerank reorders the best fused candidates of a search; no URL: the fused order",
    )
    extractor: ExtractorConfig = Field(
        default_factory=ExtractorConfig,
        description="RECALL_EXTRACTOR__URL/__MODEL/__API_KEY/__TIMEOUT_S: the LLM remember_extracted asks; no URL: "
        "a deterministic outline of the text",
    )
    vector_quantization: str = Field(default="Q8", description="Q8, BIN or NOQUANT (VADD)")
    sentence_vectors: bool = Field(
        default=True,
        description="A bead within the model's window with two sentences or more also gets a vector of each "
        "sentence, pooled from the same model run (the local model; no extra inference, more vectors kept); "
        "applies to beads embedded from then on",
    )
    late_interaction: bool = Field(
        default=True,
        description="Each bead keeps the signs of the model's outputs for its words (the local model; 48 bytes a "
        "word token of its first window, from the same model run), and hybrid search adds how well the query's "
        "words match them one by one to the fused relevance; applies to beads embedded from then on",
    )
    auto_related: bool = Field(default=True, description="Link a new bead RELATED_TO its nearest beads")
    related_threshold: float = Field(default=0.75, ge=-1, le=1, description="Cosine needed for RELATED_TO")
    related_max: int = Field(default=3, ge=0, le=20)
    applied_event_ttl_s: int = Field(
        default=7 * 86_400, ge=60,
        description="How long an applied event id is remembered (longer than the events stream keeps events)",
    )
    outbox_interval_s: float = Field(
        default=5.0, gt=0, description="How often a hub sweeps the outbox for work a crash or a failure left"
    )
    access_flush_s: float = Field(
        default=1.0, gt=0, le=60, description="How often a hub writes the read times (accessed_at) it has noted"
    )
    outbox_grace_ms: int = Field(
        default=10_000, ge=0,
        description="A sweep leaves entries younger than this to the request settling them (a batch under load "
        "can take seconds)"
    )
    index_log_max: int = Field(
        default=500_000, ge=1000,
        description="Entries the index log keeps; a hub that falls further behind rebuilds its keyword index",
    )
    keyword_context_weight: float = Field(
        default=0.3, ge=0, le=1,
        description="How much a word of the bead a bead follows (FOLLOWS_FROM: the question before an answer) counts "
        "in keyword search against a word of the bead itself; 0: not at all",
    )
    bead_cache_size: int = Field(
        default=50_000, ge=0,
        description="Beads whose properties a hub process keeps after reading them, so a search's page or a "
        "traversal is checked in the graph without carrying them again (about 3.5 KB each with 370-character "
        "contents; 0: none kept)",
    )
    signs_cache_size: int = Field(
        default=20_000, ge=0,
        description="Beads whose token signs (late interaction) a hub process keeps after reading them, so a "
        "search need not read them again (at most ~2.3 KB each; another hub's change of a bead's text shows in "
        "ranking within 30 s; 0: none kept)",
    )
    index_wait_s: float = Field(
        default=5.0, gt=0, le=60,
        description="How long a search waits for the keyword index to reach its caller's last write",
    )
    create_settle: Literal["inline", "background"] = Field(
        default="background",
        description="background: create_bead replies after the commit and the index-log entry, its vector, links "
        "and feed entry follow, and every later read of them, by anyone at any hub, waits for that work; inline: "
        "it replies once they are done (`recall bench --create-settle` measures either)",
    )
    auto_follows: bool = Field(default=True, description="Link a new bead FOLLOWS_FROM its session's previous")
    stream_replicas: int = Field(
        default=1, ge=1, le=5,
        description="Copies JetStream keeps of the events and dead-letter streams (and the hub's consumer): 3 in a "
        "3-node cluster, so losing a node loses no acknowledged event",
    )
    # --- observability (docs/operations.md "Observability") ---
    metrics_port: int | None = Field(
        default=None, ge=0, le=65535,
        description="HTTP port of /metrics, /healthz and /readyz; 0: any free port; unset, '' or 'off': no server "
        "(`recall hub` defaults to 9464)",
    )
    metrics_host: str = Field(
        default="127.0.0.1", description="Address the metrics and health server binds (0.0.0.0 in a container)"
    )
    log_format: Literal["text", "json"] = Field(
        default="text",
        description="`recall` logs as text or as JSON lines with request id, caller and op (an application embedding "
        "the hub applies it with recall_hub.logs.configure)",
    )
    tracing: bool = Field(
        default=False,
        description="A server span per request, continuing the client's W3C trace (needs the [otel] extra)",
    )
    # --- retention: nothing grows without bound (docs/operations.md) ---
    events_max_age_s: int = Field(
        default=3 * 86_400, ge=60, description="RECALL_EVENTS keeps an event this long (replay window)"
    )
    events_max_bytes: int = Field(
        default=1 << 30, ge=1 << 20, description="RECALL_EVENTS size; the oldest events go first"
    )
    event_max_bytes: int = Field(
        default=512 * 1024, ge=1024, le=1 << 20,
        description="Largest event: the stream refuses bigger publishes, the hub dead-letters bigger messages",
    )
    dead_letters_max_age_s: int = Field(default=30 * 86_400, ge=60, description="RECALL_DLQ keeps a letter this long")
    dead_letters_max_bytes: int = Field(default=256 << 20, ge=1 << 20, description="RECALL_DLQ size")
    dead_letter_excerpt_bytes: int = Field(
        default=1024, ge=0, le=16_384, description="Bytes of a dead event's payload copied into its letter"
    )
    event_max_deliveries: int = Field(
        default=8, ge=1, le=100, description="Attempts at an event whose store is unavailable before it is dead"
    )
    event_retry_delay_s: float = Field(default=1.0, gt=0, description="Back-off step between those attempts")
    event_apply_timeout_s: float = Field(
        default=20.0, gt=0, le=300, description="Applying one event longer than this counts as unavailable"
    )
    audit_maxlen: int = Field(default=100_000, ge=100, description="Entries kept per identity's audit stream")
    audit_bead_maxlen: int = Field(default=1_000, ge=10, description="Entries kept per bead's audit stream")
    audit_bead_ttl_s: int = Field(
        default=90 * 86_400, ge=60, description="A bead's audit stream expires this long after its last entry"
    )
    kv_max_keys: int = Field(default=10_000, ge=1, description="Key-value memories per identity")
    kv_max_bytes: int = Field(
        default=16 << 20, ge=1024, description="Bytes of key-value memory per identity (keys + stored values)"
    )
    kv_recall_scan_max: int = Field(
        default=2_000, ge=10, description="Key-value entries unified_recall examines per request"
    )
    forget_similarity: float = Field(
        default=0.92, ge=0, le=1,
        description="Cosine at which new content counts as a near duplicate of forgotten content and is refused",
    )

    @field_validator("metrics_port", mode="before")
    @classmethod
    def _metrics_off(cls, value: object) -> object:
        return None if isinstance(value, str) and value.strip().lower() in ("", "off", "none") else value

    @model_validator(mode="after")
    def _applied_events_outlive_the_stream(self) -> HubSettings:
        # An event still in the stream can be delivered again (redelivery, a new consumer, a replay);
        # if its applied-id had expired by then, an old membership event could undo a newer one.
        if self.applied_event_ttl_s <= self.events_max_age_s:
            raise ValueError(
                f"applied_event_ttl_s ({self.applied_event_ttl_s}) must exceed events_max_age_s "
                f"({self.events_max_age_s}): an event id must be remembered while the event can be redelivered"
            )
        return self
