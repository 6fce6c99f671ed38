"""The change feed: every create, update and delete of a group or global bead is appended to its
scope's log (a Redis stream, so a member can replay from a cursor) and sent at once to each
*current* member's own notification subject. Leaving a group stops both on the next change."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from recall_schemas.coordination import Change, ChangeAction, Notification
from recall_schemas.subjects import notify_subject
from redis.asyncio import Redis

from recall_hub.store.graph import GraphStore
from recall_hub.store.keys import Keys
from recall_hub.store.records import bead_from_props
from recall_hub.timeutil import from_ms, now_ms

log = logging.getLogger(__name__)

Notifier = Callable[[str, bytes], Awaitable[None]]


def feed_scope(props: Mapping[str, Any] | None) -> str | None:
    if not props:
        return None
    if props.get("visibility") == "global":
        return "global"
    if props.get("visibility") == "group" and props.get("group_id"):
        return str(props["group_id"])
    return None


class ChangeFeed:
    def __init__(self, redis: Redis, graph: GraphStore, keys: Keys, maxlen: int = 100_000) -> None:
        self.redis = redis
        self.keys = keys
        self.graph = graph
        self.maxlen = maxlen
        self.notifier: Notifier | None = None
        """Set by the transport: publishes bytes on a subject. None: log only (tests of the domain)."""

    def key(self, scope: str) -> str:
        return self.keys.changes(scope)

    async def bead_changed(
        self, by: str, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None
    ) -> list[Change]:
        """Record a change given the bead's stored properties before and after (None: absent)."""
        old_scope, new_scope = feed_scope(before), feed_scope(after)
        changes: list[Change] = []
        if new_scope is not None and after is not None:
            action: ChangeAction = "updated" if old_scope == new_scope else "created"
            changes.append(await self._append(new_scope, action, after["bead_id"], by, after))
        if old_scope is not None and old_scope != new_scope and before is not None:
            action = "deleted" if after is None else "hidden"
            changes.append(await self._append(old_scope, action, before["bead_id"], by, None))
        for change in changes:
            await self._fan_out(change)
        return changes

    async def _append(
        self, scope: str, action: ChangeAction, bead_id: str, by: str, props: Mapping[str, Any] | None
    ) -> Change:
        at = now_ms()
        bead = bead_from_props(props) if props is not None else None
        draft = Change(cursor="0-0", scope=scope, action=action, bead_id=bead_id, by=by, at=from_ms(at), bead=bead)
        cursor = await self.redis.xadd(
            self.key(scope), {"change": draft.model_dump_json(exclude={"cursor"})}, maxlen=self.maxlen, approximate=True
        )
        return draft.model_copy(update={"cursor": cursor.decode() if isinstance(cursor, bytes) else str(cursor)})

    async def members(self, scope: str) -> list[str]:
        if scope == "global":
            rows = await self.graph.ro_query("MATCH (a:AI) RETURN a.ai_id")
        else:
            rows = await self.graph.ro_query(
                "MATCH (a:AI)-[:MEMBER_OF]->(:Group {group_id: $g}) RETURN a.ai_id", {"g": scope}
            )
        return [row[0] for row in rows]

    async def _fan_out(self, change: Change) -> None:
        if self.notifier is None:
            return
        body = Notification(kind="change", change=change).model_dump_json().encode()
        for ai_id in await self.members(change.scope):
            await self.notify_raw(ai_id, body)

    async def notify(self, ai_id: str, notification: Notification) -> None:
        await self.notify_raw(ai_id, notification.model_dump_json().encode())

    async def notify_raw(self, ai_id: str, body: bytes) -> None:
        if self.notifier is None:
            return
        try:
            await self.notifier(notify_subject(ai_id), body)
        except Exception:  # a notification is best effort; the log is the durable record
            log.exception("could not notify %s", ai_id)

    async def read(self, scope: str, cursor: str | None, limit: int) -> list[Change]:
        start = f"({cursor}" if cursor else "-"
        entries: list[tuple[bytes, dict[bytes, bytes]]] = await self.redis.xrange(  # type: ignore[assignment]
            self.key(scope), min=start, max="+", count=limit
        )
        changes = []
        for entry_id, fields in entries:
            raw = fields[b"change"]
            changes.append(Change.model_validate_json(_with_cursor(raw, entry_id)))
        return changes


def _with_cursor(raw: bytes | str, entry_id: bytes | str) -> str:
    data = json.loads(raw)
    data["cursor"] = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return json.dumps(data)
