"""Where a bench ran: the machine, its load, the server and library versions, and the code measured."""

from __future__ import annotations

import contextlib
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



def code_version() -> str:
    version = f"nexus-recall {_version('nexus-recall')}"
    here = Path(__file__).parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, timeout=10,
        )
        if commit.returncode != 0:
            return version
        status = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return version
    changed = [line[3:] for line in status.stdout.splitlines() if line.strip()]
    dirty = f" + uncommitted changes in {', '.join(changed)}" if changed else ""
    return f"{version}, commit {commit.stdout.strip()}{dirty}"


def load_average() -> float:
    """The 1-minute load average; NaN where the system has none."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return math.nan


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


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
    return MachineInfo(
        cores=os.cpu_count() or 0,
        cpu_model=_cpu_model(),
        memory_gb=_memory_gb(),
        os=platform.platform(),
        python=f"{platform.python_implementation()} {platform.python_version()}",
        nats_server=str(nc.connected_server_version),
        redis=redis_version,
        falkordb=falkordb_version,
        libraries={p: _version(p) for p in LIBRARIES},
    )
