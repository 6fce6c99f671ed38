"""LoCoMo retrieval evaluation, run through the bus like any agent would use the hub.

Mapping (docs/retrieval.md has the method and the numbers):

* each conversation is a group, created by an ops identity that adds both speakers as agents;
* each speaker is an agent; each turn is a group bead written by its speaker, titled
  ``"Speaker: text"``, with its real LoCoMo timestamp and dialogue id in ``metadata``
  (``dia_id``, ``session``, ``date``) and the session's date as ``valid_from`` (when it happened) — the hub
  stamps ``created_at`` itself at ingest;
* each LoCoMo session is a session. A hub session has one owner (a create naming another
  identity's session is refused), so each speaker writes its turns of session N into its own
  hub session, and each turn is linked ``FOLLOWS_FROM`` the turn it answers (the other speaker's
  previous turn) — the hub itself links each turn to the same speaker's previous one;
* each question of categories 1–4 is asked by one of the two speakers, as of the conversation's last
  session, with ``search_beads(filters={"group_id": <conversation group>}, limit=10,
  reference_time=<last session's date>, mode=...)``.

Metrics per mode and per category: Recall@10 of the evidence turns, Hit@5, MRR (over the top 10),
session Hit@1 (the top bead's LoCoMo session holds an evidence turn) and the p50 round-trip
latency of the search request as the client sees it.
"""

from __future__ import annotations

import asyncio
import logging
import re
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
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

log = logging.getLogger(__name__)

CATEGORIES: dict[int, str] = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
"""LoCoMo's question categories as numbered in its released data (5, adversarial, is left out)."""

MODES: tuple[str, ...] = ("keyword", "vector", "hybrid-rrf", "hybrid", "hybrid+priors")
MODE_OPTIONS: dict[str, dict[str, Any]] = {
    "keyword": {"mode": "keyword", "use_priors": False},
    "vector": {"mode": "vector", "use_priors": False},
    "hybrid-rrf": {"mode": "hybrid", "use_priors": False, "fusion": "rrf"},  # rank positions only
    "hybrid": {"mode": "hybrid", "use_priors": False},
    "hybrid+priors": {},  # the default request: what an agent gets when it asks nothing special
}
LIMIT = 10
HIT_AT = 5
_DATE_FORMAT = "%I:%M %p on %d %B, %Y"
_EVIDENCE = re.compile(r"^D:?(\d+):(\d+)$")

# --- the data ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    dia_id: str
    speaker: str
    text: str
    session: int
    date: datetime
    caption: str | None = None

    def title(self) -> str:
        return f"{self.speaker}: {self.text}"


@dataclass(frozen=True)
class Question:
    index: int
    text: str
    category: int
    evidence: tuple[str, ...]


@dataclass
class Conversation:
    key: str
    speakers: tuple[str, str]
    turns: list[Turn]
    questions: list[Question]

    def session_of(self, dia_id: str) -> int:
        return int(dia_id[1:].split(":", 1)[0])


def normalise_evidence(raw: Iterable[str], known: set[str]) -> tuple[str, ...]:
    """Evidence ids as ``D<session>:<turn>``, known ones only, in order, without repeats.

    The released data holds a few malformed entries (``"D8:6; D9:17"``, ``"D:11:26"``, ``"D"``);
    they are split and repaired where the intent is clear and dropped otherwise.
    """
    out: list[str] = []
    for item in raw:
        for token in re.split(r"[;,\s]+", str(item)):
            match = _EVIDENCE.match(token.strip())
            if match is None:
                continue
            dia_id = f"D{int(match.group(1))}:{int(match.group(2))}"
            if dia_id in known and dia_id not in out:
                out.append(dia_id)
    return tuple(out)


def load_conversation(path: Path, max_turns: int | None = None, captions: bool = False) -> Conversation:
    """The one LoCoMo conversation in the file ``path``; with ``max_turns``, only its first turns and the
    questions whose evidence lies entirely among them."""
    ((name, record),) = json_records(path, "LoCoMo conversation")
    return conversation(name, record, max_turns, captions)


def conversation(
    name: str, record: dict[str, Any], max_turns: int | None = None, captions: bool = False
) -> Conversation:
    """A LoCoMo conversation from its JSON record: flattened (``speaker_a``, ``session_<n>``,
    ``session_<n>_date_time`` and ``qa`` at the top) or as LoCoMo's release has it (``sample_id``, the turns under
    ``conversation``, ``qa`` beside them), named by its ``sample_id`` or else ``name``."""
    if isinstance(record.get("conversation"), dict):
        sample_id = record.get("sample_id")
        name = name if sample_id is None or sample_id == "" else str(sample_id)
        record = {**record["conversation"], "qa": record.get("qa", [])}
    speakers = (str(record["speaker_a"]), str(record["speaker_b"]))
    numbers = sorted(
        int(k.rsplit("_", 1)[1]) for k in record if re.fullmatch(r"session_\d+", k) and record[k]
    )
    turns: list[Turn] = []
    for number in numbers:
        date = datetime.strptime(str(record[f"session_{number}_date_time"]), _DATE_FORMAT)
        for raw in record[f"session_{number}"]:
            caption = raw.get("blip_caption") if captions else None
            turns.append(Turn(str(raw["dia_id"]), str(raw["speaker"]), str(raw["text"]), number, date, caption))
    if max_turns is not None:
        turns = turns[:max_turns]
    known = {t.dia_id for t in turns}
    questions: list[Question] = []
    for index, qa in enumerate(record.get("qa", [])):
        category = int(qa.get("category", 0))
        if category not in CATEGORIES:
            continue
        all_evidence = qa.get("evidence") or []
        evidence = normalise_evidence(all_evidence, known)
        if not evidence:
            continue
        if max_turns is not None and len(evidence) < len(normalise_evidence(all_evidence, _all_ids(record))):
            continue  # part of its evidence lies beyond the slice
        questions.append(Question(index, str(qa["question"]), category, evidence))
    return Conversation(name, speakers, turns, questions)


def _all_ids(data: dict[str, Any]) -> set[str]:
    return {
        str(t["dia_id"]) for k, v in data.items() if re.fullmatch(r"session_\d+", k) and isinstance(v, list) for t in v
    }


def _numbered(path: Path) -> tuple[int, str]:
    """Conversation files in the order of their numbers: ``2.json`` before ``10.json``."""
    return len(path.stem), path.stem


def load_locomo(
    data: Path, conversations: int | None = None, max_turns: int | None = None, captions: bool = False
) -> list[Conversation]:
    """The conversations in ``data`` — a folder of JSON files or one file, each holding a conversation or a list
    of them (LoCoMo's release: ``locomo10.json``) — the first ``conversations`` of them if given."""
    records = json_records(data, "LoCoMo conversation", order=_numbered)[:conversations]
    try:
        return [conversation(name, record, max_turns, captions) for name, record in records]
    except (KeyError, TypeError, ValueError) as exc:
        raise DatasetError(f"{data} does not hold LoCoMo conversations as expected: {exc!r}") from exc


# --- ingest through the bus --------------------------------------------------------------------


@dataclass
class Ingested:
    """What one conversation became in the hub."""

    key: str
    group_id: str
    agents: dict[str, str]  # speaker name -> ai id
    beads: dict[str, str]  # dia id -> bead id
    sessions: dict[str, int] = field(default_factory=dict)  # bead id -> LoCoMo session
    index_position: str | None = None
    """How far the keyword index must be for the askers to find every turn (the writers' furthest write)."""

    def __post_init__(self) -> None:
        self.dia_of = {b: d for d, b in self.beads.items()}


async def _ingest_session(
    clients: dict[str, RecallClient], group_id: str, turns: Sequence[Turn], beads: dict[str, str], plain: bool
) -> None:
    """Write one LoCoMo session in order: its turns, each into its speaker's own hub session (and, unless
    ``plain``, the reply structure as FOLLOWS_FROM edges)."""
    sessions: dict[str, str] = {}
    previous: str | None = None
    for turn in turns:
        client = clients[turn.speaker]
        session_id = sessions.setdefault(turn.speaker, f"s_{new_body()}")
        title, content = turn_title(turn.title())
        if turn.caption:
            content = (content + "\n" if content else "") + f"[shares a photo: {turn.caption}]"
        bead = await client.create_bead(
            title,
            content,
            bead_type="observation",
            session_id=session_id,
            group_id=group_id,
            visibility="group",
            metadata={"dia_id": turn.dia_id, "session": turn.session, "date": turn.date.isoformat()},
            valid_from=turn.date.replace(tzinfo=UTC),  # when it happened, what date expressions are matched to
            idempotency_key=f"locomo.{group_id}.{turn.dia_id.replace(':', '.')}",
        )
        beads[turn.dia_id] = bead.bead_id
        if previous is not None and not plain:
            # The reply structure of the conversation: this turn answers the previous one.
            await client.add_relationship(bead.bead_id, previous, "FOLLOWS_FROM", strength=1.0)
        previous = bead.bead_id


async def ingest(
    nats_url: str,
    conversation: Conversation,
    concurrency: int = 4,
    progress: Callable[[int], None] | None = None,
    plain: bool = False,
) -> Ingested:
    """Create the group, its agents and every turn of ``conversation`` through the bus."""
    ops = RecallClient(f"o_{new_body()}", nats_url, timeout=30.0)
    speakers = {name: RecallClient(f"a_{new_body()}", nats_url, timeout=30.0) for name in conversation.speakers}
    beads: dict[str, str] = {}
    async with connected([ops, *speakers.values()]):
        group = await ops.create_group(f"LoCoMo conversation {conversation.key}")
        for client in speakers.values():
            await ops.add_member(group.group_id, client.ai_id, "agent")
        by_session: dict[int, list[Turn]] = {}
        for turn in conversation.turns:
            by_session.setdefault(turn.session, []).append(turn)
        slots = asyncio.Semaphore(max(1, concurrency))

        async def one(turns: list[Turn]) -> None:
            async with slots:
                await _ingest_session(speakers, group.group_id, turns, beads, plain)
            if progress:
                progress(len(turns))

        await asyncio.gather(*(one(t) for t in by_session.values()))
    sessions = {beads[t.dia_id]: t.session for t in conversation.turns}
    positions = [p for p in (w.index_position for w in speakers.values()) if p is not None]
    return Ingested(
        conversation.key, group.group_id, {n: c.ai_id for n, c in speakers.items()}, beads, sessions,
        max(positions, key=index_seq_key, default=None),
    )


# --- asking and scoring ------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """One question asked in one mode."""

    conversation: str
    question: int
    category: int
    mode: str
    ranked: tuple[str, ...]  # dia ids, best first
    evidence: tuple[str, ...]
    latency_ms: float

    @property
    def recall(self) -> float:
        return len(set(self.ranked[:LIMIT]) & set(self.evidence)) / len(self.evidence)

    @property
    def hit(self) -> float:
        return float(bool(set(self.ranked[:HIT_AT]) & set(self.evidence)))

    @property
    def reciprocal_rank(self) -> float:
        for rank, dia_id in enumerate(self.ranked[:LIMIT], start=1):
            if dia_id in self.evidence:
                return 1.0 / rank
        return 0.0

    @property
    def session_hit(self) -> float:
        if not self.ranked:
            return 0.0
        return float(_session(self.ranked[0]) in {_session(e) for e in self.evidence})


def _session(dia_id: str) -> int:
    return int(dia_id[1:].split(":", 1)[0])


async def ask(
    nats_url: str,
    conversation: Conversation,
    ingested: Ingested,
    modes: Sequence[str] = MODES,
    limit: int = LIMIT,
    concurrency: int = 1,
    progress: Callable[[int], None] | None = None,
) -> list[Answer]:
    """Ask every question of ``conversation`` in every mode, as one of its speakers.

    Questions alternate between the two speakers (any group member sees the same group beads).
    With ``concurrency`` 1 the latencies are those of an idle hub.
    """
    askers = [RecallClient(ingested.agents[s], nats_url, timeout=30.0) for s in conversation.speakers]
    # The questions come after the conversation: its last session is their "now".
    asked = max(t.date for t in conversation.turns).replace(tzinfo=UTC) if conversation.turns else None
    for asker in askers:
        asker.read_after(ingested.index_position)
    answers: list[Answer] = []
    slots = asyncio.Semaphore(max(1, concurrency))

    async def one(n: int, question: Question) -> None:
        client = askers[n % len(askers)]
        async with slots:
            for mode in modes:
                started = time.perf_counter()
                result = await client.search_beads(
                    question.text, limit=limit, filters={"group_id": ingested.group_id}, reference_time=asked,
                    **MODE_OPTIONS[mode],
                )
                elapsed = (time.perf_counter() - started) * 1000.0
                ranked = tuple(ingested.dia_of.get(h.bead.bead_id, "?") for h in result.hits)
                answers.append(
                    Answer(
                        conversation.key, question.index, question.category, mode, ranked, question.evidence, elapsed
                    )
                )
        if progress:
            progress(1)

    async with connected(askers):
        await asyncio.gather(*(one(n, q) for n, q in enumerate(conversation.questions)))
    return answers


# --- the report --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Metrics:
    questions: int
    recall_at_10: float
    hit_at_5: float
    mrr: float
    session_hit_at_1: float
    p50_ms: float


def summarise(answers: Sequence[Answer]) -> Metrics:
    if not answers:
        return Metrics(0, 0.0, 0.0, 0.0, 0.0, 0.0)
    return Metrics(
        questions=len(answers),
        recall_at_10=statistics.fmean(a.recall for a in answers),
        hit_at_5=statistics.fmean(a.hit for a in answers),
        mrr=statistics.fmean(a.reciprocal_rank for a in answers),
        session_hit_at_1=statistics.fmean(a.session_hit for a in answers),
        p50_ms=statistics.median(a.latency_ms for a in answers),
    )


@dataclass
class LocomoReport:
    conversations: list[str]
    turns: int
    questions: int
    modes: list[str]
    embedder: str
    ingest_seconds: float
    query_seconds: float
    answers: list[Answer]
    setup: str = ""
    captions: bool = False
    plain: bool = False
    """Ingested as a plain client would: no reply-structure edges added by the eval."""

    def metrics(self, mode: str, category: int | None = None) -> Metrics:
        return summarise(
            [a for a in self.answers if a.mode == mode and (category is None or a.category == category)]
        )

    def intervals(self, mode: str) -> dict[str, tuple[float, float]]:
        """95% intervals of the overall R@10 and sess@1 of ``mode``."""
        answers = [a for a in self.answers if a.mode == mode]
        return {
            "recall_at_10": interval([a.recall for a in answers]),
            "session_hit_at_1": interval([a.session_hit for a in answers]),
        }

    def table(self) -> dict[str, dict[str, Metrics]]:
        """``{mode: {"all" | category name: Metrics}}``."""
        out: dict[str, dict[str, Metrics]] = {}
        for mode in self.modes:
            row = {"all": self.metrics(mode)}
            for number, name in CATEGORIES.items():
                row[name] = self.metrics(mode, number)
            out[mode] = row
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "conversations": self.conversations,
            "turns": self.turns,
            "questions": self.questions,
            "embedder": self.embedder,
            "ingest_seconds": round(self.ingest_seconds, 1),
            "query_seconds": round(self.query_seconds, 1),
            "captions": self.captions,
            "plain": self.plain,
            "table": {
                mode: {cat: vars(m) for cat, m in row.items()} for mode, row in self.table().items()
            },
            "intervals_95": {mode: self.intervals(mode) for mode in self.modes},
        }


def _header(report: LocomoReport) -> list[str]:
    per_category = ", ".join(
        f"{name} {sum(1 for a in report.answers if a.mode == report.modes[0] and a.category == n)}"
        for n, name in CATEGORIES.items()
    )
    return [
        f"LoCoMo retrieval through the bus: {len(report.conversations)} conversation(s) "
        f"({', '.join(report.conversations)}), {report.turns} turns as group beads, "
        f"{report.questions} questions of categories 1-4 ({per_category}).",
        "Each conversation a group, each speaker an agent, each turn a bead 'Speaker: text'"
        + (" (+ image caption)" if report.captions else "")
        + ("; plain ingest (no edges beyond the hub's own)" if report.plain
           else "; reply structure added as FOLLOWS_FROM edges")
        + "; each question asked by a speaker, search_beads(group_id filter, limit 10).",
        "Recall@10 = share of evidence turns in the top 10; Hit@5 = an evidence turn in the top 5; "
        "MRR over the top 10; sess@1 = the top bead's session holds evidence; p50 = search round trip.",
        f"Embedder {report.embedder}; ingest {report.ingest_seconds:.0f} s, queries {report.query_seconds:.0f} s."
        + (f" {report.setup}" if report.setup else ""),
    ]


_COLUMNS = ("R@10", "Hit@5", "MRR", "sess@1", "p50 ms", "n")


def _cells(m: Metrics) -> list[str]:
    return [
        f"{m.recall_at_10:.3f}", f"{m.hit_at_5:.3f}", f"{m.mrr:.3f}", f"{m.session_hit_at_1:.3f}",
        f"{m.p50_ms:.1f}", str(m.questions),
    ]


def _rows(report: LocomoReport) -> list[list[str]]:
    rows = []
    for mode, row in report.table().items():
        for category, metrics in row.items():
            if metrics.questions:
                rows.append([mode, category, *_cells(metrics)])
    return rows


def render(report: LocomoReport) -> str:
    """A plain-text table (every mode, overall and per category) under a header on the method."""
    head = ["mode", "category", *_COLUMNS]
    rows = _rows(report)
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

    def line(cells: Sequence[str]) -> str:
        padded = (c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
        return "  ".join(padded).rstrip()

    out = [*_header(report), "", line(head), "  ".join("-" * w for w in widths)]
    previous = None
    for row in rows:
        if previous is not None and row[0] != previous:
            out.append("")
        out.append(line(row))
        previous = row[0]
    return "\n".join([*out, "", *_interval_lines(report)])


def _interval_lines(report: LocomoReport) -> list[str]:
    lines = [f"95% intervals (bootstrap over questions, {BOOTSTRAP_RESAMPLES} resamples):"]
    for mode in report.modes:
        ci = report.intervals(mode)
        r_lo, r_hi = ci["recall_at_10"]
        s_lo, s_hi = ci["session_hit_at_1"]
        lines.append(f"  {mode:<16} R@10 [{r_lo:.3f}, {r_hi:.3f}]   sess@1 [{s_lo:.3f}, {s_hi:.3f}]")
    return lines


def markdown(report: LocomoReport) -> str:
    """The same table as Markdown, with the method as a paragraph above it."""
    head = ["mode", "category", *_COLUMNS]
    rule = "|" + "|".join(["---"] * 2 + ["---:"] * (len(head) - 2)) + "|"
    out = [" ".join(_header(report)), "", "| " + " | ".join(head) + " |", rule]
    for row in _rows(report):
        bold = row[1] == "all"
        cells = [f"**{c}**" if bold and i >= 2 and i < 6 else c for i, c in enumerate(row)]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join([*out, "", *_interval_lines(report)])


# --- running it --------------------------------------------------------------------------------


async def run_locomo(
    data_dir: Path,
    nats_url: str | None = None,
    *,
    redis_url: str | None = None,
    falkordb_url: str | None = None,
    graph_name: str | None = None,
    work_dir: Path | None = None,
    conversations: int | None = None,
    max_turns: int | None = None,
    modes: Sequence[str] = MODES,
    captions: bool = False,
    ingest_concurrency: int = 4,
    query_concurrency: int = 1,
    progress: Progress | None = None,
    plain: bool = False,
) -> LocomoReport:
    """Ingest LoCoMo conversations into a hub and ask their questions in every mode, through the bus.

    Without ``nats_url`` an embedded stack is started (in ``work_dir`` or a temporary directory)
    with an in-process hub on a fresh graph. With ``nats_url`` only, a hub must already serve there;
    with ``nats_url`` and a store URL, an in-process hub is started against them. ``max_turns`` keeps
    only the first turns of each conversation (and the questions answered inside them).
    """
    unknown = [m for m in modes if m not in MODE_OPTIONS]
    if unknown:
        raise ValueError(f"unknown mode(s) {unknown}; known: {', '.join(MODES)}")
    convs = load_locomo(data_dir, conversations, max_turns, captions)
    total_turns = sum(len(c.turns) for c in convs)
    total_questions = sum(len(c.questions) for c in convs)
    async with eval_hub(nats_url, redis_url, falkordb_url, graph_name or f"locomo_{new_body()}", work_dir) as target:
        url = target.nats_url
        done = 0

        def step(stage: str, total: int) -> Callable[[int], None]:
            def advance(n: int) -> None:
                nonlocal done
                done += n
                if progress:
                    progress(stage, done, total)

            return advance

        started = time.perf_counter()
        ingested: list[Ingested] = []
        advance = step("ingest", total_turns)
        for conv in convs:
            ingested.append(await ingest(url, conv, ingest_concurrency, advance, plain=plain))
            log.info("ingested conversation %s: %d turns", conv.key, len(conv.turns))
        ingest_seconds = time.perf_counter() - started
        done = 0
        started = time.perf_counter()
        answers: list[Answer] = []
        advance = step("query", total_questions)
        for conv, ing in zip(convs, ingested, strict=True):
            answers += await ask(url, conv, ing, modes, LIMIT, query_concurrency, advance)
        query_seconds = time.perf_counter() - started
    return LocomoReport(
        conversations=[c.key for c in convs],
        turns=total_turns,
        questions=total_questions,
        modes=list(modes),
        embedder=target.embedder,
        ingest_seconds=ingest_seconds,
        query_seconds=query_seconds,
        answers=answers,
        setup=target.setup,
        captions=captions,
        plain=plain,
    )
