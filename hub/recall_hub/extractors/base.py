"""What an extractor gives back, its configuration and its errors.

An extractor turns a text into topics, each with the facts the text states about it. The hub's LLM
extractor asks an OpenAI-compatible chat endpoint; without one configured, the deterministic outline
extractor (:mod:`recall_hub.extractors.outline`) splits the text by its own structure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field


class ExtractorConfig(BaseModel):
    """``RECALL_EXTRACTOR__URL`` (base URL of an OpenAI-compatible API, e.g. ``http://localhost:11434/v1``),
    ``__MODEL``, ``__API_KEY``, ``__TIMEOUT_S``. Without a URL the hub extracts by outline."""

    model_config = ConfigDict(extra="forbid")

    url: str | None = None
    model: str = "gpt-4o-mini"
    api_key: str | None = None
    timeout_s: float = Field(default=60.0, gt=0, le=600)
    max_retries: int = Field(default=1, ge=0, le=5, description="Retries after a timeout or a 5xx")
    max_tokens: int = Field(default=4096, ge=64, le=65_536, description="Longest answer asked for")


@dataclass
class ExtractedTopic:
    name: str
    facts: list[str] = field(default_factory=list)


class ExtractorUnavailableError(RuntimeError):
    """The extraction backend did not answer in time or answered with an HTTP error."""


class ExtractorMalformedError(ValueError):
    """The backend answered, but not with the JSON that was asked for."""


class Extractor(Protocol):
    name: str

    async def extract(self, text: str, max_facts: int) -> list[ExtractedTopic]: ...

    async def aclose(self) -> None: ...


_SPACE = re.compile(r"\s+")


def topic_key(name: str) -> str:
    """Two spellings of one topic name that differ only in case, spacing or trailing punctuation are one topic."""
    return _SPACE.sub(" ", name).strip(" \t#*_:.-").casefold()
