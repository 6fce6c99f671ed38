"""OpenAI-compatible HTTP embedder (OpenAI, Ollama, vLLM, TEI, LM Studio, ...) via ``openai.AsyncOpenAI``.

Configured by base URL, model, API key and optionally ``dimensions`` (sent as the API's
``dimensions`` parameter, for models that can shorten their vectors).

Dimension: ``dimensions`` when configured; otherwise it is discovered from the first reply (the first
:meth:`OpenAIEmbedder.embed`, or :meth:`OpenAIEmbedder.warmup`, which embeds one probe text).
Until then ``dim`` and ``model_id`` raise :class:`EmbedderError`: call ``await warmup()`` at start-up.

``model_id`` is ``openai:<host[:port] of the base URL>:<model>:<dim>``.

Requests: ``encoding_format="float"`` (understood by every compatible server; the client's default,
base64, is not), texts in batches of ``batch_size`` with at most ``max_concurrency`` requests in
flight, replies put back in input order by their ``index``, every row L2-normalised. An empty text is
sent as a single space (OpenAI refuses empty strings). Every request has a timeout; any failure
(HTTP error, timeout, refused connection, malformed reply) raises :class:`EmbedderUnavailableError`
with the host, the model and the cause.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import numpy as np

from recall_hub.embedders.base import EmbedderError, EmbedderUnavailableError, check_texts, l2_normalise

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["OpenAIEmbedder"]

logger = logging.getLogger(__name__)

_PROBE_TEXT = "dimension probe"


def _host_of(base_url: str) -> str:
    parts = urlsplit(base_url)
    host = parts.hostname or base_url
    return f"{host}:{parts.port}" if parts.port else host


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible ``POST <base_url>/embeddings`` endpoint."""

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        dimensions: int | None = None,
        batch_size: int = 32,
        timeout_s: float = 30.0,
        max_retries: int = 2,
        max_concurrency: int = 4,
    ) -> None:
        if not model:
            raise EmbedderError("the openai embedder needs a model name (openai_model)")
        if dimensions is not None and dimensions < 1:
            raise ValueError("dimensions must be >= 1")
        if batch_size < 1 or max_concurrency < 1:
            raise ValueError("batch_size and max_concurrency must be >= 1")
        if timeout_s <= 0:
            raise ValueError("timeout_s must be > 0")
        from openai import AsyncOpenAI  # imported here: ~0.6 s, only paid when this embedder is used

        key = api_key or os.environ.get("OPENAI_API_KEY") or "no-key"  # local servers need none
        self._client: AsyncOpenAI = AsyncOpenAI(
            api_key=key, base_url=base_url, timeout=timeout_s, max_retries=max_retries
        )
        self.model = model
        self.dimensions = dimensions
        self.batch_size = batch_size
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.max_concurrency = max_concurrency
        self.base_url = str(self._client.base_url)  # resolves OPENAI_BASE_URL when base_url is None
        self.host = _host_of(self.base_url)
        self._dim: int | None = dimensions
        # Hard ceiling for one batch, retries and back-off included (the client's timeout is per attempt).
        self._deadline_s = timeout_s * (max_retries + 1) + 10.0 * max_retries + 1.0
        self._closed = False

    # -- the Embedder protocol ------------------------------------------------------------------

    @property
    def dim(self) -> int:
        if self._dim is None:
            raise EmbedderError(
                f"dimension of {self.host}/{self.model} not known yet: set 'dimensions' or "
                "await warmup() (or embed()) first"
            )
        return self._dim

    @property
    def window_tokens(self) -> int | None:
        """Remote models read thousands of tokens; the endpoint decides."""
        return None

    @property
    def model_id(self) -> str:
        return f"openai:{self.host}:{self.model}:{self.dim}"

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        items = check_texts(texts)
        if self._closed:
            raise EmbedderError("the openai embedder is closed")
        if not items:
            if self._dim is None:
                await self.warmup()
            return np.zeros((0, self.dim), dtype=np.float32)
        batches = [items[i:i + self.batch_size] for i in range(0, len(items), self.batch_size)]
        if len(batches) == 1:
            return await self._embed_batch(batches[0])
        semaphore = asyncio.Semaphore(self.max_concurrency)

        async def run(batch: list[str]) -> np.ndarray:
            async with semaphore:
                return await self._embed_batch(batch)

        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(run(b)) for b in batches]
        except* EmbedderError as group_error:
            first = group_error.exceptions[0]
            raise first from first.__cause__
        return np.vstack([t.result() for t in tasks])

    async def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return await self.embed(texts)  # the endpoint's model is taken as symmetric

    async def warmup(self) -> None:
        """Embed one probe text: checks the endpoint and discovers the dimension if not configured."""
        await self._embed_batch([_PROBE_TEXT])

    async def aclose(self) -> None:
        self._closed = True
        await self._client.close()

    # -- internals ------------------------------------------------------------------------------

    def _fail(self, what: str, status_code: int | None = None) -> EmbedderUnavailableError:
        return EmbedderUnavailableError(
            f"embedding endpoint {self.base_url} (model {self.model!r}) {what}", status_code=status_code
        )

    async def _embed_batch(self, batch: list[str]) -> np.ndarray:
        import openai

        extra: dict[str, Any] = {}
        if self.dimensions is not None:
            extra["dimensions"] = self.dimensions
        inputs = [t if t else " " for t in batch]
        try:
            async with asyncio.timeout(self._deadline_s):
                response = await self._client.embeddings.create(
                    model=self.model, input=inputs, encoding_format="float", **extra
                )
        except openai.APITimeoutError as exc:
            raise self._fail(f"did not answer within {self.timeout_s:g}s") from exc
        except TimeoutError as exc:
            raise self._fail(f"did not answer within {self._deadline_s:g}s (retries included)") from exc
        except openai.APIStatusError as exc:
            raise self._fail(f"answered HTTP {exc.status_code}: {exc.message}", exc.status_code) from exc
        except openai.APIConnectionError as exc:
            raise self._fail(f"cannot be reached: {exc}") from exc
        except openai.OpenAIError as exc:
            raise self._fail(f"failed: {exc}") from exc
        vectors = self._parse(response, len(batch))
        return l2_normalise(vectors)

    def _parse(self, response: Any, expected: int) -> np.ndarray:
        try:
            data = list(response.data)
            if len(data) != expected:
                raise ValueError(f"{len(data)} embeddings for {expected} inputs")
            by_index = sorted(data, key=lambda d: int(d.index))
            if [int(d.index) for d in by_index] != list(range(expected)):
                raise ValueError("reply indexes are not 0..n-1")
            rows = [self._row(d.embedding) for d in by_index]
            vectors = np.vstack(rows) if rows else np.zeros((0, 0), dtype=np.float32)
        except (AttributeError, TypeError, ValueError) as exc:
            raise self._fail(f"sent a malformed reply: {exc}") from exc
        width = int(vectors.shape[1])
        if self._dim is None:
            self._dim = width
            logger.info("openai embedder %s/%s: discovered dimension %d", self.host, self.model, width)
        elif width != self._dim:
            hint = " (does the server support the 'dimensions' parameter?)" if self.dimensions else ""
            raise self._fail(f"returned {width}-dimensional vectors, expected {self._dim}{hint}")
        if not np.isfinite(vectors).all():
            raise self._fail("returned non-finite numbers")
        return vectors

    @staticmethod
    def _row(embedding: Any) -> np.ndarray:
        if isinstance(embedding, str):  # a server that answers base64 whatever was asked
            return np.frombuffer(base64.b64decode(embedding), dtype="<f4").astype(np.float32)
        row = np.asarray(embedding, dtype=np.float32)
        if row.ndim != 1 or row.size == 0:
            raise ValueError("an embedding is not a non-empty list of numbers")
        return row

    def __repr__(self) -> str:
        return (
            f"OpenAIEmbedder(base_url={self.base_url!r}, model={self.model!r}, dimensions={self.dimensions})"
        )
