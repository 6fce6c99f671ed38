"""The embedded stack as its user meets it: a port another program holds is refused before anything
starts, a process that dies is started again on the same data, one that keeps dying ends the stack
with a message saying why, and `recall status` tells what runs where."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis
from recall_client import RecallClient
from recall_hub.tooling.stack import STATE_FILE, EmbeddedStack, StackError, free_port, port_in_use, running_state
from recall_hub.tooling.supervisor import Supervisor

pytestmark = pytest.mark.timeout(180)


@contextlib.contextmanager
def _listening(port: int = 0) -> Iterator[int]:
    """Another program listening on a port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        yield int(s.getsockname()[1])


@pytest.mark.parametrize("option", ["nats_port", "redis_port"])
def test_a_port_held_by_another_program_is_refused_before_anything_starts(tmp_path: Path, option: str) -> None:
    with _listening() as taken:
        stack = EmbeddedStack(tmp_path, **{option: taken})  # type: ignore[arg-type]
        with pytest.raises(StackError, match=f"port {taken} .* in use by another program; choose another with "
                           f"--{option.replace('_', '-')}"):
            stack.start()
    assert stack.children == []
    assert not (tmp_path / "logs").exists()  # no server was started, so none wrote a log


@contextlib.contextmanager
def _listening_after_a_free_port() -> Iterator[int]:
    """Another program listening on a port whose predecessor is free (any port may be some other
    connection's local port, so the pair is looked for rather than assumed)."""
    for _ in range(100):
        with _listening() as taken:
            if not port_in_use("127.0.0.1", taken - 1):
                yield taken
                return
    raise AssertionError("no listening port with a free predecessor found")


def test_a_cluster_needs_every_node_port_free(tmp_path: Path) -> None:
    with _listening_after_a_free_port() as taken, pytest.raises(StackError, match=f"port {taken} .* --nats-port"):
        EmbeddedStack(tmp_path, nats_port=taken - 1, nats_nodes=2).start()  # the second node's port is taken


def test_recall_up_names_the_taken_port_and_the_flag(tmp_path: Path) -> None:
    with _listening() as taken:
        result = subprocess.run(
            [sys.executable, "-m", "recall_hub.tooling.cli", "up", "--data-dir", str(tmp_path),
             "--nats-port", str(free_port()), "--redis-port", str(taken)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert result.returncode == 1
    assert f"port {taken} on 127.0.0.1 is in use by another program; choose another with --redis-port" in result.stderr
    assert "is up" not in result.stdout


class _Reports:
    """What a supervisor reported, awaitable line by line."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._new = asyncio.Condition()

    def __call__(self, line: str) -> None:
        self.lines.append(line)
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._new:
            self._new.notify_all()

    async def wait_for(self, text: str, within: float = 60.0) -> str:
        async with asyncio.timeout(within), self._new:
            await self._new.wait_for(lambda: any(text in line for line in self.lines))
        return next(line for line in self.lines if text in line)


async def test_a_killed_server_is_started_again_on_its_data(tmp_path: Path) -> None:
    with EmbeddedStack(tmp_path) as stack:
        reports = _Reports()
        watching = asyncio.create_task(Supervisor(stack, report=reports).run())
        client = redis.Redis.from_url(stack.redis_url)
        try:
            client.set("kept", "yes")
            old = stack.child("redis-server").pid
            stack.kill("redis-server")
            assert "redis-server was killed by SIGKILL; starting it again" in await reports.wait_for("killed")
            await reports.wait_for("redis-server is back")
            assert stack.child("redis-server").pid != old
            assert client.get("kept") == b"yes"
            assert json.loads((tmp_path / STATE_FILE).read_text())["children"][0]["pid"] == stack.child(
                "redis-server"
            ).pid
            assert not watching.done()
        finally:
            client.close()
            watching.cancel()


async def test_a_server_that_keeps_dying_ends_the_stack_with_the_reason(tmp_path: Path) -> None:
    with EmbeddedStack(tmp_path) as stack:
        reports = _Reports()
        watching = asyncio.create_task(Supervisor(stack, max_restarts=1, report=reports).run())
        stack.kill("nats-server")
        await reports.wait_for("nats-server is back")
        stack.kill("nats-server")  # a third start within the window would be one restart too many
        reason = await asyncio.wait_for(watching, 30)
    assert reason.startswith("nats-server was killed by SIGKILL after 2 starts within 60 s; see ")
    assert reason.endswith("logs/nats-server.log")


async def test_a_hub_process_is_started_again_and_serves(tmp_path: Path) -> None:
    with EmbeddedStack(tmp_path, hubs=1, hub_env={"RECALL_EMBEDDER__KIND": "hash"}) as stack:
        reports = _Reports()
        watching = asyncio.create_task(Supervisor(stack, report=reports).run())
        try:
            async with RecallClient("a_supervised1", stack.nats_url, timeout=10) as client:
                bead = await client.create_bead("before the crash", visibility="global")
                stack.kill("hub-1")
                await reports.wait_for("hub-1 is back")
                assert (await client.get_bead(bead.bead_id)).title == "before the crash"
        finally:
            watching.cancel()


@contextlib.asynccontextmanager
async def _recall_up(data_dir: Path) -> AsyncIterator[tuple[asyncio.subprocess.Process, list[str]]]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "recall_hub.tooling.cli", "up", "--data-dir", str(data_dir),
        "--nats-port", str(free_port()), "--redis-port", str(free_port()),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    printed: list[str] = []
    try:
        await _read_until(proc, printed, "Ctrl-C stops everything")
        yield proc, printed
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 30)


async def _read_until(proc: asyncio.subprocess.Process, printed: list[str], text: str) -> None:
    assert proc.stdout is not None
    async with asyncio.timeout(60):
        while not printed or text not in printed[-1]:
            line = await proc.stdout.readline()
            assert line, f"recall up ended before printing {text!r}: {''.join(printed)}"
            printed.append(line.decode())


def _status(data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "recall_hub.tooling.cli", "status", "--data-dir", str(data_dir)],
        capture_output=True, text=True, timeout=60, check=False,
    )


async def test_recall_status_shows_what_runs_and_recall_up_restarts_a_killed_server(tmp_path: Path) -> None:
    async with _recall_up(tmp_path) as (proc, printed):
        state = running_state(tmp_path)
        assert state is not None
        async with RecallClient("a_statususer1", state["nats_url"]) as client:
            await client.create_bead("one bead", visibility="global")
        shown = _status(tmp_path)
        assert shown.returncode == 0
        assert f"recall up pid {proc.pid}" in shown.stdout
        for child in state["children"]:
            assert f"{child['name']}" in shown.stdout and f"{child['pid']}" in shown.stdout
        assert "beads     1 in graph recall" in shown.stdout

        nats = next(c for c in state["children"] if c["name"] == "nats-server")
        os.kill(nats["pid"], signal.SIGKILL)
        await _read_until(proc, printed, "nats-server is back")
        assert any("nats-server was killed by SIGKILL; starting it again" in line for line in printed)
        after = running_state(tmp_path)
        assert after is not None
        assert next(c for c in after["children"] if c["name"] == "nats-server")["pid"] != nats["pid"]
        async with RecallClient("a_statususer1", state["nats_url"]) as client:
            assert [b.title for b in await client.get_recent(5)] == ["one bead"]
    stopped = _status(tmp_path)
    assert stopped.returncode == 3
    assert "not running" in stopped.stdout and "holds data of earlier runs" in stopped.stdout
