"""A command run as a bead: its command line, exit status, duration and the tail of its output.

A success of a command whose previous recorded run failed is linked to that failure: ``RELATED_TO`` from
the fix to the failure, with ``metadata: {"fix": true}``. Runs of one command line share the tag
``cmd:<digest of the line>``, which is how the previous run is found.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import os
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from recall_schemas import RelType

from ..client import RecallClient

TAIL_LINES = 40
TAIL_BYTES = 8192


@dataclass
class CommandRun:
    command: str
    exit_code: int
    duration_s: float
    tail: str
    bead_id: str | None = None
    fixed: str | None = None
    """The bead of the failure this run fixed, if any."""
    started_at: float | None = None
    """When it started (epoch seconds); default: now minus its duration. Part of the run's identity: the
    same run recorded twice is one bead."""


def command_tag(command: str) -> str:
    return "cmd:" + hashlib.sha256(command.encode()).hexdigest()[:16]


class _Tail:
    """The last ``lines`` lines of a stream, at most ``size`` bytes of them."""

    def __init__(self, lines: int, size: int) -> None:
        self.lines: collections.deque[bytes] = collections.deque(maxlen=lines)
        self.size = size
        self.partial = b""

    def feed(self, chunk: bytes) -> None:
        *complete, self.partial = (self.partial + chunk).split(b"\n")
        self.lines.extend(complete)
        self.partial = self.partial[-self.size :]

    def text(self) -> str:
        lines = [*self.lines, self.partial] if self.partial else list(self.lines)
        data = b"\n".join(lines)[-self.size :]
        return data.decode(errors="replace")


def tail_of(output: bytes, lines: int = TAIL_LINES, size: int = TAIL_BYTES) -> str:
    """The part of a finished command's output a bead keeps: its last lines, at most ``size`` bytes."""
    tail = _Tail(lines, size)
    tail.feed(output)
    return tail.text()


async def run_command(
    argv: Sequence[str], *, echo: BinaryIO | None = None, tail_lines: int = TAIL_LINES, tail_bytes: int = TAIL_BYTES
) -> CommandRun:
    """Run ``argv`` (output and errors merged, passed on to ``echo``); its exit status, duration and output tail.
    A command that cannot be started exits 127, as in a shell."""
    command = shlex.join(argv)
    tail = _Tail(tail_lines, tail_bytes)
    started = time.monotonic()
    try:
        process = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
    except OSError as exc:
        return CommandRun(command, 127, time.monotonic() - started, f"{argv[0]}: {exc.strerror or exc}")
    assert process.stdout is not None
    while chunk := await process.stdout.read(65536):
        tail.feed(chunk)
        if echo is not None:
            echo.write(chunk)
            echo.flush()
    code = await process.wait()
    return CommandRun(command, code, time.monotonic() - started, tail.text())


async def record_run(client: RecallClient, run: CommandRun, **scope: Any) -> CommandRun:
    """Store ``run`` as a bead (keyed by command line and start time) and link it to the failure it fixed."""
    started_at = run.started_at if run.started_at is not None else time.time() - run.duration_s
    tag = command_tag(run.command)
    outcome = "succeeded" if run.exit_code == 0 else f"failed (exit {run.exit_code})"
    cwd = os.getcwd()
    key = hashlib.sha256(f"{run.command}\0{cwd}\0{started_at:.6f}".encode()).hexdigest()[:40]
    previous = [b for b in await client.get_by_tag(tag, limit=5) if b.metadata.get("command") == run.command]
    bead = await client.create_bead(
        f"`{run.command[:400]}` {outcome}",
        f"$ {run.command}\nexit {run.exit_code} after {run.duration_s:.2f}s in {cwd}\n\n{run.tail}".rstrip(),
        bead_type="event", provenance="observed", tags=["shell", tag, "ok" if run.exit_code == 0 else "failed"],
        metadata={"collector": "shell", "command": run.command, "exit_code": run.exit_code,
                  "duration_s": round(run.duration_s, 3), "cwd": cwd},
        idempotency_key=f"shell:{key}", **scope,
    )
    run.bead_id = bead.bead_id
    last = previous[0] if previous else None  # newest first
    if run.exit_code == 0 and last is not None and last.metadata.get("exit_code") not in (0, None):
        await client.add_relationship(
            bead.bead_id, last.bead_id, RelType.RELATED_TO,
            metadata={"fix": True, "collector": "shell", "failed_with": last.metadata.get("exit_code")},
        )
        run.fixed = last.bead_id
    return run


async def run_and_record(
    client: RecallClient, argv: Sequence[str], *, echo: bool = True, **scope: Any
) -> CommandRun:
    """``recall run -- CMD ARGS``: run the command, then record it (``scope``: visibility, group_id, session_id)."""
    run = await run_command(argv, echo=sys.stdout.buffer if echo else None)
    return await record_run(client, run, **scope)
