"""The embedded stack as its user meets it: a port another program holds is refused before anything
starts, a process that dies is started again on the same data, one that keeps dying (a fourth death
within 60 s, however old the stack) ends the stack with a message saying why, a hub that says it is
ready after a Redis restart serves, and `recall status` tells what runs where."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis
from conftest import new_ai, until
from recall_client import RecallClient
from recall_hub.tooling.stack import STATE_FILE, EmbeddedStack, StackError, free_port, port_in_use, running_state
from recall_hub.tooling.supervisor import DeathWindow, Supervisor

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

    async def wait_for(self, text: str, within: float = 60.0, times: int = 1) -> str:
        """The ``times``-th line saying ``text``, once there is one."""
        async with asyncio.timeout(within), self._new:
            await self._new.wait_for(lambda: len(self.saying(text)) >= times)
        return self.saying(text)[times - 1]

    def saying(self, text: str) -> list[str]:
        return [line for line in self.lines if text in line]


class _Clock:
    """A monotonic clock a test sets: the stack's age at will, without waiting for it."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("age", [0.0, 61.0, 86_400.0])
def test_a_fourth_death_within_60_s_is_one_too_many_however_old_the_stack(age: float) -> None:
    clock = _Clock(age)  # the stack started at 0: after a minute its first start has left any window
    window = DeathWindow(60.0, clock)
    counts = []
    for after in (0.0, 10.0, 20.0, 30.0):
        clock.now = age + after
        counts.append(window.died("nats-server"))
    assert counts == [1, 2, 3, 4]  # Supervisor(max_restarts=3) restarts the first three, not the fourth


def test_deaths_leave_the_window_60_s_after_they_happened() -> None:
    clock = _Clock(1000.0)
    window = DeathWindow(60.0, clock)
    counts = []
    for at in (1000.0, 1030.0, 1059.0, 1060.0, 1089.0, 1200.0):
        clock.now = at
        counts.append(window.died("redis-server"))
    # 1060: the death at 1000 is 60 s old, no longer within 60 s; 1089: 1030, 1059, 1060 and 1089 are;
    # 1200: all earlier ones have left.
    assert counts == [1, 2, 3, 3, 4, 1]


def test_each_process_has_a_window_of_its_own() -> None:
    window = DeathWindow(60.0, _Clock(5.0))
    assert [window.died("nats-server") for _ in range(3)] == [1, 2, 3]
    assert window.died("redis-server") == 1
    assert window.died("nats-server") == 4


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
        stack.kill("nats-server")  # a second death within the window is one more than the one restart allowed
        reason = await asyncio.wait_for(watching, 30)
    assert reason.startswith("nats-server was killed by SIGKILL: 2 deaths within 60 s, more than the 1 restarts "
                             "allowed; see ")
    assert reason.endswith("logs/nats-server.log")


async def test_an_hour_old_stack_restarts_three_deaths_within_60_s_and_ends_at_the_fourth(tmp_path: Path) -> None:
    clock = _Clock(0.0)
    with EmbeddedStack(tmp_path) as stack:
        reports = _Reports()
        watching = asyncio.create_task(Supervisor(stack, report=reports, clock=clock).run())
        try:
            # An hour after the start. The death at 3661 is the fourth in a row but the one at 3600 has left
            # the window by then: three within 60 s, restarted.
            for n, at in enumerate((3600.0, 3610.0, 3620.0, 3661.0), start=1):
                clock.now = at  # set while the supervisor waits: it reads the clock when it sees the death
                stack.kill("nats-server")
                await reports.wait_for("nats-server is back", times=n)
            clock.now = 3662.0  # 3610, 3620, 3661, 3662: a fourth death within 60 s
            stack.kill("nats-server")
            reason = await asyncio.wait_for(watching, 30)
        finally:
            watching.cancel()
    assert reason.startswith("nats-server was killed by SIGKILL: 4 deaths within 60 s, more than the 3 restarts "
                             "allowed; see ")
    assert len(reports.saying("nats-server was killed by SIGKILL; starting it again")) == 4


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
async def _recall_up(
    data_dir: Path, env: dict[str, str] | None = None
) -> AsyncIterator[tuple[asyncio.subprocess.Process, list[str]]]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "recall_hub.tooling.cli", "up", "--data-dir", str(data_dir),
        "--nats-port", str(free_port()), "--redis-port", str(free_port()),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env={**os.environ, **(env or {})},
    )  # fmt: skip
    printed: list[str] = []
    try:
        await _read_until(proc, printed, "Ctrl-C stops everything")
        yield proc, printed
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 30)


async def _read_until(proc: asyncio.subprocess.Process, printed: list[str], text: str) -> str:
    """Reads what `recall up` prints (into ``printed``) until a line it prints from now on says ``text``."""
    assert proc.stdout is not None
    async with asyncio.timeout(60):
        while True:
            line = await proc.stdout.readline()
            assert line, f"recall up ended before printing {text!r}: {''.join(printed)}"
            printed.append(line.decode())
            if text in printed[-1]:
                return printed[-1]


def _pid_of(data_dir: Path, name: str) -> int:
    state = running_state(data_dir)
    assert state is not None
    return int(next(c for c in state["children"] if c["name"] == name)["pid"])


HASH_EMBEDDER = {"RECALL_EMBEDDER__KIND": "hash"}
"""The in-process hub of `recall up` without a model to load."""


async def test_recall_up_stops_everything_at_a_fourth_death_within_60_s(tmp_path: Path) -> None:
    async with _recall_up(tmp_path, HASH_EMBEDDER) as (proc, printed):
        state = running_state(tmp_path)
        assert state is not None
        for _ in range(3):
            os.kill(_pid_of(tmp_path, "nats-server"), signal.SIGKILL)
            await _read_until(proc, printed, "nats-server is back")
        os.kill(_pid_of(tmp_path, "nats-server"), signal.SIGKILL)  # the fourth death within a few seconds
        await _read_until(proc, printed, "stopped.")
        assert await asyncio.wait_for(proc.wait(), 30) == 1
    said = "".join(printed)
    assert "recall up: nats-server was killed by SIGKILL: 4 deaths within 60 s, more than the 3 restarts allowed; " \
        "see " in said
    assert said.count("nats-server was killed by SIGKILL; starting it again") == 3
    assert running_state(tmp_path) is None
    redis_port = int(state["redis_url"].rsplit(":", 1)[1])
    assert not port_in_use("127.0.0.1", redis_port)  # the processes that did not die were stopped too


async def _answers_200(url: str) -> bool:
    def get() -> int:
        with urllib.request.urlopen(url, timeout=5) as reply:  # a 503 raises HTTPError, an OSError: not yet
            return int(reply.status)

    return await asyncio.to_thread(get) == 200


async def test_after_a_supervised_redis_restart_ready_means_the_requests_that_follow_succeed(tmp_path: Path) -> None:
    async with _recall_up(tmp_path, HASH_EMBEDDER) as (proc, printed):
        state = running_state(tmp_path)
        assert state is not None
        metrics = next(line.split()[1] for line in printed if line.strip().startswith("metrics"))
        readyz = metrics.removesuffix("/metrics") + "/readyz"
        # retries=0: the first attempt of each request must succeed.
        async with RecallClient(new_ai(), state["nats_url"], timeout=10, retries=0) as client:
            beads = [await client.create_bead(f"restart note {i}", visibility="global") for i in range(3)]
            await client.learn("restart.key", "kept")
            # Requests at once, so the hub's pools hold several connections, idle when Redis dies.
            await asyncio.gather(*(client.search_beads("restart note") for _ in range(8)),
                                 *(client.get_bead(b.bead_id) for b in beads), client.recall("restart.key"))

            os.kill(_pid_of(tmp_path, "redis-server"), signal.SIGKILL)
            await _read_until(proc, printed, "redis-server is back")
            await until("/readyz 200 after the restart", lambda: _answers_200(readyz))

            # The first requests after ready, at once (so they take several pooled connections).
            answers = await asyncio.gather(
                client.search_beads("restart note"), client.get_bead(beads[1].bead_id), client.recall("restart.key"),
                client.create_bead("after the restart", visibility="global"), return_exceptions=True,
            )
            assert [a for a in answers if isinstance(a, BaseException)] == []
            found, got, recalled, created = answers
            assert {b.bead_id for b in beads} <= {hit.bead.bead_id for hit in found.hits}
            assert got.title == "restart note 1"
            assert recalled.value == "kept"
            assert (await client.get_bead(created.bead_id)).title == "after the restart"


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
