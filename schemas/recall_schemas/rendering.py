"""A bead as text, the one layout the hub's ``context`` blocks and the MCP sidecar's resources share."""

from __future__ import annotations

from recall_schemas.models import MemoryBead


def render_bead(bead: MemoryBead) -> str:
    """One bead as a header line and its body: ``[type | provenance | importance N | day | by ai | visibility |
    bead id] title``, then the content when it says more than the title. The bead id ends the header, so a
    rendered block can be cut before any bead's header."""
    header = (
        f"[{bead.bead_type.value} | {bead.provenance.value} | importance {bead.importance} | "
        f"{bead.created_at.date().isoformat()} | by {bead.created_by} | {bead.visibility.value} | {bead.bead_id}]"
    )
    body = bead.content if bead.content and bead.content != bead.title else ""
    return f"{header} {bead.title}" + (f"\n{body}" if body else "")
