"""Results as data: each run of ``recall bench`` and ``recall eval`` kept as one JSON file.

A results file holds the figures the run printed (its ``--json`` output) with what is needed to trust and
repeat them: the suite, the command, the commit (``+`` when the checkout had changes), the machine and the
date. They live under ``benchmarks/results/`` in the repository, one file a run, and the tables of README and
docs are generated from them (:mod:`recall_hub.bench.tables`), never typed.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from recall_hub.bench.machine import commit, host

RESULTS_DIR = Path("benchmarks/results")
SUITES = (
    "bench", "locomo", "longmemeval", "tune", "flood", "growth", "keyword", "failover", "vectors", "embedder", "load",
    "peers",
)


@dataclass(frozen=True)
class Record:
    suite: str
    """``bench`` (the bus suite), ``locomo``, ``longmemeval``, ``tune`` (``scripts/tune_ranking.py``: ranking
    variants on both dev sets, paired differences and the cross-validated choice), or the other suites of
    ``recall bench --suite``."""
    command: str
    commit: str
    machine: dict[str, Any]
    date: str
    """ISO 8601, UTC, to the microsecond."""
    figures: dict[str, Any]

    @property
    def name(self) -> str:
        """The file name: suite, date and commit, so a directory listing reads as the history."""
        stamp = self.date.replace("-", "").replace(":", "").replace(".", "")[:21]
        return f"{self.suite}-{stamp}-{self.commit.replace('+', '-dirty')}.json"

    def to_json(self) -> dict[str, Any]:
        return {
            "suite": self.suite, "command": self.command, "commit": self.commit, "machine": self.machine,
            "date": self.date, "figures": self.figures,
        }


def new_record(suite: str, figures: dict[str, Any], command: str | None = None) -> Record:
    """A record of a run that just ended on this machine, from this checkout."""
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}: one of {', '.join(SUITES)}")
    return Record(
        suite=suite,
        command=command if command is not None else shlex.join(["recall", *sys.argv[1:]]),
        commit=commit(),
        machine=host(),
        date=datetime.now(UTC).isoformat(timespec="microseconds"),
        figures=figures,
    )


def as_figures(report: Any) -> Any:
    """A suite's report (dataclasses, lists of them) as JSON-ready figures."""
    if dataclasses.is_dataclass(report) and not isinstance(report, type):
        return dataclasses.asdict(report)
    if isinstance(report, dict):
        return {key: as_figures(value) for key, value in report.items()}
    if isinstance(report, (list, tuple)):
        return [as_figures(item) for item in report]
    return report


def save(record: Record, directory: Path = RESULTS_DIR) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path, n = directory / record.name, 1
    while path.exists():  # two runs ended in the same microsecond
        n += 1
        path = directory / record.name.replace(".json", f"-{n}.json")
    path.write_text(json.dumps(record.to_json(), indent=1, default=str) + "\n")
    return path


def load(directory: Path = RESULTS_DIR) -> list[Record]:
    """Every record of ``directory``, oldest first."""
    records = [Record(**json.loads(path.read_text())) for path in sorted(directory.glob("*.json"))]
    return sorted(records, key=lambda r: (r.date, r.suite))
