"""Which beads were written next to each other: each scope's beads in the order of their stamps.

Agents of a group talk in turns, each writing what it says as a bead; a reply is stamped right after what it
answers, though each writer's beads are in a hub session of its own (a session has one owner), so no
``FOLLOWS_FROM`` edge joins them. A bead's *conversation neighbours* are, in its scope, the nearest bead stamped
before it and the nearest stamped after it of the same conversation, where that bead is another writer's (a
writer's own beads in a row are its session's chain, or notes that need not be about one thing). Two beads are of
one conversation where both say when they happened (``valid_from``: an imported conversation's turns carry its
date) within ten minutes of each other, or where neither says (written live): several conversations imported into
one group at once interleave in their stamps, and each says when it happened. Hybrid search reads the neighbours
beside the ``FOLLOWS_FROM`` edges for graph context (:mod:`recall_hub.retrieval.ranking`). Nothing is stored: the
keyword index keeps this order beside its documents (:mod:`recall_hub.store.keyword_index`) and it changes as they
do — a deleted, forgotten or moved bead leaves its place, and its neighbours become each other's.

:meth:`ConversationOrder.place` and :meth:`ConversationOrder.remove` run in the index's writer thread while searches
read on the event loop: a search reads a scope's list with single calls (a bisection, an index), each atomic under
the interpreter lock; one that finds the list changed under it takes no neighbour, or another bead of the same
scope, for that once.
"""

from __future__ import annotations

from bisect import bisect_left, insort

STAMP_GAP_MS = 600_000
"""Neighbours are at most this far apart in their stamps: a conversation's turns, not yesterday's bead."""
EVENT_GAP_MS = 600_000
"""...and, where both say when they happened (``valid_from``), at most this far apart in it: the turns of a
conversation imported with its date (or each with its own time) are one conversation, another session's are not."""
REACH = 16
"""Beads looked at on each side of a bead for its neighbour (other conversations' beads interleaved between)."""

_Placed = tuple[int, str, int | None, str | None]  # (stamp, bead id, valid_from, author)


class ConversationOrder:
    """Each scope's beads ordered by ``(created_at, bead_id)`` — the order of a session's chain too."""

    def __init__(self) -> None:
        self._scopes: dict[str, list[_Placed]] = {}
        self._placed: dict[str, tuple[str, _Placed]] = {}

    def place(self, bead_id: str, scope: str, stamp: int, happened: int | None, author: str | None) -> None:
        """Put (or move) a bead in its scope's order; ``happened``: its ``valid_from``, if it has one."""
        key = (stamp, bead_id, happened, author)
        if self._placed.get(bead_id) == (scope, key):
            return
        self.remove(bead_id)
        insort(self._scopes.setdefault(scope, []), key)
        self._placed[bead_id] = (scope, key)

    def remove(self, bead_id: str) -> None:
        placed = self._placed.pop(bead_id, None)
        if placed is None:
            return
        scope, key = placed
        order = self._scopes[scope]
        at = bisect_left(order, key)
        if at < len(order) and order[at] == key:
            del order[at]
        if not order:
            del self._scopes[scope]

    def neighbours(self, bead_id: str) -> tuple[str | None, str | None]:
        """``(before, after)``: the bead's conversation neighbours, None where it has none."""
        return self.neighbour(bead_id, -1), self.neighbour(bead_id, 1)

    def neighbour(self, bead_id: str, step: int) -> str | None:
        """The bead's conversation neighbour before it (``step`` -1) or after it (1), if it has one."""
        placed = self._placed.get(bead_id)
        if placed is None:
            return None
        scope, key = placed
        order = self._scopes.get(scope, [])
        at = bisect_left(order, key)
        try:
            return _nearest(order, at, step) if order[at] == key else None
        except IndexError:  # the scope's order changed while this search looked: no neighbour this time
            return None


def _nearest(order: list[_Placed], at: int, step: int) -> str | None:
    stamp, _, happened, author = order[at]
    for j in range(at + step, at + step * (REACH + 1), step):
        if not 0 <= j < len(order):
            return None
        other_stamp, other, other_happened, other_author = order[j]
        if abs(other_stamp - stamp) > STAMP_GAP_MS:
            return None
        if _one_conversation(happened, other_happened):
            return other if other_author != author else None
    return None


def _one_conversation(happened: int | None, other: int | None) -> bool:
    if happened is None or other is None:
        return happened is other  # both written live; an imported turn never neighbours a live one
    return abs(other - happened) <= EVENT_GAP_MS
