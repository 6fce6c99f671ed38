"""A bead's stored trust marks as wire models.

A bead holds its marks as four parallel lists (graph properties cannot be maps): ``trust_by`` (who),
``trust_verdicts`` (``verified``/``rejected``), ``trust_at`` (epoch ms) and ``trust_notes`` (the note or
reason, ``''`` for none). One identity has at most one mark: a new verdict replaces its earlier one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from recall_schemas import TrustMark, TrustVerdict

from recall_hub.timeutil import from_ms


def trust_marks_of(props: Mapping[str, Any]) -> list[TrustMark]:
    """The stored marks of a bead (oldest mark first)."""
    by = props.get("trust_by") or []
    verdicts = props.get("trust_verdicts") or []
    ats = props.get("trust_at") or []
    notes = props.get("trust_notes") or []
    return [
        TrustMark(ai_id=ai, verdict=TrustVerdict(verdict), at=from_ms(int(at)), note=note or None)
        for ai, verdict, at, note in zip(by, verdicts, ats, notes, strict=False)
    ]
