"""Timestamps: stored as integer epoch milliseconds, carried on the wire as UTC datetimes."""

from __future__ import annotations

import time
from datetime import UTC, datetime

DAY_MS = 86_400_000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def to_ms(value: datetime) -> int:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return int(value.timestamp() * 1000)


def from_ms(value: int) -> datetime:
    return datetime.fromtimestamp(value / 1000, tz=UTC)
