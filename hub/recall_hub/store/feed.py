"""The change feed: every create, update and delete of a group or global bead is appended to its
scope's log (a Redis stream, so a member can replay from a cursor) and sent at once to each
*current* member's own notification subject. Leaving a group stops both on the next change.

Entries are appended by the outbox worker, once per outbox entry and scope: the append and its
"done" marker are one Lua script, so a retried entry never logs a change twice. A bead that leaves
a scope (deleted, made private, moved to another group) is logged there as ``deleted``: to the
members of the old scope it is gone, exactly as a bead they may not see is indistinguishable from a
missing one.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from recall_schemas.coordination import Change, ChangeAction, Notification
from recall_schemas.subjects import notify_subject
from redis.asyncio import Redis

from recall_hub.store.graph import GraphStore
from recall_hub.store.keys import Keys
from recall_hub.store.records import bead_from_props
from recall_hub.timeutil import from_ms

log = logging.getLogger(__name__)

Notifier = Callable[[str, bytes], Awaitable[None]]

# KEYS[1] the stream, KEYS[2] the entry's done marker; ARGV: change JSON, maxlen, marker TTL seconds.
_APPEND_ONCE = """
if redis.call('SET', KEYS[2], '1', 'NX', 'EX', ARGV[3]) then
  return redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', 'change', ARGV[1])
end
return false
"""
DONE_TTL_S = 7 * 86_400


def feed_scope(props: Mapping[str, Any] | None) -> str | None:
    if not props:
        return None
    if props.get("visibility") == "global":
        return "global"
    if props.get("visibility") == "group" and props.get("group_id"):
        return str(props["group_id"])
    return None


def actions(old_scope: str | None, new_scope: str | None, exists: bool) -> list[tuple[str, ChangeAction]]:
    """The log entries one change makes: ``(scope, action)``."""
    out: list[tuple[str, ChangeAction]] = []
    if new_scope is not None and exists:
        out.append((new_scope, "updated" if old_scope == new_scope else "created"))
    if old_scope is not None and old_scope != new_scope:
        out.append((old_scope, "deleted"))
    return out


@dataclass(frozen=True)
class Logged:
    """One change to log: outbox entry ``entry_id``'s ``action`` in ``scope`` (``props``: the bead it shows)."""

    entry_id: str
    scope: str
    action: ChangeAction
    bead_id: str
    by: str
    at_ms: int
    props: Mapping[str, Any] | None


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

    async def append_once(self, changes: Sequence[Logged]) -> list[Change | None]:
        """Log each change once, in order, in one round trip; each the change as logged, or None if it was before."""
        drafts = [
            Change(cursor="0-0", scope=c.scope, action=c.action, bead_id=c.bead_id, by=c.by, at=from_ms(c.at_ms),
                   bead=bead_from_props(c.props) if c.props is not None and c.action != "deleted" else None)
            for c in changes
        ]
        # EVAL, not a registered script: a pipeline holding one asks SCRIPT EXISTS first, a round trip more.
        pipe = self.redis.pipeline(transaction=False)
        for change, draft in zip(changes, drafts, strict=True):
            pipe.eval(
                _APPEND_ONCE, 2, self.key(change.scope), self.keys.outbox_done(change.entry_id, f"feed:{change.scope}"),
                draft.model_dump_json(exclude={"cursor"}), self.maxlen, DONE_TTL_S,
            )
        cursors = await pipe.execute()
        return [
            draft.model_copy(update={"cursor": cursor.decode() if isinstance(cursor, bytes) else str(cursor)})
            if cursor else None
            for draft, cursor in zip(drafts, cursors, strict=True)
        ]

    async def system_members(self, scope: str) -> list[str]:
        """Who is told of a change in ``scope`` (current members; everyone for ``global``)."""
        if scope == "global":
            rows = await self.graph.ro_query("MATCH (a:AI) RETURN a.ai_id")
        else:
            rows = await self.graph.ro_query(
                "MATCH (a:AI)-[:MEMBER_OF]->(:Group {group_id: $g}) RETURN a.ai_id", {"g": scope}
            )
        return [row[0] for row in rows]

    async def log_once(self, changes: Sequence[Logged]) -> None:
        """:meth:`append_once`, then tell the members of each scope (read meanwhile, once a scope) of the changes
        it logged."""
        if not changes:
            return
        if self.notifier is None:
            await self.append_once(changes)
            return
        scopes = list(dict.fromkeys(c.scope for c in changes))
        logged, members = await asyncio.gather(
            self.append_once(changes), asyncio.gather(*map(self.system_members, scopes))
        )
        members_of = dict(zip(scopes, members, strict=True))
        for change in logged:
            if change is None:
                continue
            body = Notification(kind="change", change=change).model_dump_json().encode()
            for ai_id in members_of[change.scope]:
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
