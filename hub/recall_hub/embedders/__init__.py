"""Pluggable embedders: local MiniLM (default), local e5-small (optional), OpenAI-compatible HTTP,
deterministic hashing.

>>> embedder = make_embedder(EmbedderConfig())          # local all-MiniLM-L6-v2, int8 ONNX
>>> await embedder.warmup()                              # optional: load now / discover the dimension
>>> vectors = await embedder.embed(["some text"])        # float32 (1, 384), rows unit length
>>> await embedder.aclose()

Vectors carry ``embedder.model_id``; vectors of different model ids are never compared.
"""

from __future__ import annotations

from recall_hub.embedders.base import Embedder, EmbedderConfig, EmbedderError, EmbedderUnavailableError
from recall_hub.embedders.e5_small import E5_DIM, E5SmallEmbedder
from recall_hub.embedders.hashing import HashEmbedder
from recall_hub.embedders.local import LOCAL_DIM, LocalEmbedder
from recall_hub.embedders.openai_compat import OpenAIEmbedder

__all__ = [
    "E5SmallEmbedder",
    "Embedder",
    "EmbedderConfig",
    "EmbedderError",
    "EmbedderUnavailableError",
    "HashEmbedder",
    "LocalEmbedder",
    "OpenAIEmbedder",
    "make_embedder",
]


def make_embedder(config: EmbedderConfig) -> Embedder:
    """Build the embedder a configuration asks for. Nothing is loaded or contacted yet.

    ``kind="openai"`` needs ``openai_model``; without ``dimensions`` its ``dim`` and ``model_id`` are
    known only after the first reply (``await embedder.warmup()``).
    """
    if config.kind == "local":
        if config.dimensions not in (None, LOCAL_DIM):
            raise EmbedderError(f"the local model has {LOCAL_DIM} dimensions, not {config.dimensions}")
        return LocalEmbedder(
            batch_size=config.batch_size, threads=config.threads, query_threads=config.query_threads,
            document_nice=config.document_nice, int8_activations=config.int8_activations, cache_dir=config.cache_dir,
        )
    if config.kind == "e5-small":
        if config.dimensions not in (None, E5_DIM):
            raise EmbedderError(f"e5-small has {E5_DIM} dimensions, not {config.dimensions}")
        return E5SmallEmbedder(batch_size=config.batch_size, threads=config.threads)
    if config.kind == "openai":
        if not config.openai_model:
            raise EmbedderError("kind='openai' needs openai_model (e.g. 'text-embedding-3-small')")
        return OpenAIEmbedder(
            model=config.openai_model,
            base_url=config.openai_base_url,
            api_key=config.openai_api_key,
            dimensions=config.dimensions,
            batch_size=config.batch_size,
            timeout_s=config.openai_timeout_s,
            max_retries=config.openai_max_retries,
        )
    if config.kind == "hash":
        return HashEmbedder(dim=config.dimensions or 384)
    raise EmbedderError(f"unknown embedder kind {config.kind!r}")  # pragma: no cover - Literal guards it
