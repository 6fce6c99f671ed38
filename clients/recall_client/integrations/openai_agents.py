"""OpenAI Agents SDK memory on the hub: :class:`RecallSession`, an ``agents.memory.Session`` over a RecallClient.

>>> session = RecallSession(client, "support-42")                  # private to client.ai_id
>>> session = RecallSession(client, "support-42", group_id="g_team")  # readable by the group's members
>>> result = await Runner.run(agent, "Where do we deploy?", session=session)

What maps to what:

* **Conversation → hub session.** ``session_id`` (any string the SDK is given) names the hub session
  :attr:`RecallSession.hub_session_id`: the id itself when it is one (``s_`` + 4–32 lowercase letters or digits),
  else ``s_`` + a hash of it. Hub sessions are per owner, so two identities using one id hold two conversations.
* **Item → bead.** One bead per item, written by ``add_items`` in one ``create_beads`` request: ``content`` the
  item's JSON, ``title`` its role or type and a short text (``"user: Where do we deploy?"``), ``bead_type``
  ``event``, ``provenance`` ``recorded`` (a verbatim transcript), ``session_id`` the hub session, tag
  ``openai-agents``, ``metadata`` ``{"session": <session_id>, "position": n, "item_type": ...}``. The hub links
  each bead ``FOLLOWS_FROM`` the one before, so search and ``why`` read a turn with its context.
* **Order** is ``metadata.position`` (increasing nanoseconds of the writer's clock, one per item), not
  ``created_at``: the hub gives the beads of one batch back-dated milliseconds.
* **Visibility** is private by default; with ``group_id``, group (the identity must be a member). Another member
  of the group reads the conversation with a ``RecallSession`` of the same id as long as it has none of its own
  (the hub resolves a session id to the caller's own session first); changing it (``pop_item``,
  ``clear_session``) stays the writer's, as every bead's: anyone else gets ``Forbidden``.
* ``get_items(limit)`` reads the whole session (page after page) and returns the latest ``limit`` items in order;
  ``pop_item`` deletes and returns the latest; ``clear_session`` deletes every item.

Limits: an item larger than a bead's content (256 KiB of text) is refused (``InvalidRequest``); ``get_items`` and
``pop_item`` cost a read of the whole session.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from typing import TYPE_CHECKING, Any, cast

from recall_schemas import (
    CreateBead,
    ErrorReply,
    MemoryBead,
    NotFound,
    error_from_reply,
)
from recall_schemas.ids import SESSION_ID_PATTERN

from ..client import RecallClient
from ._hub import clip, connected, delete_all, digest, json_object, placement

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import SessionSettings

log = logging.getLogger(__name__)

__all__ = ["RecallSession", "hub_session_id"]

TAG = "openai-agents"
MAX_TITLE = 200

_clock = threading.Lock()
_last_position = 0


def _positions(n: int) -> range:
    """``n`` increasing positions after every one handed out before in this process (nanosecond clock)."""
    global _last_position
    with _clock:
        start = max(time.time_ns(), _last_position + 1)
        _last_position = start + n - 1
    return range(start, start + n)


def hub_session_id(session_id: str) -> str:
    """The hub session a conversation id names: itself when it is a hub session id, else ``s_`` + a hash."""
    if re.fullmatch(SESSION_ID_PATTERN, session_id):
        return session_id
    return "s_" + digest(session_id, size=32)


def _text(content: Any) -> str:
    """The text of a message's content: a string, or the ``text`` of its parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("text"))
    return ""


def _kind(item: dict[str, Any]) -> str:
    """An item's type; a message given as ``{"role", "content"}`` has none."""
    return str(item.get("type") or "message")


def _title(item: dict[str, Any]) -> str:
    """The role or type of an item and a short text of it: the words search reads first."""
    kind = _kind(item)
    if "role" in item and kind == "message":
        title = f"{item['role']}: {_text(item.get('content'))}"
    elif kind == "function_call":
        title = f"function_call {item.get('name', '')}({item.get('arguments', '')})"
    elif kind == "function_call_output":
        title = f"function_call_output: {item.get('output', '')}"
    else:
        title = kind
    return clip(" ".join(title.split()) or kind, MAX_TITLE)


class RecallSession:
    """The conversation ``session_id`` of ``client``'s identity, kept in the hub (the SDK's ``Session`` protocol).

    ``group_id``: store the items visible to that group instead of private. ``session_settings``: the SDK's
    settings (``limit``: how many latest items ``get_items()`` returns by default). The session connects the
    client on first use if it is not connected yet (refused credentials raise ``Unauthorized`` there) and
    never closes it.
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        client: RecallClient,
        session_id: str,
        *,
        group_id: str | None = None,
        session_settings: SessionSettings | None = None,
    ) -> None:
        self.client = client
        self.session_id = session_id
        self.hub_session_id = hub_session_id(session_id)
        self.group_id = group_id
        self.session_settings = session_settings
        self._connected = False

    async def _ready(self) -> None:
        if not self._connected:
            await connected(self.client, "RecallSession")  # refused credentials: Unauthorized, here
            self._connected = True

    async def _beads(self) -> list[MemoryBead]:
        """This conversation's item beads the identity sees, in conversation order."""
        await self._ready()
        beads = [
            b
            async for b in self.client.iter_by_session(self.hub_session_id)
            if TAG in b.tags and isinstance(b.metadata.get("position"), int)
        ]
        return sorted(beads, key=lambda b: (b.metadata["position"], b.created_at, b.bead_id))

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The conversation's items, oldest first: all, or the latest ``limit`` (default: the settings')."""
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        if limit is not None and limit <= 0:
            return []
        beads = await self._beads()
        if limit is not None:
            beads = beads[-limit:]
        return [item for item in map(_item, beads) if item is not None]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items``, one bead each, in one request."""
        if not items:
            return
        await self._ready()
        scope = placement(self.group_id or None)  # an empty group_id is private, too
        beads = [
            CreateBead(
                title=_title(fields),
                content=json.dumps(fields, ensure_ascii=False),
                bead_type="event",
                provenance="recorded",
                tags=[TAG],
                session_id=self.hub_session_id,
                metadata={"session": self.session_id, "position": position, "item_type": _kind(fields)},
                **scope,
            )
            for fields, position in zip(map(dict, items), _positions(len(items)), strict=True)
        ]
        created = await self.client.create_beads(beads)
        refused = [c.error for c in created if c.error is not None]
        if refused:  # a refusal wrote nothing of its bead; say the first (the others are alike)
            log.warning("%s: %d of %d items refused", self.session_id, len(refused), len(items))
            raise error_from_reply(ErrorReply(error=refused[0]))

    async def pop_item(self) -> TResponseInputItem | None:
        """Delete the latest item and return it; None when the conversation is empty."""
        for _ in range(3):  # another pop may take the latest item first: then the next one is ours
            beads = await self._beads()
            if not beads:
                return None
            try:
                await self.client.delete_bead(beads[-1].bead_id)
            except NotFound:
                continue
            return _item(beads[-1])
        return None

    async def clear_session(self) -> None:
        """Delete every item of the conversation."""
        await delete_all(self.client, [b.bead_id for b in await self._beads()], missing_ok=True)


def _item(bead: MemoryBead) -> TResponseInputItem | None:
    return cast("TResponseInputItem | None", json_object(bead, "a session item", log))
