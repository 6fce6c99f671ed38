"""Reranking the best fused candidates with a cross-encoder behind an HTTP ``/rerank`` endpoint (TEI,
Infinity, Cohere-compatible servers), when one is configured; without one, the fused order stands."""

from __future__ import annotations

from recall_hub.rerankers.base import Reranker, RerankerConfig, RerankerError
from recall_hub.rerankers.http import HTTPReranker

__all__ = ["HTTPReranker", "Reranker", "RerankerConfig", "RerankerError", "make_reranker"]


def make_reranker(config: RerankerConfig) -> Reranker | None:
    """The reranker the configuration names; None without a URL."""
    return HTTPReranker(config) if config.url else None
