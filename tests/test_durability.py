"""The embedded stack's durability settings reach the servers: Redis reports the AOF fsync policy it
was given and nats-server its JetStream sync policy (docs/operations.md)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
import redis
from recall_hub.tooling.cli import _durability, build_parser
from recall_hub.tooling.stack import DURABILITY, EmbeddedStack, StackError, free_port


def _reported(stack: EmbeddedStack) -> tuple[str, dict[str, object]]:
    """(Redis appendfsync, nats-server's JetStream config from /varz)."""
    client = redis.Redis.from_url(stack.redis_url)
    try:
        appendfsync = client.config_get("appendfsync")["appendfsync"]
        appendonly = client.config_get("appendonly")["appendonly"]
    finally:
        client.close()
    assert appendonly == "yes"
    with urllib.request.urlopen(f"http://{stack.host}:{stack.monitor_port}/varz", timeout=10) as reply:
        varz = json.load(reply)
    return appendfsync, varz["jetstream"]["config"]


@pytest.mark.parametrize("preset", sorted(DURABILITY))
def test_the_durability_presets_reach_both_servers(tmp_path: Path, preset: str) -> None:
    with EmbeddedStack(tmp_path, monitor_port=free_port(), **DURABILITY[preset]) as stack:
        appendfsync, jetstream = _reported(stack)
    if preset == "strict":
        assert appendfsync == "always"
        assert jetstream.get("sync_always") is True
    else:
        assert appendfsync == "everysec"
        assert not jetstream.get("sync_always") and jetstream["sync_interval"] == 120 * 10**9


def test_an_explicit_interval_and_policy(tmp_path: Path) -> None:
    with EmbeddedStack(tmp_path, monitor_port=free_port(), redis_appendfsync="no", jetstream_sync="500ms") as stack:
        appendfsync, jetstream = _reported(stack)
    assert appendfsync == "no" and jetstream["sync_interval"] == 500 * 10**6


@pytest.mark.parametrize(("option", "value"), [("redis_appendfsync", "sometimes"), ("jetstream_sync", "2 minutes"),
                                               ("jetstream_sync", "0s"), ("jetstream_sync", "1s}\nhttp: 8222")])
def test_unknown_settings_are_refused_before_anything_starts(tmp_path: Path, option: str, value: str) -> None:
    with pytest.raises(StackError, match=option):
        EmbeddedStack(tmp_path, **{option: value}).start()  # type: ignore[arg-type]
    assert not (tmp_path / "nats-embedded.conf").exists()


def test_recall_up_flags() -> None:
    parse = build_parser().parse_args
    assert _durability(parse(["up"])) == DURABILITY["default"]
    assert _durability(parse(["up", "--durability", "strict"])) == {
        "redis_appendfsync": "always", "jetstream_sync": "always"}
    assert _durability(parse(["up", "--durability", "strict", "--jetstream-sync", "1s"])) == {
        "redis_appendfsync": "always", "jetstream_sync": "1s"}
    assert _durability(parse(["up", "--appendfsync", "no"]))["redis_appendfsync"] == "no"
    assert parse(["bench", "--durability", "strict"]).durability == "strict"
