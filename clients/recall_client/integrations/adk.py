"""Google ADK memory on the hub: :class:`RecallMemoryService`, a ``google.adk.memory.BaseMemoryService``.

``pip install 'recall-client[adk]'``; then hand it to a runner::

    client = RecallClient("a_planner", "nats://127.0.0.1:4222", creds="~/.recall/a_planner.creds")
    memory = RecallMemoryService(client, group_id="g_team")    # or no group: private to a_planner
    runner = Runner(agent=agent, app_name="planner", session_service=InMemorySessionService(),
                    memory_service=memory)
    ...
    await memory.add_session_to_memory(session)                 # the session's text events become beads
    found = await memory.search_memory(app_name="planner", user_id="u1", query="which database?")

The service acts as the client's identity; the hub decides what that identity may read. What maps to what:

- an ADK session (app_name, user_id, id) → one hub session, ``s_`` + 32 hex digits of a sha256 of the three
  (deterministic: adding the session again writes into the same hub session; hub sessions are per identity);
- an event with text → one bead (``bead_type`` ``event``): content = the event's text parts (thoughts left
  out), title = ``"<author>: <first line>"``, ``valid_from`` = the event's timestamp, metadata ``adk`` =
  {app_name, user_id, session_id, event_id, invocation_id, author, role}; the idempotency key is derived
  from (app_name, user_id, session id, event id), so adding a session twice stores each event once;
- app_name and user_id → the tags ``adk.app:<app_name>`` and ``adk.user:<user_id>`` (a value that is not a
  valid tag is hashed: ``adk.app.sha:<hex>``), plus ``adk`` on every bead;
- where beads go: private to the client's identity, or, with ``group_id=``, visibility ``group`` in that
  group, so every current member (whatever framework it runs) can find them;
- ``search_memory`` → the hub's hybrid search (keyword + semantic) filtered on the tags of ``scope``:
  ``"app_user"`` (default, ADK's contract: the same app and user), ``"user"`` (the same user across apps: a
  team whose agents are apps of their own) or ``"all"`` (everything the identity may see); each hit becomes a
  ``MemoryEntry`` (id = bead id, content = ``types.Content`` with the event's role, author, ISO timestamp,
  ``custom_metadata`` = bead id, creator, score, group, ADK session id);
- ``add_memory`` → one bead per ``MemoryEntry`` (idempotent on its ``id``); ``delete_memory(memory_id)`` →
  ``delete_bead``, or with ``delete_forgets=True`` ``forget_bead`` (only the bead's creator or its group's ops
  may; the hub refuses anyone else); content forgotten on the hub is left out when a session is added again.

A client that is not connected yet is connected on first use (and closed by :meth:`RecallMemoryService.close`);
refused credentials raise :class:`~recall_schemas.Unauthorized` naming the identity.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from google.adk.memory import BaseMemoryService
from google.adk.memory.base_memory_service import SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from google.genai import types
from recall_schemas import (
    FORGOTTEN_REASON,
    ErrorReply,
    MemoryBead,
    NotFound,
    error_from_reply,
)
from recall_schemas.models import RESERVED_METADATA_PREFIX

from recall_client.client import RecallClient
from recall_client.integrations._hub import connected, digest, placement, tag_of, title_of

if TYPE_CHECKING:
    from google.adk.events.event import Event
    from google.adk.sessions.session import Session

log = logging.getLogger(__name__)

Scope = Literal["app_user", "user", "all"]
Bead = dict[str, Any]
"""The fields of a ``CreateBead``: the client checks them (``InvalidRequest`` naming what is wrong)."""
ADK_TAG = "adk"
BEAD_TYPE = "event"
TITLE_CHARS = 120


def scope_tag(kind: Literal["app", "user"], value: str) -> str:
    """The tag standing for an ADK app_name or user_id: ``adk.app:<value>``, or ``adk.app.sha:<hex>`` when the
    value cannot be a tag (too long, or characters tags do not allow)."""
    return tag_of(f"adk.{kind}", value)


def hub_session_id(app_name: str, user_id: str, session_id: str) -> str:
    """The hub session of an ADK session: the same three always give the same ``s_…`` id."""
    return "s_" + digest(app_name, user_id, session_id, size=32)


def _event_text(event: Event) -> str:
    if event.content is None or not event.content.parts:
        return ""
    return "\n".join(part.text for part in event.content.parts if part.text and not part.thought).strip()


def _epoch_to_utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _parse_time(text: str | None) -> datetime | None:
    """A MemoryEntry's timestamp as an aware time (a naive one is local time, as ADK's own services write them), or
    None if it is not ISO 8601."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment.astimezone(UTC)


class RecallMemoryService(BaseMemoryService):  # type: ignore[misc, unused-ignore]  # Any where ADK is missing
    """ADK memory kept by the Nexus Recall hub, as the identity of ``client`` (see the module docstring).

    Args:
        client: the hub identity this service acts as; connected on first use if it is not yet.
        group_id: write beads to this group (visibility ``group``) instead of privately.
        scope: which beads ``search_memory`` considers: ``"app_user"``, ``"user"`` or ``"all"``.
        limit: at most this many memories per search.
        delete_forgets: ``delete_memory`` forgets the bead (``forget_bead``: a tombstone, and its content is refused
            in its scope from then on, so adding the session again does not bring it back) instead of deleting it
            (the hub then frees its idempotency key: adding the same session again stores that event anew).
    """

    def __init__(
        self,
        client: RecallClient,
        *,
        group_id: str | None = None,
        scope: Scope = "app_user",
        limit: int = 10,
        delete_forgets: bool = False,
    ) -> None:
        if scope not in ("app_user", "user", "all"):
            raise ValueError(f"scope must be 'app_user', 'user' or 'all', not {scope!r}")
        self.client = client
        self.group_id = group_id
        self.scope: Scope = scope
        self.limit = limit
        self.delete_forgets = delete_forgets
        self._connected_here = False

    # --- the connection -----------------------------------------------------------------------------------

    async def _hub(self) -> RecallClient:
        """The client, connected: a refusal of its credentials is an :class:`Unauthorized` naming the identity."""
        self._connected_here |= await connected(self.client, "RecallMemoryService")
        return self.client

    async def close(self) -> None:
        """Close the client if this service connected it (a client connected by its owner stays open)."""
        if self._connected_here:
            self._connected_here = False
            await self.client.close()

    # --- writing --------------------------------------------------------------------------------------------

    def _bead(
        self, app_name: str, user_id: str, text: str, valid_from: datetime | None, adk: dict[str, Any], key: str | None
    ) -> Bead:
        """The fields of one bead of ``app_name``/``user_id``, in this service's place (private or the group)."""
        adk = {"app_name": app_name, "user_id": user_id, **adk}
        return {
            "title": title_of(text, prefix=adk.get("author"), limit=TITLE_CHARS),
            "content": text,
            "bead_type": BEAD_TYPE,
            "tags": [ADK_TAG, scope_tag("app", app_name), scope_tag("user", user_id)],
            "metadata": {"adk": {k: v for k, v in adk.items() if v is not None}},
            "valid_from": valid_from,
            **placement(self.group_id),
            **({"idempotency_key": key} if key else {}),
        }

    def _event_bead(self, app_name: str, user_id: str, session_id: str | None, event: Event) -> Bead | None:
        text = _event_text(event)
        if not text or event.partial:
            return None
        adk = {"session_id": session_id, "event_id": event.id, "invocation_id": event.invocation_id or None,
               "author": event.author or None, "role": event.content.role if event.content is not None else None}
        key = "adk:" + digest(app_name, user_id, session_id or "", event.id, size=48) if event.id else None
        fields = self._bead(app_name, user_id, text, _epoch_to_utc(event.timestamp), adk, key)
        if session_id is not None:
            fields["session_id"] = hub_session_id(app_name, user_id, session_id)
        return fields

    async def _store(self, beads: Sequence[Bead]) -> None:
        """Create the beads (batches of 64 per request). Content forgotten on the hub (``forget_bead``) is left out
        quietly; any other refusal raises its error once the batch is through (the others are stored, and adding
        again stores only what is missing)."""
        if not beads:
            return
        hub = await self._hub()
        items = await hub.create_beads(beads)
        errors = [item.error for item in items if item.error is not None]
        refused = [error for error in errors if error.details.get("reason") != FORGOTTEN_REASON]
        forgotten = len(errors) - len(refused)
        if forgotten:
            log.info("%d of %d memories were forgotten on the hub and are not stored again", forgotten, len(items))
        if refused:
            log.warning("%d of %d memories refused by the hub: %s", len(refused), len(items), refused[0].message)
            raise error_from_reply(ErrorReply(error=refused[0]))
        log.debug("%d memories stored (%d new)", len(items) - forgotten, sum(item.created for item in items))

    async def add_session_to_memory(self, session: Session) -> None:
        """Every event of ``session`` with text becomes a bead of the session's hub session; adding the session
        again (it grew) stores only the events not stored yet."""
        beads = [self._event_bead(session.app_name, session.user_id, session.id, e) for e in session.events]
        await self._store([b for b in beads if b is not None])

    async def add_events_to_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        events: Sequence[Event],
        session_id: str | None = None,
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        """Like :meth:`add_session_to_memory` for some events (a delta); without ``session_id`` the beads belong
        to no hub session. ``custom_metadata`` is kept in each bead's metadata under ``adk_custom``."""
        beads = [self._event_bead(app_name, user_id, session_id, event) for event in events]
        extra = _custom(custom_metadata)
        await self._store([_with_custom(b, extra) for b in beads if b is not None])

    async def add_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        memories: Sequence[MemoryEntry],
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        """Each ``MemoryEntry`` becomes a bead (its text, author, timestamp as ``valid_from``, its custom metadata
        under ``adk_custom``); an entry with an ``id`` is stored once however often it is added."""
        extra = _custom(custom_metadata)
        beads: list[Bead] = []
        for memory in memories:
            text = "\n".join(p.text for p in memory.content.parts or [] if p.text and not p.thought).strip()
            if not text:
                continue
            adk = {"author": memory.author, "role": memory.content.role, "memory_id": memory.id}
            key = "adk.memory:" + digest(app_name, user_id, memory.id, size=48) if memory.id else None
            fields = self._bead(app_name, user_id, text, _parse_time(memory.timestamp), adk, key)
            beads.append(_with_custom(fields, {**_custom(memory.custom_metadata), **extra}))
        await self._store(beads)

    # --- reading ---------------------------------------------------------------------------------------------

    def _filters(self, app_name: str, user_id: str) -> dict[str, Any]:
        if self.scope == "app_user":
            return {"tags": [scope_tag("app", app_name), scope_tag("user", user_id)]}
        if self.scope == "user":
            return {"tags": [scope_tag("user", user_id)]}
        return {}

    async def search_memory(self, *, app_name: str, user_id: str, query: str) -> SearchMemoryResponse:
        """The hub's hybrid search over the beads of ``scope`` this identity may see, best first."""
        if not query.strip():
            return SearchMemoryResponse()
        hub = await self._hub()
        result = await hub.search_beads(query, limit=self.limit, filters=self._filters(app_name, user_id))
        return SearchMemoryResponse(memories=[memory_entry(hit.bead, hit.score) for hit in result.hits])

    async def delete_memory(self, *, app_name: str, user_id: str, memory_id: str | None = None) -> None:
        """Delete (or, with ``delete_forgets``, forget) the bead ``memory_id`` (a ``MemoryEntry.id``):
        :class:`~recall_schemas.NotFound` if this identity cannot see it or it is not of ``app_name``/``user_id``
        (with ``scope`` ``"app_user"`` or ``"user"``), :class:`~recall_schemas.Forbidden` if it may see but not
        change it (only its creator and its group's ops may)."""
        if not memory_id:
            return
        hub = await self._hub()
        bead = await hub.get_bead(memory_id)
        if not set(self._filters(app_name, user_id).get("tags", [])) <= set(bead.tags):
            raise NotFound(f"memory {memory_id} is not one of {app_name}/{user_id}")
        if self.delete_forgets:
            await hub.forget_bead(memory_id, reason=f"deleted from ADK memory of {app_name}/{user_id}")
        else:
            await hub.delete_bead(memory_id)


def memory_entry(bead: MemoryBead, score: float | None = None) -> MemoryEntry:
    """A bead as ADK sees a memory: written by this adapter or by anything else on the hub."""
    found = bead.metadata.get("adk")
    adk: dict[str, Any] = found if isinstance(found, dict) else {}
    role = adk.get("role") or ("user" if adk.get("author") == "user" else "model")
    moment = bead.valid_from or bead.created_at
    custom: dict[str, Any] = {
        "bead_id": bead.bead_id, "created_by": bead.created_by, "visibility": bead.visibility.value,
    }
    if score is not None:
        custom["score"] = score
    if bead.group_id:
        custom["group_id"] = bead.group_id
    if adk.get("session_id"):
        custom["session_id"] = adk["session_id"]
    return MemoryEntry(
        id=bead.bead_id,
        content=types.Content(role=role, parts=[types.Part(text=bead.content or bead.title)]),
        author=adk.get("author") or bead.created_by,
        timestamp=moment.isoformat(),
        custom_metadata=custom,
    )


def _custom(metadata: Mapping[str, object] | None) -> dict[str, Any]:
    return {str(k): v for k, v in (metadata or {}).items() if not str(k).startswith(RESERVED_METADATA_PREFIX)}


def _with_custom(bead: Bead, custom: dict[str, Any]) -> Bead:
    return {**bead, "metadata": {**bead["metadata"], "adk_custom": custom}} if custom else bead


__all__ = ["RecallMemoryService", "hub_session_id", "memory_entry", "scope_tag"]
