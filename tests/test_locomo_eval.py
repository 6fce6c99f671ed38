"""The LoCoMo evaluation machinery (recall_hub.bench.locomo): loading, evidence mapping, metrics, and a
small run through the bus on the session's real servers. Quality numbers are not asserted here: they
live in docs/retrieval.md and come from `recall eval locomo`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from recall_hub.bench.evalkit import interval
from recall_hub.bench.locomo import (
    CATEGORIES,
    MODES,
    Answer,
    ask,
    ingest,
    load_conversation,
    load_locomo,
    markdown,
    normalise_evidence,
    render,
    run_locomo,
    summarise,
)
from recall_hub.tooling.stack import EmbeddedStack

from tests.conftest import repo_root

TINY = {
    "speaker_a": "Alice",
    "speaker_b": "Bob",
    "session_1_date_time": "1:56 pm on 8 May, 2023",
    "session_1": [
        {"speaker": "Alice", "dia_id": "D1:1", "text": "Hi Bob! How was your week?"},
        {"speaker": "Bob", "dia_id": "D1:2", "text": "Busy. I started learning the cello, lessons every Tuesday."},
        {"speaker": "Alice", "dia_id": "D1:3", "text": "Nice! I adopted a grey kitten called Pixel."},
        {"speaker": "Bob", "dia_id": "D1:4", "text": "Pixel is a great name for a kitten.",
         "blip_caption": "a photo of a small grey cat on a sofa"},
    ],
    "session_2_date_time": "7:55 pm on 9 June, 2023",
    "session_2": [
        {"speaker": "Bob", "dia_id": "D2:1", "text": "My cello teacher says I play with real feeling now."},
        {"speaker": "Alice", "dia_id": "D2:2", "text": "I ran my first marathon in Lisbon last weekend."},
        {"speaker": "Bob", "dia_id": "D2:3", "text": "A marathon! How long did it take you?"},
        {"speaker": "Alice", "dia_id": "D2:4", "text": "Four hours and ten minutes, slow but happy."},
    ],
    "session_3_date_time": "9:00 am on 1 July, 2023",
    "session_3": [],
    "qa": [
        {"question": "What instrument is Bob learning?", "answer": "cello", "evidence": ["D1:2"], "category": 4},
        {"question": "What is the name of Alice's kitten?", "answer": "Pixel", "evidence": ["D1:3"], "category": 4},
        {"question": "When did Alice run a marathon?", "answer": "early June 2023", "evidence": ["D2:2"],
         "category": 2},
        {"question": "How long did Alice's marathon take, and where was it?", "answer": "4h10, Lisbon",
         "evidence": ["D2:2; D2:4"], "category": 1},
        {"question": "Would Bob enjoy a classical concert?", "answer": "likely", "evidence": ["D1:2", "D:2:1"],
         "category": 3},
        {"question": "What is Alice's favourite colour?", "evidence": ["D1:1"], "category": 5,
         "adversarial_answer": "grey"},
        {"question": "Who is Carol?", "answer": "unknown", "evidence": ["D"], "category": 4},
    ],
}


@pytest.fixture
def tiny_dir(tmp_path: Path) -> Path:
    (tmp_path / "1.json").write_text(json.dumps(TINY))
    return tmp_path


def test_evidence_ids_are_repaired_or_dropped() -> None:
    known = {"D1:2", "D2:1", "D2:4", "D8:6", "D9:17", "D11:26"}
    assert normalise_evidence(["D8:6; D9:17"], known) == ("D8:6", "D9:17")
    assert normalise_evidence(["D:11:26", "D", "D99:1", "D1:2", "D1:2"], known) == ("D11:26", "D1:2")
    assert normalise_evidence([], known) == ()


def test_loading_keeps_categories_1_to_4_and_maps_sessions(tiny_dir: Path) -> None:
    conv = load_conversation(tiny_dir / "1.json", captions=True)
    assert conv.speakers == ("Alice", "Bob")
    assert [t.dia_id for t in conv.turns] == ["D1:1", "D1:2", "D1:3", "D1:4", "D2:1", "D2:2", "D2:3", "D2:4"]
    assert conv.turns[4].session == 2 and conv.turns[4].date.isoformat() == "2023-06-09T19:55:00"
    assert conv.turns[3].caption == "a photo of a small grey cat on a sofa"
    assert conv.turns[1].title() == "Bob: Busy. I started learning the cello, lessons every Tuesday."
    # category 5 and the question without a usable evidence id are left out
    assert [(q.category, q.evidence) for q in conv.questions] == [
        (4, ("D1:2",)), (4, ("D1:3",)), (2, ("D2:2",)), (1, ("D2:2", "D2:4")), (3, ("D1:2", "D2:1")),
    ]
    sliced = load_conversation(tiny_dir / "1.json", max_turns=4)
    assert len(sliced.turns) == 4
    assert [q.evidence for q in sliced.questions] == [("D1:2",), ("D1:3",)]  # others reach past the slice
    assert load_conversation(tiny_dir / "1.json").turns[3].caption is None


def test_metrics_on_a_hand_checked_answer() -> None:
    answer = Answer("c", 0, 1, "hybrid", ("D1:2", "D2:1", "D3:3"), ("D2:1", "D2:3"), 12.0)
    assert answer.recall == 0.5  # one of the two evidence turns in the top 10
    assert answer.hit == 1.0
    assert answer.reciprocal_rank == 0.5  # first evidence turn at rank 2
    assert answer.session_hit == 0.0  # the top bead is from session 1, the evidence from session 2
    top = Answer("c", 1, 2, "hybrid", ("D2:3",), ("D2:1",), 8.0)
    assert (top.recall, top.hit, top.reciprocal_rank, top.session_hit) == (0.0, 0.0, 0.0, 1.0)
    late = Answer("c", 2, 4, "hybrid", tuple(f"D1:{i}" for i in range(1, 11)), ("D1:7",), 10.0)
    assert late.hit == 0.0 and late.recall == 1.0 and late.reciprocal_rank == pytest.approx(1 / 7)
    metrics = summarise([answer, top, late])
    assert metrics.questions == 3 and metrics.p50_ms == 10.0
    assert metrics.recall_at_10 == pytest.approx(0.5)
    assert metrics.session_hit_at_1 == pytest.approx(2 / 3)  # "late" ranks its own session first


async def test_ingest_and_ask_through_the_bus(stack: EmbeddedStack, hub, connect, tiny_dir: Path) -> None:
    conv = load_conversation(tiny_dir / "1.json", captions=True)
    ingested = await ingest(stack.nats_url, conv, concurrency=2)
    assert set(ingested.beads) == {t.dia_id for t in conv.turns}
    assert len(set(ingested.beads.values())) == len(conv.turns)

    bob = await connect(ingested.agents["Bob"])
    bead = await bob.get_bead(ingested.beads["D1:4"])
    assert bead.title == "Bob: Pixel is a great name for a kitten."
    assert "small grey cat" in bead.content
    assert bead.metadata == {"dia_id": "D1:4", "session": 1, "date": "2023-05-08T13:56:00"}
    assert bead.group_id == ingested.group_id and bead.created_by == ingested.agents["Bob"]
    # D1:4 answers D1:3 (the explicit reply edge) and follows Bob's own D1:2 (the hub's session link)
    links = {(r.from_id, r.to_id) for r in await bob.get_relationships(bead.bead_id, "FOLLOWS_FROM", "out")}
    assert (bead.bead_id, ingested.beads["D1:3"]) in links
    assert (bead.bead_id, ingested.beads["D1:2"]) in links

    answers = await ask(stack.nats_url, conv, ingested)
    assert len(answers) == len(conv.questions) * len(MODES)
    known = set(ingested.beads)
    for answer in answers:
        assert answer.ranked and set(answer.ranked) <= known  # every hit maps back to its turn
        assert len(answer.ranked) <= 10
        for value in (answer.recall, answer.hit, answer.reciprocal_rank, answer.session_hit):
            assert 0.0 <= value <= 1.0
        assert answer.latency_ms > 0
    cello = [a for a in answers if a.question == 0]
    assert {a.evidence for a in cello} == {("D1:2",)}


async def test_run_locomo_reports_every_mode_and_category(stack: EmbeddedStack, hub, tiny_dir: Path) -> None:
    stages: list[str] = []
    report = await run_locomo(tiny_dir, stack.nats_url, progress=lambda stage, done, total: stages.append(stage))
    assert report.turns == 8 and report.questions == 5
    assert set(stages) == {"ingest", "query"}
    table = report.table()
    assert list(table) == list(MODES)
    for row in table.values():
        assert set(row) == {"all", *CATEGORIES.values()}
        assert row["all"].questions == 5
        for metrics in row.values():
            for value in (metrics.recall_at_10, metrics.hit_at_5, metrics.mrr, metrics.session_hit_at_1):
                assert 0.0 <= value <= 1.0
    text = render(report)
    assert all(mode in text for mode in MODES) and "sess@1" in text
    assert markdown(report).count("\n| hybrid+priors |") == 5  # overall + the four categories
    assert json.dumps(report.to_json())


@pytest.mark.slow
async def test_a_slice_of_the_real_data(stack: EmbeddedStack, hub) -> None:
    data = repo_root().parent / "shared" / "data" / "locomo"
    if not data.exists():
        pytest.skip("LoCoMo data not present")
    assert len(load_locomo(data, conversations=1, max_turns=100)[0].turns) == 100
    report = await run_locomo(data, stack.nats_url, conversations=1, max_turns=100)
    assert report.turns == 100 and report.questions > 10
    for mode in MODES:
        assert 0.0 <= report.metrics(mode).recall_at_10 <= 1.0


def test_the_95_percent_interval_brackets_the_mean_and_narrows_with_more_questions() -> None:
    assert interval([0.7] * 50) == pytest.approx((0.7, 0.7))
    few, many = [1.0, 0.0] * 50, [1.0, 0.0] * 800
    lo_few, hi_few = interval(few)
    lo_many, hi_many = interval(many)
    assert lo_few < 0.5 < hi_few and lo_many < 0.5 < hi_many
    # The half-width of a proportion's 95% interval is about 1.96 * sqrt(p(1-p)/n).
    assert abs((hi_few - lo_few) / 2 - 1.96 * (0.25 / 100) ** 0.5) < 0.02
    assert (hi_many - lo_many) < (hi_few - lo_few) / 3
    assert interval(few) == interval(few)
