"""Embeddings in Redis 8 vector sets, one set per visibility scope and per model.

Scopes: ``global``, ``group:<group_id>``, ``private:<ai_id>``. A search queries only the sets the
caller may read, so visibility is decided before top-k and a crowd of invisible near-duplicates
can never push a visible bead out of the results. The model id is part of every key: vectors of
two models never meet in one set.

Quantisation Q8, the default HNSW graph (M=16) and a search EF of :data:`SEARCH_EF` (or k, when more are
asked) are what ``recall bench --suite vectors`` measured: recall@10 0.999 against exact search on real MiniLM
vectors, at half the time of EF 200 (measured 2026-12-01).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import redis.exceptions
from recall_schemas import BeadFilters, Unavailable
from redis.asyncio import Redis

from recall_hub.store.keys import Keys
from recall_hub.store.replica import REPLICA_READ_FAILURES, ReplicaRoute
from recall_hub.store.sign_cache import SignCache
from recall_hub.store.validity import OPEN_START
from recall_hub.store.vector_removal import log_mending, queue_removal
from recall_hub.timeutil import to_ms

log = logging.getLogger(__name__)
_T = TypeVar("_T")

ATTRIBUTE_FIELDS = (
    "bead_type", "importance", "created_at", "status", "tags", "created_by", "session_id", "group_id",
    "valid_from", "valid_to",
)


def scope_name(visibility: str, group_id: str | None, creator: str) -> str:
    """The one spelling of a visibility scope (a vector set, a keyword-index prefix): ``global``,
    ``group:<group id>`` or ``private:<creator>``. With empty ids, the prefix every scope of that visibility has."""
    if visibility == "global":
        return "global"
    if visibility == "group":
        return f"group:{group_id}"
    return f"private:{creator}"


def scope_of(props: Mapping[str, Any]) -> str:
    """The vector-set scope of a bead, from its stored properties."""
    return scope_name(props["visibility"], props.get("group_id"), props["created_by"])


def caller_scopes(caller: str, groups: Iterable[str]) -> list[str]:
    """Every scope ``caller`` may read, given its groups."""
    return [scope_name("global", None, caller), scope_name("private", None, caller),
            *(scope_name("group", g, caller) for g in groups)]


def _quote(value: str) -> str:
    # Every value reaching a FILTER expression is an id, tag or enum validated by the schemas;
    # json.dumps still quotes and escapes it, so no caller text can change the expression.
    return json.dumps(value)


def filter_expression(filters: BeadFilters, within: tuple[int, int] | None = None) -> str | None:
    """The vector-set ``FILTER`` for ``filters``; ``within``: only beads whose ``valid_from`` (else ``created_at``)
    lies in ``[start, end)`` (epoch ms)."""
    parts: list[str] = [f"{_quote(t)} in .tags" for t in filters.tags]
    if filters.bead_types:
        parts.append(f".bead_type in [{', '.join(_quote(t.value) for t in filters.bead_types)}]")
    for field in ("session_id", "group_id", "created_by"):
        value = getattr(filters, field)
        if value is not None:
            parts.append(f".{field} == {_quote(value)}")
    if filters.status is not None:
        parts.append(f".status == {_quote(filters.status.value)}")
    if filters.min_importance is not None:
        parts.append(f".importance >= {int(filters.min_importance)}")
    if filters.max_importance is not None:
        parts.append(f".importance <= {int(filters.max_importance)}")
    if filters.created_after is not None:
        parts.append(f".created_at >= {to_ms(filters.created_after)}")
    if filters.created_before is not None:
        parts.append(f".created_at < {to_ms(filters.created_before)}")
    if filters.valid_at is not None:  # unset ends are stored open (store/validity.py)
        parts.append(f".valid_from <= {to_ms(filters.valid_at)} and .valid_to >= {to_ms(filters.valid_at)}")
    if within is not None:
        start, end = within
        parts.append(
            f"((.valid_from >= {start} and .valid_from < {end}) or "
            f"(.valid_from == {OPEN_START} and .created_at >= {start} and .created_at < {end}))"
        )
    return " and ".join(parts) if parts else None


CHUNK_SEPARATOR = "#"
"""A bead's first vector is named by its id, its n-th chunk's by ``<bead_id>#<n>`` (ids hold no ``#``)."""
CHUNK_DISCOUNT = 0.1
"""A later chunk of a bead counts only this much (cosine) below its similarity: it wins where it is clearly the
nearest — a fact deep in a long bead — and a long bead's many windows do not crowd out short beads that say the
same thing first. On LongMemEval_S (120 questions) with chunks: turn Recall@10 0.726 without it, 0.758 with it
(0.762 before chunking), session recall_any@1 0.900 / 0.917 (0.908); LoCoMo's short turns have no later chunks
(docs/retrieval.md, "Long content")."""
SENTENCE_DISCOUNT = 0.025
"""A sentence's vector of a short bead (:class:`BeadVectors`) counts this much below its similarity: the sentence
that answers wins over a bead that says the same more loosely, not over one that says it as plainly. Chosen by
cross-validation over both dev sets among 0, 0.025, 0.05 and 0.1 (docs/retrieval.md, "Sentences")."""
SENTENCE_MARK = "s"
"""A sentence's vector is named ``<bead_id>#s<n>``, a window's ``<bead_id>#<n>``: a search tells them apart by name."""
SENTENCE_BUILD_EF = 50
"""How widely a sentence's vector looks for its neighbours as it is added (VADD's EF; 200 for the others): each
costs ~1 ms at 200 on the test machine, a bead may have several, and a sentence's links matter less than its
bead's own vector's."""
ASKED_PER_BEAD = 1.5
"""Vectors a search asks of each set per bead it wants (rounded up): a bead may have several (chunks,
sentences). With :data:`SEARCH_EF`, chosen by cross-validation over both quality sets among 50, 64, 75 and
100 vectors asked with that EF (docs/benchmarks.md, "At 100k beads"): 75 moved no measure beyond its
interval, and a hybrid search's four VSIMs cost mostly their EF."""
SEARCH_EF = 75
"""How widely a search looks in each set (VSIM's EF; at least the number of vectors asked)."""
MAIN_THREAD_UP_TO = 15_000
"""A search's VSIMs without a filter run on Redis's main thread (``NOTHREAD``) while the sets it reads hold this
many vectors or fewer together: Redis hands a threaded VSIM to a thread of its own and back, which costs more than
searching a few thousand vectors. Above it they go to Redis's threads, which search the sets side by side: the four
VSIMs of the bench's searches (``scripts/vsim_threads.py``), threads against main thread, p50 ms: 1.46 / 1.39 at
11,536 vectors, 2.08 / 2.52 at 32,079, 2.23 / 2.83 at 47,433, 2.46 / 3.09 at 92,597, 3.90 / 4.87 at 306,186
(docs/benchmarks.md). A filtered VSIM, which may read far more of its set (``FILTER-EF``), keeps its thread so
that it never holds Redis up."""
SET_SIZES_KEPT_S = 30.0
"""How long a set's size (``VCARD``, read beside a search's VSIMs) is taken as it was read."""
CHUNKS_ATTRIBUTE = "chunks"
"""The first vector's attributes say how many the bead has, so each write and removal reaches all of them."""


SENTENCES_ATTRIBUTE = "sentences"
"""Set on the first vector of a bead whose later vectors are its sentences (not windows)."""


def element(bead_id: str, chunk: int, sentences: bool = False) -> str:
    if chunk == 0:
        return bead_id
    return f"{bead_id}{CHUNK_SEPARATOR}{SENTENCE_MARK if sentences else ''}{chunk}"


def bead_of(name: str) -> str:
    return name.split(CHUNK_SEPARATOR, 1)[0]


@dataclass(frozen=True)
class BeadVectors:
    """A bead's vectors: the first its whole text, then its windows (a long bead) or its sentences
    (``sentences``: a short bead that says several things)."""

    rows: np.ndarray
    sentences: bool = False
    tokens: np.ndarray | None = None
    """The outputs of the word tokens of its first text (late interaction), kept as their signs; None: none."""


@dataclass(frozen=True)
class _Stored:
    """What a set holds of a bead: how many vectors, and whether the later ones are sentences."""

    count: int
    sentences: bool = False

    def names(self, bead_id: str) -> list[str]:
        """The names of these vectors of ``bead_id``."""
        return [element(bead_id, chunk, self.sentences) for chunk in range(self.count)]


@dataclass(frozen=True)
class VectorHit:
    bead_id: str
    similarity: float
    """Cosine similarity in [-1, 1]."""


class VectorStore:
    def __init__(
        self, redis: Redis, keys: Keys, model_id: str, quantization: str = "Q8", replica: ReplicaRoute | None = None,
        signs_cache_size: int = 0,
    ) -> None:
        self.redis = redis
        self.replica = replica
        self.model_id = model_id
        self.quantization = quantization
        self.keys = keys
        self._sizes: dict[str, tuple[int, float]] = {}
        """Each set's size (vectors) as a search last read it, and when (``time.monotonic``)."""
        self.signs = SignCache(signs_cache_size)

    def key(self, scope: str) -> str:
        return self.keys.vectors(self.model_id, scope)

    def signs_key(self, scope: str) -> str:
        return self.keys.token_signs(self.model_id, scope)

    def all_keys_pattern(self, any_model: bool = False) -> str:
        return f"{self.keys.vector_root(None if any_model else self.model_id)}:*"

    def _note_write(self) -> None:
        if self.replica is not None:
            self.replica.note_write()

    async def _read(self, run: Callable[[Redis], Awaitable[_T]]) -> _T:
        """``run(client)`` on the replica when it serves this read (on the primary if that fails, and the
        replica stops serving), else on the primary."""
        replica = self.replica
        if replica is not None and replica.serves_this_read():
            try:
                return await run(replica.replica)
            except (Unavailable, *REPLICA_READ_FAILURES) as exc:
                replica.read_failed(exc.__cause__ or exc)
        return await run(self.redis)

    async def add(
        self, bead_id: str, scope: str, vectors: np.ndarray | BeadVectors, attributes: dict[str, Any]
    ) -> None:
        """Store the bead's vectors (one row per chunk, the first its whole text) in ``scope``, replacing any it
        had there; :meth:`add_many` for one bead."""
        await self.add_many([(bead_id, scope, vectors, attributes)])

    async def add_many(self, items: list[tuple[str, str, np.ndarray | BeadVectors, dict[str, Any]]]) -> None:
        """Store ``(bead_id, scope, vectors, attributes)`` items — ``vectors`` a :class:`BeadVectors`, one row per
        chunk, or a single vector — each replacing the vectors its bead had in that scope (those it no longer
        has are removed), in two round trips."""
        self._note_write()
        given = [(b, scope, v if isinstance(v, BeadVectors) else BeadVectors(v), attrs) for b, scope, v, attrs in items]
        before = await self._stored([(b, scope) for b, scope, _, _ in given])
        # Redis 8.2's VADD of an element the set already holds changes it in memory only: neither the AOF nor a
        # replica sees the change, so after a restart (or on the replica) the old vector and attributes are back.
        # An element being replaced is removed and added again instead, in one transaction (never missing).
        pipe = self.redis.pipeline(transaction=any(had.count for had in before))
        written: list[tuple[str, str, bytes | None]] = []
        for (bead_id, scope, bead_vectors, attrs), had in zip(given, before, strict=True):
            vectors, sentences = np.atleast_2d(bead_vectors.rows), bead_vectors.sentences
            described = _attributes_json(attrs, len(vectors), sentences)
            if had.count:  # each replaced (removed, then added again) or no longer there
                queue_removal(pipe, self.key(scope), had.names(bead_id))
            # Never VADD's CAS (neighbours gathered on a Redis thread): Redis 8.2 stops on an assertion when it
            # loads an append-only file holding one, so the store would not come back after a restart.
            for chunk, vector in enumerate(vectors):
                build = ["EF", SENTENCE_BUILD_EF] if sentences and chunk else []
                pipe.execute_command(
                    "VADD", self.key(scope), "FP32", vector.astype(np.float32).tobytes(),
                    element(bead_id, chunk, sentences), self.quantization, *build, "SETATTR", described,
                )
            signs = None if bead_vectors.tokens is None else pack_signs(bead_vectors.tokens)
            if signs is not None:  # no word at all: kept empty, so start-up repair passes it by
                pipe.hset(self.signs_key(scope), bead_id, signs)
            else:
                pipe.hdel(self.signs_key(scope), bead_id)
            written.append((scope, bead_id, signs))
        try:
            log_mending(await self._execute(pipe))
        except BaseException:
            self.signs.drop(bead_id for _, bead_id, _ in written)  # what the failed pipeline left is read again
            raise
        for scope, bead_id, signs in written:
            self.signs.written(scope, bead_id, signs)

    async def set_attributes(self, bead_id: str, scope: str, attributes: dict[str, Any]) -> bool:
        """Replace the filter attributes of the bead's stored vectors; False if the set holds none of it."""
        self._note_write()
        (held,) = await self._stored([(bead_id, scope)])
        if not held.count:
            return False
        pipe = self.redis.pipeline(transaction=False)
        described = _attributes_json(attributes, held.count, held.sentences)
        for name in held.names(bead_id):
            pipe.execute_command("VSETATTR", self.key(scope), name, described)
        done = await self._execute(pipe)
        return bool(done[0])

    async def remove(self, bead_id: str, scope: str) -> None:
        """Remove every vector of the bead from ``scope``."""
        self._note_write()
        (held,) = await self._stored([(bead_id, scope)])
        pipe = self.redis.pipeline(transaction=False)
        queue_removal(pipe, self.key(scope), held.names(bead_id) or [bead_id])
        pipe.hdel(self.signs_key(scope), bead_id)
        try:
            log_mending(await self._execute(pipe))
        finally:
            self.signs.drop([bead_id])

    async def beads_without_signs(self) -> dict[str, list[str]]:
        """By scope, the beads with vectors of this model there but no token signs (embedded before
        ``late_interaction`` was on, or by a hub that had it off)."""
        missing: dict[str, list[str]] = {}
        root = self.keys.vector_root(self.model_id)
        async for raw in self.redis.scan_iter(match=self.all_keys_pattern()):
            key = raw.decode()
            scope = key[len(root) + 1 :]
            size = int(await self.redis.vset().vcard(key))
            names = await self.redis.vset().vrandmember(key, size) if size else []
            beads = {bead_of(_text(name)) for name in names or []}
            signed = {_text(field) for field in await self.redis.hkeys(self.signs_key(scope))}
            if beads - signed:
                missing[scope] = sorted(beads - signed)
        return missing

    async def add_missing_signs(self, scope: str, tokens: Mapping[str, np.ndarray]) -> None:
        """Token signs for beads of ``scope`` that have none (``HSETNX``: signs a newer write stored meanwhile
        stay), each only while its vectors are still in ``scope`` (a bead moved meanwhile keeps none behind)."""
        self._note_write()
        pipe = self.redis.pipeline(transaction=False)
        for bead_id, rows in tokens.items():
            pipe.hsetnx(self.signs_key(scope), bead_id, pack_signs(rows))
        for bead_id in tokens:
            pipe.execute_command("VISMEMBER", self.key(scope), bead_id)
        try:
            replies = await self._execute(pipe)
        finally:
            self.signs.drop(tokens)
        gone = [b for b, held in zip(tokens, replies[len(replies) - len(tokens) :], strict=True) if not held]
        if gone:
            await self.redis.hdel(self.signs_key(scope), *gone)

    async def token_signs(self, scopes: Sequence[str], bead_ids: Sequence[str]) -> dict[str, bytes]:
        """The token signs (:func:`pack_signs`) kept for each of ``bead_ids`` in any of ``scopes``: those this
        process read or wrote a moment ago from memory (:class:`~recall_hub.store.sign_cache.SignCache`), the
        others read."""
        if not scopes or not bead_ids:
            return {}
        held, wanted = self.signs.held(scopes, bead_ids)

        async def run(client: Redis) -> list[Any]:
            pipe = client.pipeline(transaction=False)
            for scope in scopes:
                pipe.hmget(self.signs_key(scope), wanted)
            return await self._execute(pipe)

        read: dict[str, tuple[str, bytes]] = {}
        if wanted:
            for scope, replies in zip(scopes, await self._read(run), strict=True):
                for bead_id, packed in zip(wanted, replies, strict=True):
                    if packed is not None:
                        read[bead_id] = (scope, packed)
            self.signs.read(read)
        found = held | {bead_id: packed for bead_id, (_, packed) in read.items()}
        return {bead_id: packed for bead_id, packed in found.items() if packed}

    async def _stored(self, beads: list[tuple[str, str]]) -> list[_Stored]:
        """What each ``(bead_id, scope)`` has there (count 0: none), from its first vector's attributes."""
        if not beads:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for bead_id, scope in beads:
            pipe.execute_command("VGETATTR", self.key(scope), bead_id)
        held = []
        for reply in await self._execute(pipe, raise_on_error=False):
            if reply is None or isinstance(reply, Exception):
                held.append(_Stored(0))
                continue
            try:  # redis-py decodes the JSON itself on some connections
                described = reply if isinstance(reply, dict) else json.loads(reply)
                held.append(_Stored(max(1, int(described.get(CHUNKS_ATTRIBUTE, 1))),
                                  bool(described.get(SENTENCES_ATTRIBUTE, False))))
            except (ValueError, TypeError, AttributeError):
                held.append(_Stored(1))
        return held

    @staticmethod
    async def _execute(pipe: Any, raise_on_error: bool = True) -> list[Any]:
        try:
            return list(await pipe.execute(raise_on_error=raise_on_error))
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            raise Unavailable(f"vector store unreachable: {exc}") from exc

    async def vector(self, bead_id: str, scope: str) -> np.ndarray | None:
        raw = await self._read(lambda client: self._vemb(client, self.key(scope), bead_id))
        if not raw:
            return None
        return np.asarray(raw, dtype=np.float32)

    async def search(
        self, scopes: Iterable[str], vector: np.ndarray, k: int, filter_expr: str | None = None
    ) -> list[VectorHit]:
        """The ``k`` nearest beads across ``scopes`` (one VSIM per set, in one round trip), each bead scored by
        its nearest chunk. :data:`ASKED_PER_BEAD` times ``k`` vectors are asked for, so that several chunks of
        one bead leave room."""
        keys = [self.key(s) for s in scopes]
        main_thread = self._vectors_in(keys) <= MAIN_THREAD_UP_TO
        args = _vsim_args(vector, k, filter_expr, main_thread=main_thread)
        replies = await self._read(lambda client: self._vsim(client, keys, args))
        return _nearest(keys, replies, k)

    def _vectors_in(self, keys: Iterable[str]) -> int:
        """How many vectors the sets ``keys`` hold together, as searches last read their sizes (none read: 0)."""
        return sum(self._sizes[key][0] for key in keys if key in self._sizes)

    async def search_many(self, queries: Sequence[tuple[Iterable[str], np.ndarray, int]]) -> list[list[VectorHit]]:
        """:meth:`search` for each ``(scopes, vector, k)``, all in one pipeline: the sets are searched one after
        another, for bulk work where the cores are busy anyway and a round trip each would cost more."""
        asked = [([self.key(s) for s in scopes], _vsim_args(vector, k, None), k) for scopes, vector, k in queries]

        async def run(client: Redis) -> list[Any]:
            pipe = client.pipeline(transaction=False)
            for keys, args, _ in asked:
                for key in keys:
                    pipe.execute_command("VSIM", key, *args)
            return await self._execute(pipe, raise_on_error=False)

        replies = iter(await self._read(run))
        return [_nearest(keys, [next(replies) for _ in keys], k) for keys, _, k in asked]

    async def _vsim(self, client: Redis, keys: list[str], args: list[Any]) -> list[Any]:
        """One VSIM per set, each on a connection of its own: a threaded VSIM runs beside the others (a pipeline on
        one connection would run them one after another). Beside them, the size of each set not read for
        :data:`SET_SIZES_KEPT_S`, which :meth:`search` weighs against :data:`MAIN_THREAD_UP_TO`."""
        now = time.monotonic()
        unsized = [key for key in keys if now - self._sizes.get(key, (0, -math.inf))[1] > SET_SIZES_KEPT_S]
        searches = [client.execute_command("VSIM", key, *args) for key in keys]  # type: ignore[no-untyped-call]
        sizes = [client.execute_command("VCARD", key) for key in unsized]  # type: ignore[no-untyped-call]
        replies = await asyncio.gather(*searches, *sizes, return_exceptions=True)
        for reply in replies:
            if isinstance(reply, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
                raise Unavailable(f"vector store unreachable: {reply}") from reply
            if isinstance(reply, BaseException) and not isinstance(reply, redis.exceptions.ResponseError):
                raise reply
        for key, size in zip(unsized, replies[len(keys):], strict=True):
            if isinstance(size, int):
                self._sizes[key] = (size, now)
        return list(replies[: len(keys)])

    @staticmethod
    async def _vemb(client: Redis, key: str, bead_id: str) -> Any:
        try:
            return await client.vset().vemb(key, bead_id)
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            raise Unavailable(f"vector store unreachable: {exc}") from exc

    async def scope_sizes(self) -> dict[str, int]:
        sizes = {}
        async for key in self.redis.scan_iter(match=self.all_keys_pattern()):
            scope = key.decode()[len(self.keys.vector_root(self.model_id)) + 1 :]
            sizes[scope] = int(await self.redis.vset().vcard(key))
        return sizes

    async def drop_model_sets(self, keep_current: bool = True) -> int:
        """Delete vector sets of other models (and of this one unless ``keep_current``)."""
        dropped = 0
        for root in (self.keys.vector_root, self.keys.token_root):
            async for key in self.redis.scan_iter(match=f"{root(None)}:*"):
                if keep_current and key.decode().startswith(f"{root(self.model_id)}:"):
                    continue
                dropped += int(await self.redis.delete(key))
        if not keep_current:
            self.signs.drop()
        return dropped


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


SIGNS_KEPT = 48
"""Word tokens a bead keeps the signs of: its first 48 (docs/retrieval.md: as much as all of them on both dev
sets, and a search's product over its candidates' signs stays under a millisecond)."""


def pack_signs(tokens: np.ndarray) -> bytes:
    """The first :data:`SIGNS_KEPT` token outputs kept as the sign of each dimension: a bit each, 48 bytes a
    token of the local model (docs/retrieval.md: nearly all of what the outputs themselves give a search)."""
    rows = np.asarray(tokens)[:SIGNS_KEPT]
    return np.packbits(rows > 0, axis=1).tobytes() if rows.size else b""


def unpack_signs(packed: bytes, dim: int = 384) -> np.ndarray:
    """Rows of +-1/sqrt(dim) (unit length), one a token, from :func:`pack_signs`."""
    bits = np.unpackbits(np.frombuffer(packed, dtype=np.uint8).reshape(-1, dim // 8), axis=1)
    return (bits.astype(np.float32) * 2.0 - 1.0) / np.float32(math.sqrt(dim))


def match_signs(
    query: np.ndarray, signs: Mapping[str, bytes], weigh: Callable[[np.ndarray], np.ndarray] | None = None
) -> dict[str, float]:
    """How well a query's word tokens (rows) match each bead's (its :func:`pack_signs`), one by one (late
    interaction): for each query token its best cosine among the bead's tokens, averaged — weighed by
    ``weigh(best)`` (each query token's weight, from the beads' best cosines, one row a bead) if given — the
    query's tokens kept as signs too, so that a cosine is 1 - 2 x the share of dimensions whose signs differ
    (bits counted in 64-bit words; no float product, which on two cores cost the event loop more than it took
    itself)."""
    if not len(query) or not signs:
        return {}
    dim = query.shape[1]
    asked = np.frombuffer(pack_signs(query), dtype=np.uint64).reshape(len(query), -1)
    bead_ids = list(signs)
    counts = np.array([len(signs[b]) // (dim // 8) for b in bead_ids])
    held = np.frombuffer(b"".join(signs[b] for b in bead_ids), dtype=np.uint64).reshape(-1, asked.shape[1]).T.copy()
    differing = np.zeros((held.shape[1], len(asked)), dtype=np.uint16)  # (bead tokens, query tokens)
    for word in range(asked.shape[1]):  # a 64-bit word of every token at once
        differing += np.bitwise_count(np.bitwise_xor.outer(held[word], asked[:, word]))
    cosines = 1.0 - differing * (2.0 / dim)
    best = np.maximum.reduceat(cosines, np.concatenate(([0], np.cumsum(counts)[:-1])), axis=0)
    if weigh is None:
        return dict(zip(bead_ids, best.mean(axis=1).tolist(), strict=True))
    weights = weigh(best)
    weighed = (best * weights).sum(axis=1) / max(float(weights.sum()), 1e-9)  # not best @ weights: no BLAS
    return dict(zip(bead_ids, weighed.tolist(), strict=True))


def _attributes_json(attributes: Mapping[str, Any], chunks: int = 1, sentences: bool = False) -> str:
    described: dict[str, Any] = {k: attributes.get(k) for k in ATTRIBUTE_FIELDS if attributes.get(k) is not None}
    if chunks > 1:
        described[CHUNKS_ATTRIBUTE] = chunks
        if sentences:
            described[SENTENCES_ATTRIBUTE] = True
    return json.dumps(described)


def _vsim_args(vector: np.ndarray, k: int, filter_expr: str | None, main_thread: bool = False) -> list[Any]:
    """VSIM's arguments after the key: :data:`ASKED_PER_BEAD` times ``k`` vectors nearest ``vector``; with
    ``main_thread``, on Redis's main thread unless filtered (:data:`MAIN_THREAD_UP_TO`)."""
    asked = math.ceil(ASKED_PER_BEAD * k)
    args: list[Any] = ["FP32", vector.astype(np.float32).tobytes(), "WITHSCORES", "COUNT", asked, "EF",
                       max(SEARCH_EF, asked)]
    if filter_expr:
        args += ["FILTER", filter_expr, "FILTER-EF", max(asked * 100, 1000)]
    elif main_thread:
        args.append("NOTHREAD")
    return args


def _nearest(keys: Sequence[str], replies: Sequence[Any], k: int) -> list[VectorHit]:
    """The ``k`` nearest beads from one search's VSIM replies (a set's error: skipped, logged unless the set does
    not exist)."""
    answered = []
    for key, reply in zip(keys, replies, strict=True):
        if isinstance(reply, Exception):
            if "key" not in str(reply).lower():
                log.warning("VSIM on %s failed: %s", key, reply)
            continue
        answered.append(reply)
    return [VectorHit(bead_id=b, similarity=s) for b, s in nearest_beads(answered, k)]


def nearest_beads(replies: Sequence[Any], k: int) -> list[tuple[str, float]]:
    """The ``k`` beads nearest the query, best first, from VSIM replies, each bead scored by its nearest vector (a
    later chunk discounted). One plain pass over every entry: a search of four sets reads ~300, and merging them
    by score to stop early cost more than it saved (the first ``k`` beads kept up to date at every entry)."""
    best: dict[str, float] = {}
    unseen = -math.inf
    discounts = {"": 0.0, SENTENCE_MARK: SENTENCE_DISCOUNT}
    for reply in replies:
        for name, score in _entries(reply):
            bead_id, _, chunk = (name.decode() if isinstance(name, bytes) else str(name)).partition(CHUNK_SEPARATOR)
            similarity = 2.0 * float(score) - 1.0 - discounts.get(chunk[:1], CHUNK_DISCOUNT)
            if similarity > best.get(bead_id, unseen):
                best[bead_id] = similarity
    return sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))[:k]


def _entries(reply: Any) -> Iterable[tuple[Any, Any]]:
    """``(name, score)`` of a VSIM WITHSCORES reply, a map (RESP3, or redis-py's parsing) or a flat list (RESP2)."""
    if isinstance(reply, dict):
        return reply.items()
    return zip(reply[::2], reply[1::2], strict=True)
