"""The embedded stack keeps its data across restarts and refuses a second stack on one data dir."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from recall_client import RecallClient
from recall_hub.config import HubSettings
from recall_hub.service.server import running_hub
from recall_hub.tooling.stack import EmbeddedStack, StackError, hold_data_dir, holds_data
from recall_schemas import NotFound


async def _write_and_read(stack: EmbeddedStack, bead_id: str | None) -> str:
    settings = HubSettings(nats_url=stack.nats_url, falkordb_url=stack.redis_url, redis_url=stack.redis_url)
    async with running_hub(settings), RecallClient("a_persist1", stack.nats_url) as client:
        if bead_id is None:
            return (await client.create_bead("survives restarts", "AOF keeps me", visibility="global")).bead_id
        return (await client.get_bead(bead_id)).content


async def test_a_second_up_on_the_same_data_dir_finds_every_bead(tmp_path: Path) -> None:
    with EmbeddedStack(tmp_path) as first:
        bead_id = await _write_and_read(first, None)
    with EmbeddedStack(tmp_path) as second:
        assert await _write_and_read(second, bead_id) == "AOF keeps me"
    assert any((tmp_path / "redis").rglob("*.aof")), "persistence (AOF) must be on"


async def test_fresh_starts_empty_and_keeps_the_credentials(tmp_path: Path) -> None:
    with EmbeddedStack(tmp_path) as first:
        bead_id = await _write_and_read(first, None)
    (tmp_path / "auth").mkdir()
    (tmp_path / "auth" / "a_persist1.creds").write_text("kept")
    assert holds_data(tmp_path)
    with EmbeddedStack(tmp_path, fresh=True) as again:
        settings = HubSettings(nats_url=again.nats_url, falkordb_url=again.redis_url, redis_url=again.redis_url)
        async with running_hub(settings), RecallClient("a_persist1", again.nats_url) as client:
            with pytest.raises(NotFound):
                await client.get_bead(bead_id)
    assert (tmp_path / "auth" / "a_persist1.creds").read_text() == "kept"


def test_two_stacks_cannot_share_a_data_dir(tmp_path: Path) -> None:
    with EmbeddedStack(tmp_path), pytest.raises(StackError, match="already running"):
        EmbeddedStack(tmp_path).start()


def test_a_redis_that_accepts_but_never_answers_fails_the_start_with_a_stack_error_at_the_deadline() -> None:
    """A server that is up but not answering yet (a slow disk at start-up) is waited for, not a crash:
    past the deadline the start fails with a StackError that says so."""
    from recall_hub.tooling.stack import _wait_for_redis

    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with _never_answering() as port, pytest.raises(StackError, match="did not answer within"):
            _wait_for_redis("127.0.0.1", port, alive, timeout=1.0)
    finally:
        alive.kill()
        alive.wait()


def test_a_redis_busy_replaying_its_data_is_waited_for_past_the_deadline() -> None:
    """A server replaying a large append-only file may answer nothing for minutes; while it works (uses CPU) the
    start waits for it, and the deadline counts from when it stops working."""
    from recall_hub.tooling.stack import _wait_for_redis

    busy = subprocess.Popen([sys.executable, "-c", (
        "import time\nwhile time.process_time() < 3.0: pass\ntime.sleep(60)"  # 3 s of CPU, then idle
    )])
    started = time.monotonic()
    try:
        with _never_answering() as port, pytest.raises(StackError, match="did not answer within"):
            _wait_for_redis("127.0.0.1", port, busy, timeout=1.0)
        assert time.monotonic() - started >= 3.0  # waited while it worked (a second of deadline before)
    finally:
        busy.kill()
        busy.wait()


@contextlib.contextmanager
def _never_answering() -> Iterator[int]:
    """A port that accepts connections and never answers on them."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(listener.accept()[0])  # kept open, never answered
            except OSError:
                return

    accepting = threading.Thread(target=accept, daemon=True)
    accepting.start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread (close alone would not)
        listener.close()
        accepting.join()
        for connection in held:
            connection.close()


def test_a_server_is_terminated_when_the_process_that_started_it_dies(tmp_path: Path) -> None:
    """Servers are started through a launcher that asks Linux to signal them when their parent dies (and
    never run Python between fork and exec in a process with threads, where that can deadlock)."""
    parent = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from recall_hub.tooling.stack import spawn_server\n"
         "server = spawn_server(['sleep', '600'], open(sys.argv[1], 'ab'))\n"
         "print(server.pid, flush=True); time.sleep(600)", str(tmp_path / "server.log")],
        stdout=subprocess.PIPE,
    )
    try:
        assert parent.stdout is not None
        server_pid = int(parent.stdout.readline())
        _wait("the launcher became the server", lambda: _command(server_pid) == ["sleep", "600"])
    finally:
        parent.kill()
        parent.wait()
    _wait("the server ended with the process that started it", lambda: not _running(server_pid))


def _wait(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _command(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().rstrip("\0").split("\0")


def _running(pid: int) -> bool:
    """Alive and not a zombie waiting to be reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_stack_waits_for_the_servers_of_a_crashed_stack_on_its_data_to_exit(tmp_path: Path) -> None:
    """The data directory's lock is held by every server a stack starts: a crashed stack's servers may take a
    moment to stop (a Redis writing its last AOF), and a new stack must not start its own on the same files
    meanwhile. The 'server' here outlives its crashed stack by two seconds."""
    crashed = subprocess.run(
        [sys.executable, "-c",
         "import os, sys; from pathlib import Path; from recall_hub.tooling.stack import hold_data_dir, spawn_server\n"
         "lock = hold_data_dir(Path(sys.argv[1]))\n"
         "server = spawn_server([sys.executable, '-c', 'import time; time.sleep(2)'], open(os.devnull, 'ab'),"
         " lock=lock)\n"
         "print(server.pid, flush=True); os._exit(9)", str(tmp_path)],
        capture_output=True, text=True, check=False,
    )
    server_pid = int(crashed.stdout)
    assert _running(server_pid)
    lock = hold_data_dir(tmp_path)
    try:
        assert not _running(server_pid)  # taken only once the old server had exited
    finally:
        lock.close()


def test_a_live_stack_on_the_data_is_refused_at_once(tmp_path: Path) -> None:
    held = hold_data_dir(tmp_path)
    try:
        started = time.monotonic()
        with pytest.raises(StackError, match="already running"):
            hold_data_dir(tmp_path, wait_s=30)
        assert time.monotonic() - started < 5
    finally:
        held.close()
