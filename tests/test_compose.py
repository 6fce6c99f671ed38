"""The production compose file is valid (checked with docker-compose where it is installed)."""

from __future__ import annotations

import os
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
    assert {"nats-1", "nats-2", "nats-3", "falkordb", "hub", "sidecar-example", "prometheus", "grafana"} <= services


def test_the_hub_serves_metrics_and_health_where_compose_looks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hub's environment gives it the metrics port its healthcheck and Prometheus use, bound for the
    container network, and JSON logs."""
    import yaml
    from recall_hub.config import HubSettings

    compose = yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())
    hub = compose["services"]["hub"]
    for name in [n for n in os.environ if n.startswith("RECALL_")]:
        monkeypatch.delenv(name)
    for name, value in hub["environment"].items():
        monkeypatch.setenv(name, str(value))
    settings = HubSettings()
    assert settings.metrics_port == 9464 and settings.metrics_host == "0.0.0.0" and settings.log_format == "json"
    nats_nodes = [name for name in compose["services"] if name.startswith("nats-")]
    assert settings.stream_replicas == len(nats_nodes) == 3  # losing a node loses no acknowledged event
    assert settings.nats_url.count("nats://") == len(nats_nodes)  # and the hub can reach every node

    probe = " ".join(hub["healthcheck"]["test"])
    assert f"http://127.0.0.1:{settings.metrics_port}/readyz" in probe
    assert hub["healthcheck"]["test"][:2] == ["CMD", "python"]  # the hub image has python, not curl

    scrape = yaml.safe_load((COMPOSE / "prometheus" / "prometheus.yml").read_text())
    targets = [sd for job in scrape["scrape_configs"] for sd in job.get("dns_sd_configs", [])]
    assert [(t["names"], t["port"]) for t in targets] == [(["hub"], settings.metrics_port)]
    grafana = compose["services"]["grafana"]["volumes"]
    assert any(v.startswith("./grafana/recall-hub.json:") for v in grafana)


def test_compose_starts_falkordb_as_the_embedded_stack_does() -> None:
    """No query telemetry, and every write replicated as its text (docs/operations.md, Durability)."""
    import yaml
    from recall_hub.store.graph import FALKORDB_ARGS

    compose = yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())
    assert compose["services"]["falkordb"]["environment"]["FALKORDB_ARGS"].split() == list(FALKORDB_ARGS)
