"""Time in a search: ``as_of`` (search the past) and the date window a query names (rank it higher).

An ``as_of`` search takes its candidates from the current indexes — the keyword and vector lists score
the beads' *current* text — restricted before top-k to beads created by then, and answers with each
bead's version of then. Filters apply to the current bead (as the indexes hold it) and again to the
version of then; a bead superseded only later is not demoted.
So a bead whose words changed since is found by its words of now; its score says nothing of then.

A date window (:mod:`recall_hub.retrieval.dates`) is a bounded boost, never a filter: beads whose
``valid_from`` (else ``created_at``) falls in it have their relevance multiplied by :data:`DATE_BOOST`. A
window with both ends also brings its own candidates: hybrid search reads each list again restricted to the
window and adds what it finds, scored as that list scores it (:func:`recall_hub.retrieval.search.rank`), so a
bead of then is ranked even when more beads of other times, saying the same things, fill both lists' depth.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from recall_schemas import BeadFilters, DateWindow

from recall_hub.context import HubContext
from recall_hub.retrieval.dates import find_window
from recall_hub.retrieval.ranking import Fused, split_by_screening
from recall_hub.store.as_of import AsOfReads
from recall_hub.store.validity import DatedBeads
from recall_hub.timeutil import from_ms, to_ms

DATE_BOOST = 1.5
"""What falling in the query's date window multiplies relevance by (as strong as all priors together)."""


def created_by_then(filters: BeadFilters, as_of: int) -> BeadFilters:
    """``filters`` narrowed to beads created at or before ``as_of``, so every index applies it before top-k."""
    before = from_ms(as_of + 1)
    if filters.created_before is not None and to_ms(filters.created_before) <= as_of + 1:
        return filters
    return filters.model_copy(update={"created_before": before})


def understood_window(query: str, reference_ms: int | None) -> DateWindow | None:
    """The date window of ``query``, read against ``reference_ms`` (when the question is asked; else now), as
    the reply shows it."""
    reference = from_ms(reference_ms) if reference_ms is not None else datetime.now(UTC)
    window = find_window(query, reference)
    if window is None:
        return None
    return DateWindow(text=window.text, start=window.start, end=window.end, boost=DATE_BOOST)


async def boost_window(
    ctx: HubContext, caller: str, fused: Mapping[str, Fused], window: DateWindow,
    screened: Mapping[str, Mapping[str, Any]],
) -> None:
    """Raise the candidates in ``window`` by :data:`DATE_BOOST`, saying so in their explanation. When each was
    dated is what screening read (``screened``); the graph is asked only of candidates screened without it."""
    known, unread = split_by_screening(fused, screened, "valid_from")
    dated = DatedBeads(ctx.graph)
    if window.start is None or window.end is None:  # "when did …": the beads that know when
        note = f"date: has valid_from ('{window.text}')"
        inside = {bead_id for bead_id, props in known.items() if props["valid_from"] is not None}
        if unread:
            inside |= await dated.with_validity(caller, unread)
    else:
        last_day = window.end - timedelta(milliseconds=1)
        note = f"date: in {window.start:%Y-%m-%d}..{last_day:%Y-%m-%d} ('{window.text}')"
        start, end = to_ms(window.start), to_ms(window.end)
        inside = {bead_id for bead_id, props in known.items() if start <= _dated_at(props) < end}
        if unread:
            inside |= await dated.in_window(caller, unread, start, end)
    for bead_id in sorted(inside):
        entry = fused[bead_id]
        entry.relevance *= DATE_BOOST
        entry.notes.append(f"{note}: x{DATE_BOOST}")


def _dated_at(props: Mapping[str, Any]) -> int:
    """When a bead says it held (``valid_from``), else when it was written."""
    valid_from = props.get("valid_from")
    return int(props.get("created_at") or 0) if valid_from is None else int(valid_from)


def past_reads(ctx: HubContext, as_of: int | None) -> AsOfReads | None:
    return AsOfReads(ctx.graph) if as_of is not None else None

