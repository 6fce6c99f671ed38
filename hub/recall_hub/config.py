"""Hub configuration, from arguments or `RECALL_*` environment variables."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from recall_hub.embedders import EmbedderConfig


class HubSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RECALL_", env_nested_delimiter="__", extra="ignore")

    nats_url: str = "nats://127.0.0.1:4222"
    nats_creds: str | None = Field(default=None, description="Path to the hub's NATS credentials file")
    nats_user: str | None = None
    nats_password: str | None = None
    falkordb_url: str = "redis://127.0.0.1:6379"
    redis_url: str = "redis://127.0.0.1:6379"
    graph_name: str = Field(
        default="recall", pattern=r"^[A-Za-z0-9_\-]{1,64}$",
        description="Names the graph and prefixes every Redis key: one Redis can hold several isolated hubs",
    )
    max_payload_bytes: int = Field(default=512 * 1024, description="Requests larger than this are refused")
    max_concurrency: int = Field(default=64, description="Requests handled at once by one hub process")
    auth_required: bool = Field(default=False, description="False only in the embedded dev mode")
    embedder: EmbedderConfig = Field(
        default_factory=EmbedderConfig, description="RECALL_EMBEDDER__KIND=local|openai|hash, …"
    )
    vector_quantization: str = Field(default="Q8", description="Q8, BIN or NOQUANT (VADD)")
    auto_related: bool = Field(default=True, description="Link a new bead RELATED_TO its nearest beads")
    related_threshold: float = Field(default=0.75, ge=-1, le=1, description="Cosine needed for RELATED_TO")
    related_max: int = Field(default=3, ge=0, le=20)
    applied_event_ttl_s: int = Field(
        default=7 * 86_400, ge=60,
        description="How long an applied event id is remembered (longer than the events stream keeps events)",
    )
    auto_follows: bool = Field(default=True, description="Link a new bead FOLLOWS_FROM its session's previous")
