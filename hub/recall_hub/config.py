"""Hub configuration, from arguments or `RECALL_*` environment variables."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class HubSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RECALL_", extra="ignore")

    nats_url: str = "nats://127.0.0.1:4222"
    nats_creds: str | None = Field(default=None, description="Path to the hub's NATS credentials file")
    nats_user: str | None = None
    nats_password: str | None = None
    falkordb_url: str = "redis://127.0.0.1:6379"
    redis_url: str = "redis://127.0.0.1:6379"
    graph_name: str = "recall"
    max_payload_bytes: int = Field(default=512 * 1024, description="Requests larger than this are refused")
    max_concurrency: int = Field(default=64, description="Requests handled at once by one hub process")
    auth_required: bool = Field(default=False, description="False only in the embedded dev mode")
