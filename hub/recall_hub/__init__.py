"""Nexus Recall hub: the service, its storage and retrieval, the CLI and the embedded stack."""

from .config import HubSettings
from .context import HubContext
from .server import running_hub, serve_forever
from .stack import EmbeddedStack

__all__ = ["EmbeddedStack", "HubContext", "HubSettings", "running_hub", "serve_forever"]
