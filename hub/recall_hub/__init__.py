"""Nexus Recall hub: the service, its storage and retrieval, the CLI and the embedded stack."""

from recall_hub.config import HubSettings
from recall_hub.context import HubContext
from recall_hub.service.server import running_hub, serve_forever
from recall_hub.tooling.stack import EmbeddedStack

__all__ = ["EmbeddedStack", "HubContext", "HubSettings", "running_hub", "serve_forever"]
