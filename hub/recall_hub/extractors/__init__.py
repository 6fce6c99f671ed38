"""Fact extraction: an OpenAI-compatible LLM when configured, else a deterministic outline of the text."""

from __future__ import annotations

from recall_hub.extractors.base import (
    ExtractedTopic,
    Extractor,
    ExtractorConfig,
    ExtractorMalformedError,
    ExtractorUnavailableError,
    topic_key,
)
from recall_hub.extractors.outline import OutlineExtractor

__all__ = [
    "ExtractedTopic",
    "Extractor",
    "ExtractorConfig",
    "ExtractorMalformedError",
    "ExtractorUnavailableError",
    "OutlineExtractor",
    "make_extractor",
    "topic_key",
]


def make_extractor(config: ExtractorConfig) -> Extractor | None:
    """The LLM extractor the configuration names; None without a URL (the outline is used)."""
    if not config.url:
        return None
    from recall_hub.extractors.llm import LLMExtractor

    return LLMExtractor(config)
