"""`recall bench`: latency and throughput of the hub through the bus, beside the physical floor.

One run builds a realistic synthetic memory (identities, groups, sessions, beads and edges), ingests
it through the client library with ``concurrency`` requests in flight, then times each operation one
request at a time and, in the same run, a bare NATS request/reply of the same size through the same
nats-server (the floor). Results are ratios to that floor as well as absolute times.

The operations timed are the entries of :data:`LATENCY_OPS` (and :data:`FLOORS`): a name and a
coroutine factory that, given the :class:`Workload`, returns the coroutine function timed per sample.
Adding an operation (hybrid search, find_similar, why, ...) means adding one entry.

Usage (what ``recall bench --beads 1000`` does)::

    report = asyncio.run(run_bench(BenchConfig(beads=1000)))
    print(render(report))
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib.metadata
import itertools
import json
import logging
import math
import os
import platform
import secrets
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from random import Random
from typing import Any

import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from recall_client import RecallClient
from recall_schemas import CreateBead
from recall_schemas.subjects import inbox_prefix, request_subject

from recall_hub.config import HubSettings
from recall_hub.embedders.local import default_tokenizer_path
from recall_hub.retrieval.embedding import bead_chunks
from recall_hub.service.server import running_hub
from recall_hub.tooling.stack import DURABILITY, EmbeddedStack

log = logging.getLogger(__name__)

ProgressFn = Callable[[str], None]
SampleFn = Callable[[int], Awaitable[int]]
"""One timed call for sample ``i``; returns the size of its result (hits, nodes, ...)."""
Factory = Callable[["Workload"], Awaitable[SampleFn]]

# --- configuration ---------------------------------------------------------------------------


@dataclass
class BenchConfig:
    beads: int = 10_000
    samples: int = 1000
    """Timed samples per operation."""
    concurrency: int = 32
    """Requests in flight during ingest."""
    nats_url: str | None = None
    falkordb_url: str | None = None
    redis_url: str | None = None
    """All three None: start an embedded stack in a temporary directory (or ``data_dir``)."""
    data_dir: Path | None = None
    """Where the embedded stack keeps its data; None: a temporary directory removed at the end."""
    seed: int = 7
    in_process_hub: bool = True
    """Serve the hub inside this process; False: a hub must already serve ``nats_url``."""
    graph_name: str | None = None
    """None: a fresh ``bench_<hex>`` graph (deleted at the end when the FalkorDB is external)."""
    warmup: int = 20
    """Untimed calls per operation before sampling."""
    rounds: int = 5
    """Samples are taken in this many interleaved rounds, so drift affects every operation alike."""
    related_per_bead: float = 2.0
    """Random RELATED_TO edges per bead, beside the FOLLOWS_FROM chains of sessions."""
    timeout: float = 30.0
    """Per-request timeout of the bench client (no retries: a failure is counted, not hidden)."""
    embedder: str | None = None
    """The in-process hub's embedder kind (``local``, ``hash``, ``openai``); None: the hub's default."""
    durability: str = "default"
    """The embedded stack's fsync settings (``tooling.stack.DURABILITY``): ``default`` or ``strict``."""
    create_settle: str = "inline"
    """The in-process hub's ``create_settle``: ``inline`` or ``background``."""

    def command(self) -> str:
        parts = ["recall bench", f"--beads {self.beads}"]
        defaults = BenchConfig()
        for name in ("samples", "concurrency", "seed", "embedder", "durability", "create_settle"):
            value = getattr(self, name)
            if value != getattr(defaults, name):
                parts.append(f"--{name.replace('_', '-')} {value}")
        return " ".join(parts)


# --- report ----------------------------------------------------------------------------------


@dataclass
class MachineInfo:
    cores: int
    cpu_model: str
    memory_gb: float
    os: str
    python: str
    nats_server: str
    redis: str
    falkordb: str
    libraries: dict[str, str]
    code: str = "?"
    """nexus-recall version and, in a git checkout, the commit (``+`` and the changed files if dirty)."""
    load: tuple[float, ...] = ()
    """1-minute load average at the start, at each progress step and at the end of the run. The bench
    itself keeps about 2 busy; more means other work on the machine shared the cores."""


@dataclass
class DatasetSummary:
    identities: int
    groups: int
    sessions: int
    beads: int
    edges: dict[str, int]
    """Edges between beads by type, counted in the graph after ingest ("(auto)": made by the hub);
    the planned RELATED_TO edges when the graph cannot be read."""
    visibility: dict[str, int]
    bead_bytes: tuple[int, int, int]
    """(min, median, max) bytes of title + content."""
    vocabulary: int
    tokens: tuple[int, int]
    """(median, p90) tokens of a bead's embedder input (title + content), 0 when unknown."""
    caller: str
    caller_visible: int
    query_matches: tuple[int, int]
    """(median, p90) beads of the whole store matching a search query (any of its words)."""


@dataclass
class OpResult:
    name: str
    op: str
    description: str
    samples_ms: list[float] = field(repr=False)
    errors: int = 0
    request_bytes: int = 0
    reply_bytes: int = 0
    result_size: float = 0.0
    result_unit: str = ""
    target_ms: float | None = None
    hub_ms: dict[str, list[float]] = field(default_factory=dict, repr=False)
    """Per bucket of :data:`PROBE_BUCKETS`, per sample: the in-process hub's time there (ms)."""
    graph_queries: float = 0.0
    """Mean FalkorDB queries per request (in-process hub only)."""

    def hub_p50(self, bucket: str) -> float:
        return percentile(self.hub_ms.get(bucket, []), 50)

    @property
    def n(self) -> int:
        return len(self.samples_ms)

    def p(self, q: float) -> float:
        return percentile(self.samples_ms, q)


@dataclass
class Throughput:
    name: str
    count: int
    seconds: float
    errors: int
    latencies_ms: list[float] = field(repr=False)

    @property
    def per_second(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else math.nan


@dataclass
class BenchReport:
    config: BenchConfig
    machine: MachineInfo
    dataset: DatasetSummary
    setup: str
    started_at: datetime
    duration_s: float
    ingest: list[Throughput]
    floor: OpResult
    ops: list[OpResult]
    command: str
    gc_pauses: list[tuple[int, float]] = field(default_factory=list, repr=False)
    """(generation, ms) of each Python garbage collection while latency was timed."""


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100), linear between closest ranks; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _median_int(values: Sequence[int]) -> int:
    return round(percentile([float(v) for v in values], 50)) if values else 0


# --- synthetic data --------------------------------------------------------------------------

_REAL_WORDS = """
adapter agent alert allocation anchor api archive artifact audit backlog backoff bandwidth baseline
batch benchmark billing binary blocker bootstrap branch broker budget buffer bundle cache callback
canary capacity catalog certificate changelog checkpoint checksum client cluster cohort commit
compaction compiler config connector consensus consumer container contract coverage cursor customer
dashboard database dataset deadline deadlock debug decision dependency deploy descriptor diagnosis
digest directory dispatch docker domain downtime draft driver embedding encoder endpoint engine
environment error estimate event eviction experiment exporter failover feature fixture flag forecast
fragment framework gateway gradient graph handler handoff hash header heartbeat histogram hotfix
identity incident index inference ingest inventory invoice journal kernel keyspace label latency
layout lease ledger library limit linter listener loader lockfile logger mailbox manifest mapping
metric migration milestone mirror model module monitor mutex namespace network notebook offset
onboarding operator optimizer outage package pagination parser partition patch payload pipeline
planner plugin policy pool postmortem priority probe profile protocol provider proxy query queue
quota ranking ratio receipt recovery refactor region registry regression release replica report
request resolver retry review rollback rollout router runbook runtime sampler scheduler schema
scope script secret segment selector sensor serializer server session shard signal snapshot socket
specification spike sprint staging storage stream subnet summary supplier switch sync tenant
terraform thread threshold throttle ticket timeout token topology tracer transaction transport
trigger tuning upgrade upload usage validator vector vendor version volume warehouse webhook
window worker workflow workspace
""".split()

_TAGS = """
db infra api auth perf bug deploy ci docs ui ml search cache net security billing onboarding release
incident design storage queue mobile web data eval cost compliance oncall backend frontend
area:core area:edge area:ops team:alpha team:beta team:gamma prio:high prio:low status:open
""".split()
_BEAD_TYPES = "fact decision observation finding todo handoff summary note question event".split()
_TYPE_WEIGHTS = [25, 12, 20, 12, 8, 3, 5, 10, 3, 2]
_CHANNELS = ["chat", "tool", "git", "doc", "shell"]

VOCABULARY_SIZE = 6000
IDENTIFIER_SHARE = 0.25
"""The rarest quarter of the vocabulary are snake_case identifiers (``retry_budget``): several
tokens each, as the names and jargon of real notes are, so embedder inputs have a realistic length."""
ZIPF_S = 1.0
ZIPF_Q = 30.0
"""Word ranks follow a Zipf-Mandelbrot law p(r) ~ (r + q)^-s: at 10k beads the commonest words are in
over a quarter of the beads (like content words after stop-word removal), a median one in 0.35%."""
_STOPWORDS = set(
    """a an and are as at be but by for if in into is it no not of on or such that the their then there
    these they this to was will with""".split()
)
_TOKENIZER = default_tokenizer_path()


def _english_words() -> list[str]:
    """Whole English words of the embedding model's WordPiece vocabulary, roughly commonest first
    (its ids follow corpus frequency); empty when the file is not there."""
    try:
        vocab: dict[str, int] = json.loads(_TOKENIZER.read_text())["model"]["vocab"]
    except (OSError, ValueError, KeyError):
        return []
    return [
        w
        for w, _ in sorted(vocab.items(), key=lambda kv: kv[1])
        if w.isascii() and w.isalpha() and len(w) >= 3 and w not in _STOPWORDS
    ]


def _vocabulary(rng: Random) -> list[str]:
    """The words in rank order (commonest first): English words with the domain words spread over the
    common ranks, then identifiers made of two words."""
    # The first 150 are mostly function words (his, from, which, ...), which notes are not searched by.
    english = [w for w in _english_words()[150:8000] if w not in _REAL_WORDS]
    n_words = round(VOCABULARY_SIZE * (1 - IDENTIFIER_SHARE))
    if len(english) < n_words:  # no tokenizer file: made-up words, deterministic for the seed
        syllables = [c + v for c in "bcdfghklmnprstvz" for v in "aeiou"]
        while len(english) < n_words:
            english.append("".join(rng.choice(syllables) for _ in range(rng.choice((2, 3)))))
        english = list(dict.fromkeys(english))
    words = english[: n_words - len(_REAL_WORDS)]
    for domain_word in _REAL_WORDS:
        words.insert(rng.randrange(min(len(words), 2000)), domain_word)
    seen = set(words)
    parts = _REAL_WORDS + words[200:2000]
    while len(words) < VOCABULARY_SIZE:
        identifier = f"{rng.choice(parts)}_{rng.choice(parts)}"
        if identifier not in seen:
            seen.add(identifier)
            words.append(identifier)
    return words


def _token_counts(texts: Sequence[str]) -> list[int]:
    """Tokens of each text for the local embedding model (its tokenizer); empty when unavailable."""
    try:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(_TOKENIZER))
        tokenizer.no_padding()
        tokenizer.enable_truncation(512)
    except Exception:
        return []
    return [len(e.ids) for e in tokenizer.encode_batch(list(texts))]


@dataclass(frozen=True)
class BeadPlan:
    creator: str
    title: str
    content: str
    bead_type: str
    importance: int
    tags: tuple[str, ...]
    session_id: str | None
    group_id: str | None
    visibility: str
    channel: str
    words: frozenset[int] = field(repr=False)

    def fields(self) -> dict[str, Any]:
        """Keyword arguments of :meth:`RecallClient.create_bead` after title and content."""
        out: dict[str, Any] = {
            "bead_type": self.bead_type,
            "importance": self.importance,
            "tags": list(self.tags),
            "visibility": self.visibility,
            "metadata": {"channel": self.channel},
        }
        if self.session_id is not None:
            out["session_id"] = self.session_id
        if self.group_id is not None:
            out["group_id"] = self.group_id
        return out


@dataclass
class Dataset:
    ops: list[str]
    agents: list[str]
    groups: dict[str, tuple[str, list[str]]]
    """group_id -> (its ops, its agents)."""
    sessions: dict[str, tuple[str, str | None]]
    """session_id -> (owner, group_id or None)."""
    beads: list[BeadPlan]
    """In session order: the hub itself links each bead FOLLOWS_FROM its session's previous one."""
    related_to: list[tuple[int, int]]
    """(from, to) bead indexes of the RELATED_TO edges the bench adds."""
    vocabulary: list[str]
    cum_weights: list[float]

    @property
    def identities(self) -> list[str]:
        return self.ops + self.agents

    def members(self, group_id: str) -> set[str]:
        ops, agents = self.groups[group_id]
        return {ops, *agents}

    def groups_of(self, ai_id: str) -> list[str]:
        return [g for g in self.groups if ai_id in self.members(g)]

    def visible_to(self, ai_id: str) -> list[int]:
        mine = set(self.groups_of(ai_id))
        return [
            i
            for i, b in enumerate(self.beads)
            if b.visibility == "global"
            or (b.visibility == "private" and b.creator == ai_id)
            or (b.visibility == "group" and b.group_id in mine)
        ]

    def draw_words(self, rng: Random, k: int) -> list[int]:
        return rng.choices(range(len(self.vocabulary)), cum_weights=self.cum_weights, k=k)

    def text(self, words: Sequence[int]) -> str:
        return " ".join(self.vocabulary[w] for w in words)

    def plan_bead(self, rng: Random, creator: str, session_id: str | None, group_id: str | None) -> BeadPlan:
        title_words = self.draw_words(rng, rng.randint(4, 9))
        sentences: list[str] = []
        content_words: list[int] = []
        budget = rng.randint(28, 70)
        while budget > 0:
            n = min(budget, rng.randint(6, 14))
            words = self.draw_words(rng, n)
            content_words += words
            sentence = self.text(words)
            sentences.append(sentence[:1].upper() + sentence[1:] + ".")
            budget -= n
        title = self.text(title_words)
        if group_id is not None:
            visibility = rng.choices(["group", "private", "global"], weights=[65, 15, 20])[0]
        else:
            visibility = rng.choices(["private", "global"], weights=[70, 30])[0]
        return BeadPlan(
            creator=creator,
            title=title[:1].upper() + title[1:],
            content=" ".join(sentences),
            bead_type=rng.choices(_BEAD_TYPES, weights=_TYPE_WEIGHTS)[0],
            importance=min(10, max(0, round(rng.triangular(0, 10, 5)))),
            tags=tuple(dict.fromkeys(rng.choices(_TAGS, k=rng.randint(0, 4)))),
            session_id=session_id,
            group_id=group_id,
            visibility=visibility,
            channel=rng.choice(_CHANNELS),
            words=frozenset(title_words + content_words),
        )


def build_dataset(beads: int, seed: int, tag: str, related_per_bead: float = 2.0) -> Dataset:
    """A deterministic (for a seed) memory of ``beads`` beads; ``tag`` makes the ids unique per run."""
    rng = Random(seed)
    vocabulary = _vocabulary(rng)
    cum_weights = list(itertools.accumulate((r + ZIPF_Q) ** -ZIPF_S for r in range(1, len(vocabulary) + 1)))
    ops = [f"o_bench{tag}{i:02d}" for i in range(2)]
    agents = [f"a_bench{tag}{i:02d}" for i in range(10)]
    groups: dict[str, tuple[str, list[str]]] = {}
    for k in range(4):
        members = rng.sample(agents[1:], 4)
        if k in (0, 3):
            members.append(agents[0])  # the latency caller is in two of the four groups
        groups[f"g_bench{tag}{k:02d}"] = (ops[k % 2], sorted(members))
    data = Dataset(ops, agents, groups, {}, [], [], vocabulary, cum_weights)
    identities = data.identities
    while len(data.beads) < beads:
        owner = rng.choice(identities)
        if rng.random() < 0.05:  # a bead outside any session
            data.beads.append(data.plan_bead(rng, owner, None, None))
            continue
        session_id = f"s_bench{tag}{len(data.sessions):05d}"
        mine = data.groups_of(owner)
        group_id = rng.choice(mine) if mine and rng.random() < 0.8 else None
        data.sessions[session_id] = (owner, group_id)
        for _ in range(min(rng.randint(10, 70), beads - len(data.beads))):
            data.beads.append(data.plan_bead(rng, owner, session_id, group_id))
    # RELATED_TO: from a bead to one its creator can see, mostly within the same group (locality).
    pools = {ai: data.visible_to(ai) for ai in identities}
    by_group: dict[str, list[int]] = {g: [] for g in data.groups}
    for i, b in enumerate(data.beads):
        if b.group_id is not None:
            by_group[b.group_id].append(i)
    seen: set[tuple[int, int]] = set()
    target = round(related_per_bead * len(data.beads))
    attempts = 0
    while len(data.related_to) < target and attempts < target * 4:
        attempts += 1
        i = rng.randrange(len(data.beads))
        source = data.beads[i]
        local = by_group.get(source.group_id or "", [])
        candidates = local if local and rng.random() < 0.6 else pools[source.creator]
        j = rng.choice(candidates)
        target_bead = data.beads[j]
        if j == i or (i, j) in seen or (j, i) in seen:
            continue
        if candidates is local and not _sees(data, source.creator, target_bead):
            continue
        seen.add((i, j))
        data.related_to.append((i, j))
    return data


def _sees(data: Dataset, ai_id: str, bead: BeadPlan) -> bool:
    if bead.visibility == "global":
        return True
    if bead.visibility == "private":
        return bead.creator == ai_id
    return bead.group_id is not None and ai_id in data.members(bead.group_id)


# --- instrumentation -------------------------------------------------------------------------


class SizeTap:
    """Wraps a connection's ``request`` to record the byte size of the last request and reply."""

    def __init__(self, nc: NATS) -> None:
        self.last_request = 0
        self.last_reply = 0
        original = nc.request

        async def request(
            subject: str,
            payload: bytes = b"",
            timeout: float = 0.5,  # noqa: ASYNC109 - mirrors NATS.request
            old_style: bool = False,
            headers: dict[str, Any] | None = None,
        ) -> Msg:
            self.last_request = len(payload)
            msg = await original(subject, payload, timeout=timeout, old_style=old_style, headers=headers)
            self.last_reply = len(msg.data)
            return msg

        nc.request = request  # type: ignore[method-assign]


PROBE_BUCKETS = {
    "graph": "FalkorDB calls: round trip + result parsing in the hub",
    "graph_rt": "FalkorDB round trips alone (the redis command)",
    "falkordb": "FalkorDB's own reported execution time",
    "embed": "the embedder (thread hand-off included)",
    "vectors": "Redis vector-set calls (VADD, VSIM, ...)",
}


def _falkordb_exec_ms(result: Any) -> float:
    """FalkorDB's reported execution time (the client's own accessor fails on byte-string stats)."""
    if isinstance(getattr(result, "exec_ms", None), float):  # GraphStore.values' rows
        return float(result.exec_ms)
    for stat in getattr(result, "_raw_stats", None) or []:
        text = stat.decode() if isinstance(stat, bytes) else str(stat)
        if "internal execution time" in text:
            with contextlib.suppress(ValueError, IndexError):
                return float(text.split(": ")[1].split(" ")[0])
    return 0.0


_MISSING = object()


class HubProbe:
    """Per request, the time the in-process hub spends in FalkorDB, the embedder and the vector sets.

    Instance attributes shadow the methods of the hub's store objects; the hub's code is unchanged
    and :meth:`detach` restores it. Only meaningful with one request in flight.
    """

    def __init__(self) -> None:
        self.ns: dict[str, float] = dict.fromkeys(PROBE_BUCKETS, 0.0)
        self.queries = 0
        self._wrapped: list[tuple[Any, str, Any]] = []

    def wrap(self, obj: Any, name: str, bucket: str, count: bool = False) -> None:
        original = getattr(obj, name, None)
        if original is None or not callable(original):
            return

        async def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter_ns()
            result = await original(*args, **kwargs)
            self.ns[bucket] += time.perf_counter_ns() - t0
            if count:
                self.queries += 1
                self.ns["falkordb"] += _falkordb_exec_ms(result) * 1e6
            return result

        own = vars(obj).get(name, _MISSING) if hasattr(obj, "__dict__") else _MISSING
        setattr(obj, name, timed)
        self._wrapped.append((obj, name, own))

    @classmethod
    def attach(cls, ctx: Any) -> HubProbe:
        probe = cls()
        store = getattr(ctx, "graph", None)
        graph = getattr(store, "graph", None)
        if graph is not None:
            probe.wrap(graph, "_query", "graph", count=True)
            probe.wrap(store, "values", "graph", count=True)
            probe.wrap(graph, "execute_command", "graph_rt")
        embedder = getattr(ctx, "embedder", None)
        if embedder is not None:
            probe.wrap(embedder, "embed", "embed")
        vectors = getattr(ctx, "vectors", None)
        if vectors is not None:
            for name in ("add", "search", "remove", "set_attributes", "vector"):
                probe.wrap(vectors, name, "vectors")
        return probe

    def reset(self) -> None:
        self.ns = dict.fromkeys(PROBE_BUCKETS, 0.0)
        self.queries = 0

    def detach(self) -> None:
        """Put back what was wrapped: an attribute the object held itself (the FalkorDB client binds
        ``execute_command`` per instance) is restored, a method of its class shows through again."""
        for obj, name, own in reversed(self._wrapped):
            if own is _MISSING:
                with contextlib.suppress(AttributeError):
                    delattr(obj, name)
            else:
                setattr(obj, name, own)
        self._wrapped.clear()


class GcWatch:
    """Records the Python garbage collector's pauses (client and in-process hub share them)."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float]] = []
        self._t0 = 0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter_ns()
        else:
            self.pauses.append((info.get("generation", -1), (time.perf_counter_ns() - self._t0) / 1e6))

    def __enter__(self) -> GcWatch:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)


# --- the workload ----------------------------------------------------------------------------


@dataclass
class Workload:
    """Everything an operation factory may use."""

    config: BenchConfig
    data: Dataset
    rng: Random
    clients: dict[str, RecallClient]
    caller: str
    tap: SizeTap
    bead_ids: dict[int, str]
    """Plan index -> bead id, for the beads ingested."""
    visible: list[str]
    """Bead ids the caller may see."""
    queries: list[str]
    nats_url: str
    cleanup: contextlib.AsyncExitStack
    get_sizes: tuple[int, int] = (0, 0)
    redis_url: str | None = None
    embedder: Any = None
    """The in-process hub's embedder (None with an external hub): timed alone for the ingest floor."""

    @property
    def client(self) -> RecallClient:
        return self.clients[self.caller]


@dataclass(frozen=True)
class LatencyOp:
    name: str
    op: str
    description: str
    make: Factory
    target_ms: float | None = None
    unit: str = ""


async def _make_create(w: Workload) -> SampleFn:
    mine: list[str | None] = [s for s, (owner, _) in w.data.sessions.items() if owner == w.caller] or [None]
    rng = Random(w.config.seed + 1)
    plans = []
    for _ in range(w.config.samples + w.config.warmup):  # planned ahead: only the call is timed
        session = rng.choice(mine)
        group = w.data.sessions[session][1] if session is not None else None
        plans.append(w.data.plan_bead(rng, w.caller, session, group))

    async def create(i: int) -> int:
        plan = plans[i % len(plans)]
        await w.client.create_bead(plan.title, plan.content, **plan.fields())
        return 1

    return create


async def _make_create_then_find(w: Workload) -> SampleFn:
    """A new bead, then at once a vector search for its own title: what a writer that reads its own write
    pays (with ``--create-settle background`` the search waits for the handed-off embedding)."""
    rng = Random(w.config.seed + 11)

    async def create_then_find(i: int) -> int:
        title = f"{w.data.text(w.data.draw_words(rng, 6))} {secrets.token_hex(4)}"
        bead = await w.client.create_bead(title, "")
        hits = (await w.client.search_beads(title, mode="vector", limit=5)).hits
        return int(any(h.bead.bead_id == bead.bead_id for h in hits))

    return create_then_find


async def _make_get(w: Workload) -> SampleFn:
    rng = Random(w.config.seed + 2)

    async def get(i: int) -> int:
        await w.client.get_bead(rng.choice(w.visible))
        return 1

    return get


def _searching(**options: Any) -> Factory:
    """A search factory: the bench's queries, limit 20, with these request options."""

    async def make(w: Workload) -> SampleFn:
        async def search(i: int) -> int:
            result = await w.client.search_beads(w.queries[i % len(w.queries)], limit=20, **options)
            return len(result.hits)

        return search

    return make


async def _make_traverse(w: Workload) -> SampleFn:
    rng = Random(w.config.seed + 3)

    async def traverse(i: int) -> int:
        graph = await w.client.traverse_graph(rng.choice(w.visible), max_depth=3, limit=200)
        return len(graph.nodes)

    return traverse


async def _make_nats_floor(w: Workload) -> SampleFn:
    """A plain nats-py echo responder (no micro) on its own connection, like the hub's; the request
    goes over the caller's own connection, with the median size of a real get_bead request and reply."""
    request_size, reply_size = w.get_sizes
    responder = await nats.connect(w.nats_url, name="recall-bench-floor")
    w.cleanup.push_async_callback(responder.drain)
    body = b"x" * reply_size
    subject = request_subject(w.caller, "bench_floor")

    async def echo(msg: Msg) -> None:
        await msg.respond(body)

    await responder.subscribe(subject, cb=echo)
    await responder.flush()
    payload = b"x" * request_size
    nc = w.client.nc

    async def floor(i: int) -> int:
        await nc.request(subject, payload, timeout=w.config.timeout)
        return 1

    return floor


async def _make_find_similar(w: Workload) -> SampleFn:
    rng = Random(w.config.seed + 4)

    async def similar(i: int) -> int:
        result = await w.client.find_similar(rng.choice(w.visible), threshold=0.0, limit=10)
        return len(result.hits)

    return similar


async def _make_why(w: Workload) -> SampleFn:
    async def why(i: int) -> int:
        result = await w.client.why(w.queries[i % len(w.queries)], hops=2)
        return len(result.graph.nodes)

    return why


async def _make_vsim_floor(w: Workload) -> SampleFn:
    """A bare VSIM (k=20) straight to Redis on the largest vector set the caller may read, with real
    query embeddings: what the hybrid search's vector list costs at the store, nothing else."""
    import numpy as np
    import redis.asyncio

    from recall_hub.embedders import EmbedderConfig, make_embedder
    from recall_hub.store.keys import Keys

    client = redis.asyncio.Redis.from_url(w.redis_url or "redis://127.0.0.1:6379")
    w.cleanup.push_async_callback(client.aclose)
    groups = [g.group_id for g in await w.client.list_groups()]
    scopes = ("global", f"private:{w.caller}", *(f"group:{g}" for g in groups))
    best, size = "", -1
    async for raw in client.scan_iter(match=Keys.vector_sets_pattern(w.config.graph_name or "*")):
        key = raw.decode()
        if Keys.scope_of_vector_set(key) in scopes and (n := int(await client.execute_command("VCARD", key))) > size:  # type: ignore[no-untyped-call]
            best, size = key, n
    embedder = make_embedder(EmbedderConfig(kind=w.config.embedder or "local"))
    try:
        vectors = await embedder.embed_queries(list(dict.fromkeys(w.queries))[:100])
    finally:
        await embedder.aclose()
    blobs = [np.asarray(v, dtype=np.float32).tobytes() for v in vectors]

    async def vsim(i: int) -> int:
        reply = await client.execute_command("VSIM", best, "FP32", blobs[i % len(blobs)], "COUNT", 20)  # type: ignore[no-untyped-call]
        return len(reply)

    return vsim


FLOORS: list[LatencyOp] = [
    LatencyOp(
        "floor: NATS echo",
        "-",
        "bare request/reply through the same nats-server, get-sized payloads",
        _make_nats_floor,
    ),
    LatencyOp(
        "floor: bare VSIM",
        "-",
        "VSIM k=20 straight to Redis on the caller's largest vector set, real query embeddings",
        _make_vsim_floor,
        unit="hits",
    ),
]
"""The first entry is the reference of every ratio."""

LATENCY_OPS: list[LatencyOp] = [
    LatencyOp("create", "create_bead", "a new bead in one of the caller's sessions", _make_create, 100.0),
    LatencyOp(
        "create, then find it",
        "create_bead",
        "a new private bead, then a vector search for its title (read your own write)",
        _make_create_then_find,
        None,
        "found",
    ),
    LatencyOp("get", "get_bead", "a random bead the caller may see", _make_get, 10.0),
    LatencyOp(
        "search keyword",
        "search_beads",
        "1-3 vocabulary words, mode keyword, limit 20",
        _searching(mode="keyword"),
        500.0,
        "hits",
    ),
    LatencyOp(
        "search hybrid",
        "search_beads",
        "the same queries, default request (hybrid, priors), limit 20",
        _searching(),
        500.0,
        "hits",
    ),
    LatencyOp(
        "find_similar",
        "find_similar",
        "a random visible bead, threshold 0, limit 10",
        _make_find_similar,
        None,
        "hits",
    ),
    LatencyOp(
        "why (2 hops)",
        "why",
        "the same queries, 3 seeds, 2 hops, limit 50",
        _make_why,
        None,
        "nodes",
    ),
    LatencyOp(
        "traverse depth 3",
        "traverse_graph",
        "from a random visible bead, both directions, limit 200",
        _make_traverse,
        200.0,
        "nodes",
    ),
]
"""Timed one request at a time. Later: hybrid search, find_similar, why, at 10k and 100k."""


# --- running ---------------------------------------------------------------------------------


async def _connect(url: str, ai_id: str) -> NATS:
    return await nats.connect(
        url, name=f"recall-bench:{ai_id}", inbox_prefix=inbox_prefix(ai_id).encode(), max_reconnect_attempts=3
    )


async def _pool(
    count: int,
    concurrency: int,
    call: Callable[[int], Awaitable[None]],
    progress: ProgressFn | None,
    label: str,
) -> Throughput:
    """Run ``call(0..count-1)`` with ``concurrency`` in flight; the per-request latencies too."""
    indexes = iter(range(count))
    latencies: list[float] = []
    errors = 0
    done = 0
    step = max(1, count // 10)

    async def worker() -> None:
        nonlocal errors, done
        for i in indexes:
            t0 = time.perf_counter_ns()
            try:
                await call(i)
            except Exception as exc:
                errors += 1
                if errors <= 5:
                    log.warning("%s #%d failed: %s: %s", label, i, type(exc).__name__, exc)
                continue
            latencies.append((time.perf_counter_ns() - t0) / 1e6)
            done += 1
            if progress is not None and done % step == 0:
                progress(f"{label}: {done}/{count}")

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, count)))))
    seconds = time.perf_counter() - start
    return Throughput(label, count - errors, seconds, errors, latencies)


async def _ingest(
    w: Workload, progress: ProgressFn | None
) -> list[Throughput]:
    data, config = w.data, w.config
    for group_id, (ops, agents) in data.groups.items():
        await w.clients[ops].create_group(f"bench group {group_id}", group_id=group_id)
        for agent in agents:
            await w.clients[ops].add_member(group_id, agent)
    # Every identity writes at once, each session in its own order: round-robin over the sessions in
    # a shuffled order, so two beads of one session are never in flight together and the hub's
    # automatic FOLLOWS_FROM chains follow the planned order.
    runs: dict[str | int, list[int]] = {}
    for i, plan in enumerate(data.beads):
        runs.setdefault(plan.session_id if plan.session_id is not None else i, []).append(i)
    queues = list(runs.values())
    Random(config.seed + 4).shuffle(queues)
    order = [q[k] for k in range(max(map(len, queues), default=0)) for q in queues if k < len(q)]

    # Each identity sends its beads in batches (create_beads), in plan order, so its sessions keep
    # their order; identities write at once, up to the configured concurrency.
    by_creator: dict[str, list[int]] = {}
    for i in order:
        by_creator.setdefault(data.beads[i].creator, []).append(i)
    batches = [
        (creator, indexes[k : k + INGEST_BATCH])
        for creator, indexes in by_creator.items()
        for k in range(0, len(indexes), INGEST_BATCH)
    ]
    locks = {creator: asyncio.Lock() for creator in by_creator}
    errors = 0

    async def create(k: int) -> None:
        nonlocal errors
        creator, indexes = batches[k]
        async with locks[creator]:  # one batch of an identity at a time: its order is kept
            items = await w.clients[creator].create_beads(
                [CreateBead(title=data.beads[i].title, content=data.beads[i].content, **data.beads[i].fields())
                 for i in indexes],
                batch_size=INGEST_BATCH,
            )
        for i, item in zip(indexes, items, strict=True):
            if item.bead_id is not None:
                w.bead_ids[i] = item.bead_id
            else:
                errors += 1

    embedder_alone = await _embedder_alone(w, [f"{p.title}\n{p.content}" for p in data.beads])
    # A batch is many requests' worth of work: a few at a time keep the hub busy without queueing.
    batched = await _pool(len(batches), min(config.concurrency, INGEST_BATCHES_IN_FLIGHT), create, progress,
                          "ingest beads")
    beads = Throughput(
        f"beads (create_beads, batches of {INGEST_BATCH})", len(w.bead_ids), batched.seconds, errors,
        batched.latencies_ms,
    )
    # FOLLOWS_FROM is the hub's own automatic link on create; the bench adds the RELATED_TO edges.
    edges = [(a, b) for a, b in data.related_to if a in w.bead_ids and b in w.bead_ids]

    async def link(k: int) -> None:
        a, b = edges[k]
        strength = round(0.3 + 0.7 * ((a * 7919 + b) % 100) / 100, 2)
        await w.clients[data.beads[a].creator].add_relationship(
            w.bead_ids[a], w.bead_ids[b], "RELATED_TO", strength=strength
        )

    links = await _pool(len(edges), config.concurrency, link, progress, "ingest edges")
    links.name = "edges (add_relationship, RELATED_TO)"
    return [t for t in (embedder_alone, beads, links) if t is not None]


LONG_BEADS = 100
LONG_WORDS = 1200
"""The long-content corpus: beads of this many words (a document section, a long answer, a log), each
embedded in several chunks (docs/retrieval.md, "Long content")."""
LONG_BATCH = 8


async def _ingest_long(w: Workload, progress: ProgressFn | None) -> list[Throughput]:
    """Long beads written by the caller (``create_beads``), counted in chunks, beside the embedder alone on the
    same chunks: the floor of long-content ingest."""
    rng = Random(w.config.seed + 11)
    beads = [
        CreateBead(title=f"long note {n}: {w.data.text(w.data.draw_words(rng, 4))}",
                   content=w.data.text(w.data.draw_words(rng, LONG_WORDS)))
        for n in range(LONG_BEADS)
    ]
    window = w.embedder.window_tokens if w.embedder is not None else None
    chunks = [text for bead in beads for text in bead_chunks(bead.model_dump(), window)]
    alone = None
    if w.embedder is not None:
        started = time.perf_counter()
        for k in range(0, len(chunks), 32):
            await w.embedder.embed(chunks[k : k + 32])
        alone = Throughput(
            f"embedder alone on their chunks ({window} tokens each)", len(chunks), time.perf_counter() - started, 0, []
        )
    started = time.perf_counter()
    errors = 0
    for k in range(0, len(beads), LONG_BATCH):
        items = await w.client.create_beads(beads[k : k + LONG_BATCH], batch_size=LONG_BATCH)
        errors += sum(1 for item in items if item.bead_id is None)
        if progress is not None:
            progress(f"ingest long beads: {min(k + LONG_BATCH, len(beads))}/{len(beads)}")
    long = Throughput(
        f"long beads ({LONG_WORDS} words, {len(chunks) / len(beads):.1f} chunks each; counted in chunks)",
        len(chunks), time.perf_counter() - started, errors, [],
    )
    return [t for t in (alone, long) if t is not None]


INGEST_BATCH = 64
"""Beads per create_beads request when the bench ingests."""
INGEST_BATCHES_IN_FLIGHT = 3


async def _embedder_alone(w: Workload, texts: list[str]) -> Throughput | None:
    """The in-process hub's embedder on the beads' texts, batched, nothing else: the floor of ingest."""
    if w.embedder is None or not texts:
        return None
    sample = texts[: min(len(texts), 512)]
    latencies = []
    start = time.perf_counter()
    for k in range(0, len(sample), 32):
        t0 = time.perf_counter_ns()
        await w.embedder.embed(sample[k : k + 32])
        latencies.append((time.perf_counter_ns() - t0) / 1e6)
    seconds = time.perf_counter() - start
    return Throughput("embedder alone (batches of 32, same texts)", len(sample), seconds, 0, latencies)


async def _publish_events(w: Workload, progress: ProgressFn | None) -> tuple[Throughput, list[str]]:
    """``session.continued`` events through JetStream, each acknowledged once stored: the path the
    JetStream sync policy is on (``--durability``)."""
    sessions = list(w.data.sessions.items())
    count = min(w.config.samples, 1000) if sessions else 0
    event_ids = [f"bench{secrets.token_hex(4)}{k}" for k in range(count)]

    async def publish(k: int) -> None:
        session_id, (owner, _) = sessions[k % len(sessions)]
        await w.clients[owner].events.session_continued(session_id, event_id=event_ids[k])

    result = await _pool(count, w.config.concurrency, publish, progress, "ingest events")
    result.name = "events (session.continued, JetStream publish)"
    return result, event_ids


async def _measure(
    w: Workload, specs: list[LatencyOp], probe: HubProbe | None, progress: ProgressFn | None
) -> list[OpResult]:
    config = w.config
    results = [
        OpResult(s.name, s.op, s.description, [], target_ms=s.target_ms, result_unit=s.unit) for s in specs
    ]
    fns = [await s.make(w) for s in specs]
    sizes: list[list[tuple[int, int, int]]] = [[] for _ in specs]
    for fn, spec in zip(fns, specs, strict=True):
        for i in range(config.warmup):
            try:
                await fn(-1 - i)
            except Exception as exc:
                log.warning("%s warm-up failed: %s: %s", spec.name, type(exc).__name__, exc)
    rounds = max(1, min(config.rounds, config.samples))
    counter = [0] * len(specs)
    for r in range(rounds):
        share = config.samples // rounds + (1 if r < config.samples % rounds else 0)
        for k, (fn, spec) in enumerate(zip(fns, specs, strict=True)):
            res = results[k]
            for _ in range(share):
                i = counter[k]
                counter[k] += 1
                if probe is not None:
                    probe.reset()
                t0 = time.perf_counter_ns()
                try:
                    size = await fn(i)
                except Exception as exc:
                    res.errors += 1
                    if res.errors <= 5:
                        log.warning("%s sample %d failed: %s: %s", spec.name, i, type(exc).__name__, exc)
                    continue
                res.samples_ms.append((time.perf_counter_ns() - t0) / 1e6)
                sizes[k].append((w.tap.last_request, w.tap.last_reply, size))
                if probe is not None and probe.queries:
                    for bucket, ns in probe.ns.items():
                        res.hub_ms.setdefault(bucket, []).append(ns / 1e6)
                    res.graph_queries += probe.queries
        if progress is not None:
            progress(f"latency round {r + 1}/{rounds} done")
    for res, got in zip(results, sizes, strict=True):
        if got:
            res.request_bytes = _median_int([g[0] for g in got])
            res.reply_bytes = _median_int([g[1] for g in got])
            res.result_size = sum(g[2] for g in got) / len(got)
        if res.hub_ms:
            res.graph_queries /= len(res.hub_ms["graph"])
    return results


async def _get_sizes(w: Workload) -> tuple[int, int]:
    """Median request and reply bytes of real get_bead calls by the caller."""
    rng = Random(w.config.seed + 6)
    requests: list[int] = []
    replies: list[int] = []
    for _ in range(50):
        await w.client.get_bead(rng.choice(w.visible))
        requests.append(w.tap.last_request)
        replies.append(w.tap.last_reply)
    return _median_int(requests), _median_int(replies)


async def run_bench(config: BenchConfig, progress: ProgressFn | None = None) -> BenchReport:
    """Build the data, ingest it, time every operation and the floor; tear down what it started."""
    started_at = datetime.now(UTC)
    t_start = time.perf_counter()
    load_start = _load_average()
    code = await asyncio.to_thread(_code_version)  # at the start: the code this run imported
    tag = secrets.token_hex(3)
    graph_name = config.graph_name or f"bench_{tag}"
    loads = [load_start]

    def say(message: str) -> None:
        loads.append(_load_average())
        if progress is not None:
            progress(message)

    async with contextlib.AsyncExitStack() as cleanup:
        nats_url, falkordb_url, redis_url, setup = config.nats_url, config.falkordb_url, config.redis_url, ""
        if nats_url is None and falkordb_url is None and redis_url is None:
            if config.data_dir is not None:
                data_dir = config.data_dir
            else:
                tmp = tempfile.TemporaryDirectory(prefix="recall-bench-")
                cleanup.callback(tmp.cleanup)
                data_dir = Path(tmp.name)
            say(f"starting the embedded stack in {data_dir}")
            stack = EmbeddedStack(data_dir, **DURABILITY[config.durability])
            await asyncio.to_thread(stack.start)
            cleanup.push_async_callback(asyncio.to_thread, stack.stop)
            nats_url, falkordb_url, redis_url = stack.nats_url, stack.redis_url, stack.redis_url
            setup = (
                "embedded stack (nats-server + redis-server/FalkorDB from their wheels, loopback); durability "
                f"{config.durability}: Redis appendfsync {stack.redis_appendfsync}, "
                f"JetStream sync {stack.jetstream_sync}"
            )
        else:
            setup = "external servers"
            if nats_url is None or (config.in_process_hub and falkordb_url is None):
                raise ValueError("give nats_url (and falkordb_url for an in-process hub), or no URL at all")
            falkordb_url = falkordb_url or redis_url
            redis_url = redis_url or falkordb_url
        probe: HubProbe | None = None
        if config.in_process_hub:
            assert falkordb_url is not None and redis_url is not None
            settings = HubSettings(
                nats_url=nats_url, falkordb_url=falkordb_url, redis_url=redis_url, graph_name=graph_name
            )
            if config.embedder is not None:
                settings.embedder = settings.embedder.model_copy(update={"kind": config.embedder})
            settings.create_settle = config.create_settle  # type: ignore[assignment]
            service = await cleanup.enter_async_context(running_hub(settings))
            if config.graph_name is None and config.nats_url is not None:
                cleanup.push_async_callback(_delete_graph, falkordb_url, graph_name)
            probe = HubProbe.attach(service.ctx)
            cleanup.callback(probe.detach)
            setup += f"; hub in-process (same process and event loop as the client), graph {graph_name}"
            setup += f"; embedder {settings.embedder.kind}"
        else:
            setup += "; external hub"

        say(f"planning {config.beads} beads (seed {config.seed})")
        data = await asyncio.to_thread(build_dataset, config.beads, config.seed, tag, config.related_per_bead)
        clients: dict[str, RecallClient] = {}
        caller = data.agents[0]
        tap: SizeTap | None = None
        for ai in data.identities:
            nc = await _connect(nats_url, ai)
            cleanup.push_async_callback(nc.drain)
            if ai == caller:
                tap = SizeTap(nc)
            clients[ai] = RecallClient(ai, nats_url, nc=nc, timeout=config.timeout, retries=0)
        assert tap is not None
        rng = Random(config.seed + 8)
        queries = [
            data.text(data.draw_words(rng, rng.choice((1, 1, 2, 2, 3)))) for _ in range(config.samples)
        ]
        w = Workload(config, data, rng, clients, caller, tap, {}, [], queries, nats_url, cleanup)
        w.redis_url = redis_url
        w.embedder = service.ctx.embedder if config.in_process_hub else None

        ingest = await _ingest(w, say)
        ingest += await _ingest_long(w, say)
        events, event_ids = await _publish_events(w, say)
        ingest.append(events)
        if config.in_process_hub:
            for event_id in event_ids:  # applied before latency is timed, so the consumer is idle then
                await service.events.wait_for(event_id, within=300)
        edge_counts = await _edge_counts(falkordb_url, graph_name) if config.in_process_hub else None
        visible_plans = data.visible_to(caller)
        w.visible = [w.bead_ids[i] for i in visible_plans if i in w.bead_ids]
        if not w.visible:
            raise RuntimeError("no bead was ingested; see the log")
        w.get_sizes = await _get_sizes(w)
        summary = _summary(data, caller, len(visible_plans), queries, edge_counts)
        # The plan of every bead is no longer needed: dropped, so the bench's own objects do not
        # lengthen the garbage collections of the hub it shares a process with.
        data.beads = []
        w.bead_ids.clear()
        gc.collect()
        say("timing operations one request at a time")
        with GcWatch() as gc_watch:
            measured = await _measure(w, FLOORS + LATENCY_OPS, probe, say)
        machine = await _machine(clients[caller].nc, falkordb_url)
        machine.code = code
        machine.load = (*loads, _load_average())
    return BenchReport(
        config=config,
        machine=machine,
        dataset=summary,
        setup=setup,
        started_at=started_at,
        duration_s=time.perf_counter() - t_start,
        ingest=ingest,
        floor=measured[0],
        ops=measured[1:],
        command=config.command(),
        gc_pauses=gc_watch.pauses,
    )


async def _edge_counts(url: str | None, graph_name: str) -> dict[str, int] | None:
    """Edges between beads by type, as stored; hub-made ones (auto-links) counted apart."""
    if url is None:
        return None
    from recall_hub.store.beads import BeadStore
    from recall_hub.store.graph import GraphStore

    try:
        graph = GraphStore(url, graph_name)  # connects at once
    except Exception as exc:
        log.warning("could not count the edges of %s: %s", graph_name, exc)
        return None
    try:
        return await BeadStore(graph).system_edge_counts()
    except Exception as exc:
        log.warning("could not count the edges of %s: %s", graph_name, exc)
        return None
    finally:
        await graph.aclose()


async def _delete_graph(url: str, graph_name: str) -> None:
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(url)
    try:
        await client.execute_command("GRAPH.DELETE", graph_name)  # type: ignore[no-untyped-call]
    except Exception as exc:
        log.warning("could not delete bench graph %s: %s", graph_name, exc)
    finally:
        await client.aclose()


def _summary(
    data: Dataset, caller: str, caller_visible: int, queries: list[str], edges: dict[str, int] | None
) -> DatasetSummary:
    visibility: dict[str, int] = {}
    for b in data.beads:
        visibility[b.visibility] = visibility.get(b.visibility, 0) + 1
    sizes = sorted(len(b.title.encode()) + len(b.content.encode()) for b in data.beads)
    rank = {word: r for r, word in enumerate(data.vocabulary)}
    postings: dict[int, set[int]] = {}
    for i, b in enumerate(data.beads):
        for word in b.words:
            postings.setdefault(word, set()).add(i)
    tokens = _token_counts([f"{b.title}\n{b.content}" for b in data.beads[:1000]])
    matches = []
    for q in queries[:300]:
        hit: set[int] = set()
        for term in q.split():
            hit |= postings.get(rank[term], set())
        matches.append(len(hit))
    return DatasetSummary(
        identities=len(data.identities),
        groups=len(data.groups),
        sessions=len(data.sessions),
        beads=len(data.beads),
        edges=edges or {"RELATED_TO (planned)": len(data.related_to)},
        visibility=visibility,
        bead_bytes=(sizes[0], sizes[len(sizes) // 2], sizes[-1]) if sizes else (0, 0, 0),
        vocabulary=len(data.vocabulary),
        tokens=(_median_int(tokens), round(percentile([float(t) for t in tokens], 90))) if tokens else (0, 0),
        caller=caller,
        caller_visible=caller_visible,
        query_matches=(_median_int(matches), round(percentile([float(m) for m in matches], 90))),
    )


def _code_version() -> str:
    version = f"nexus-recall {_version('nexus-recall')}"
    here = Path(__file__).parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, timeout=10,
        )
        if commit.returncode != 0:
            return version
        status = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return version
    changed = [line[3:] for line in status.stdout.splitlines() if line.strip()]
    dirty = f" + uncommitted changes in {', '.join(changed)}" if changed else ""
    return f"{version}, commit {commit.stdout.strip()}{dirty}"


def _load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return math.nan


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _memory_gb() -> float:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 / 1024
    return math.nan


LIBRARIES = ("nats-py", "FalkorDB", "redis", "hiredis", "pydantic", "onnxruntime")
"""Client-side packages that shape the figures (hiredis: redis-py's C reply parser, when installed)."""


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


async def _machine(nc: NATS, falkordb_url: str | None) -> MachineInfo:
    server_info: dict[str, Any] = getattr(nc, "_server_info", None) or {}
    redis_version = falkordb_version = "?"
    if falkordb_url is not None:
        import redis.asyncio

        client = redis.asyncio.Redis.from_url(falkordb_url, decode_responses=True)
        try:
            info = await client.info("server")
            redis_version = str(info.get("redis_version", "?"))
            for module in await client.execute_command("MODULE", "LIST"):  # type: ignore[no-untyped-call]
                if isinstance(module, list):
                    module = dict(zip(module[::2], module[1::2], strict=False))
                entry: dict[str, Any] = module
                if str(entry.get("name", "")).lower() == "graph":
                    ver = int(entry.get("ver", 0))
                    falkordb_version = f"{ver // 10000}.{ver // 100 % 100}.{ver % 100}"
        except Exception as exc:
            log.warning("could not read server versions: %s", exc)
        finally:
            await client.aclose()
    return MachineInfo(
        cores=os.cpu_count() or 0,
        cpu_model=_cpu_model(),
        memory_gb=_memory_gb(),
        os=platform.platform(),
        python=f"{platform.python_implementation()} {platform.python_version()}",
        nats_server=str(server_info.get("version", "?")),
        redis=redis_version,
        falkordb=falkordb_version,
        libraries={p: _version(p) for p in LIBRARIES},
    )


# --- output ----------------------------------------------------------------------------------


def _ms(value: float) -> str:
    if math.isnan(value):
        return "-"
    return f"{value:.2f}" if value < 100 else f"{value:.0f}"


def _header_lines(report: BenchReport) -> list[str]:
    m, d, c = report.machine, report.dataset, report.config
    vis = ", ".join(
        f"{d.visibility.get(v, 0) * 100 / max(1, d.beads):.0f}% {v}" for v in ("group", "private", "global")
    )
    libs = ", ".join(f"{k} {v}" for k, v in m.libraries.items())
    edges = ", ".join(f"{n:,} {t}" for t, n in sorted(d.edges.items()))
    floor = report.floor
    load = ""
    if m.load:
        start, peak, end = m.load[0], max(m.load), m.load[-1]
        load = f"; load average {start:.2f} at the start, {peak:.2f} at most, {end:.2f} at the end"
    return [
        f"Machine: {m.cores} cores, {m.cpu_model}, {m.memory_gb:.0f} GB RAM, {m.os}{load}",
        f"Code: {getattr(m, 'code', '?')}",
        f"Software: {m.python}; nats-server {m.nats_server}; redis {m.redis} + FalkorDB {m.falkordb}; {libs}",
        f"Setup: {report.setup}",
        f"Data: {d.beads:,} beads by {d.identities} identities in {d.groups} groups and "
        f"{d.sessions} sessions ({vis}); {sum(d.edges.values()):,} edges ({edges}); "
        f"title+content {d.bead_bytes[0]}-{d.bead_bytes[2]} B "
        f"(median {d.bead_bytes[1]} B, {d.tokens[0]} embedder tokens, p90 {d.tokens[1]}) "
        f"from a {d.vocabulary:,}-word Zipf vocabulary; seed {c.seed}",
        f"Queries: 1-3 words; median {d.query_matches[0]:,} beads of the store match one (p90 "
        f"{d.query_matches[1]:,}); the caller {d.caller} may see {d.caller_visible:,} beads",
        f"Ingest: beads in create_beads batches of {INGEST_BATCH}, {min(c.concurrency, INGEST_BATCHES_IN_FLIGHT)} "
        f"batches in flight (one identity's batches in order); edges and events {c.concurrency} requests in "
        "flight; one connection per identity; 'embedder alone' = the hub's embedder on the first 512 bead texts, "
        "batches of 32, before ingest",
        f"Latency: one request at a time, {c.samples} samples per operation in {c.rounds} interleaved rounds "
        f"after {c.warmup} warm-up calls; time.perf_counter_ns around the client call",
        f"Floor: bare NATS request/reply to a plain nats-py echo responder through the same nats-server and "
        f"client connection; request {floor.request_bytes} B, reply {floor.reply_bytes} B "
        "(the median get_bead request and reply)",
        _gc_line(getattr(report, "gc_pauses", [])),
        f"Run: {report.started_at:%Y-%m-%d %H:%M} UTC, {report.duration_s:.0f} s; command: {report.command}",
    ]


def _gc_line(pauses: list[tuple[int, float]]) -> str:
    if not pauses:
        return "Python GC while timing: no collection recorded"
    oldest = sum(1 for gen, _ in pauses if gen == 2)
    longest = max(ms for _, ms in pauses)
    total = sum(ms for _, ms in pauses)
    return (
        f"Python GC while timing (client and hub share it): {len(pauses)} collections ({oldest} of "
        f"generation 2), longest {longest:.1f} ms, {total:.0f} ms in all"
    )


_LATENCY_COLUMNS = [
    "operation", "n", "p50 ms", "p95 ms", "p99 ms", "x floor", "req B", "reply B", "result", "seed target",
    "errors",
]
_BREAKDOWN_COLUMNS = [
    "operation", "mean ms", "queries", "graph ms", "falkordb exec", "client parse", "embed ms", "vectors ms",
    "rest ms",
]
_INGEST_COLUMNS = ["ingest", "count", "seconds", "per second", "p50 ms", "p99 ms", "errors"]


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _latency_rows(report: BenchReport) -> list[list[str]]:
    base = report.floor.p(50)
    rows = []
    for r in [report.floor, *report.ops]:
        target = "-"
        if r.target_ms is not None:
            verdict = "no samples" if not r.n else "met" if r.p(99) < r.target_ms else "MISSED"
            target = f"< {r.target_ms:.0f} ms: {verdict}"
        result = f"{r.result_size:.1f} {r.result_unit}".strip() if r.result_unit else "-"
        rows.append([
            r.name,
            str(r.n),
            _ms(r.p(50)),
            _ms(r.p(95)),
            _ms(r.p(99)),
            f"{r.p(50) / base:.1f}x" if base > 0 and r.n else "-",
            str(r.request_bytes),
            str(r.reply_bytes),
            result,
            target,
            str(r.errors),
        ])
    return rows


def _breakdown_rows(report: BenchReport) -> list[list[str]]:
    """Means per request, so the parts add up: rest = NATS, (de)serialisation and the event loop."""
    rows = []
    for r in report.ops:
        if not r.hub_ms:
            continue
        total = _mean(r.samples_ms)
        graph, rt = _mean(r.hub_ms["graph"]), _mean(r.hub_ms["graph_rt"])
        embed, vectors = _mean(r.hub_ms["embed"]), _mean(r.hub_ms["vectors"])
        rows.append([
            r.name,
            _ms(total),
            f"{r.graph_queries:.1f}",
            _ms(graph),
            _ms(_mean(r.hub_ms["falkordb"])),
            _ms(graph - rt),
            _ms(embed),
            _ms(vectors),
            _ms(total - graph - embed - vectors),
        ])
    return rows


def _ingest_rows(report: BenchReport) -> list[list[str]]:
    return [
        [
            t.name,
            f"{t.count:,}",
            f"{t.seconds:.1f}",
            f"{t.per_second:,.0f}/s",
            _ms(percentile(t.latencies_ms, 50)),
            _ms(percentile(t.latencies_ms, 99)),
            str(t.errors),
        ]
        for t in report.ingest
    ]


def _table(columns: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(columns[i]), *(len(row[i]) for row in rows)) for i in range(len(columns))]

    def line(cells: list[str]) -> str:
        pairs = enumerate(zip(cells, widths, strict=True))
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in pairs)

    return [line(columns), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def ingest_ratio(report: BenchReport) -> str | None:
    """Bead ingest against the embedder alone, on the same texts in the same run."""
    alone = next((t for t in report.ingest if t.name.startswith("embedder alone")), None)
    beads = next((t for t in report.ingest if t.name.startswith("beads")), None)
    if alone is None or beads is None or not alone.per_second > 0:
        return None
    line = (f"ingest {beads.per_second:,.0f} beads/s = {beads.per_second / alone.per_second:.0%} of the "
            f"embedder alone ({alone.per_second:,.0f} texts/s)")
    long = next((t for t in report.ingest if t.name.startswith("long beads")), None)
    chunks = next((t for t in report.ingest if t.name.startswith("embedder alone on their chunks")), None)
    if long is not None and chunks is not None and chunks.per_second > 0:
        line += (f"; long content {long.per_second:,.0f} chunks/s = {long.per_second / chunks.per_second:.0%} of the "
                 f"embedder alone on the same chunks ({chunks.per_second:,.0f} chunks/s)")
    return line


def to_json(report: BenchReport) -> dict[str, Any]:
    """The report as data (``recall bench --json``): the same figures as the tables, in ms."""

    def op(r: OpResult) -> dict[str, Any]:
        base = report.floor.p(50)
        return {
            "name": r.name, "op": r.op, "n": r.n, "p50_ms": r.p(50), "p95_ms": r.p(95), "p99_ms": r.p(99),
            "x_floor": r.p(50) / base if base > 0 and r.n else None, "request_bytes": r.request_bytes,
            "reply_bytes": r.reply_bytes, "errors": r.errors, "target_ms": r.target_ms,
        }

    return {
        "beads": report.dataset.beads,
        "started_at": report.started_at.isoformat(),
        "duration_s": report.duration_s,
        "command": report.command,
        "setup": report.setup,
        "method": _header_lines(report),
        "ingest": [
            {"name": t.name, "count": t.count, "seconds": t.seconds, "per_second": t.per_second,
             "p50_ms": percentile(t.latencies_ms, 50), "p99_ms": percentile(t.latencies_ms, 99), "errors": t.errors}
            for t in report.ingest
        ],
        "ingest_vs_embedder": ingest_ratio(report),
        "floor": op(report.floor),
        "ops": [op(r) for r in report.ops],
    }


def render(report: BenchReport) -> str:
    """The report as plain text: the method, then the ingest and latency tables."""
    out = [f"Nexus Recall benchmark at {report.dataset.beads:,} beads", ""]
    out += _header_lines(report)
    out += ["", *_table(_INGEST_COLUMNS, _ingest_rows(report))]
    ratio = ingest_ratio(report)
    out += [ratio] if ratio else []
    out += ["", *_table(_LATENCY_COLUMNS, _latency_rows(report))]
    out += ["", "x floor = the operation's p50 / the floor's p50; seed target is judged on p99."]
    breakdown = _breakdown_rows(report)
    if breakdown:
        out += ["", "Where the time goes (in-process hub; means per request):"]
        out += ["", *_table(_BREAKDOWN_COLUMNS, breakdown), "", *BREAKDOWN_NOTE]
    return "\n".join(out)


BREAKDOWN_NOTE = [
    "graph = FalkorDB calls as the hub sees them (round trip + parsing), of which falkordb exec is the",
    "server's own execution time and client parse the reading of the reply; rest = the total minus",
    "graph, embed and vectors: NATS, pydantic (de)serialisation, visibility/ranking code and the event loop.",
]


def _md_table(columns: list[str], rows: list[list[str]]) -> list[str]:
    align = ["---"] + ["---:"] * (len(columns) - 1)
    return [
        "| " + " | ".join(columns) + " |",
        "| " + " | ".join(align) + " |",
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


def markdown(report: BenchReport) -> str:
    """The report as a Markdown section for docs/benchmarks.md."""
    out = [f"### {report.dataset.beads:,} beads, {report.started_at:%Y-%m-%d}", ""]
    out += [f"- {line}" for line in _header_lines(report)]
    out += ["", *_md_table(_INGEST_COLUMNS, _ingest_rows(report))]
    ratio = ingest_ratio(report)
    out += ["", ratio] if ratio else []
    out += ["", *_md_table(_LATENCY_COLUMNS, _latency_rows(report))]
    out += ["", "x floor = the operation's p50 / the floor's p50; seed target is judged on p99."]
    breakdown = _breakdown_rows(report)
    if breakdown:
        out += ["", "Where the time goes (in-process hub; means per request):"]
        out += ["", *_md_table(_BREAKDOWN_COLUMNS, breakdown), "", " ".join(BREAKDOWN_NOTE)]
    return "\n".join(out) + "\n"
