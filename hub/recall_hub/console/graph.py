"""A group's memory as nodes and edges, for the graph page, read through the hub as one identity.

Nodes: the group's beads (``get_by_group``, newest first, 500 a page, up to ``limit``), filtered
by tag, type, session and time range. Edges: ``get_edges`` (one read per 500 beads) for the first
``edges_for`` nodes shown (all of them by default) — the page says how many nodes that covers. An edge
is kept when both its ends are shown.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from recall_client import RecallClient
from recall_schemas import BeadList, BeadType, GetByGroup, MemoryBead

from .html import EDGE_COLOURS, TYPE_COLOURS
from .state import SESSION_ID, BadInput, int_param

log = logging.getLogger(__name__)

TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/\-]{0,63}$")
MAX_NODES = 5000
LISTING_PAGE = 500
"""The most a listing request may ask for; longer listings go page by page (keyset cursor)."""
DEFAULT_NODES = 2000
MAX_EDGE_READS = MAX_NODES
DEFAULT_EDGE_READS = MAX_NODES


@dataclass(frozen=True)
class GraphFilters:
    tag: str = ""
    bead_type: str = ""
    session_id: str = ""
    since: datetime | None = None
    until: datetime | None = None
    limit: int = DEFAULT_NODES
    edges_for: int = DEFAULT_EDGE_READS

    @classmethod
    def parse(cls, params: Any) -> GraphFilters:
        """The filters of a query string; :class:`BadInput` naming the first bad one."""
        tag = (params.get("tag") or "").strip()
        if tag and not TAG.fullmatch(tag):
            raise BadInput("tag: letters, digits and _ . : / - only, at most 64.")
        bead_type = (params.get("type") or "").strip()
        if bead_type and bead_type not in {t.value for t in BeadType}:
            raise BadInput(f"type must be one of {', '.join(t.value for t in BeadType)}.")
        session_id = (params.get("session") or "").strip()
        if session_id and not SESSION_ID.fullmatch(session_id):
            raise BadInput("session must be a session id (s_ followed by 4–32 lowercase letters or digits).")
        since, until = _moment(params, "since"), _moment(params, "until")
        if since and until and since > until:
            raise BadInput("since must not be after until.")
        return cls(
            tag=tag, bead_type=bead_type, session_id=session_id, since=since, until=until,
            limit=int_param(params, "limit", DEFAULT_NODES, 1, MAX_NODES),
            edges_for=int_param(params, "edges", DEFAULT_EDGE_READS, 0, MAX_EDGE_READS),
        )

    def admits(self, bead: MemoryBead) -> bool:
        return (
            (not self.tag or self.tag in bead.tags)
            and (not self.bead_type or bead.bead_type.value == self.bead_type)
            and (not self.session_id or bead.session_id == self.session_id)
            and (self.since is None or bead.created_at >= self.since)
            and (self.until is None or bead.created_at <= self.until)
        )


def _moment(params: Any, name: str) -> datetime | None:
    raw = (params.get(name) or "").strip()
    if not raw:
        return None
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        raise BadInput(f"{name} must be a date or date and time (2025-01-31 or 2025-01-31T14:00).") from None
    if name == "until" and len(raw) == 10:  # a bare date includes that whole day
        moment = moment.replace(hour=23, minute=59, second=59, microsecond=999_999)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def node(bead: MemoryBead) -> dict[str, Any]:
    return {
        "id": bead.bead_id,
        "title": bead.title,
        "type": bead.bead_type.value,
        "importance": bead.importance,
        "tags": bead.tags,
        "session_id": bead.session_id,
        "created_by": bead.created_by,
        "created_at": bead.created_at.isoformat(),
        "visibility": bead.visibility.value,
        "status": bead.status.value,
    }


async def group_beads(client: RecallClient, group_id: str, limit: int) -> list[MemoryBead]:
    """Up to ``limit`` beads of the group, newest first, page after page."""
    beads: list[MemoryBead] = []
    cursor: str | None = None
    while len(beads) < limit:
        request = GetByGroup(group_id=group_id, limit=min(LISTING_PAGE, limit - len(beads)), cursor=cursor)
        reply = await client.call("get_by_group", request, BeadList)
        beads.extend(reply.beads)
        if reply.next_cursor is None or not reply.beads:
            break
        cursor = reply.next_cursor
    return beads


async def group_graph(client: RecallClient, group_id: str, filters: GraphFilters) -> dict[str, Any]:
    """The JSON of ``/api/groups/{group_id}/graph``; ``NotFound`` when the identity is not a member."""
    started = time.perf_counter()
    beads = await group_beads(client, group_id, filters.limit)
    listed = time.perf_counter()
    shown = [b for b in beads if filters.admits(b)]
    ids = {b.bead_id for b in shown}
    with_edges = [b.bead_id for b in shown[: filters.edges_for]]
    edges: dict[tuple[str, str, str], dict[str, Any]] = {}
    for rel in await client.get_edges(with_edges) if with_edges else []:
        if rel.from_id in ids and rel.to_id in ids:
            key = (rel.from_id, rel.to_id, rel.rel_type.value)
            edges[key] = {"source": rel.from_id, "target": rel.to_id, "type": rel.rel_type.value}
    done = time.perf_counter()
    return {
        "group_id": group_id,
        "nodes": [node(b) for b in shown],
        "edges": list(edges.values()),
        "listed": len(beads),
        "list_limit_reached": len(beads) >= filters.limit,
        "edges_read_for": len(with_edges),
        "edges_complete": len(with_edges) == len(shown),
        "type_colours": dict(TYPE_COLOURS),
        "edge_colours": dict(EDGE_COLOURS),
        "timing_ms": {"list": round((listed - started) * 1000), "edges": round((done - listed) * 1000)},
    }
