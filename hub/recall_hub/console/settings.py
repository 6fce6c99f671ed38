"""The console's settings, from arguments or ``RECALL_CONSOLE_*`` environment variables (docs/console.md)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ConsoleSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RECALL_CONSOLE_", extra="ignore")

    secret: str | None = Field(
        default=None, description="Signs the sign-in form's token; default a random key per process"
    )
    max_clients: int = Field(
        default=64, ge=1, le=10_000,
        description="Hub connections the console keeps open at once, one per identity in use; a new identity "
        "beyond it replaces the one idle the longest, or is refused when every one is busy",
    )
    client_idle_s: float = Field(
        default=600.0, gt=0, le=86_400,
        description="An identity's connection is closed after this long without a request or an open live feed",
    )
    allowed_hosts: str = Field(
        default="127.0.0.1,localhost,::1",
        description="Comma-separated host names the console answers to (the Host header, port aside); '*' for "
        "any. Keeps a page of another site from reaching a console on loopback by DNS rebinding",
    )

    @property
    def hosts(self) -> frozenset[str] | None:
        """The allowed host names, lower case; None when any host is allowed."""
        names = frozenset(h.strip().lower().strip("[]") for h in self.allowed_hosts.split(",") if h.strip())
        return None if "*" in names else names
