"""The beads a hub process read last, each with the stamp it was read at, so a read need not carry them again.

Every read of beads for a caller is a graph query that checks visibility and filters then (a search's page,
a traversal's beads, ``find_similar``'s). What such a query need not bring back is a bead's properties when
this process already holds them as the graph has them now. The read sends the stamps it holds; the graph
compares each with the bead's own and returns the properties only where they differ (or nothing is held),
``accessed_at`` always (reads move it, changes do not). A 20-bead page of search hits is ~24 KB of properties
to send, receive and parse, against a few numbers a bead.

The stamp is ``version`` and ``updated_at``: every change of a bead's properties moves one of them (an edit,
a move, archiving, trust marks, corroboration bump the version; moving a session's beads sets
``updated_at``). ``vec_model``/``vec_scope`` are set without either, and no caller-facing read uses them from
here. :data:`VERIFY` (the tests set it) checks the rule on every read that used this cache.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from recall_schemas import MemoryBead

from recall_hub.store.records import bead_from_props
from recall_hub.timeutil import from_ms

Props = dict[str, Any]

VERIFY = False
"""When true, every read that used held properties is read again in full and compared: a bead whose stamp
is unchanged but whose properties are not raises :class:`StaleBead` (a write that moves neither ``version``
nor ``updated_at``). Set by the test suite; too slow for a hub in service."""

SAME_STAMP = "toString(coalesce({v}.version, 1)) + ':' + toString({v}.updated_at)"
"""Cypher: the stamp of the bead bound to ``{v}`` (format with ``v=``), as :func:`stamp` computes it."""

_NOT_COMPARED = frozenset({"accessed_at", "vec_model", "vec_scope"})


class StaleBead(AssertionError):
    """A bead's properties changed without its stamp (only raised with :data:`VERIFY`)."""


def stamp(props: Mapping[str, Any]) -> str:
    return f"{props.get('version') or 1}:{props.get('updated_at')}"


def held_properties_or_none(var: str) -> str:
    """Cypher: the properties of ``var`` unless ``$held`` (bead id -> stamp) holds its current stamp, then null."""
    return f"CASE WHEN $held[{var}.bead_id] = {SAME_STAMP.format(v=var)} THEN NULL ELSE properties({var}) END"


class Held:
    """One held bead: its stamp, its properties as read at it, and the wire model made of them (once asked)."""

    __slots__ = ("model", "props", "stamp")

    def __init__(self, props: Props) -> None:
        self.stamp = stamp(props)
        self.props = props
        self.model: MemoryBead | None = None


class BeadCache:
    """At most ``size`` beads' properties, the least recently used dropped first (``size`` 0: none kept)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._held: OrderedDict[str, Held] = OrderedDict()
        self.hits = 0
        """Beads a read took from here (their properties not sent again)."""
        self.misses = 0
        """Beads a read had to receive in full."""

    def held(self, ids: Sequence[str]) -> dict[str, Held]:
        """The beads of ``ids`` held now (a snapshot: what a read compares with)."""
        found = {}
        for bead_id in ids:
            entry = self._held.get(bead_id)
            if entry is not None:
                self._held.move_to_end(bead_id)
                found[bead_id] = entry
        return found

    def keep(self, beads: Iterable[Props]) -> None:
        if self.size <= 0:
            return
        held = self._held
        for props in beads:
            bead_id = props["bead_id"]
            entry = held.get(bead_id)
            if entry is not None and entry.stamp == stamp(props):
                entry.props = dict(props)  # the model made at this version stays
            else:
                held[bead_id] = Held(dict(props))  # (copies: the caller's may be changed)
            held.move_to_end(bead_id)
        while len(held) > self.size:
            held.popitem(last=False)

    def drop(self, bead_ids: Iterable[str]) -> None:
        for bead_id in bead_ids:
            self._held.pop(bead_id, None)

    def bead(self, props: Mapping[str, Any]) -> MemoryBead:
        """``props`` (as a read returned them) as a :class:`MemoryBead`: made once per version while the bead is
        held (with each read's ``accessed_at``), else made now. Never change what it returns: it is shared."""
        entry = self._held.get(props["bead_id"])
        if entry is None or entry.stamp != stamp(props):
            return bead_from_props(props)
        if entry.model is None:
            entry.model = bead_from_props(props)
            return entry.model
        accessed_at = from_ms(props["accessed_at"])
        model = entry.model
        return model if model.accessed_at == accessed_at else model.model_copy(update={"accessed_at": accessed_at})


def check_unchanged(used: Mapping[str, Props], fresh: Mapping[str, Props]) -> None:
    """Raise :class:`StaleBead` if a bead of ``used`` (held properties a read returned) has the same stamp in
    ``fresh`` (read in full just after) but other properties."""
    for bead_id, props in used.items():
        now = fresh.get(bead_id)
        if now is None or stamp(now) != stamp(props):
            continue  # gone or changed since: a write in between, stamped as it should be
        differ = {k for k in props.keys() | now.keys() if k not in _NOT_COMPARED and props.get(k) != now.get(k)}
        if differ:
            raise StaleBead(f"bead {bead_id} changed {sorted(differ)} without moving its version or updated_at")
