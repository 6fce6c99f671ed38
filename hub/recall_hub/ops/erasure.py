"""Erasure of forgotten content from everything the stores keep besides the graph (contract 14).

A forget commits the tombstone, which is also the record of the erasure owed; the forget's outbox work
removes the bead's vector and keyword entries. This pass does the rest for every tombstone not yet
erased, all of them at once: the change logs rewritten without their snapshots, FalkorDB's query telemetry
and the slow logs emptied, then the append-only files (and RDB snapshots) rewritten and waited for — only
then are the tombstones marked erased. A failed pass leaves them owed and is retried.

Every hub runs :func:`erase_forever`: a pass right after a forget on that hub, and one every
``RECALL_OUTBOX_INTERVAL_S`` for forgets another hub (or a crash, or a restore) left owed; a Redis lock
makes one hub do it at a time. So a forgotten bead's text is gone from every Redis key and file within
about two intervals plus the time the servers take to rewrite their files (docs/lifecycle.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from recall_hub.context import HubContext
from recall_hub.outages import log_failure
from recall_hub.store.erasure import TELEMETRY_FLUSH_MS, ErasureStore
from recall_hub.timeutil import now_ms

log = logging.getLogger(__name__)

LOCK = "erasure"


def erasure_store(ctx: HubContext) -> ErasureStore:
    return ErasureStore(ctx.graph, ctx.redis, ctx.keys, ctx.vectors.replica)


async def erase_forgotten(ctx: HubContext) -> int:
    """One pass over the erasures owed; how many forgotten beads it finished (0 when another hub is at it)."""
    store = erasure_store(ctx)
    async with ctx.outbox.locks.hold(LOCK, wait_s=0) as mine:
        if not mine:
            return 0
        owed = await store.system_pending()
        if not owed:
            return 0
        started = now_ms()
        recording = await store.scrub_server_logs()
        erased = await store.erase_from_change_logs(o.bead_id for o in owed)
        await store.compact_files()
        # While FalkorDB records telemetry, the queries of the last moments may reach its stream after this
        # pass emptied it: a forget that recent stays owed, and the next pass empties the stream again.
        done = [o.bead_id for o in owed if not recording or o.forgotten_at <= started - TELEMETRY_FLUSH_MS]
        await store.system_mark_erased(done, now_ms())
        log.info(
            "erased %d forgotten bead(s) from the change logs (%d entries), server logs and files; %d wait for "
            "FalkorDB's telemetry", len(done), erased, len(owed) - len(done),
        )
        return len(done)


async def erase_forever(ctx: HubContext, interval_s: float) -> None:
    """A pass whenever this hub forgets something (``ctx.forgotten`` is set), and every ``interval_s``."""
    while True:
        ctx.forgotten.clear()
        try:
            await erase_forgotten(ctx)
        except Exception as exc:
            log_failure(log, "erasing forgotten beads left for the next pass", exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ctx.forgotten.wait(), interval_s)
