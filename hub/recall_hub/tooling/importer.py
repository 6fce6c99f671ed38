"""`recall import FILE.jsonl`: bulk-load beads through the bus, as one identity.

Each line is a JSON object with the fields of ``create_bead`` (``title`` required; ``content``, ``tags``,
``group_id``, ``visibility``, ``session_id``, …). A line without an ``idempotency_key`` gets one made
from its text, so importing the same file again stores nothing twice. Lines that are not valid beads
are reported with their line number and skipped; the rest are sent in batches (``create_beads``).
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from pydantic import ValidationError
from recall_client import RecallClient
from recall_schemas import CreateBead


@dataclass
class ImportReport:
    lines: int = 0
    created: int = 0
    replayed: int = 0
    refused: list[tuple[int, str]] = field(default_factory=list)
    """(line number, reason) of every line not stored."""
    seconds: float = 0.0


def read_beads(path: Path) -> tuple[list[tuple[int, CreateBead]], list[tuple[int, str]], int]:
    """The beads of a JSON-lines file with their line numbers, the lines that are not beads, and the
    number of non-blank lines."""
    beads: list[tuple[int, CreateBead]] = []
    bad: list[tuple[int, str]] = []
    lines = 0
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            lines += 1
            try:
                fields = json.loads(line)
                if not isinstance(fields, dict):
                    raise ValueError("a line must be a JSON object")
                fields.setdefault("idempotency_key", "import:" + hashlib.sha256(line.strip().encode()).hexdigest()[:48])
                beads.append((number, CreateBead.model_validate(fields)))
            except ValidationError as exc:
                bad.append((number, "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())))
            except ValueError as exc:
                bad.append((number, str(exc)))
    return beads, bad, lines


async def import_file(
    client: RecallClient, path: Path, *, batch_size: int = 64, progress: Callable[[int, int], None] | None = None
) -> ImportReport:
    started = time.perf_counter()
    beads, bad, lines = read_beads(path)
    report = ImportReport(lines=lines, refused=bad)
    items = await client.create_beads(
        [bead for _, bead in beads], batch_size=batch_size,
        progress=(lambda done: progress(done, len(beads))) if progress else None,
    )
    for (number, _), item in zip(beads, items, strict=True):
        if item.error is not None:
            report.refused.append((number, f"{item.error.code.value}: {item.error.message}"))
        elif item.created:
            report.created += 1
        else:
            report.replayed += 1
    report.refused.sort()
    report.seconds = time.perf_counter() - started
    return report


def progress_bar(out: TextIO = sys.stderr, width: int = 40) -> Callable[[int, int], None]:
    started = time.perf_counter()

    def show(done: int, total: int) -> None:
        filled = width * done // max(total, 1)
        rate = done / max(time.perf_counter() - started, 1e-9)
        out.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} beads, {rate:.0f}/s")
        out.flush()

    return show
