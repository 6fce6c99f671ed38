"""Keyword retrieval on tantivy: one in-memory index per hub process, derived from the graph.

The index holds each bead's words (title, content, tags; English stemming) with the fields that
decide visibility and the search filters, and, in a field of its own weighed down by ``context_weight``
(``RECALL_KEYWORD_CONTEXT_WEIGHT``), the words of the beads it ``FOLLOWS_FROM`` that everyone who sees
it may see: an answer is found by the words of the question it follows ("Where do you get your
ideas?" / "From books"). When a bead changes, the beads that follow it are indexed again too.

Each word is indexed with the bead's scope (``global``, ``group:<id>``, ``private:<ai id>``) in front of
it, ``<scope>|<word>``: a query asks for each of the caller's words in each of the caller's scopes (and
the filters, if any), all inside one tantivy query, so top-k is taken among beads the caller may see
and only their postings are walked — with the scope as a separate condition, every posting of a word
in any scope was walked and intersected with the scopes (5x the time at 100k beads). Every bead
returned is still read from the graph, visibility checked in that query
(:mod:`recall_hub.retrieval.search`).

Scores are Okapi BM25 with the term statistics *of the caller's scopes*: a word's document frequency
there is the sum of its scoped terms' (read from the term dictionary, like the scopes' sizes: no
counting at query time), and the query weighs each word by the ratio of that in-scope IDF to the whole
index's IDF, so that tantivy's own BM25 finds the best candidates in one query with the in-scope IDF.
Those candidates are then scored again (:mod:`recall_hub.store.bm25`) with the same IDF and each text
normalised against a fixed reference length instead of the whole index's mean length. So a score tells
nothing about beads the caller cannot see (a whole-index IDF would say whether some invisible bead holds a
word, a whole-index mean how long everyone else's texts are). Like tantivy's and Lucene's own statistics,
the term dictionary counts a replaced or deleted document until its segment merges. With filters (tags,
type, ...) the in-scope figures are counted by queries instead, once per commit.

The index is kept current from :mod:`recall_hub.store.index_log`: :meth:`KeywordIndex.catch_up`
applies every entry after the last applied one (reading each named bead's current state), commits,
and reloads the searcher. A hub runs :meth:`KeywordIndex.follow` in the background; a request that
carries the sequence of its caller's last write first catches up to it.

Why this module is long (~700 lines): it is one object with one invariant — the index, its documents, the
per-process rows beside them (ids, words, session edges) and the searcher that reads them must change
together, under one commit — so building documents, applying the log, searching with in-scope statistics and
screening stay with the state they share; the BM25 formula (:mod:`recall_hub.store.bm25`) and the log itself
(:mod:`recall_hub.store.index_log`) live apart.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any, cast

import tantivy
from recall_schemas import BeadFilters, BeadStatus, BeadType, Provenance
from recall_schemas.requests import index_seq_key as seq_key

from recall_hub.store import bm25
from recall_hub.store.base_forms import base_forms
from recall_hub.store.beads import BeadStore
from recall_hub.store.bm25 import WordCounts
from recall_hub.store.conversation import ConversationOrder
from recall_hub.store.index_log import REBUILD, ZERO, IndexLog
from recall_hub.store.validity import OPEN_END, OPEN_START, validity_attributes
from recall_hub.store.vectors import scope_of
from recall_hub.timeutil import to_ms

log = logging.getLogger(__name__)

APPLY_PAGE = 1000
FOLLOW_DEBOUNCE_S = 0.1
"""The background follow commits this long after a write (gathering what follows it)..."""
COMMIT_INTERVAL_S = 0.5
"""...and, while writes keep coming, at most this often. Each commit is a new segment, and tantivy's merge
policy merges every segment under 10k documents as one layer, so each commit soon costs a merge of the
small segments: ~12 ms of a core per commit at 5k beads, ~2 ms at 100k; committing 0.1 s after every
write, writes at 40 a second kept a core busy merging. A request that must see a write sooner catches up
to it itself (:meth:`KeywordIndex.catch_up` with ``until``)."""
WRITER_HEAP = 32_000_000
SCOPE_COUNTS_MAX = 65_536
_RAW = ("bead_id", "scope", "bead_type", "status", "session_id", "created_by", "group_id", "tags")
_CODED: dict[str, list[str]] = {
    "bead_type": list(BeadType), "status": list(BeadStatus), "provenance": list(Provenance),
}
"""Enum fields kept as their position in the enum too, in columns (fast fields) read in one call per field."""
_DEFAULTS = {
    "bead_type": BeadType.NOTE.value, "status": BeadStatus.ACTIVE.value, "provenance": Provenance.AUTHORED.value,
}
_COLUMNS = ("importance", "created_at", "verified", "rejected", *(f"{name}_code" for name in _CODED))


SCOPED = "|"
"""Between a scope and a word in the indexed terms (``group:g_1|book``)."""


BASE_FORMS = True
"""Irregular forms ("bought", "drew", "children") indexed and searched as their base word (:mod:`base_forms`)."""


class _Analyzer:
    """tantivy's ``en_stem`` built by hand (simple tokenizer, long tokens dropped, lower case, English
    stemmer), then irregular forms as their base word: documents and queries are analysed here, in one way,
    and the words indexed as scoped terms."""

    def __init__(self) -> None:
        self._stem = (
            tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
            .filter(tantivy.Filter.remove_long(40))
            .filter(tantivy.Filter.lowercase())
            .filter(tantivy.Filter.stemmer("english"))
            .build()
        )
        self._base = base_forms(self._stem.analyze) if BASE_FORMS else {}

    def analyze(self, text: str) -> list[str]:
        base = self._base
        return [base.get(token, token) for token in self._stem.analyze(text)]


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("bead_id", stored=True, tokenizer_name="raw", index_option="basic")
    # Scoped words, already analysed, one term per word (so BM25 sees the text's own frequencies and lengths).
    builder.add_text_field("text", tokenizer_name="whitespace", index_option="freq")
    builder.add_text_field("context", tokenizer_name="whitespace", index_option="freq")
    builder.add_text_field("follows", tokenizer_name="raw", index_option="basic")
    builder.add_text_field("context_key", stored=True, tokenizer_name="raw", index_option="basic")
    for name in _RAW[1:]:
        builder.add_text_field(name, tokenizer_name="raw", index_option="basic")
    builder.add_integer_field("importance", indexed=True, fast=True)
    builder.add_integer_field("created_at", indexed=True, fast=True)
    for name in _COLUMNS[2:]:
        builder.add_integer_field(name, fast=True)
    builder.add_integer_field("valid_from", indexed=True)
    builder.add_integer_field("valid_to", indexed=True)
    builder.add_unsigned_field("row", fast=True)
    return builder.build()


class _Rows:
    """Each bead id's number in this process, held by its document in a column: the ids of a hundred hits
    come out of one column read instead of a hundred stored-document reads. With each bead's counted words
    (:class:`~recall_hub.store.bm25.WordCounts`), which rank the hits, and its scope with what screening reads of
    it: they change with the documents (a moment ahead of the searcher at most), and a rebuild starts them afresh."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self._of: dict[str, int] = {}
        self.words = WordCounts()
        self.screened: dict[str, tuple[Any, ...]] = {}
        """Each bead's scope and what screening reads of it (the arguments of :func:`_screened_props`), as its
        document holds them: a search with no filter but the caller's scopes screens its candidates here,
        without a query. A tuple, not a dict: a few hundred bytes a bead less."""
        self.order = ConversationOrder()
        """Each scope's beads in the order of their stamps: their conversation neighbours."""

    def screen(self, scopes: Sequence[str], ids: Sequence[str]) -> tuple[dict[str, dict[str, Any]], list[str]]:
        """:meth:`KeywordIndex.screen` without filters: of ``ids``, what screening reads of those in ``scopes``, and
        those without a document."""
        in_scopes, seen, unknown = set(scopes), {}, []
        for bead_id in ids:
            entry = self.screened.get(bead_id)
            if entry is None:
                unknown.append(bead_id)
            elif entry[0] in in_scopes:
                seen[bead_id] = _screened_props(*entry[1:])
        return seen, unknown

    def drop(self, bead_id: str) -> None:
        """A bead whose document is gone."""
        self.words.drop(bead_id)
        self.screened.pop(bead_id, None)
        self.order.remove(bead_id)

    def row(self, bead_id: str) -> int:
        found = self._of.get(bead_id)
        if found is None:
            found = self._of[bead_id] = len(self.ids)
            self.ids.append(bead_id)
        return found


class _Sessions:
    """Every ``FOLLOWS_FROM`` edge of the indexed beads, both ways: what hybrid search reads of the session
    structure around its candidates, without a graph query. Kept with the documents (a moment ahead of the
    searcher at most); a search screens every bead it reaches through it."""

    def __init__(self) -> None:
        self.earlier: dict[str, tuple[str, ...]] = {}
        self.later: dict[str, set[str]] = {}

    def set(self, bead_id: str, earlier: Sequence[str]) -> None:
        for before_id in self.earlier.pop(bead_id, ()):
            followers = self.later.get(before_id)
            if followers is not None:
                followers.discard(bead_id)
                if not followers:
                    del self.later[before_id]
        if earlier:
            self.earlier[bead_id] = tuple(earlier)
            for before_id in earlier:
                self.later.setdefault(before_id, set()).add(bead_id)

    def drop(self, bead_id: str) -> None:
        """A bead gone from the graph, with its edges both ways."""
        self.set(bead_id, ())
        for later in self.later.pop(bead_id, set()):
            self.earlier[later] = tuple(b for b in self.earlier.get(later, ()) if b != bead_id)
            if not self.earlier[later]:
                del self.earlier[later]

    def followers_of(self, bead_ids: Iterable[str]) -> frozenset[str]:
        """The beads that follow any of ``bead_ids``."""
        return frozenset(later for bead_id in bead_ids for later in self.later.get(bead_id, ()))

    def edges(self, ids: Sequence[str], around: Sequence[str]) -> list[tuple[str, str]]:
        """``(later, earlier)`` for every edge that joins two beads of ``ids`` or touches one of ``around`` (a
        subset of ``ids``) — the pairs :meth:`~recall_hub.store.beads.BeadStore.session_edges` gives, before
        visibility: the caller screens the beads outside ``ids``."""
        among, near = set(ids), set(around)
        found = [
            (bead_id, before_id)
            for bead_id in ids
            for before_id in self.earlier.get(bead_id, ())
            if before_id in among or bead_id in near or before_id in near
        ]
        found += [(later, bead_id) for bead_id in around for later in self.later.get(bead_id, ()) if later not in among]
        return found


class _View:
    """What one search reads, taken together: a commit replaces the whole view at once, so a search never
    mixes two commits."""

    def __init__(self, searcher: tantivy.Searcher, rows: _Rows) -> None:
        self.searcher = searcher
        self.rows = rows
        self.counts: dict[tuple[tuple[tuple[str, ...], str], str], int] = {}
        """Documents of a caller's scopes and filters holding a word, counted once per view."""

    def bead_ids(self, addresses: list[tantivy.DocAddress]) -> list[str]:
        ids = self.rows.ids  # every document of this in-memory index has its row: no None
        return [ids[row] for row in cast(list[int], self.searcher.fast_field_values("row", addresses))]

    def count(self, key: tuple[tuple[str, ...], str], token: str, query: Callable[[], tantivy.Query]) -> int:
        """How many documents match ``query()``: the documents of a caller's scopes and filters (``key``)
        holding ``token`` (all of them for ``""``). The query is built only when the count is not known yet."""
        counts = self.counts
        found = counts.get((key, token))
        if found is None:
            if len(counts) > SCOPE_COUNTS_MAX:
                counts.clear()
            found = counts[(key, token)] = _count(self.searcher, query())
        return found

    def screened(self, addresses: list[tantivy.DocAddress]) -> list[tuple[str, dict[str, Any]]]:
        """``(bead id, what screening reads)`` of the documents at ``addresses``, in their order."""
        if not addresses:
            return []
        column = {name: self.searcher.fast_field_values(name, addresses) for name in _COLUMNS}
        decoded = {name: [values[int(c or 0)] for c in column[f"{name}_code"]] for name, values in _CODED.items()}
        rows = self.rows.screened
        return [
            (bead_id, _screened_props(importance, created_at, provenance, status, bead_type, verified, rejected,
                                      *_dated_author(rows.get(bead_id))))
            for bead_id, importance, created_at, provenance, status, bead_type, verified, rejected in zip(
                self.bead_ids(addresses), column["importance"], column["created_at"], decoded["provenance"],
                decoded["status"], decoded["bead_type"], column["verified"], column["rejected"], strict=True,
            )
        ]


def _screened_props(
    importance: Any, created_at: Any, provenance: Any, status: Any, bead_type: Any, verified: Any, rejected: Any,
    *dated_author: Any,
) -> dict[str, Any]:
    """What screening reads of a bead (:meth:`KeywordIndex.screen`), from its document's columns and its row:
    with ``dated_author`` (its ``valid_from`` and author), those too."""
    props = {
        "importance": importance, "created_at": created_at, "provenance": provenance, "status": status,
        "bead_type": bead_type, "trust_verdicts": ["verified"] * int(verified or 0) + ["rejected"] * int(rejected or 0),
    }
    if dated_author:
        props["valid_from"], props["created_by"] = dated_author
    return props


def _dated_author(row: tuple[Any, ...] | None) -> tuple[Any, ...]:
    """The ``valid_from`` and author a bead's row holds; nothing for a bead without a row (the graph tells)."""
    return () if row is None else row[-2:]


def _coded_value(props: Mapping[str, Any], name: str) -> Any:
    """The member of the enum field ``name`` a document holds: the bead's, or the default for none or one unknown."""
    values, value = _CODED[name], props.get(name) or _DEFAULTS[name]
    return values[values.index(value if value in values else _DEFAULTS[name])]


def document_text(props: Mapping[str, Any]) -> str:
    """What a bead is found by: its title, its content and its tags."""
    parts = [str(props.get("title") or ""), str(props.get("content") or "")]
    parts.extend(str(t) for t in props.get("tags") or [])
    return "\n".join(p for p in parts if p)


class KeywordIndex:
    def __init__(self, beads: BeadStore, index_log: IndexLog, context_weight: float = 0.0) -> None:
        self.beads = beads
        self.context_weight = context_weight
        self.log = index_log
        self.schema = _schema()
        self._index = tantivy.Index(self.schema)
        # Searchers change only when _commit says so. Left unconfigured, the binding's reader made every
        # commit take ~11 ms and every reload ~100 ms (2 ms and 0.1 ms configured; tantivy 0.27, 10k docs).
        self._index.config_reader(reload_policy="Manual")
        self._analyzer = _Analyzer()
        self._writer = self._index.writer(heap_size=WRITER_HEAP, num_threads=1)
        self._view = _View(self._index.searcher(), _Rows())
        self._sessions = _Sessions()
        self._uncommitted_followers: dict[str, set[str]] = {}
        """Beads the documents added since the last commit follow -> those documents' beads."""
        self._uncommitted: set[str] = set()
        """Beads whose documents were replaced since the last commit."""
        self._lock = asyncio.Lock()
        self.applied = ZERO
        """The newest index-log entry this index reflects."""
        self._committed_at = 0.0
        self.commits = 0
        """Commits since this process started (each a new segment, soon merged: see COMMIT_INTERVAL_S)."""
        self.ready = False
        """True once built from the graph (:meth:`rebuild`)."""

    # --- maintenance ------------------------------------------------------------------------------

    async def rebuild(self, progress: Any = None) -> int:
        """Index every bead from the graph, then apply the log from where the build began."""
        async with self._lock:
            start = (await self.log.state()).last
            self._writer.delete_all_documents()
            done, after, rows, sessions = 0, "", _Rows(), _Sessions()
            try:
                total = await self.beads.system_count()
                while page := await self.beads.system_page(after, APPLY_PAGE):
                    ids = [str(p["bead_id"]) for p in page]
                    preceding = await self.beads.system_preceding(ids)
                    before = preceding.context
                    for bead_id, earlier in preceding.follows.items():
                        sessions.set(bead_id, earlier)
                    await asyncio.to_thread(
                        self._write, [(str(p["bead_id"]), p, before.get(str(p["bead_id"]), {})) for p in page], rows,
                    )
                    done += len(page)
                    after = str(page[-1]["bead_id"])
                    if progress is not None:
                        progress(done, total)
            except BaseException:
                # Not half a build left for the next commit to publish (numbered for a view never used).
                await asyncio.to_thread(self._writer.rollback)
                self._uncommitted_followers, self._uncommitted = {}, set()
                raise
            await self._commit(rows)
            self._sessions = sessions
            self.applied = start
            self.ready = True
        await self.catch_up()
        return done

    async def catch_up(self, until: str | None = None) -> None:
        """Apply the log up to ``until`` (everything there is, with None).

        Searches that each need their caller's last write wait here together: whoever holds the lock applies
        everything logged when it took it and commits once, and those queued behind it find their position
        applied as soon as they get the lock, without another read of the log."""
        if not self.ready:
            await self.rebuild()
            return
        if until is not None and seq_key(until) <= seq_key(self.applied):
            return
        async with self._lock:
            if until is not None and seq_key(until) <= seq_key(self.applied):
                return  # applied while this caller waited for the lock (by the follow or another search)
            state = await self.log.state()
            if seq_key(state.trimmed_through) > seq_key(self.applied):
                log.warning("keyword index fell behind the trimmed log (%s < %s): rebuilding",
                            self.applied, state.trimmed_through)
                self.ready = False
            else:
                await self._apply_through(state.last)
        if not self.ready:
            await self.rebuild()

    async def _apply_through(self, last: str) -> None:
        """Apply the log's entries up to ``last`` at least, then commit (under the lock)."""
        reached = self.applied
        while seq_key(reached) < seq_key(last) and (entries := await self.log.after(reached, APPLY_PAGE)):
            if any(bead_id == REBUILD for _, bead_id in entries):
                self.ready = False  # `recall reindex` asked every hub to start from the graph again
                return
            await self._apply({bead_id for _, bead_id in entries})
            reached = entries[-1][0]
        if reached != self.applied:
            await self._commit()
            self.applied = reached  # only now do searches see it

    async def follow(self, block_ms: int = 2000) -> None:
        """Keep applying the log as it grows (a hub's background task). ``block_ms`` stays below
        redis-py's default socket timeout (5 s), which a longer blocking read would trip."""
        while True:
            try:
                await self.catch_up()
                if await self.log.wait_after(self.applied, block_ms):
                    await asyncio.sleep(
                        max(FOLLOW_DEBOUNCE_S, self._committed_at + COMMIT_INTERVAL_S - time.monotonic())
                    )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("keyword index follow: %s; retrying", exc)
                await asyncio.sleep(1.0)

    async def load(self, beads: Sequence[Mapping[str, Any]]) -> None:
        """Add beads as given and commit, outside the log (measuring the index on its own)."""
        async with self._lock:
            for props in beads:
                self._writer.add_document(self._document(props))
            await self._commit()
            self.ready = True

    async def _apply(self, bead_ids: set[str]) -> None:
        # A bead that follows a changed one holds its words: read again too (the change may be a deletion,
        # a forget or a move out of its scope, after which those words must no longer find it), and indexed
        # again only if they changed: a replaced document still counts in tantivy's statistics until its
        # segment is merged, so needless replacements make scores drift from a freshly built index's. So is
        # one that follows it without holding its words (not in its scope): removed, the changed bead leaves
        # its follower following the one before it, whose words the follower may hold.
        followers = (self._followers_of(bead_ids) | self._sessions.followers_of(bead_ids)) - bead_ids
        ids = sorted(bead_ids | followers)
        current = {str(p["bead_id"]): p for p in await self.beads.system_many(ids)}
        preceding = await self.beads.system_preceding(ids)
        before, follows = preceding.context, preceding.follows
        for bead_id in ids:  # a follower's own link may have moved too (a bead removed from a session's middle)
            if bead_id in current:
                self._sessions.set(bead_id, follows.get(bead_id, []))
            else:
                self._sessions.drop(bead_id)
        writes: list[tuple[str, Mapping[str, Any] | None, Mapping[str, str]]] = []
        for bead_id in ids:
            if bead_id in followers and bead_id in current and bead_id not in self._uncommitted and (
                self._context_key_of(bead_id) == _context_key(before.get(bead_id, {}))
            ):
                continue
            props = current.get(bead_id)
            writes.append((bead_id, props, before.get(bead_id, {})))
            self._uncommitted.add(bead_id)
            if props is not None:
                for before_id in before.get(bead_id, {}):
                    self._uncommitted_followers.setdefault(before_id, set()).add(bead_id)
        await asyncio.to_thread(self._write, writes)

    def _write(
        self, writes: Sequence[tuple[str, Mapping[str, Any] | None, Mapping[str, str]]], rows: _Rows | None = None
    ) -> None:
        """Replace each bead's document (``(bead_id, props or None for gone, the words it follows)``); ``rows``:
        a rebuild's numbering (its index starts empty: nothing to replace). Run in a worker thread, under the
        index's lock: analysing a long bead's words takes milliseconds, which the event loop (and the bus it
        reads) would otherwise wait for."""
        for bead_id, props, before in writes:
            if rows is None:
                self._writer.delete_documents_by_term("bead_id", bead_id)
            if props is not None:
                self._writer.add_document(self._document(props, before, rows))
            else:
                (rows or self._view.rows).drop(bead_id)

    def _context_key_of(self, bead_id: str) -> str | None:
        """The key of the words a committed document holds from the beads it follows (None: not committed)."""
        searcher = self._view.searcher
        hits = searcher.search(tantivy.Query.term_query(self.schema, "bead_id", bead_id), limit=1).hits
        return str(searcher.doc(hits[0][1]).get_first("context_key") or "") if hits else None

    def _followers_of(self, bead_ids: set[str]) -> set[str]:
        """The beads whose documents hold words of ``bead_ids``: committed, or added since the last commit."""
        view = self._view
        query = _any_of(self.schema, "follows", sorted(bead_ids))
        found = {b for before_id in bead_ids for b in self._uncommitted_followers.get(before_id, ())}
        if count := _count(view.searcher, query):
            found.update(view.bead_ids([address for _, address in view.searcher.search(query, limit=count).hits]))
        return found

    async def _commit(self, rows: _Rows | None = None) -> None:
        """Commit and search the result; ``rows``: the numbering of a rebuild's documents, from now on."""
        await asyncio.to_thread(self._writer.commit)
        await asyncio.to_thread(self._index.reload)
        self._committed_at = time.monotonic()
        self.commits += 1
        self._view = _View(self._index.searcher(), rows or self._view.rows)
        self._uncommitted_followers = {}
        self._uncommitted = set()

    def _document(
        self, props: Mapping[str, Any], before: Mapping[str, str] | None = None, rows: _Rows | None = None
    ) -> tantivy.Document:
        """``before``: the beads it follows whose words it is also found by (id -> text); ``rows``: the
        numbering it joins (a rebuild's), else the current one."""
        rows = rows or self._view.rows
        doc = tantivy.Document()
        doc.add_text("bead_id", str(props["bead_id"]))
        doc.add_unsigned("row", rows.row(str(props["bead_id"])))
        scope = scope_of(props)
        words = self._analyzer.analyze(document_text(props))
        doc.add_text("text", " ".join(f"{scope}{SCOPED}{word}" for word in words))
        context: list[str] = []
        for before_id, text in (before or {}).items():
            doc.add_text("follows", before_id)
            before_words = self._analyzer.analyze(text)
            context += before_words
            doc.add_text("context", " ".join(f"{scope}{SCOPED}{word}" for word in before_words))
        rows.words.set(str(props["bead_id"]), words, context)
        doc.add_text("context_key", _context_key(before or {}))
        doc.add_text("scope", scope)
        for name in ("bead_type", "status", "session_id", "created_by", "group_id"):
            if props.get(name) is not None:
                doc.add_text(name, str(props[name]))
        for tag in props.get("tags") or []:
            doc.add_text("tags", str(tag))
        coded = {name: _coded_value(props, name) for name in _CODED}
        for name, value in coded.items():
            doc.add_integer(f"{name}_code", _CODED[name].index(value))
        importance, verdicts = props.get("importance"), list(props.get("trust_verdicts") or [])
        columns = {
            "importance": int(importance) if importance is not None else 5,
            "created_at": int(props.get("created_at") or 0),
            "verified": verdicts.count("verified"),
            "rejected": verdicts.count("rejected"),
        }
        for name, number in (columns | validity_attributes(props)).items():
            doc.add_integer(name, number)
        valid_from = None if props.get("valid_from") is None else int(props["valid_from"])
        author = sys.intern(str(props["created_by"])) if props.get("created_by") else None
        rows.screened[str(props["bead_id"])] = (
            sys.intern(scope), columns["importance"], columns["created_at"], coded["provenance"], coded["status"],
            coded["bead_type"], columns["verified"], columns["rejected"], valid_from, author,
        )
        rows.order.place(str(props["bead_id"]), scope, columns["created_at"], valid_from, author)
        return doc

    # --- search -----------------------------------------------------------------------------------

    def search(
        self, scopes: Sequence[str], terms: Sequence[str], filters: BeadFilters, limit: int
    ) -> list[tuple[str, float]]:
        """The ``limit`` best beads of ``scopes`` passing ``filters`` for the words ``terms``, with
        BM25 scores computed on the statistics of those scopes only (see the module docstring)."""
        return self.search_screened(scopes, terms, filters, limit)[0]

    def search_screened(
        self, scopes: Sequence[str], terms: Sequence[str], filters: BeadFilters, limit: int,
        within: tuple[int, int] | None = None,
    ) -> tuple[list[tuple[str, float]], dict[str, dict[str, Any]]]:
        """:meth:`search`, and what :meth:`screen` would say of the beads found (they passed its test).
        ``within``: only beads whose ``valid_from`` (else ``created_at``) lies in ``[start, end)``, scored as
        in the search without it (the statistics stay those of the scopes and filters)."""
        if not scopes or not terms:
            return [], {}
        view = self._view
        searcher = view.searcher
        narrowed = self._narrowing(filters)  # the filters beyond the scopes, if any
        if narrowed:  # counted by queries, kept per commit under these scopes and filters
            key = (tuple(scopes), filters.model_dump_json())
            in_scope = view.count(key, "", lambda: self._restriction(scopes, filters))
        else:  # each bead is in one scope: the scopes' sizes add up, read from the term dictionary
            in_scope = sum(searcher.doc_freq("scope", scope) for scope in scopes)
        if in_scope == 0:
            return [], {}
        everywhere = max(searcher.num_docs, 1)
        weighted = []
        idfs: dict[str, float] = {}
        for token in dict.fromkeys(t for term in terms for t in self._analyzer.analyze(term)):
            # (scoped term, its document frequency in the whole index) for each scope that holds the word
            scoped = [f"{scope}{SCOPED}{token}" for scope in scopes]
            found = [(t, df) for t in scoped if (df := searcher.doc_freq("text", t))]
            if not found:
                continue
            words = [tantivy.Query.term_query(self.schema, "text", t, index_option="freq") for t, _ in found]
            if narrowed:
                df_scope = view.count(key, token, partial(_all_of, [_any(words), *narrowed]))
            else:
                df_scope = sum(df for _, df in found)
            if df_scope == 0:
                continue
            # tantivy scores each scoped term with its own IDF in the whole index; the boost turns it into
            # the word's IDF in the caller's scopes.
            idf = _idf(in_scope, df_scope)
            idfs[token] = idf
            weighted += [
                (tantivy.Occur.Should, tantivy.Query.boost_query(word, idf / _idf(everywhere, df)))
                for word, (_, df) in zip(words, found, strict=True)
            ]
            if self.context_weight > 0:  # the same in-scope IDF, weighed down
                for t in scoped:
                    if df_context := searcher.doc_freq("context", t):
                        before = tantivy.Query.term_query(self.schema, "context", t, index_option="freq")
                        boost = self.context_weight * idf / _idf(everywhere, df_context)
                        weighted.append((tantivy.Occur.Should, tantivy.Query.boost_query(before, boost)))
        if not weighted:
            return [], {}
        unscored = [tantivy.Query.const_score_query(q, 0.0) for q in narrowed]
        if within is not None:
            unscored.append(tantivy.Query.const_score_query(self._dated(*within), 0.0))
        query = _all_of([tantivy.Query.boolean_query(weighted), *unscored])
        addresses = [address for _, address in searcher.search(
            query, limit=max(limit, bm25.RESCORE_DEPTH), count=False
        ).hits]
        ids = view.bead_ids(addresses)
        scores = view.rows.words.scores(ids, idfs, self.context_weight)
        # Two beads with the same words score the same up to tantivy's f32 rounding of their scopes' boosts:
        # five significant digits make them tie, and the bead id decides, whatever scopes they are in.
        rounded = [float(f"{score:.5g}") for score in scores]
        ranked = sorted(zip(ids, rounded, strict=True), key=lambda hit: (-hit[1], hit[0]))[:limit]
        return ranked, view.rows.screen(scopes, [bead_id for bead_id, _ in ranked])[0]

    def session_edges(self, ids: Sequence[str], around: Sequence[str]) -> list[tuple[str, str]]:
        """``(later, earlier)`` for every ``FOLLOWS_FROM`` edge that joins two beads of ``ids`` or touches one
        of ``around``, whoever may see its ends: the caller screens them."""
        return self._sessions.edges(ids, around)

    def conversation_edges(self, ids: Sequence[str], around: Sequence[str]) -> list[tuple[str, str]]:
        """``(later, earlier)`` for every pair of conversation neighbours (:mod:`~recall_hub.store.conversation`)
        that joins two beads of ``ids`` or touches one of ``around`` (a subset of ``ids``), as
        :meth:`session_edges` gives ``FOLLOWS_FROM`` edges: both ends are of one scope, and the caller screens the
        beads outside ``ids`` all the same."""
        order, among, near = self._view.rows.order, set(ids), set(around)
        found = []
        for bead_id in ids:
            before_id = order.neighbour(bead_id, -1)
            if before_id is not None and (before_id in among or bead_id in near or before_id in near):
                found.append((bead_id, before_id))
            if bead_id in near and (after_id := order.neighbour(bead_id, 1)) is not None and after_id not in among:
                found.append((after_id, bead_id))
        return found

    def screen(
        self, scopes: Sequence[str], ids: Sequence[str], filters: BeadFilters
    ) -> tuple[dict[str, dict[str, Any]], list[str]]:
        """Of ``ids``: those in ``scopes`` passing ``filters``, each with what ranking reads of it
        (importance, created_at, provenance, status, trust verdicts, bead type, valid_from, author) as
        :meth:`~recall_hub.store.beads.BeadStore.screen` gives it; and those the index does not hold at
        all (written a moment ago, not applied yet), which only the graph can screen. Without filters from the
        rows kept beside the documents (:meth:`_Rows.screen`), else by a query."""
        if not ids:
            return {}, []
        view = self._view
        narrowed = self._narrowing(filters)
        if not narrowed:  # the caller's scopes alone: the rows say, no query needed
            return view.rows.screen(scopes, ids)
        searcher = view.searcher
        wanted = _any_of(self.schema, "bead_id", ids)
        seen: dict[str, dict[str, Any]] = {}
        if scopes:
            restricted = _all_of([wanted, _any_of(self.schema, "scope", scopes), *narrowed])
            hits = searcher.search(restricted, limit=len(ids), count=False).hits
            seen = dict(view.screened([address for _, address in hits]))
        rest = [bead_id for bead_id in ids if bead_id not in seen]
        if not rest:
            return seen, []
        held = set(view.bead_ids([
            address for _, address in searcher.search(
                _any_of(self.schema, "bead_id", rest), limit=len(rest), count=False
            ).hits
        ]))
        return seen, [bead_id for bead_id in rest if bead_id not in held]

    def dated_counts(self, scopes: Sequence[str], start: int, end: int) -> dict[str, tuple[int, int]]:
        """Of each of ``scopes``: how many beads the index holds whose ``valid_from`` (else ``created_at``) lies in
        ``[start, end)``, and how many it holds in all (a moment behind the graph at most)."""
        searcher, dated = self._view.searcher, self._dated(start, end)
        return {
            scope: (_count(searcher, _all_of([tantivy.Query.term_query(self.schema, "scope", scope), dated])),
                    searcher.doc_freq("scope", scope))
            for scope in scopes
        }

    def _dated(self, start: int, end: int) -> tantivy.Query:
        """Beads whose ``valid_from`` (else ``created_at``) lies in ``[start, end)``."""
        schema, integer = self.schema, tantivy.FieldType.Integer
        return _any([
            tantivy.Query.range_query(schema, "valid_from", integer, start, end, include_upper=False),
            _all_of([
                tantivy.Query.range_query(schema, "valid_from", integer, OPEN_START, OPEN_START),
                tantivy.Query.range_query(schema, "created_at", integer, start, end, include_upper=False),
            ]),
        ])

    def _restriction(self, scopes: Sequence[str], filters: BeadFilters) -> tantivy.Query:
        return _all_of([_any_of(self.schema, "scope", scopes), *self._narrowing(filters)])

    def _narrowing(self, filters: BeadFilters) -> list[tantivy.Query]:
        """One query per condition of ``filters`` (none when the filters are empty)."""
        schema = self.schema
        must: list[tantivy.Query] = []
        for tag in filters.tags:
            must.append(tantivy.Query.term_query(schema, "tags", tag))
        if filters.bead_types:
            must.append(_any_of(schema, "bead_type", [t.value for t in filters.bead_types]))
        for name, value in (
            ("session_id", filters.session_id), ("group_id", filters.group_id), ("created_by", filters.created_by),
            ("status", filters.status.value if filters.status else None),
        ):
            if value is not None:
                must.append(tantivy.Query.term_query(schema, name, value))
        if filters.min_importance is not None or filters.max_importance is not None:
            must.append(tantivy.Query.range_query(
                schema, "importance", tantivy.FieldType.Integer,
                filters.min_importance if filters.min_importance is not None else -(2**62),
                filters.max_importance if filters.max_importance is not None else 2**62,
            ))
        if filters.created_after is not None or filters.created_before is not None:
            must.append(tantivy.Query.range_query(
                schema, "created_at", tantivy.FieldType.Integer,
                to_ms(filters.created_after) if filters.created_after is not None else -(2**62),
                to_ms(filters.created_before) if filters.created_before is not None else 2**62,
                include_upper=filters.created_before is None,
            ))
        if filters.valid_at is not None:  # unset ends are stored open (store/validity.py)
            at = to_ms(filters.valid_at)
            must.append(tantivy.Query.range_query(schema, "valid_from", tantivy.FieldType.Integer, OPEN_START, at))
            must.append(tantivy.Query.range_query(schema, "valid_to", tantivy.FieldType.Integer, at, OPEN_END))
        return must

    def size(self) -> int:
        return int(self._view.searcher.num_docs)


def _context_key(before: Mapping[str, str]) -> str:
    return hashlib.blake2b(json.dumps(sorted(before.items())).encode(), digest_size=12).hexdigest() if before else ""


def _any_of(schema: tantivy.Schema, field: str, values: Sequence[str]) -> tantivy.Query:
    """Documents whose ``field`` is one of ``values``. A disjunction of term queries: tantivy's term-set
    query walks the field's whole term dictionary, several times slower for a few ids among many."""
    return _any([tantivy.Query.term_query(schema, field, value) for value in values])


def _idf(total: int, df: int) -> float:
    return math.log(1.0 + (total - df + 0.5) / (df + 0.5))


def _all_of(queries: Sequence[tantivy.Query]) -> tantivy.Query:
    return _combined(tantivy.Occur.Must, queries)


def _any(queries: Sequence[tantivy.Query]) -> tantivy.Query:
    return _combined(tantivy.Occur.Should, queries)


def _combined(occur: tantivy.Occur, queries: Sequence[tantivy.Query]) -> tantivy.Query:
    return queries[0] if len(queries) == 1 else tantivy.Query.boolean_query([(occur, q) for q in queries])


def _count(searcher: tantivy.Searcher, query: tantivy.Query) -> int:
    return int(searcher.search(query, limit=1, count=True).count)  # type: ignore[attr-defined]
