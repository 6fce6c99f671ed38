"""LongMemEval retrieval evaluation (the ``_s`` setting), run through the bus like any agent would use the hub.

Mapping, as the LongMemEval paper scores retrieval (docs/retrieval.md has the numbers):

* each question is a group of its own, created by an ops identity that adds a *user* and an *assistant*
  agent; every turn of the question's haystack is a group bead written by its role's agent, titled
  ``"role: text"`` (cut at 512 characters; the whole turn in the content), with the haystack session's id
  and date in ``metadata``, the date also as the bead's ``valid_from`` (when it happened);
* each haystack session is a hub session: a hub session has one owner, so each role writes its turns of
  session N into its own hub session, in order (``create_beads``, one batch per role and session);
* the question is asked by the user agent on its date, ``search_beads(filters={"group_id": …}, limit=50,
  reference_time=<question date>, mode=…)``;
  the hits are mapped to their haystack sessions, each session ranked by its best hit.

Metrics per mode and per question type: session recall_any@1/@5/@10 (an answer session among the first k
sessions), recall_all@5 (every answer session among the first 5), turn Recall@10 (the share of the
``has_answer`` turns among the first 10 hits; questions without such turns are left out of it), and the p50
round trip of the search as the client sees it; 95% bootstrap intervals over questions.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from recall_client import RecallClient
from recall_schemas.requests import index_seq_key

from recall_hub.bench.evalkit import (
    BOOTSTRAP_RESAMPLES,
    DatasetError,
    Progress,
    connected,
    eval_hub,
    interval,
    json_records,
    new_body,
    turn_title,
)
from recall_hub.bench.locomo import MODE_OPTIONS

log = logging.getLogger(__name__)

MODES: tuple[str, ...] = ("keyword", "vector", "hybrid", "hybrid+priors")
HITS = 50
"""Hits asked for: enough to rank ten sessions."""
_DATE_FORMAT = "%Y/%m/%d (%a) %H:%M"

# --- the data ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    session: str
    """The haystack session's id."""
    index: int
    """The turn's position in its session."""
    role: str
    text: str
    has_answer: bool

    @property
    def key(self) -> str:
        return f"{self.session}#{self.index}"

    def title(self) -> str:
        return f"{self.role}: {self.text}"


@dataclass
class Item:
    """One question with its haystack."""

    question_id: str
    question_type: str
    question: str
    question_date: datetime | None
    answer_sessions: tuple[str, ...]
    sessions: list[tuple[str, datetime | None, list[Turn]]]
    """``(session id, date, turns)`` in haystack order."""

    @property
    def turns(self) -> list[Turn]:
        return [t for _, _, turns in self.sessions for t in turns]

    @property
    def answer_turns(self) -> tuple[str, ...]:
        return tuple(t.key for t in self.turns if t.has_answer)


def _date(raw: object) -> datetime | None:
    try:
        return datetime.strptime(str(raw), _DATE_FORMAT)
    except ValueError:
        return None


def question(record: dict[str, Any]) -> Item:
    """A LongMemEval question from its JSON record (the release's fields; turns without content left out)."""
    sessions = []
    for session_id, date, turns in zip(
        record["haystack_session_ids"], record["haystack_dates"], record["haystack_sessions"], strict=True
    ):
        sessions.append((str(session_id), _date(date), [
            Turn(str(session_id), i, str(t["role"]), str(t["content"]), bool(t.get("has_answer")))
            for i, t in enumerate(turns) if str(t.get("content", "")).strip()
        ]))
    return Item(
        question_id=str(record["question_id"]),
        question_type=str(record["question_type"]),
        question=str(record["question"]),
        question_date=_date(record.get("question_date")),
        answer_sessions=tuple(str(s) for s in record.get("answer_session_ids") or ()),
        sessions=sessions,
    )


def abstains(record: dict[str, Any]) -> bool:
    """An abstention question (its id ends ``_abs``): what it asks is not in the haystack, so retrieval has no
    answer to find; LongMemEval's retrieval scoring leaves these out, and so does this eval."""
    return str(record.get("question_id", "")).endswith("_abs")


def load_longmemeval(data: Path, questions: int | None = None, types: Sequence[str] = ()) -> list[Item]:
    """The questions in ``data`` — a folder of JSON files or one file, each holding a question or a list of them
    (the release's ``longmemeval_s.json``) — in file-name order, abstention questions left out (:func:`abstains`);
    with ``types`` only those question types; with ``questions`` the first that many of each type in turn (a
    stratified subset)."""
    records = [record for _, record in json_records(data, "LongMemEval question") if not abstains(record)]
    try:
        items = [question(record) for record in records]
    except (KeyError, TypeError, ValueError) as exc:
        raise DatasetError(f"{data} does not hold LongMemEval questions as expected: {exc!r}") from exc
    if types:
        items = [i for i in items if i.question_type in types]
    if questions is not None:
        by_type: dict[str, list[Item]] = {}
        for item in items:
            by_type.setdefault(item.question_type, []).append(item)
        picked: list[Item] = []
        while len(picked) < min(questions, len(items)):
            for group in by_type.values():
                if group and len(picked) < questions:
                    picked.append(group.pop(0))
        items = picked
    return items


# --- ingest through the bus --------------------------------------------------------------------


@dataclass
class Ingested:
    group_id: str
    asker: str
    beads: dict[str, str]
    """Bead id -> turn key (``session#index``)."""
    index_position: str | None


async def ingest(nats_url: str, item: Item, concurrency: int = 4) -> Ingested:
    """The question's group, its two agents and every turn of its haystack, through the bus."""
    ops = RecallClient(f"o_{new_body()}", nats_url, timeout=60.0)
    roles = {"user": RecallClient(f"a_{new_body()}", nats_url, timeout=60.0),
             "assistant": RecallClient(f"a_{new_body()}", nats_url, timeout=60.0)}
    beads: dict[str, str] = {}
    async with connected([ops, *roles.values()]):
        group = await ops.create_group(f"LongMemEval {item.question_id}")
        for client in roles.values():
            await ops.add_member(group.group_id, client.ai_id, "agent")
        slots = asyncio.Semaphore(max(1, concurrency))

        async def one(session_id: str, date: datetime | None, turns: list[Turn]) -> None:
            async with slots:
                for role, client in roles.items():
                    mine = [t for t in turns if t.role == role]
                    if not mine:
                        continue
                    hub_session = f"s_{new_body()}"
                    items = await client.create_beads([_bead(t, hub_session, group.group_id, date) for t in mine])
                    for turn, made in zip(mine, items, strict=True):
                        if made.bead_id is None:
                            raise RuntimeError(f"turn {turn.key} was refused: {made.error}")
                        beads[made.bead_id] = turn.key

        await asyncio.gather(*(one(*session) for session in item.sessions))
    positions = [p for p in (c.index_position for c in roles.values()) if p is not None]
    return Ingested(
        group.group_id, roles["user"].ai_id, beads, max(positions, key=index_seq_key, default=None)
    )


def _bead(turn: Turn, hub_session: str, group_id: str, date: datetime | None) -> dict[str, Any]:
    title, content = turn_title(turn.title(), turn.text)
    metadata: dict[str, Any] = {"session": turn.session, "turn": turn.index}
    bead: dict[str, Any] = {
        "title": title, "content": content, "bead_type": "observation", "session_id": hub_session,
        "group_id": group_id, "visibility": "group", "metadata": metadata,
        "idempotency_key": f"lme.{group_id}.{turn.session}.{turn.index}",
    }
    if date is not None:  # when it happened: what a question's date expressions are matched against
        metadata["date"] = date.isoformat()
        bead["valid_from"] = date.replace(tzinfo=UTC)
    return bead


# --- asking and scoring ------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    question_id: str
    question_type: str
    mode: str
    ranked: tuple[str, ...]
    """Turn keys of the hits, best first."""
    answer_sessions: tuple[str, ...]
    answer_turns: tuple[str, ...]
    latency_ms: float

    @property
    def sessions(self) -> list[str]:
        """Haystack sessions in the order of their best hit."""
        return list(dict.fromkeys(key.split("#", 1)[0] for key in self.ranked))

    def recall_any(self, k: int) -> float:
        return float(bool(set(self.sessions[:k]) & set(self.answer_sessions)))

    def recall_all(self, k: int) -> float:
        return float(set(self.answer_sessions) <= set(self.sessions[:k]))

    @property
    def turn_recall(self) -> float | None:
        if not self.answer_turns:
            return None
        return len(set(self.ranked[:10]) & set(self.answer_turns)) / len(self.answer_turns)


async def ask(nats_url: str, item: Item, ingested: Ingested, modes: Sequence[str]) -> list[Answer]:
    client = RecallClient(ingested.asker, nats_url, timeout=60.0)
    client.read_after(ingested.index_position)
    asked = item.question_date.replace(tzinfo=UTC) if item.question_date is not None else None
    answers = []
    async with connected([client]):
        for mode in modes:
            started = time.perf_counter()
            result = await client.search_beads(
                item.question, limit=HITS, filters={"group_id": ingested.group_id}, reference_time=asked,
                **MODE_OPTIONS[mode],
            )
            elapsed = (time.perf_counter() - started) * 1000.0
            ranked = tuple(ingested.beads.get(h.bead.bead_id, "?") for h in result.hits)
            answers.append(Answer(
                item.question_id, item.question_type, mode, ranked, item.answer_sessions, item.answer_turns, elapsed
            ))
    return answers


# --- the report --------------------------------------------------------------------------------

METRICS: tuple[str, ...] = ("any@1", "any@5", "any@10", "all@5", "turn R@10")


def metric_values(answers: Sequence[Answer], name: str) -> list[float]:
    if name == "turn R@10":
        return [r for a in answers if (r := a.turn_recall) is not None]
    kind, k = name.split("@")
    return [a.recall_any(int(k)) if kind == "any" else a.recall_all(int(k)) for a in answers]


@dataclass
class LongMemEvalReport:
    questions: int
    turns: int
    modes: list[str]
    embedder: str
    ingest_seconds: float
    query_seconds: float
    answers: list[Answer]
    setup: str = ""
    types: list[str] = field(default_factory=list)

    def of(self, mode: str, question_type: str | None = None) -> list[Answer]:
        return [a for a in self.answers if a.mode == mode and question_type in (None, a.question_type)]

    def score(self, mode: str, name: str, question_type: str | None = None) -> float:
        values = metric_values(self.of(mode, question_type), name)
        return statistics.fmean(values) if values else 0.0

    def interval(self, mode: str, name: str) -> tuple[float, float]:
        return interval(metric_values(self.of(mode), name))

    def p50_ms(self, mode: str) -> float:
        answers = self.of(mode)
        return statistics.median(a.latency_ms for a in answers) if answers else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "questions": self.questions,
            "turns": self.turns,
            "embedder": self.embedder,
            "ingest_seconds": round(self.ingest_seconds, 1),
            "query_seconds": round(self.query_seconds, 1),
            "modes": {
                mode: {
                    "all": {name: self.score(mode, name) for name in METRICS} | {"p50_ms": self.p50_ms(mode)},
                    "intervals_95": {name: self.interval(mode, name) for name in METRICS},
                    "by_type": {
                        t: {name: self.score(mode, name, t) for name in METRICS} | {"n": len(self.of(mode, t))}
                        for t in self.types
                    },
                }
                for mode in self.modes
            },
        }


def render(report: LongMemEvalReport) -> str:
    lines = [
        f"LongMemEval_S retrieval through the bus: {report.questions} questions, {report.turns} turns as group "
        f"beads (a group per question, a hub session per haystack session, 'role: text'); each question asked by "
        f"the user agent, search_beads(group_id filter, limit {HITS}), hits mapped to sessions by their best hit.",
        "any@k = an answer session among the first k sessions; all@5 = every answer session among the first 5; "
        "turn R@10 = share of has_answer turns among the first 10 hits.",
        f"Embedder {report.embedder}; ingest {report.ingest_seconds:.0f} s, queries {report.query_seconds:.0f} s. "
        f"{report.setup}",
        "",
    ]
    head = ["mode", "type", *METRICS, "p50 ms", "n"]
    rows = []
    for mode in report.modes:
        rows.append([mode, "all", *(f"{report.score(mode, m):.3f}" for m in METRICS),
                     f"{report.p50_ms(mode):.1f}", str(len(report.of(mode)))])
        for question_type in report.types:
            answers = report.of(mode, question_type)
            rows.append([mode, question_type, *(f"{report.score(mode, m, question_type):.3f}" for m in METRICS),
                         "", str(len(answers))])
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    for row in [head, ["-" * w for w in widths], *rows]:
        cells = enumerate(zip(row, widths, strict=True))
        lines.append("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in cells))
    lines += ["", f"95% intervals (bootstrap over questions, {BOOTSTRAP_RESAMPLES} resamples):"]
    for mode in report.modes:
        spans = "  ".join(f"{m} [{lo:.3f}, {hi:.3f}]" for m in METRICS for lo, hi in [report.interval(mode, m)])
        lines.append(f"  {mode:<14} {spans}")
    return "\n".join(lines)


# --- running it --------------------------------------------------------------------------------


async def run_longmemeval(
    data_dir: Path,
    nats_url: str | None = None,
    *,
    redis_url: str | None = None,
    falkordb_url: str | None = None,
    graph_name: str | None = None,
    work_dir: Path | None = None,
    questions: int | None = None,
    types: Sequence[str] = (),
    modes: Sequence[str] = MODES,
    ingest_concurrency: int = 4,
    progress: Progress | None = None,
) -> LongMemEvalReport:
    """Ingest each question's haystack into a group of its own and ask it in every mode, through the bus
    (where to: :func:`recall_hub.bench.evalkit.eval_hub`)."""
    unknown = [m for m in modes if m not in MODE_OPTIONS]
    if unknown:
        raise ValueError(f"unknown mode(s) {unknown}; known: {', '.join(MODES)}")
    items = load_longmemeval(data_dir, questions, types)
    total_turns = sum(len(i.turns) for i in items)
    graph = graph_name or f"lme_{new_body()}"
    async with eval_hub(nats_url, redis_url, falkordb_url, graph, work_dir) as target:
        ingest_seconds = query_seconds = 0.0
        answers: list[Answer] = []
        turns_done = 0
        for n, item in enumerate(items, start=1):
            started = time.perf_counter()
            ingested = await ingest(target.nats_url, item, ingest_concurrency)
            ingest_seconds += time.perf_counter() - started
            turns_done += len(item.turns)
            if progress:
                progress("ingest", turns_done, total_turns)
            started = time.perf_counter()
            answers += await ask(target.nats_url, item, ingested, modes)
            query_seconds += time.perf_counter() - started
            if progress:
                progress("query", n, len(items))
    return LongMemEvalReport(
        questions=len(items), turns=total_turns, modes=list(modes), embedder=target.embedder,
        ingest_seconds=ingest_seconds, query_seconds=query_seconds, answers=answers, setup=target.setup,
        types=sorted({i.question_type for i in items}),
    )
