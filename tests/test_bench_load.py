"""`recall bench --suite load` at a small scale: agents with their own identities work at once against a hub in
a process of its own, every operation of the mix is answered, and each level reports what it measured."""

from __future__ import annotations

import os

import pytest
from recall_hub.bench.config import BenchConfig
from recall_hub.bench.corpus import bench_queries, build_dataset
from recall_hub.bench.load import MIX, LoadConfig, LoadLevel, LoadReport, render_load, run_load
from recall_hub.tooling.cli import build_parser


@pytest.mark.parametrize("create_settle", ["inline", "background"])
async def test_a_small_team_works_closed_and_open_loop_without_errors(create_settle: str) -> None:
    report = await run_load(
        LoadConfig(agents=(3,), hubs=(1,), seconds=2.0, rate=30.0, embedder="hash", create_settle=create_settle)
    )
    assert [(lv.loop, lv.agents) for lv in report.levels] == [("quiet", 1), ("closed", 3), ("open", 3)]
    for level in report.levels:
        assert level.errors == 0, level.error_codes
        assert level.requests > 0 and level.throughput > 0
        assert 0 < level.p50_ms <= level.p99_ms
    closed = report.levels[1]
    assert {op.op for op in closed.ops} == {op for op, _ in MIX}  # every operation ran and was answered
    text = render_load(report)
    assert "| 1 | closed | 3 |" in text and "Knee" in text
    cpu = closed.cpu_ms  # what a request cost each process, read from /proc
    assert set(cpu) == {"hubs", "hubs (main thread)", "redis + FalkorDB", "nats-server", "agents"}
    assert 0 < cpu["hubs (main thread)"] <= cpu["hubs"]
    assert 0 < closed.cores_busy <= os.cpu_count()  # type: ignore[operator]
    assert "CPU per answered request" in text


def _level(loop: str, agents: int, p99: float) -> LoadLevel:
    return LoadLevel(hubs=1, agents=agents, loop=loop, target_rate=None, seconds=1.0, requests=1, throughput=1.0,
                     p50_ms=p99 / 2, p99_ms=p99, errors=0, error_codes={}, ops=[])


def test_the_knee_is_the_first_level_past_twice_the_quiet_p99() -> None:
    report = LoadReport(LoadConfig(agents=(8, 32, 128), hubs=(1,)))
    report.levels = [_level("quiet", 1, 20.0), _level("closed", 8, 39.0), _level("closed", 32, 41.0),
                     _level("closed", 128, 300.0), _level("open", 8, 30.0), _level("open", 32, 35.0)]
    assert report.knee(1, "closed") == 32
    assert report.knee(1, "open") is None
    assert report.knee(2, "closed") is None  # no such stack measured


def test_a_bench_run_can_be_repeated_with_another_seed() -> None:
    parse = build_parser().parse_args
    assert parse(["bench"]).seed == BenchConfig().seed
    assert parse(["bench", "--seed", "42", "--suite", "load"]).seed == 42
    assert "--seed 42" in BenchConfig(seed=42).command() and "--seed" not in BenchConfig().command()
    same, other = build_dataset(200, 42, "t"), build_dataset(200, 43, "t")
    assert [b.title for b in build_dataset(200, 42, "t").beads] == [b.title for b in same.beads]
    assert [b.title for b in other.beads] != [b.title for b in same.beads]
    assert bench_queries(same, 42, 50) == bench_queries(same, 42, 50) != bench_queries(same, 43, 50)
