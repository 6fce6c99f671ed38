"""CPU time the processes of a run spend, by kind, read from ``/proc`` (Linux; elsewhere nothing is read).

What a load level cost the machine: a hub's process (and its event-loop thread apart: the one thread a
hub's Python work runs on), the stores, nats-server and the load generator itself, in CPU seconds between two
readings.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
MAIN_THREAD = " (main thread)"
"""A kind named with this at its end counts only the main thread of each of its processes."""


def cpu_seconds(pid: int, thread: int | None = None) -> float | None:
    """User + system CPU seconds of process ``pid`` (all its threads), or of its thread ``thread``; None when
    it cannot be read (no such process, no ``/proc``)."""
    path = Path(f"/proc/{pid}/task/{thread}/stat") if thread is not None else Path(f"/proc/{pid}/stat")
    try:
        fields = path.read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime: fields 14 and 15 of stat(5)


class CpuMeter:
    """CPU seconds by kind over a stretch of time: ``kinds`` maps a kind to its process ids (see
    :data:`MAIN_THREAD`)."""

    def __init__(self, kinds: Mapping[str, Sequence[int]]) -> None:
        self.kinds = {kind: list(pids) for kind, pids in kinds.items() if pids}

    def read(self) -> dict[str, float]:
        found = {}
        for kind, pids in self.kinds.items():
            main_only = kind.endswith(MAIN_THREAD)
            times = [cpu_seconds(pid, pid if main_only else None) for pid in pids]
            if all(t is not None for t in times):
                found[kind] = sum(t for t in times if t is not None)
        return found

    @staticmethod
    def spent(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
        return {kind: after[kind] - before[kind] for kind in before if kind in after}


def whole_processes(by_kind: Mapping[str, float]) -> float:
    """The sum over the kinds that count whole processes (a main thread is already in its process's figure)."""
    return sum(value for kind, value in by_kind.items() if not kind.endswith(MAIN_THREAD))
