"""Write the LongMemEval slice the default test suite measures retrieval on (tests/data/retrieval/).

From a folder of LongMemEval_S questions (one JSON file each, as in the dev set), take the first question of
each question type (file-name order) and keep, of its haystack, every answer session and the first
distractor sessions up to ``--sessions`` in all (in haystack order, with their dates), turns longer than
``--max-chars`` cut there. The questions, their types, answers and answer sessions are unchanged.

    python scripts/make_retrieval_slices.py --data ../shared/data/longmemeval --out tests/data/retrieval/longmemeval
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any


def trimmed(data: dict[str, Any], sessions: int, max_chars: int) -> dict[str, Any]:
    answers = set(data["answer_session_ids"])
    kept: list[int] = [i for i, s in enumerate(data["haystack_session_ids"]) if s in answers]
    for i, session_id in enumerate(data["haystack_session_ids"]):
        if len(kept) >= max(sessions, len(answers)):
            break
        if session_id not in answers:
            kept.append(i)
    kept.sort()
    turns = [
        [{**t, "content": str(t["content"])[:max_chars]} for t in data["haystack_sessions"][i]] for i in kept
    ]
    return {
        **data,
        "haystack_session_ids": [data["haystack_session_ids"][i] for i in kept],
        "haystack_dates": [data["haystack_dates"][i] for i in kept],
        "haystack_sessions": turns,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="../shared/data/longmemeval")
    parser.add_argument("--out", default="tests/data/retrieval/longmemeval")
    parser.add_argument("--sessions", type=int, default=8, help="haystack sessions kept per question (at least)")
    parser.add_argument("--max-chars", type=int, default=4000, help="a turn is cut after this many characters")
    args = parser.parse_args()
    source, out = Path(args.data), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seen: set[str] = set()
    for path in sorted(source.glob("*.json")):
        data = json.loads(path.read_text())
        if data["question_type"] in seen:
            continue
        seen.add(data["question_type"])
        (out / path.name).write_text(json.dumps(trimmed(data, args.sessions, args.max_chars), indent=1) + "\n")
        print(out / path.name, data["question_type"])
    shutil.copy(source / "LICENSE", out / "LICENSE")


if __name__ == "__main__":
    main()
