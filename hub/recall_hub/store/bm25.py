"""Okapi BM25 against a fixed reference length: how the keyword index ranks the candidates tantivy finds.

tantivy scores BM25 with the mean length of the *whole* index in its length normalisation, and takes no other
reference. So a group's ranking depended on what every other group wrote (a team of short chat turns in a hub
that also holds long documents had its short turns barely normalised), and no team's ranking was its own. Here
every text is normalised against :data:`REFERENCE_LENGTH` tokens instead, whatever the index holds:

    score(d) = Σ_w idf(w) · tf(w, d) · (k1 + 1) / (tf(w, d) + k1 · (1 − b + b · |d| / REFERENCE_LENGTH))

with tantivy's k1 and b, the in-scope IDF the keyword index computes, and the same again, weighed down, for the
words a bead holds from the beads it follows (its context). tantivy still finds the candidates (the best
:data:`RESCORE_DEPTH` by its own BM25, inside the caller's scopes and filters); their words are counted here,
per bead, as (hash, count) pairs, so a search rescores a hundred candidates in a few vector operations.

The reference length was chosen on both retrieval dev sets together (docs/retrieval.md, "BM25 against a fixed
reference length"): short chat turns (LoCoMo, ~25 tokens) rank better normalised more weakly than against their
own mean, long chats with short answers (LongMemEval, ~330 tokens, answers in short user turns) better
normalised more strongly than against theirs.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

K1 = 1.2
B = 0.75
"""tantivy's (and Lucene's) BM25 constants."""
REFERENCE_LENGTH = 100.0
"""Tokens a text is normalised against (tantivy's analyser: stemmed words); chosen by cross-validation over
both dev sets among 60, 100, 150, 200 and 300 (docs/retrieval.md)."""
RESCORE_DEPTH = 100
"""Candidates tantivy gives for rescoring (at least the search's limit): 200 ranked every dev-set question alike."""

_Words = tuple[int, bytes, bytes]
"""One text's words: its length in words, its distinct words' hashes (sorted, 4 bytes each) and their counts (2
bytes each), ~6 bytes a distinct word; kept apart so a search joins them without slicing."""
_NO_WORDS: _Words = (0, b"", b"")


def _word_hash(word: str) -> int:
    return zlib.crc32(word.encode())


def _counted(words: Sequence[str]) -> _Words:
    if not words:
        return _NO_WORDS
    counted = sorted(Counter(_word_hash(word) for word in words).items())
    hashes = np.fromiter((h for h, _ in counted), dtype="<u4", count=len(counted))
    counts = np.fromiter((min(c, 65535) for _, c in counted), dtype="<u2", count=len(counted))
    return len(words), hashes.tobytes(), counts.tobytes()


class WordCounts:
    """The words of every indexed bead, by bead id: its own text and its context."""

    def __init__(self) -> None:
        self._of: dict[str, tuple[_Words, _Words]] = {}

    def set(self, bead_id: str, text: Sequence[str], context: Sequence[str]) -> None:
        self._of[bead_id] = (_counted(text), _counted(context))

    def drop(self, bead_id: str) -> None:
        self._of.pop(bead_id, None)

    def scores(self, bead_ids: Sequence[str], idfs: Mapping[str, float], context_weight: float) -> list[float]:
        """BM25 of each of ``bead_ids`` for the words ``idfs`` (word -> its IDF in the caller's scopes): of its text,
        plus ``context_weight`` times that of its context, both fields scored in one pass."""
        if not bead_ids or not idfs:
            return [0.0] * len(bead_ids)
        pairs = [self._of.get(bead_id, (_NO_WORDS, _NO_WORDS)) for bead_id in bead_ids]
        texts = [text for text, _ in pairs]
        if context_weight > 0:
            texts += [context for _, context in pairs]
        query = sorted((_word_hash(word), idf) for word, idf in idfs.items())
        query_hashes = np.array([h for h, _ in query], dtype=np.uint32)
        query_idfs = np.array([idf for _, idf in query], dtype=np.float64)
        scores = _field_scores(texts, query_hashes, query_idfs)
        n = len(bead_ids)
        total = scores[:n] + context_weight * scores[n:] if context_weight > 0 else scores
        return total.tolist()  # type: ignore[no-any-return]


def _field_scores(
    texts: Sequence[_Words], query_hashes: npt.NDArray[np.uint32], query_idfs: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """BM25 of each text for the query's words."""
    scores = np.zeros(len(texts), dtype=np.float64)
    hashes = np.frombuffer(b"".join([hashed for _, hashed, _ in texts]), dtype="<u4")
    if not len(hashes):
        return scores
    counts = np.frombuffer(b"".join([counted for _, _, counted in texts]), dtype="<u2")
    owner = np.repeat(np.arange(len(texts)), [len(hashed) >> 2 for _, hashed, _ in texts])
    at = np.searchsorted(query_hashes, hashes)
    at[at == len(query_hashes)] = 0
    matched = query_hashes[at] == hashes
    if not matched.any():
        return scores
    tf = counts[matched].astype(np.float64)
    owner = owner[matched]
    lengths = np.array([length for length, _, _ in texts], dtype=np.float64)[owner]
    norm = K1 * (1 - B + B * lengths / REFERENCE_LENGTH)
    contribution = query_idfs[at[matched]] * tf * (K1 + 1) / (tf + norm)
    return np.bincount(owner, weights=contribution, minlength=len(texts)).astype(np.float64)
