"""Reading your own writes on the keyword index, and paying for it only where it is read.

A request may carry its caller's last index-log position (``Recall-Index-After``; see
:mod:`recall_hub.store.index_log`). The transport puts it here with :func:`reading_after`; retrieval
then asks what it needs:

* a keyword search must find the caller's writes by their words, so :func:`keyword_index_caught_up`
  brings the index up to the position (applying, committing: milliseconds, and a segment merge soon
  after);
* screening — what a vector-only search or ``why`` uses the index for — needs no
  commit: :func:`written_since_index` names the beads written between the index and the position, and
  those are screened by the graph like a bead the index has never seen.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

from recall_schemas.requests import index_seq_key as seq_key

from recall_hub.store.index_log import REBUILD

if TYPE_CHECKING:
    from recall_hub.context import HubContext

log = logging.getLogger(__name__)

UNAPPLIED_MAX = 256
"""Beyond this many log entries between the index and a caller's position, screening reads every
candidate from the graph instead of naming the changed ones."""

_read_after: ContextVar[str | None] = ContextVar("recall_read_after", default=None)


@contextmanager
def reading_after(position: str | None) -> Iterator[None]:
    """Within this block, reads must see every write up to ``position`` (None: no such demand)."""
    token = _read_after.set(position[:64] if position else None)
    try:
        yield
    finally:
        _read_after.reset(token)


def _ahead(ctx: HubContext) -> str | None:
    """The caller's position when the keyword index has not applied it yet."""
    after = _read_after.get()
    if after is None or seq_key(after) <= seq_key(ctx.keywords.applied):
        return None
    return after


async def keyword_index_caught_up(ctx: HubContext) -> None:
    """Bring the keyword index up to the caller's position, within ``index_wait_s`` (then answer from what it
    has, and log it)."""
    after = _ahead(ctx)
    if after is None:
        return
    try:
        async with asyncio.timeout(ctx.settings.index_wait_s):
            await ctx.keywords.catch_up(after)
    except TimeoutError:
        log.warning("keyword index still behind %s after %.1f s; answering from %s",
                    after, ctx.settings.index_wait_s, ctx.keywords.applied)
    except Exception as exc:  # the index log's Redis away (a dead primary): the wait is for freshness only
        log.warning("keyword index cannot catch up to %s (%s: %s); answering from %s",
                    after, type(exc).__name__, exc, ctx.keywords.applied)


async def written_since_index(ctx: HubContext) -> set[str] | None:
    """The beads named in the index log after what the keyword index has applied, when the caller's position
    lies beyond it (empty when it does not); None when they cannot be named (the log unreadable, too many
    entries, a rebuild asked for): then no screening by the index can be trusted for this request."""
    if _ahead(ctx) is None:
        return set()
    try:
        entries = await ctx.index_log.after(ctx.keywords.applied, UNAPPLIED_MAX + 1)
    except Exception as exc:
        log.warning("index log unreadable (%s: %s): screening by the graph", type(exc).__name__, exc)
        return None
    if len(entries) > UNAPPLIED_MAX or any(bead_id == REBUILD for _, bead_id in entries):
        return None
    return {bead_id for _, bead_id in entries}
