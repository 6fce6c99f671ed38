"""AutoGen memory on the hub: :class:`RecallMemory`, an ``autogen_core.memory.Memory`` (autogen-core 0.7).

``pip install 'recall-client[autogen]'``; then::

    memory = RecallMemory(RecallClient("a_coder", "nats://127.0.0.1:4222"), name="team", group_id="g_team")
    await memory.add(MemoryContent(content="The API is versioned by header", mime_type=MemoryMimeType.TEXT))
    result = await memory.query("how is the API versioned?")         # the hub's hybrid search
    await memory.update_context(model_context)                        # the last user message's memories, as
                                                                      # one SystemMessage (as ListMemory does)
    await memory.clear()                                              # this identity's beads of "team"
    await memory.close()

The memory acts as the client's identity; the hub decides what it may read. What maps to what:

- a ``MemoryContent`` → one bead (``bead_type`` ``fact``): ``text/plain`` and ``text/markdown`` content as it
  is, ``application/json`` (a dict) serialised with sorted keys; the title is its first line (120 characters at
  most); images and bytes are refused (a bead holds text);
- ``MemoryContent.metadata`` → the bead's metadata as it is, beside the adapter's own key ``autogen``
  (``{"memory": name, "mime_type": …}``); a query gives it back with ``bead_id``, ``created_by`` and ``score``;
- the memory's ``name`` → the tag ``autogen.memory:<name>`` (hashed when the name cannot be a tag) and ``autogen``
  on every bead: ``query`` and ``update_context`` search only beads of that name, whoever wrote them, as far as
  the hub lets this identity see them;
- where beads go: private to the client's identity, or, with ``group_id=``, visibility ``group`` in that group,
  so every current member using a memory of the same name finds them;
- ``clear()`` deletes the beads this identity wrote under this name in this memory's place (private, or the
  group): a groupmate's beads of the same name stay, as the hub would refuse deleting them anyway.

As a component (``dump_component`` / ``load_component``) the config holds the connection, not a live client:
``ai_id``, ``nats_url``, the path of the NATS credentials file (never a secret itself), ``name``, ``group_id``
and ``k``; the loaded memory creates and owns its client, connected on first use. A client that authenticates
with user and password cannot be dumped (the password would land in the config).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Coroutine
from typing import Any, Self, TypeVar

from autogen_core import CancellationToken, Component
from autogen_core.memory import Memory, MemoryContent, MemoryMimeType, MemoryQueryResult, UpdateContextResult
from autogen_core.model_context import ChatCompletionContext
from autogen_core.models import SystemMessage, UserMessage
from pydantic import BaseModel, Field
from recall_schemas import InvalidRequest, MemoryBead

from recall_client.client import RecallClient
from recall_client.integrations._hub import connected, delete_all, placement, tag_of, title_of

log = logging.getLogger(__name__)

AUTOGEN_TAG = "autogen"
META_KEY = "autogen"
BEAD_TYPE = "fact"
TITLE_CHARS = 120
TEXT_TYPES = {MemoryMimeType.TEXT.value, MemoryMimeType.MARKDOWN.value}
JSON_TYPE = MemoryMimeType.JSON.value


def memory_tag(name: str) -> str:
    """The tag of a memory's beads: ``autogen.memory:<name>``, or ``autogen.memory.sha:<hex>`` for a name that
    cannot be a tag (too long, or characters tags do not allow)."""
    return tag_of("autogen.memory", name)


class RecallMemoryConfig(BaseModel):
    """What a :class:`RecallMemory` is made from: a connection, never a live client or a secret."""

    ai_id: str = Field(description="The hub identity the memory acts as (a_… or o_…)")
    nats_url: str = "nats://127.0.0.1:4222"
    creds: str | None = Field(default=None, description="Path of the identity's NATS credentials file")
    name: str = "default"
    group_id: str | None = Field(default=None, description="Write to this group (visibility group), else private")
    k: int = Field(default=5, ge=1, le=500, description="Memories per query")


class RecallMemory(Memory, Component[RecallMemoryConfig]):  # type: ignore[misc, unused-ignore]  # Any without autogen
    """AutoGen memory kept by the Nexus Recall hub, as the identity of ``client`` (see the module docstring).

    Args:
        client: the hub identity this memory acts as; connected on first use if it is not yet.
        name: the memory's name: its beads carry the tag ``autogen.memory:<name>``.
        group_id: write beads to this group (visibility ``group``) instead of privately.
        k: at most this many memories per query (``query(..., k=…)`` overrides it).
        owns_client: close the client on :meth:`close` (always so when this memory connected it).
    """

    component_type = "memory"
    component_provider_override = "recall_client.integrations.autogen.RecallMemory"
    component_config_schema = RecallMemoryConfig

    def __init__(
        self,
        client: RecallClient,
        *,
        name: str = "default",
        group_id: str | None = None,
        k: int = 5,
        owns_client: bool = False,
    ) -> None:
        self.client = client
        self._name = name
        self.group_id = group_id
        self.k = k
        self._owns_client = owns_client

    @property
    def name(self) -> str:
        return self._name

    @property
    def tag(self) -> str:
        return memory_tag(self._name)

    # --- the connection -----------------------------------------------------------------------------------

    async def _hub(self) -> RecallClient:
        """The client, connected: a refusal of its credentials is an :class:`Unauthorized` naming the identity."""
        self._owns_client |= await connected(self.client, f"RecallMemory {self._name!r}")
        return self.client

    async def close(self) -> None:
        """Close the client if this memory owns it (it connected it, or was loaded from a config)."""
        if self._owns_client:
            await self.client.close()

    # --- writing --------------------------------------------------------------------------------------------

    async def add(self, content: MemoryContent, cancellation_token: CancellationToken | None = None) -> None:
        """Store ``content`` as one bead (see the module docstring for the mapping)."""
        mime = _mime(content.mime_type)
        if mime in TEXT_TYPES and isinstance(content.content, str):
            text = content.content
        elif mime == JSON_TYPE and isinstance(content.content, dict):
            text = json.dumps(content.content, sort_keys=True, ensure_ascii=False)
        elif mime == JSON_TYPE and isinstance(content.content, str):
            try:
                text = json.dumps(json.loads(content.content), sort_keys=True, ensure_ascii=False)
            except ValueError as exc:
                raise InvalidRequest(f"RecallMemory: {mime} content that is not JSON: {exc}") from exc
        else:
            kind = type(content.content).__name__
            raise InvalidRequest(f"RecallMemory stores text, markdown and JSON; not {mime} content of type {kind}")
        metadata = dict(content.metadata or {})
        if META_KEY in metadata:
            raise InvalidRequest(f"metadata key {META_KEY!r} is RecallMemory's own")
        hub = await self._hub()
        bead = await _cancellable(cancellation_token, hub.create_bead(
            title_of(text, limit=TITLE_CHARS), text, bead_type=BEAD_TYPE, tags=[AUTOGEN_TAG, self.tag],
            metadata={**metadata, META_KEY: {"memory": self._name, "mime_type": mime}}, **placement(self.group_id),
        ))
        log.debug("memory %s: stored %s", self._name, bead.bead_id)

    async def clear(self) -> None:
        """Delete the beads this identity wrote under this memory's name, in its place (private or the group)."""
        hub = await self._hub()
        own = [
            b.bead_id
            async for b in hub.iter_by_tag(self.tag)
            if b.created_by == hub.ai_id and b.group_id == self.group_id
        ]
        await delete_all(hub, own)
        log.debug("memory %s: cleared %d beads", self._name, len(own))

    # --- reading ---------------------------------------------------------------------------------------------

    async def query(
        self, query: str | MemoryContent, cancellation_token: CancellationToken | None = None, **kwargs: Any
    ) -> MemoryQueryResult:
        """The hub's hybrid search over this memory's beads that this identity may see, best first.
        ``kwargs``: ``k`` (how many), ``min_score`` (leave out weaker hits)."""
        text = query if isinstance(query, str) else _as_text(query.content)
        if not text.strip():
            return MemoryQueryResult(results=[])
        hub = await self._hub()
        found = await _cancellable(
            cancellation_token, hub.search_beads(text, limit=int(kwargs.get("k", self.k)), filters={"tags": [self.tag]})
        )
        min_score = kwargs.get("min_score")
        return MemoryQueryResult(results=[
            memory_content(hit.bead, hit.score) for hit in found.hits if min_score is None or hit.score >= min_score
        ])

    async def update_context(self, model_context: ChatCompletionContext) -> UpdateContextResult:
        """Add the memories relevant to the context's last user message as one ``SystemMessage``, numbered best
        first; nothing is added when there is no user message or nothing relevant."""
        messages = await model_context.get_messages()
        last_user = next((m for m in reversed(messages) if isinstance(m, UserMessage)), None)
        if last_user is None:
            return UpdateContextResult(memories=MemoryQueryResult(results=[]))
        content = last_user.content
        text = content if isinstance(content, str) else " ".join(part for part in content if isinstance(part, str))
        result = await self.query(text)
        if result.results:
            lines = [f"{i}. {_as_text(memory.content)}" for i, memory in enumerate(result.results, 1)]
            await model_context.add_message(SystemMessage(content="\nRelevant memory content:\n" + "\n".join(lines)))
        return UpdateContextResult(memories=result)

    # --- as a component --------------------------------------------------------------------------------------

    def _to_config(self) -> RecallMemoryConfig:
        if getattr(self.client, "_password", None):
            raise ValueError("RecallMemory cannot dump a client that authenticates with a password; use creds")
        return RecallMemoryConfig(
            ai_id=self.client.ai_id, nats_url=self.client.nats_url, creds=self.client.creds,
            name=self._name, group_id=self.group_id, k=self.k,
        )

    @classmethod
    def _from_config(cls, config: RecallMemoryConfig) -> Self:
        client = RecallClient(config.ai_id, config.nats_url, creds=config.creds)
        return cls(client, name=config.name, group_id=config.group_id, k=config.k, owns_client=True)


def memory_content(bead: MemoryBead, score: float | None = None) -> MemoryContent:
    """A bead as AutoGen sees a memory: written by this adapter (its mime type and metadata back) or by anything
    else on the hub (plain text)."""
    metadata = dict(bead.metadata)
    own = metadata.pop(META_KEY, None)
    mime = own.get("mime_type") if isinstance(own, dict) else None
    content: Any = bead.content or bead.title
    if mime == JSON_TYPE:
        try:
            content = json.loads(bead.content)
        except ValueError:
            mime = MemoryMimeType.TEXT.value
    metadata.update(bead_id=bead.bead_id, created_by=bead.created_by)
    if score is not None:
        metadata["score"] = score
    return MemoryContent(content=content, mime_type=_known_mime(mime), metadata=metadata)


def _mime(mime_type: MemoryMimeType | str) -> str:
    return mime_type.value if isinstance(mime_type, MemoryMimeType) else mime_type


def _known_mime(mime: str | None) -> MemoryMimeType | str:
    try:
        return MemoryMimeType(mime or MemoryMimeType.TEXT.value)
    except ValueError:
        return mime or MemoryMimeType.TEXT.value


def _as_text(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content, sort_keys=True, ensure_ascii=False)


T = TypeVar("T")


async def _cancellable(token: CancellationToken | None, work: Coroutine[Any, Any, T]) -> T:
    """``work`` (a coroutine), cancelled when ``token`` is."""
    if token is None:
        return await work
    task = asyncio.ensure_future(work)
    token.link_future(task)
    return await task


__all__ = ["RecallMemory", "RecallMemoryConfig", "memory_content", "memory_tag"]
