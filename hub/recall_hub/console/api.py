"""JSON and event-stream endpoints: the graph page's data and the live change feed.

``GET /api/groups/{group_id}/graph`` — nodes and edges (``graph.py``), 400 on a bad filter, 404 when the
identity is not a member (exactly as for a group that does not exist).

``GET /api/feed/{group_id}/events`` — server-sent events: the last few changes (``event: change``), then
``event: ready`` once the stream is listening, then every change as it happens (``client.changes``),
and a comment every ``PING_S`` seconds. Each ``data:`` is one JSON object (cursor, action, bead id,
title, type, who, when); what the identity may not see never arrives (the hub filters the feed).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from recall_client import RecallClient
from recall_schemas import Change, RecallError
from recall_schemas.tasks import stop_tasks
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from .graph import GraphFilters, group_graph
from .state import GROUP_ID, client_of, status_of, valid_id

log = logging.getLogger(__name__)

BACKLOG = 20
"""Changes sent when a stream opens, before the live ones."""
PING_S = 15.0
MAX_CATCH_UP_PAGES = 100


async def graph_json(request: Request) -> Response:
    group_id = valid_id(GROUP_ID, request.path_params["group_id"], "group")
    filters = GraphFilters.parse(request.query_params)
    _, client = await client_of(request)
    return JSONResponse(await group_graph(client, group_id, filters))


def change_json(change: Change) -> dict[str, Any]:
    bead = change.bead
    return {
        "cursor": change.cursor,
        "action": change.action,
        "bead_id": change.bead_id,
        "by": change.by,
        "at": change.at.isoformat(),
        "title": bead.title if bead is not None else None,
        "type": bead.bead_type.value if bead is not None else None,
    }


async def recent_changes(client: RecallClient, group_id: str, keep: int) -> tuple[list[Change], str | None]:
    """The last ``keep`` changes of the scope and the cursor of the very last (None: no changes yet)."""
    recent: list[Change] = []
    cursor: str | None = None
    for _ in range(MAX_CATCH_UP_PAGES):
        batch = await client.changes_since(group_id, cursor, limit=1000)
        recent = (recent + batch.changes)[-keep:] if keep else []
        cursor = batch.cursor or cursor
        if not batch.truncated and len(batch.changes) < 1000:
            break
    return recent, cursor


def end_reason(error: Exception) -> str:
    """What the browser is told when its feed ends: a hub refusal's message, else no detail (the log has it)."""
    if isinstance(error, RecallError) and status_of(error) < 500:
        return error.message
    return "the connection to the hub closed"


def sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


async def feed_events(request: Request) -> Response:
    group_id = valid_id(GROUP_ID, request.path_params["group_id"], "group")
    _, client = await client_of(request)
    backlog, cursor = await recent_changes(client, group_id, BACKLOG)  # a non-member: NotFound, a 404
    return StreamingResponse(
        _stream(client, group_id, backlog, cursor),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def _stream(
    client: RecallClient, group_id: str, backlog: list[Change], cursor: str | None
) -> AsyncIterator[bytes]:
    queue: asyncio.Queue[Change | Exception] = asyncio.Queue()

    async def pump() -> None:
        # client.changes replays what followed `cursor`, then yields live changes: nothing between the
        # backlog and the live stream is lost or sent twice.
        try:
            async for change in client.changes(group_id, since=cursor):
                queue.put_nowait(change)
        except Exception as exc:  # the hub refused or the connection closed: end the stream, say why
            queue.put_nowait(exc)

    for change in backlog:
        yield sse("change", change_json(change))
    task = asyncio.create_task(pump())
    try:
        yield sse("ready", {"group_id": group_id, "cursor": cursor})
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), PING_S)
            except TimeoutError:
                yield b": ping\n\n"
                continue
            if isinstance(item, Exception):
                log.warning("feed of %s for %s ended: %s", group_id, client.ai_id, item)
                yield sse("end", {"reason": end_reason(item)})
                return
            yield sse("change", change_json(item))
    finally:
        await stop_tasks([task])
