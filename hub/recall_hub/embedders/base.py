"""The embedder interface, its configuration and the helpers every embedder shares.

An embedder turns texts into L2-normalised float32 vectors. Each embedder carries a ``model_id``
that is stored next to every vector it produced; vectors with different ``model_id`` values live in
different spaces and must never be compared or mixed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Embedder",
    "EmbedderConfig",
    "EmbedderError",
    "EmbedderUnavailableError",
    "ParallelRuns",
    "Span",
    "SpanPooling",
    "TokenReading",
    "check_texts",
    "l2_normalise",
]


class EmbedderError(RuntimeError):
    """An embedder cannot do what it was asked (bad configuration, bad input, closed)."""


class EmbedderUnavailableError(EmbedderError):
    """The embedding backend failed or did not answer in time (HTTP error, timeout, bad reply).

    The hub maps this to its "unavailable" error: retrying later may succeed. ``status_code`` is the
    HTTP status when the endpoint answered with an error, else ``None``.
    """

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


@runtime_checkable
class Embedder(Protocol):
    """What the hub's storage and search code calls.

    ``model_id`` and ``dim`` are read-only here so that both plain attributes and properties satisfy
    the protocol.
    """

    @property
    def model_id(self) -> str:
        """Stable id stored with each vector, e.g. ``local:all-MiniLM-L6-v2-int8``."""
        ...

    @property
    def dim(self) -> int:
        """Length of every vector."""
        ...

    @property
    def window_tokens(self) -> int | None:
        """Tokens of a text the model reads (the rest is cut off); None: it reads a text whole. A longer bead is
        embedded in overlapping chunks that each fit (:func:`recall_hub.retrieval.embedding.bead_chunks`)."""
        ...

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """float32 array of shape ``(len(texts), dim)``, rows L2-normalised, in input order."""
        ...

    async def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Like :meth:`embed`, for search queries: the same vectors for a symmetric model; an asymmetric
        one (e5) embeds queries and documents differently."""
        ...

    async def warmup(self) -> None:
        """Load the model / learn the dimension now rather than on the first request."""
        ...

    async def aclose(self) -> None:
        """Release threads, sessions and HTTP connections."""
        ...


Span = tuple[int, int]
"""A part of a text by character offsets, ``text[start:end]``."""


@runtime_checkable
class SpanPooling(Protocol):
    """An embedder that can also give vectors of parts of a text from the same reading of it ("late
    chunking"): the model reads the whole text once, and a part's vector pools the model's outputs for the
    part's own tokens — each read in the context of the whole text, at no extra model cost."""

    @property
    def pools_spans(self) -> bool:
        """Whether :meth:`embed_spans` pools parts (a model that pools inside itself cannot)."""
        ...

    async def embed_spans(self, texts: Sequence[str], spans: Sequence[Sequence[Span]]) -> list[np.ndarray]:
        """Per text, its vector (row 0, the same as :meth:`Embedder.embed` gives) followed by a vector of each
        of its ``spans`` the model read (a span past the model's window, or holding no token, has none)."""
        ...


@runtime_checkable
class TokenReading(Protocol):
    """An embedder that can also give the model's output for each word-bearing token of a text, from the same
    reading of it ("late interaction": a question's words matched one by one against a text's, each read in its
    context)."""

    @property
    def reads_tokens(self) -> bool:
        """Whether the methods below give token outputs (a model that pools inside itself cannot)."""
        ...

    async def embed_spans_and_tokens(
        self, texts: Sequence[str], spans: Sequence[Sequence[Span]], skip: frozenset[str]
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per text, what :meth:`SpanPooling.embed_spans` gives and the outputs (rows L2-normalised) of the tokens
        of its words the model read, but for words in ``skip`` (lower case) and tokens holding no letter or digit."""
        ...

    async def embed_queries_and_tokens(
        self, texts: Sequence[str], skip: frozenset[str]
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per search query, its vector (as :meth:`Embedder.embed_queries` gives it) and its tokens' outputs, as
        above."""
        ...


@runtime_checkable
class ParallelRuns(Protocol):
    """An embedder that reads several documents at once, each call of :meth:`Embedder.embed` on whichever of
    its runs is free: a caller batching single texts keeps that many calls in flight."""

    @property
    def document_runs(self) -> int:
        ...


DOCUMENT_NICE = 10
"""The local model reads documents at a lower CPU priority than the rest of the hub (Linux ``nice`` steps): a
document's vectors are work the hub can finish a little later, and on a busy machine the requests on the event
loop, Redis and NATS then get the cores first (measured in docs/benchmarks.md: a create settled in the background
replies ~2 ms sooner at 10k beads; an inline create and a team's mixed load are unchanged)."""


class EmbedderConfig(BaseModel):
    """How to build the hub's embedder (see :func:`recall_hub.embedders.make_embedder`).

    ``dimensions``: for ``openai``, sent as the API's ``dimensions`` parameter (Matryoshka models);
    when unset the dimension is discovered from the first reply. For ``hash``, the vector length
    (default 384). For ``local`` and ``e5-small`` it must be unset or 384.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["local", "e5-small", "openai", "hash"] = "local"
    openai_base_url: str | None = None
    openai_model: str | None = None
    openai_api_key: str | None = Field(default=None, repr=False)
    dimensions: int | None = Field(default=None, ge=1, le=65536)
    batch_size: int = Field(default=32, ge=1, le=4096)
    threads: int = Field(default=2, ge=1, le=256)
    """The local model's document lanes: that many texts read at once, one ONNX thread each (e5-small: its
    threads)."""
    query_threads: int = Field(default=1, ge=1, le=256)
    """ONNX threads of the local model's query lane (a session of its own for search queries)."""
    document_nice: int = Field(default=DOCUMENT_NICE, ge=0, le=19)
    """How much lower the CPU priority of the local model's document lanes is than the hub's (Linux ``nice``
    steps; 0: the same)."""
    int8_activations: bool = True
    """The local model with int8 activations too (~2.5x faster; vectors within cosine ~0.99 of the packaged
    model's, another ``model_id``); false: the packaged model as it is."""
    cache_dir: Path | None = None
    """Where the int8-activation model is derived once and kept (default ``~/.cache/nexus-recall``)."""
    # Only for kind="openai": per-attempt HTTP timeout and retries of the official client.
    openai_timeout_s: float = Field(default=30.0, gt=0)
    openai_max_retries: int = Field(default=2, ge=0, le=10)


def check_texts(texts: Sequence[str]) -> list[str]:
    """The texts as a list, refusing the classic mistake of passing one ``str``."""
    if isinstance(texts, str | bytes):
        raise TypeError("embed() takes a sequence of texts, not a single string")
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise TypeError(f"texts[{i}] is {type(t).__name__}, expected str")
    return out


def l2_normalise(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm, as C-contiguous float32. All-zero rows stay zero."""
    v = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    np.maximum(norms, np.float32(1e-12), out=norms)
    return np.ascontiguousarray(v / norms, dtype=np.float32)
