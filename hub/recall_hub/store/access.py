"""When beads were last read (``accessed_at``), recorded in batches instead of on the read's path.

A read used to be a write query (``SET b.accessed_at``) — the graph's write lock and the AOF on every
``get_bead``. Reads now note the bead and time here; :meth:`AccessLog.flush` writes every noted read in
one query, at most ``interval_s`` later (the hub flushes on a timer and before it closes; the decay
pass flushes first, so it never archives a bead this hub saw read). What a crash can lose is the last
interval's read times, which only ever make ``decay_old_memories`` archive a bead that much later
than it might — never anything visible or any content.
"""

from __future__ import annotations

import asyncio
import logging

from recall_hub.store.graph import GraphStore

log = logging.getLogger(__name__)


class AccessLog:
    def __init__(self, graph: GraphStore) -> None:
        self.graph = graph
        self._pending: dict[str, int] = {}

    def note(self, bead_id: str, at_ms: int) -> None:
        if at_ms > self._pending.get(bead_id, 0):
            self._pending[bead_id] = at_ms

    async def flush(self) -> int:
        """Write the noted reads (a later read time only ever moves ``accessed_at`` forward); how many."""
        pending, self._pending = self._pending, {}
        if not pending:
            return 0
        try:
            await self.graph.query(
                "UNWIND $rows AS row MATCH (b:Bead {bead_id: row.id}) WHERE b.accessed_at < row.at "
                "SET b.accessed_at = row.at",
                {"rows": [{"id": bead_id, "at": at} for bead_id, at in pending.items()]},
            )
        except Exception:
            for bead_id, at in pending.items():  # kept for the next flush
                self.note(bead_id, at)
            raise
        return len(pending)

    async def flush_forever(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.flush()
            except Exception as exc:  # the graph is down: the reads stay noted, retried next time
                log.warning("recording read times failed: %s", exc)
