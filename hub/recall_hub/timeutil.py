"""Timestamps: stored as integer epoch milliseconds, carried on the wire as UTC datetimes."""

from __future__ import annotations

import time
from datetime import UTC, datetime

DAY_MS = 86_400_000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


_last_moment = 0


def new_moments(count: int = 1) -> int:
    """The first of ``count`` consecutive milliseconds to stamp new beads with: from now, and after every moment
    this process stamped before — so a batch, whatever its size, sorts after the write that came before it and
    keeps its own order (listings, session chains), and so does the write that comes after."""
    global _last_moment
    start = max(now_ms(), _last_moment + 1)
    _last_moment = start + max(count, 1) - 1
    return start


def to_ms(value: datetime) -> int:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return int(value.timestamp() * 1000)


def from_ms(value: int) -> datetime:
    return datetime.fromtimestamp(value / 1000, tz=UTC)
