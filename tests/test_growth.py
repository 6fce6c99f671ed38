"""`recall bench --suite growth` at a small scale: the bulk load gives the store's node shape (the store's own
queries find the beads, visibility applied), and the report has its figures."""

from __future__ import annotations

from recall_hub.bench.growth import render_growth, run_growth


async def test_the_growth_suite_loads_and_measures_at_two_sizes() -> None:
    report = await run_growth([1000, 2000], runs=10, vector_max=1000)
    assert [row.beads for row in report.rows] == [1000, 2000]
    small, large = report.rows
    assert 0 < small.used_memory_mb < large.used_memory_mb
    for row in report.rows:
        assert set(row.timings_ms) == {"get", "group listing (20)", "screen 100 ids", "create", "session link"}
        assert all(0 < p50 <= p99 for p50, p99 in row.timings_ms.values())
        # 20% global, 40% group (a caller is in 3 of 50 groups), 40% private (of 200 identities): a caller
        # sees about 23% of random ids — the store's queries find the loaded beads and filter them.
        assert 0.15 < row.visible_share < 0.35, row.visible_share
    assert [v.vectors for v in report.vectors] == [1000]
    assert report.vectors[0].bytes_per_vector > 0
    text = render_growth(report)
    assert "| 2,000 |" in text and "VSIM" in text
