"""Summary statistics of measured samples, shared by the bench suites: percentiles, medians and means."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100), linear between closest ranks; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def median_int(values: Sequence[int]) -> int:
    """The median, rounded; 0 for no values."""
    return round(percentile([float(v) for v in values], 50)) if values else 0


def mean(values: Sequence[float]) -> float:
    """The arithmetic mean; NaN for no values."""
    return sum(values) / len(values) if values else math.nan
