"""The token signs a hub process read last, so that a search need not read them again.

Late interaction reads the token signs of a search's 50 best candidates (``VectorStore.token_signs``: an ``HMGET``
a scope of the caller, ~2 KB a bead back), and the candidates of a team's searches are mostly the same beads
again. A bead's signs change only with its text. This process's own writes replace or drop its entries at once;
a change made by another hub process is seen here once the entry is older than :data:`SIGNS_KEPT_S`, and only
in how candidates rank: which beads a caller may see is decided before the signs are read (screening), and the
page is read from the graph.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence

SIGNS_KEPT_S = 30.0
"""How long signs read from Redis are used without reading them again (a write by this process replaces them at
once; one by another hub process shows after this long at most)."""


class SignCache:
    """At most ``size`` beads' token signs, each with the scope it was read from or written to, the least recently
    used dropped first (``size`` 0: none kept)."""

    def __init__(self, size: int, kept_s: float = SIGNS_KEPT_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.size = size
        self.kept_s = kept_s
        self._clock = clock
        self._held: OrderedDict[str, tuple[str, bytes, float]] = OrderedDict()
        self.hits = 0
        """Beads whose signs a search took from here."""
        self.misses = 0
        """Beads whose signs a search had to read."""

    def held(self, scopes: Sequence[str], bead_ids: Sequence[str]) -> tuple[dict[str, bytes], list[str]]:
        """Of ``bead_ids``, the signs held of those in ``scopes`` (and not too old), and the ids to read."""
        found: dict[str, bytes] = {}
        wanted: list[str] = []
        oldest = self._clock() - self.kept_s
        for bead_id in bead_ids:
            entry = self._held.get(bead_id)
            if entry is None or entry[2] < oldest or entry[0] not in scopes:
                wanted.append(bead_id)
                continue
            self._held.move_to_end(bead_id)
            found[bead_id] = entry[1]
        self.hits += len(found)
        self.misses += len(wanted)
        return found, wanted

    def read(self, signs: Mapping[str, tuple[str, bytes]]) -> None:
        """Signs read from Redis, by bead: the scope they were found in and the signs. An entry that a write of
        this process made while they were being read is newer and stays."""
        now = self._clock()
        oldest = now - self.kept_s
        for bead_id, (scope, packed) in signs.items():
            entry = self._held.get(bead_id)
            if entry is None or entry[2] < oldest:
                self._put(bead_id, scope, packed, now)
        self._trim()

    def written(self, scope: str, bead_id: str, packed: bytes | None) -> None:
        """Signs this process stored for a bead in ``scope`` (None: it removed them)."""
        if packed is None:
            self._held.pop(bead_id, None)
        else:
            self._put(bead_id, scope, packed, self._clock())
            self._trim()

    def drop(self, bead_ids: Iterable[str] | None = None) -> None:
        """Forget these beads' signs (None: every bead's)."""
        if bead_ids is None:
            self._held.clear()
            return
        for bead_id in bead_ids:
            self._held.pop(bead_id, None)

    def _put(self, bead_id: str, scope: str, packed: bytes, now: float) -> None:
        if self.size > 0:
            self._held[bead_id] = (scope, packed, now)
            self._held.move_to_end(bead_id)

    def _trim(self) -> None:
        while len(self._held) > self.size:
            self._held.popitem(last=False)
