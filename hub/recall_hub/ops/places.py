"""Where a subject was met: the places named by the matching beads the caller may see.

A search (the same ranking, visibility and filters as ``search_beads``, hubs left out) finds the beads
about the subject — those holding the query's words, or as close to it in meaning as the hub's bar for
``RELATED_TO`` links (``RECALL_RELATED_THRESHOLD``, cosine 0.75); each names its places in its metadata,
as the collectors write them: ``file`` (or ``source``) and ``heading`` for a document; ``commit``,
``repo`` and ``subject`` for a commit; ``command`` and ``exit_code`` for a command run; its
``session_id`` names its session. Places are grouped by kind, the best-scoring first.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from recall_schemas import MemoryBead, Place, RankSource, RecallWhere, WhereResult

from recall_hub.context import HubContext
from recall_hub.retrieval.search import rank

_FIELD = {"file": "files", "commit": "commits", "session": "sessions", "command": "commands"}


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _matches(source: RankSource, related: float) -> bool:
    return source.list == "keyword" or source.raw_score >= related


def places_of(bead: MemoryBead) -> Iterator[tuple[str, str, str | None]]:
    """``(kind, place, detail)`` for every place a bead names."""
    meta = bead.metadata
    path = _text(meta.get("file")) or _text(meta.get("source"))
    if path:
        yield "file", path, _text(meta.get("heading"))
    sha = _text(meta.get("commit"))
    if sha:
        repo = _text(meta.get("repo"))
        yield "commit", f"{repo}@{sha}" if repo else sha, _text(meta.get("subject"))
    command = _text(meta.get("command"))
    if command:
        code = meta.get("exit_code")
        yield "command", command, f"exit {code}" if isinstance(code, int) else None
    if bead.session_id:
        yield "session", bead.session_id, None


async def recall_where(ctx: HubContext, caller: str, req: RecallWhere) -> WhereResult:
    hits = await rank(ctx, caller, req.query, req.filters, req.limit, include_hubs=False)
    # A search always fills its list (vector neighbours are near something); a place needs a real match:
    # the query's words, or a meaning as close as the hub's bar for linking beads RELATED_TO (an absolute
    # bar, not one relative to whatever else is stored).
    related = ctx.settings.related_threshold
    hits = [hit for hit in hits if any(_matches(source, related) for source in hit.explanation.sources)]
    found: dict[tuple[str, str], Place] = {}
    for hit in hits:  # best first
        seen: datetime = hit.bead.updated_at
        for kind, place, detail in places_of(hit.bead):
            entry = found.get((kind, place))
            if entry is None:
                found[(kind, place)] = Place(
                    kind=kind, place=place, detail=detail, bead_ids=[hit.bead.bead_id], score=hit.score, last_seen=seen,
                )
            else:
                entry.bead_ids.append(hit.bead.bead_id)
                entry.last_seen = max(entry.last_seen, seen)
    result = WhereResult()
    for (kind, _), entry in found.items():
        getattr(result, _FIELD[kind]).append(entry)
    return result
