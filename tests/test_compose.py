"""The production compose file is valid (checked with docker-compose where it is installed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

COMPOSE = Path(__file__).resolve().parent.parent / "compose"


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose is not installed")
def test_compose_file_is_valid(tmp_path: Path) -> None:
    copy = tmp_path / "compose"
    shutil.copytree(COMPOSE, copy)
    (copy / "secrets").mkdir(exist_ok=True)
    for name in ("hub.creds", "a_example1.creds"):
        (copy / "secrets" / name).write_text("placeholder")
    result = subprocess.run(
        ["docker-compose", "-f", str(copy / "docker-compose.yml"), "config", "--services"],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stderr
    services = set(result.stdout.split())
    assert {"nats-1", "nats-2", "nats-3", "falkordb", "hub", "sidecar-example"} <= services
