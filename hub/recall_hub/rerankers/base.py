"""The reranker interface and its configuration."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field


class RerankerConfig(BaseModel):
    """``RECALL_RERANKER__URL`` (the server's base URL: ``<url>/rerank`` is asked), ``__MODEL``, ``__API_KEY``,
    ``__API``, ``__TIMEOUT_MS``, ``__TOP_N``. Without a URL nothing is reranked."""

    model_config = ConfigDict(extra="forbid")

    url: str | None = None
    model: str = Field(default="", description="Sent as `model` (servers that host one model ignore it)")
    api_key: str | None = None
    api: Literal["cohere", "tei"] = Field(
        default="cohere",
        description="cohere: {query, documents, top_n} -> {results: [{index, relevance_score}]} (Cohere, Infinity, "
        "Jina, vLLM); tei: {query, texts} -> [{index, score}] (Hugging Face text-embeddings-inference)",
    )
    timeout_ms: int = Field(
        default=500, ge=10, le=30_000,
        description="Time budget of one reranking; past it the fused order stands",
    )
    top_n: int = Field(default=20, ge=2, le=100, description="How many of the best fused candidates are reranked")
    max_chars: int = Field(
        default=2000, ge=100, le=100_000, description="Characters of each candidate's text sent to the reranker"
    )


class RerankerError(RuntimeError):
    """The reranker did not answer in time, answered with an error, or with something else than scores."""


class Reranker(Protocol):
    name: str

    async def scores(self, query: str, texts: Sequence[str]) -> list[float]:
        """One relevance score per text, in the texts' order (higher is more relevant); raises
        :class:`RerankerError`."""
        ...

    async def aclose(self) -> None: ...
