"""The retrieval evals read their data as the datasets ship it: one record a file (the copies in this
repository's tests and dev sets) or the release's single file holding a list of them (LoCoMo's
``locomo10.json``, LongMemEval's ``longmemeval_s.json``), and say clearly what they cannot read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from recall_hub.bench.evalkit import DatasetError
from recall_hub.bench.locomo import load_locomo
from recall_hub.bench.longmemeval import load_longmemeval

from tests.conftest import repo_root
from tests.test_locomo_eval import TINY

LME_SLICE = repo_root() / "tests" / "data" / "retrieval" / "longmemeval"


def _as_released(flat: dict, sample_id: str | int) -> dict:
    """A flattened LoCoMo conversation in the release's shape: the turns under ``conversation``."""
    turns = {k: v for k, v in flat.items() if k != "qa"}
    return {"sample_id": sample_id, "conversation": turns, "qa": flat["qa"], "event_summary": {}}


def test_locomo_reads_the_release_file_as_it_reads_one_file_a_conversation(tmp_path: Path) -> None:
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "1.json").write_text(json.dumps(TINY))
    other = {**TINY, "speaker_a": "Carol"}
    other["session_1"] = [{**t, "speaker": "Carol" if t["speaker"] == "Alice" else t["speaker"]}
                          for t in TINY["session_1"]]
    (tmp_path / "flat" / "2.json").write_text(json.dumps(other))
    released = tmp_path / "locomo10.json"
    released.write_text(json.dumps([_as_released(TINY, "conv-1"), _as_released(other, "conv-2")]))
    numbered = tmp_path / "numbered.json"  # some copies number their samples from 0
    numbered.write_text(json.dumps([_as_released(TINY, 0), _as_released(other, 1)]))

    flat, shipped = load_locomo(tmp_path / "flat"), load_locomo(released)

    assert [c.key for c in flat] == ["1", "2"] and [c.key for c in shipped] == ["conv-1", "conv-2"]
    for a, b in zip(flat, shipped, strict=True):
        assert a.speakers == b.speakers and a.turns == b.turns and a.questions == b.questions
    assert shipped[1].speakers == ("Carol", "Bob")
    assert [c.key for c in load_locomo(released, conversations=1)] == ["conv-1"]
    assert [c.key for c in load_locomo(numbered)] == ["0", "1"]


def test_locomo_reads_every_conversation_unless_told_fewer(tmp_path: Path) -> None:
    for n in range(1, 12):  # 10.json and 11.json come after 2.json
        (tmp_path / f"{n}.json").write_text(json.dumps(TINY))
    assert [c.key for c in load_locomo(tmp_path)] == [str(n) for n in range(1, 12)]


def test_longmemeval_reads_the_release_file_as_it_reads_one_file_a_question(tmp_path: Path) -> None:
    records = [json.loads(f.read_text()) for f in sorted(LME_SLICE.glob("*.json"))]
    released = tmp_path / "longmemeval_s.json"
    released.write_text(json.dumps(records))

    per_file, shipped = load_longmemeval(LME_SLICE), load_longmemeval(released)

    assert len(per_file) == len(records) == 6
    assert [(i.question_id, i.answer_sessions, i.turns) for i in per_file] == [
        (i.question_id, i.answer_sessions, i.turns) for i in shipped
    ]


def test_longmemeval_leaves_out_abstention_questions(tmp_path: Path) -> None:
    record = json.loads(next(LME_SLICE.glob("*.json")).read_text())
    abstains = {**record, "question_id": f"{record['question_id']}_abs"}
    (tmp_path / "questions.json").write_text(json.dumps([record, abstains]))
    assert [i.question_id for i in load_longmemeval(tmp_path)] == [record["question_id"]]


@pytest.mark.parametrize("load", [load_locomo, load_longmemeval])
def test_data_that_is_not_a_dataset_is_a_clear_error(tmp_path: Path, load) -> None:
    with pytest.raises(DatasetError, match="no such file or folder"):
        load(tmp_path / "missing")
    with pytest.raises(DatasetError, match=r"\*\.json"):
        load(tmp_path)
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(DatasetError, match="not a JSON file"):
        load(tmp_path / "broken.json")
    (tmp_path / "broken.json").write_text(json.dumps([1, 2]))
    with pytest.raises(DatasetError, match="neither"):
        load(tmp_path / "broken.json")
    (tmp_path / "broken.json").write_text(json.dumps({"something": "else"}))
    with pytest.raises(DatasetError, match="as expected"):
        load(tmp_path / "broken.json")


def test_longmemeval_keeps_file_name_order_so_a_stratified_subset_stays_the_same(tmp_path: Path) -> None:
    record = json.loads(next(LME_SLICE.glob("*.json")).read_text())
    for name in ("42_a", "41_gpt4_b", "41_c"):
        (tmp_path / f"{name}.json").write_text(json.dumps({**record, "question_id": name}))
    assert [i.question_id for i in load_longmemeval(tmp_path)] == ["41_c", "41_gpt4_b", "42_a"]
