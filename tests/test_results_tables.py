"""The tables of README and docs are what the committed results files give (``make results`` writes them), and
a sitting's table shows every run beside the median a target is judged on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import repo_root
from recall_hub.bench.records import RESULTS_DIR, Record, load, new_record, save
from recall_hub.bench.tables import TABLES, current, history, rendered, stale


def test_every_table_in_the_docs_is_what_the_results_files_give() -> None:
    root = repo_root()
    assert stale(root, load(root / RESULTS_DIR)) == [], "run `make results` and commit what it rewrites"


def bench_figures(hybrid_ms: float, long_ratio: float, settle: str = "background") -> dict[str, Any]:
    ops = [{"name": "search hybrid", "p50_ms": hybrid_ms}, {"name": "get", "p50_ms": 1.0}]
    return {"beads": 10_000, "setup": f"in-process hub; creates settled {settle}", "ops": ops,
            "ingest_ratios": {"long_chunks": long_ratio}}


def test_a_sitting_shows_each_run_and_judges_the_median(tmp_path: Path) -> None:
    for hybrid, ratio in ((14.0, 0.9), (16.0, 0.6), (14.5, 0.75)):
        save(new_record("bench", bench_figures(hybrid, ratio), command="recall bench"), tmp_path)
    records = load(tmp_path)
    assert len(records) == 3 and {r.suite for r in records} == {"bench"}
    table = "\n".join(current("bench")(records))
    assert "| search hybrid | 14.00 | 16.00 | 14.50 | **14.50** | ≤ 15: met |" in table
    assert "| long content / embedder alone | 90% | 60% | 75% | **75%** | ≥ 70%: met |" in table
    assert "| 3 |" in "\n".join(history(records))  # one sitting of three runs


def test_fewer_than_three_runs_judge_no_target(tmp_path: Path) -> None:
    save(new_record("bench", bench_figures(10.0, 0.9), command="recall bench"), tmp_path)
    assert "≤ 15: 1 run(s): not judged" in "\n".join(current("bench")(load(tmp_path)))


def test_a_newer_commit_starts_a_new_sitting(tmp_path: Path) -> None:
    old = new_record("bench", bench_figures(20.0, 0.5), command="recall bench")
    save(Record(**{**old.to_json(), "commit": "0000000", "date": "2026-01-01T00:00:00+00:00"}), tmp_path)
    save(new_record("bench", bench_figures(12.0, 0.8), command="recall bench"), tmp_path)
    table = "\n".join(current("bench")(load(tmp_path)))
    assert "| search hybrid | 12.00 | **12.00** |" in table and "20.00" not in table


def test_inline_creates_are_a_sitting_of_their_own(tmp_path: Path) -> None:
    save(new_record("bench", bench_figures(18.0, 0.8, "inline"), command="recall bench --create-settle inline"),
         tmp_path)
    save(new_record("bench", bench_figures(11.0, 0.8), command="recall bench"), tmp_path)
    records = load(tmp_path)
    inline, background = "\n".join(current("bench", settle="inline")(records)), "\n".join(current("bench")(records))
    assert "| search hybrid | 18.00 | **18.00** |" in inline and "11.00" not in inline
    assert "| search hybrid | 11.00 | **11.00** |" in background and "18.00" not in background
    rows = "\n".join(history(records))
    assert "create settle background" in rows and "create settle inline" in rows


def test_a_results_file_from_before_the_setup_said_how_creates_settled_reads_as_its_flag_said(tmp_path: Path) -> None:
    save(new_record("bench", {**bench_figures(19.0, 0.8), "setup": "in-process hub"}, command="recall bench"), tmp_path)
    save(new_record("bench", {**bench_figures(12.0, 0.8), "setup": "in-process hub"},
                    command="recall bench --create-settle background"), tmp_path)
    records = load(tmp_path)
    assert "| search hybrid | 19.00 | **19.00** |" in "\n".join(current("bench", settle="inline")(records))
    assert "| search hybrid | 12.00 | **12.00** |" in "\n".join(current("bench")(records))


def test_each_size_of_the_bus_suite_is_a_sitting_of_its_own_with_its_own_targets(tmp_path: Path) -> None:
    save(new_record("bench", bench_figures(14.0, 0.8), command="recall bench --beads 10000"), tmp_path)
    save(new_record("bench", {**bench_figures(17.0, 0.8), "beads": 100_000}, command="recall bench --beads 100000"),
         tmp_path)
    records = load(tmp_path)
    default, large = "\n".join(current("bench")(records)), "\n".join(TABLES["large"](records))
    assert "| search hybrid | 14.00 | **14.00** | ≤ 15:" in default and "17.00" not in default
    assert "| search hybrid | 17.00 | **17.00** | ≤ 12:" in large and "14.00" not in large


def test_marked_blocks_are_replaced_and_the_rest_is_left_alone(tmp_path: Path) -> None:
    save(new_record("bench", bench_figures(13.0, 0.8), command="recall bench"), tmp_path)
    text = "before\n<!-- results:bench -->\nstale\n<!-- /results:bench -->\nafter\n"
    out = rendered(text, load(tmp_path))
    assert out.startswith("before\n<!-- results:bench -->\nCommit ")
    assert out.endswith("<!-- /results:bench -->\nafter\n")
    assert "stale" not in out and "| search hybrid | 13.00 |" in out


def test_a_block_naming_a_results_file_shows_that_run_alone(tmp_path: Path) -> None:
    older = save(new_record("bench", bench_figures(21.0, 0.5), command="recall bench"), tmp_path)
    save(new_record("bench", bench_figures(12.0, 0.8), command="recall bench"), tmp_path)
    name = f"bench:{older.stem}"
    out = rendered(f"<!-- results:{name} -->\n<!-- /results:{name} -->\n", load(tmp_path))
    assert "| search hybrid | 21.00 | **21.00** |" in out and "12.00" not in out


def test_a_suites_report_is_kept_as_plain_figures(tmp_path: Path) -> None:
    """Every ``recall bench --suite`` keeps its report (dataclasses, lists of them) as JSON figures."""
    from dataclasses import dataclass

    from recall_hub.bench.records import as_figures

    @dataclass
    class Row:
        size: int
        p50_ms: float

    @dataclass
    class Study:
        rows: list[Row]
        model: str

    figures = as_figures({"study": Study([Row(10_000, 3.5), Row(100_000, 4.25)], "hash:384")})
    assert figures == {"study": {"rows": [{"size": 10_000, "p50_ms": 3.5}, {"size": 100_000, "p50_ms": 4.25}],
                                 "model": "hash:384"}}
    save(new_record("growth", figures, command="recall bench --suite growth"), tmp_path)
    assert [(r.suite, r.figures) for r in load(tmp_path)] == [("growth", figures)]


def test_a_peer_sitting_judges_the_ratio_of_each_runs_searches(tmp_path: Path) -> None:
    for peer, hybrid in ((40.0, 10.0), (36.0, 12.0), (45.0, 10.0)):
        figures = {"beads": 10_000, "samples": 300, "server": "npx -y @modelcontextprotocol/server-memory",
                   "peer": {"p50_ms": peer, "p99_ms": peer * 2},
                   "ours": {"search keyword": 4.0, "search hybrid": hybrid}}
        save(new_record("peers", figures, command="python scripts/peers.py --save x"), tmp_path)
    table = "\n".join(current("peers")(load(tmp_path)))
    assert "| peer / ours search hybrid | 4.0× | 3.0× | 4.5× | **4.0×** | ≥ 3×: met |" in table
    assert "| peer search_nodes | 40.00 | 36.00 | 45.00 | **40.00** |  |" in table


def test_each_peer_has_its_own_table_and_target(tmp_path: Path) -> None:
    for peer, hybrid in ((90.0, 10.0), (70.0, 10.0), (100.0, 10.0)):
        figures = {"beads": 10_000, "samples": 300, "server": "mem0 2.2.1", "peer_kind": "mem0",
                   "peer": {"p50_ms": peer, "p99_ms": peer * 2},
                   "ours": {"search keyword": 4.0, "search hybrid": hybrid}}
        save(new_record("peers", figures, command="python scripts/peers.py --peer mem0 --save x"), tmp_path)
    figures = {"beads": 10_000, "samples": 300, "server": "npx -y @modelcontextprotocol/server-memory",
               "peer": {"p50_ms": 20.0, "p99_ms": 40.0}, "ours": {"search keyword": 4.0, "search hybrid": 10.0}}
    save(new_record("peers", figures, command="python scripts/peers.py --save x"), tmp_path)
    mem0 = "\n".join(TABLES["mem0"](load(tmp_path)))
    assert "| peer Memory.search | 90.00 | 70.00 | 100.00 | **90.00** |  |" in mem0
    assert "| peer / ours search hybrid | 9.0× | 7.0× | 10.0× | **9.0×** | ≥ 8×: met |" in mem0
    mcp = "\n".join(TABLES["peers"](load(tmp_path)))
    assert "| peer / ours search hybrid | 2.0× | **2.0×** | ≥ 3×: 1 run(s): not judged |" in mcp
