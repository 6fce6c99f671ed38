"""Where a bench ran: the machine, its load, the server and library versions, and the code measured."""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import logging
import math
import os
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nats.aio.client import Client as NATS

log = logging.getLogger(__name__)


@dataclass
class MachineInfo:
    cores: int
    cpu_model: str
    memory_gb: float
    os: str
    python: str
    nats_server: str
    redis: str
    falkordb: str
    libraries: dict[str, str]
    code: str = "?"
    """nexus-recall version and, in a git checkout, the commit (``+`` and the changed files if dirty)."""
    load: tuple[float, ...] = ()
    """1-minute load average at the start, at each progress step and at the end of the run. The bench
    itself keeps about 2 busy; more means other work on the machine shared the cores."""



def host() -> dict[str, Any]:
    """This machine, without its servers: what a results file says of where it was measured."""
    return {
        "cores": os.cpu_count() or 0, "cpu_model": _cpu_model(), "memory_gb": round(_memory_gb(), 1),
        "os": platform.platform(), "python": f"{platform.python_implementation()} {platform.python_version()}",
        "libraries": {p: _version(p) for p in LIBRARIES},
    }


def _git(*args: str) -> str | None:
    """A git command's output in the checkout this code runs from; None outside one."""
    try:
        done = subprocess.run(
            ["git", "-C", str(Path(__file__).parent), *args], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _changed_files() -> list[str]:
    status = _git("status", "--porcelain", "--untracked-files=no") or ""
    return [line[3:] for line in status.splitlines() if line.strip()]


@functools.cache
def commit() -> str:
    """The checkout's short commit, with ``+`` if files it tracks have changed; ``?`` outside a git checkout.
    Read once per process: a run reads it at its start (:func:`recall_hub.tooling.cli.main`), so a commit made
    while it runs is not taken for the code it loaded."""
    sha = _git("rev-parse", "--short", "HEAD")
    if sha is None:
        return "?"
    return sha.strip() + ("+" if _changed_files() else "")


def code_version() -> str:
    version = f"nexus-recall {_version('nexus-recall')}"
    sha = _git("rev-parse", "--short", "HEAD")
    if sha is None:
        return version
    changed = _changed_files()
    dirty = f" + uncommitted changes in {', '.join(changed)}" if changed else ""
    return f"{version}, commit {sha.strip()}{dirty}"


def load_average() -> float:
    """The 1-minute load average; NaN where the system has none."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return math.nan


def _cpuinfo(field: str) -> str | None:
    """The first ``field`` of /proc/cpuinfo (None where there is none)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.split(":", 1)[0].strip() == field:
                return line.split(":", 1)[1].strip()
    return None


def _cpu_model() -> str:
    return _cpuinfo("model name") or platform.processor() or "unknown"


INT8_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni")
"""The CPU features that decide how onnxruntime runs int8 products (VNNI: int8 dot-product instructions)."""


def int8_flags() -> str:
    """Which of :data:`INT8_FLAGS` this CPU has, as a line to print."""
    flags = _cpuinfo("flags")
    if flags is None:
        return "unknown"
    have = [f for f in INT8_FLAGS if f in flags.split()]
    return " ".join(have) or f"none of {', '.join(INT8_FLAGS)}"


def _memory_gb() -> float:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 / 1024
    return math.nan


LIBRARIES = ("nats-py", "FalkorDB", "redis", "hiredis", "pydantic", "onnxruntime")
"""Client-side packages that shape the figures (hiredis: redis-py's C reply parser, when installed)."""


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def _semver(version: Any) -> str:
    return f"{version.major}.{version.minor}.{version.patch}"


async def describe_machine(nc: NATS, falkordb_url: str | None) -> MachineInfo:
    """This machine, the nats-server ``nc`` is connected to and the Redis + FalkorDB at ``falkordb_url``."""
    redis_version = falkordb_version = "?"
    if falkordb_url is not None:
        import redis.asyncio

        client = redis.asyncio.Redis.from_url(falkordb_url, decode_responses=True)
        try:
            info = await client.info("server")
            redis_version = str(info.get("redis_version", "?"))
            for module in await client.execute_command("MODULE", "LIST"):  # type: ignore[no-untyped-call]
                if isinstance(module, list):
                    module = dict(zip(module[::2], module[1::2], strict=False))
                entry: dict[str, Any] = module
                if str(entry.get("name", "")).lower() == "graph":
                    ver = int(entry.get("ver", 0))
                    falkordb_version = f"{ver // 10000}.{ver // 100 % 100}.{ver % 100}"
        except Exception as exc:
            log.warning("could not read server versions: %s", exc)
        finally:
            await client.aclose()
    here = host()
    return MachineInfo(
        cores=here["cores"],
        cpu_model=here["cpu_model"],
        memory_gb=_memory_gb(),
        os=here["os"],
        python=here["python"],
        nats_server=_semver(nc.connected_server_version),
        redis=redis_version,
        falkordb=falkordb_version,
        libraries=here["libraries"],
    )
