"""`recall up` as a user runs it: it prints where things are, serves, and SIGTERM stops all of it."""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
from pathlib import Path

from recall_client import RecallClient
from recall_hub.tooling.stack import free_port


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


async def test_recall_up_serves_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    nats_port, redis_port = free_port(), free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "recall_hub.tooling.cli", "up", "--data-dir", str(tmp_path),
        "--nats-port", str(nats_port), "--redis-port", str(redis_port),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )
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
        async with RecallClient("a_cliuser1", f"nats://127.0.0.1:{nats_port}") as client:
            bead = await client.create_bead("from the CLI test", visibility="private")
            assert (await client.get_bead(bead.bead_id)).title == "from the CLI test"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    assert not _port_open(nats_port) and not _port_open(redis_port)
    assert (tmp_path / "redis").is_dir() and (tmp_path / "nats").is_dir()
