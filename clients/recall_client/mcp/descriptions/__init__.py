"""What an LLM reads about each tool: its title, its description (what it is for, when to prefer it over
another tool, its limits) and the descriptions of its parameters, by tool name.

Only text lives here; how a tool behaves (its operation, hints, the fields the sidecar fills, how its
reply is rendered) is in :mod:`recall_client.mcp.tools`, which reads each tool's text from
:data:`TOOL_TEXTS`. A description starts with "Use" and says when to reach for the tool.
"""

from __future__ import annotations

from .coordination import COORDINATION_TEXTS
from .memory import MEMORY_TEXTS
from .shared import ToolText

TOOL_TEXTS: dict[str, ToolText] = {**MEMORY_TEXTS, **COORDINATION_TEXTS}

__all__ = ["TOOL_TEXTS", "ToolText"]
