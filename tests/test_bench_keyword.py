"""`recall bench --suite keyword` measures the keyword index alone, and what it measures is real search."""

from __future__ import annotations

from recall_hub.bench.keyword import CALLER_SCOPES, render_keyword_study, run_keyword_study


async def test_the_keyword_study_times_searches_that_find_beads() -> None:
    rows = await run_keyword_study([300], queries=50)
    assert [(r.beads, r.queries) for r in rows] == [(300, 50)]
    assert 0 < rows[0].p50_ms <= rows[0].p99_ms
    assert 0 < rows[0].hits <= 100  # the timed searches found beads (only in the caller's scopes)
    assert "p50 ms" in render_keyword_study(rows) and "300" in render_keyword_study(rows)
    assert "global" in CALLER_SCOPES
