"""The Nexus Recall MCP sidecar (``recall-mcp``): an MCP server per agent that forwards every tool call
to the hub over NATS under the agent's own identity. Needs the ``mcp`` extra: ``pip install
'recall-client[mcp]'``.

>>> from recall_client.mcp import HubLink, build_server
>>> server = build_server(HubLink("a_worker1", "nats://127.0.0.1:4222"))   # an mcp MCPServer
"""

from .link import HubLink
from .server import build_server, main
from .tools import TOOL_SPECS, ToolSpec, tool_specs

__all__ = ["TOOL_SPECS", "HubLink", "ToolSpec", "build_server", "main", "tool_specs"]
