"""`recall up` as a user runs it: it prints where things are, serves, says whether earlier data is kept
(``--fresh`` starts empty), and SIGTERM stops all of it."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from recall_client import RecallClient
from recall_hub.tooling.stack import free_port
from recall_schemas import NotFound


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextlib.asynccontextmanager
async def recall_up(data_dir: Path, *flags: str) -> AsyncIterator[tuple[str, str]]:
    """``recall up`` in a subprocess until it says it serves: (its NATS URL, what it printed); SIGTERM after."""
    nats_port, redis_port = free_port(), free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "recall_hub.tooling.cli", "up", "--data-dir", str(data_dir),
        "--nats-port", str(nats_port), "--redis-port", str(redis_port), *flags,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdout is not None
    printed: list[str] = []
    try:
        async with asyncio.timeout(60):
            while not printed or "Ctrl-C stops everything" not in printed[-1]:
                line = await proc.stdout.readline()
                assert line, f"recall up ended early: {printed}"
                printed.append(line.decode())
        text = "".join(printed)
        assert f"nats://127.0.0.1:{nats_port}" in text and f"redis://127.0.0.1:{redis_port}" in text
        yield f"nats://127.0.0.1:{nats_port}", text
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    assert not _port_open(nats_port) and not _port_open(redis_port)


async def test_recall_up_serves_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    async with recall_up(tmp_path) as (nats_url, printed):
        assert "kept from earlier runs" not in printed
        async with RecallClient("a_cliuser1", nats_url) as client:
            bead = await client.create_bead("from the CLI test", visibility="private")
            assert (await client.get_bead(bead.bead_id)).title == "from the CLI test"
    assert (tmp_path / "redis").is_dir() and (tmp_path / "nats").is_dir()
    # A second run on the same data says its searches will find the first run's beads, and finds them.
    async with recall_up(tmp_path) as (nats_url, printed):
        assert "kept from earlier runs" in printed and "--fresh" in printed
        async with RecallClient("a_cliuser1", nats_url) as client:
            assert (await client.get_bead(bead.bead_id)).title == "from the CLI test"
    # --fresh starts empty.
    async with recall_up(tmp_path, "--fresh") as (nats_url, printed):
        assert "started empty" in printed
        async with RecallClient("a_cliuser1", nats_url) as client:
            with pytest.raises(NotFound):
                await client.get_bead(bead.bead_id)
