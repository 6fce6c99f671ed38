"""The bench's data: a synthetic memory (identities, groups, sessions, beads and their RELATED_TO edges)
deterministic for a seed, the long-content corpus, and the summary of the data a report prints.

Bead text is drawn from a Zipf-Mandelbrot law over a vocabulary of English words (those of the embedding
model's WordPiece vocabulary), domain words and snake_case identifiers, so word frequencies, keyword
matches and embedder input lengths look like those of real notes.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from random import Random
from typing import Any

from recall_schemas import CreateBead

from recall_hub.bench.stats import median_int, percentile
from recall_hub.embedders.local import default_tokenizer_path

# --- words -----------------------------------------------------------------------------------

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


def english_words() -> list[str]:
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
    english = [w for w in english_words()[150:8000] if w not in _REAL_WORDS]
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


# --- the memory ------------------------------------------------------------------------------


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


def bench_queries(data: Dataset, seed: int, samples: int) -> list[str]:
    """The bus suite's search queries: 1–3 words drawn as the corpus draws them (the same for a seed)."""
    rng = Random(seed + 8)
    return [data.text(data.draw_words(rng, rng.choice((1, 1, 2, 2, 3)))) for _ in range(samples)]


def _sees(data: Dataset, ai_id: str, bead: BeadPlan) -> bool:
    if bead.visibility == "global":
        return True
    if bead.visibility == "private":
        return bead.creator == ai_id
    return bead.group_id is not None and ai_id in data.members(bead.group_id)


# --- long content ----------------------------------------------------------------------------

LONG_BEADS = 100
LONG_WORDS = 1200
"""The long-content corpus: beads of this many words (a document section, a long answer, a log), each
embedded in several chunks (docs/retrieval.md, "Long content")."""


def long_beads(data: Dataset, seed: int) -> list[CreateBead]:
    """The :data:`LONG_BEADS` long beads, their words drawn from ``data``'s vocabulary law."""
    rng = Random(seed)
    return [
        CreateBead(title=f"long note {n}: {data.text(data.draw_words(rng, 4))}",
                   content=data.text(data.draw_words(rng, LONG_WORDS)))
        for n in range(LONG_BEADS)
    ]


# --- summary ---------------------------------------------------------------------------------


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


def summarize(
    data: Dataset, caller: str, caller_visible: int, queries: list[str], edges: dict[str, int] | None
) -> DatasetSummary:
    """What a report says of the data (read before the plans are dropped); ``edges`` as counted in the graph,
    None when it could not be read."""
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
        tokens=(median_int(tokens), round(percentile([float(t) for t in tokens], 90))) if tokens else (0, 0),
        caller=caller,
        caller_visible=caller_visible,
        query_matches=(median_int(matches), round(percentile([float(m) for m in matches], 90))),
    )
