"""What the framework adapters share, one way each: connecting their client, hashing names into tags and ids,
titles, where a bead goes, deleting beads, reading a bead's JSON. Imports no framework."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
from collections.abc import Iterable
from typing import Any

from recall_schemas import MemoryBead, NotFound, Unauthorized, Unavailable

from ..client import RecallClient

TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/\-]{0,63}$")
"""What a tag may be (``recall_schemas.models.Tag``)."""
DELETE_CONCURRENCY = 8
"""Deletes in flight at once when an adapter deletes many beads."""


async def connected(client: RecallClient, adapter: str) -> bool:
    """Connect ``client`` unless it is connected; True when this call connected it, so the adapter may close it (two
    first calls at once share one connection and both say so). Refused credentials raise
    :class:`~recall_schemas.Unauthorized` saying ``adapter`` cannot act as the client's identity, and why."""
    try:
        if client.nc is not None:
            return False
    except Unavailable:  # not connected (yet, or any more)
        pass
    try:
        await client.connect()  # concurrent first calls share one connection
    except Unauthorized as exc:
        raise Unauthorized(f"{adapter} cannot act as {client.ai_id}: {exc.message}", exc.details) from exc
    return True


def digest(*parts: str, size: int) -> str:
    """``size`` hex digits of the sha256 of ``parts`` joined by NUL characters (of the part itself, for one)."""
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:size]


def tag_of(name: str, value: str) -> str:
    """The tag ``<name>:<value>``, or ``<name>.sha:<40 hex digits>`` when ``value`` cannot be in a tag (too long, or
    characters tags do not allow)."""
    tag = f"{name}:{value}"
    return tag if TAG.fullmatch(tag) else f"{name}.sha:{digest(value, size=40)}"


def clip(text: str, limit: int) -> str:
    """``text``, cut to ``limit`` characters (the last one ``…``) when it is longer."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def title_of(text: str, *, limit: int, prefix: str | None = None) -> str:
    """The first line of ``text`` that has words, clipped to ``limit``, after ``"<prefix>: "`` when there is a
    prefix; ``(memory)`` when there is neither."""
    first = clip(next((line.strip() for line in text.splitlines() if line.strip()), ""), limit)
    return f"{prefix}: {first}" if prefix else first or "(memory)"


def placement(group_id: str | None) -> dict[str, Any]:
    """Where a bead goes: private to its writer, or with ``group_id`` visibility ``group`` in that group."""
    return {"visibility": "private"} if group_id is None else {"visibility": "group", "group_id": group_id}


async def delete_all(client: RecallClient, bead_ids: Iterable[str], *, missing_ok: bool = False) -> None:
    """Delete the beads, :data:`DELETE_CONCURRENCY` at a time; ``missing_ok``: a bead deleted meanwhile (``NotFound``)
    is no error."""
    slots = asyncio.Semaphore(DELETE_CONCURRENCY)

    async def delete(bead_id: str) -> None:
        async with slots:
            try:
                await client.delete_bead(bead_id)
            except NotFound:
                if not missing_ok:
                    raise

    await asyncio.gather(*(delete(bead_id) for bead_id in bead_ids))


def json_object(bead: MemoryBead, what: str, log: logging.Logger) -> dict[str, Any] | None:
    """The JSON object a bead's content holds; None (and a warning on ``log``: it is not the JSON of ``what``) when
    it holds none."""
    try:
        value = json.loads(bead.content)
    except ValueError:
        log.warning("bead %s: content is not the JSON of %s", bead.bead_id, what)
        return None
    return value if isinstance(value, dict) else None
