"""What every tool text is made of: :class:`ToolText`, and the parameter descriptions several tools share."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ToolText:
    """What an LLM reads about one tool."""

    title: str
    description: str
    params: Mapping[str, str] = field(default_factory=dict)
    """Parameter descriptions for the LLM, by request field; a field's own description is the fallback."""


BEAD_ID = "Id of the bead (memory), 'b_' followed by 4–32 lowercase letters/digits, as returned by other tools."
LIMIT = "Maximum number of results (1–500)."
FILTERS = (
    "Optional constraints, all of which must hold: tags (the bead carries every one), bead_types, "
    "session_id, group_id, created_by (an AI id), visibility, min_importance/max_importance (0–10), "
    "created_after/created_before (ISO 8601), status ('active'/'archived'; default any, archived rank lower), "
    "valid_at (ISO 8601: only facts that held then)."
)
REL_TYPES = (
    "Relationship types to follow; empty means all. FOLLOWS_FROM (came after/because of), RELATED_TO "
    "(about the same thing), UPDATES (supersedes), PART_OF (is a piece of)."
)
DIRECTION = "'out' (edges from this bead), 'in' (edges to it) or 'both' (default)."
SESSION_ID = "Id of the session, 's_' followed by 4–32 lowercase letters/digits."
GROUP_ID = "Id of the group, 'g_' followed by 4–32 lowercase letters/digits (see list_groups)."
VISIBILITY = (
    "Who may read the bead: 'private' (only you; the default), 'group' (current members of group_id; "
    "needs group_id) or 'global' (every agent on the hub). Enforced by the hub on every read."
)
AS_OF = "Optional ISO 8601 time with zone: answer as memory was then (later beads absent, old versions shown)."
IF_VERSION = (
    "Optional: the version you read. The change applies only if nobody changed it since; otherwise the "
    "answer is 'conflict' with the current version: read again and redo your change on what you find."
)
