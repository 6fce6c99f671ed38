"""Extraction by an LLM behind any OpenAI-compatible ``POST <url>/chat/completions`` endpoint (OpenAI,
Ollama, vLLM, LM Studio, llama.cpp server, ...), through ``openai.AsyncOpenAI`` like the embedder.

The model is asked for JSON ``{"topics": [{"name": ..., "facts": [...]}]}``. A timeout, a refused
connection or an HTTP error raises :class:`ExtractorUnavailableError` (the hub answers ``unavailable``);
an answer that is not that JSON raises :class:`ExtractorMalformedError` (the hub then extracts by
outline and says so).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from typing import TYPE_CHECKING, Any

from recall_hub.extractors.base import (
    ExtractedTopic,
    ExtractorConfig,
    ExtractorMalformedError,
    ExtractorUnavailableError,
)

if TYPE_CHECKING:
    from openai import AsyncOpenAI

log = logging.getLogger(__name__)

PROMPT = (
    "Extract the durable facts of the user's text for a team memory. Answer with JSON only, no prose, "
    'exactly of this shape: {"topics": [{"name": "<short topic name, 1-4 words>", "facts": ["<one '
    'self-contained fact, understandable without the text>", ...]}]}. Group facts by topic; reuse one name '
    "for one topic; at most {max_facts} facts in all; keep names, numbers and identifiers exactly as written."
)
_FENCED = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


def parse_answer(answer: str | None, max_facts: int) -> list[ExtractedTopic]:
    """The topics of the model's answer; :class:`ExtractorMalformedError` saying what is wrong with it."""
    if not answer or not answer.strip():
        raise ExtractorMalformedError("the answer is empty")
    text = answer.strip()
    fenced = _FENCED.match(text)
    if fenced:
        text = fenced.group(1)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ExtractorMalformedError(f"the answer is not JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(data, dict) or not isinstance(data.get("topics"), list):
        raise ExtractorMalformedError('the answer has no "topics" list')
    topics: list[ExtractedTopic] = []
    left = max_facts
    for i, item in enumerate(data["topics"]):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not isinstance(
            item.get("facts"), list
        ):
            raise ExtractorMalformedError(f'topic {i} is not {{"name": string, "facts": list}}')
        if not all(isinstance(fact, str) for fact in item["facts"]):
            raise ExtractorMalformedError(f"topic {i} has a fact that is not a string")
        facts = [" ".join(fact.split()) for fact in item["facts"] if fact.strip()][:left]
        name = " ".join(item["name"].split())[:200]
        if facts and name:
            topics.append(ExtractedTopic(name, facts))
            left -= len(facts)
    return topics


class LLMExtractor:
    name = "llm"

    def __init__(self, config: ExtractorConfig) -> None:
        from openai import AsyncOpenAI  # imported here: only paid when an LLM is configured

        self.config = config
        self._client: AsyncOpenAI = AsyncOpenAI(
            api_key=config.api_key or "no-key",  # local servers need none
            base_url=config.url,
            timeout=config.timeout_s,
            max_retries=config.max_retries,
        )
        # Hard ceiling for one extraction, retries included (the client's timeout is per attempt).
        self._deadline_s = config.timeout_s * (config.max_retries + 1) + 2.0 * config.max_retries + 1.0

    def _unavailable(self, what: str) -> ExtractorUnavailableError:
        return ExtractorUnavailableError(f"extraction endpoint {self.config.url} (model {self.config.model!r}) {what}")

    async def extract(self, text: str, max_facts: int) -> list[ExtractedTopic]:
        import openai

        try:
            async with asyncio.timeout(self._deadline_s):
                response = await self._client.chat.completions.create(
                    model=self.config.model,
                    messages=[
                        {"role": "system", "content": PROMPT.replace("{max_facts}", str(max_facts))},
                        {"role": "user", "content": text},
                    ],
                    temperature=0,
                    max_tokens=self.config.max_tokens,
                )
        except (openai.APITimeoutError, TimeoutError) as exc:
            raise self._unavailable(f"did not answer within {self.config.timeout_s:g}s") from exc
        except openai.APIStatusError as exc:
            raise self._unavailable(f"answered HTTP {exc.status_code}: {exc.message}") from exc
        except openai.APIConnectionError as exc:
            raise self._unavailable(f"cannot be reached: {exc}") from exc
        except openai.OpenAIError as exc:
            raise self._unavailable(f"failed: {exc}") from exc
        return parse_answer(_content(response), max_facts)

    async def aclose(self) -> None:
        await self._client.close()


def _content(response: Any) -> str | None:
    try:
        content = response.choices[0].message.content
    except (AttributeError, IndexError, TypeError):
        raise ExtractorMalformedError("the reply has no message") from None
    return content if isinstance(content, str) else None
