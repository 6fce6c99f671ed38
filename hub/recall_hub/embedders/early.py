"""Vectors of a new bead's text, embedded while its write commits.

A create commits the bead first and embeds it after (the vector belongs to a bead that exists); the model is
the slowest step of a create, and it needs nothing of the commit but the text the request already holds. So a
create starts the embedding when it starts, and the after-commit work takes the vectors when it gets there
(:func:`~recall_hub.retrieval.embedding.embed_beads`), if the bead's stored text is still the text that was
embedded; otherwise, and for a create that is refused or replays an earlier one, they are dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Sequence
from typing import Any, Generic, TypeVar

log = logging.getLogger(__name__)

V = TypeVar("V")


class EarlyVectors(Generic[V]):
    """Embeddings started ahead of the work that needs them, by bead id, each with the texts it embeds."""

    def __init__(self) -> None:
        self._started: dict[str, tuple[tuple[str, ...], asyncio.Future[V]]] = {}

    def start(self, bead_id: str, texts: Sequence[str], embedding: Awaitable[V]) -> None:
        """Run ``embedding`` (the vectors of ``texts``: a row each, and one a sentence for a bead pooled by
        sentence) now, kept for :meth:`take`."""
        self.drop(bead_id)
        self._started[bead_id] = (tuple(texts), asyncio.ensure_future(embedding))

    def take(self, bead_id: str, texts: Sequence[str]) -> asyncio.Future[V] | None:
        """The embedding started for ``bead_id``, if it embeds exactly ``texts`` (the bead's text as stored
        now); it is no longer kept either way."""
        found = self._started.pop(bead_id, None)
        if found is None:
            return None
        started_texts, future = found
        if started_texts == tuple(texts):
            return future
        discard(future)
        return None

    def drop(self, bead_id: str) -> None:
        """Forget the embedding of ``bead_id`` nobody took (cancelled if still running)."""
        found = self._started.pop(bead_id, None)
        if found is not None:
            discard(found[1])

    def __len__(self) -> int:
        return len(self._started)


def discard(future: asyncio.Future[Any]) -> None:
    """Let go of an embedding taken or kept but not to be awaited: cancelled if still running, its failure
    retrieved (logged at debug) so it is not reported as never retrieved."""
    if future.done():
        if not future.cancelled():
            future.exception()  # retrieved, so a failure nobody needed is not reported as never retrieved
        return
    future.cancel()
    future.add_done_callback(_quietly)


def _quietly(future: asyncio.Future[Any]) -> None:
    with contextlib.suppress(asyncio.CancelledError):
        if (exc := future.exception()) is not None:
            log.debug("an early embedding nobody took failed: %s", exc)
