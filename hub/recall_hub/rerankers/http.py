"""A cross-encoder behind ``POST <url>/rerank``, through ``openai.AsyncOpenAI``'s plain request like the
embedder and the extractor (one HTTP stack). Two request shapes, by ``RECALL_RERANKER__API``: Cohere's, which
Infinity, Jina and vLLM share, and Hugging Face text-embeddings-inference's."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from recall_hub.rerankers.base import RerankerConfig, RerankerError

if TYPE_CHECKING:
    from openai import AsyncOpenAI


class HTTPReranker:
    def __init__(self, config: RerankerConfig) -> None:
        from openai import AsyncOpenAI  # imported here: only paid when a reranker is configured

        self.config = config
        self.name = config.model or str(config.url)
        self._client: AsyncOpenAI = AsyncOpenAI(
            api_key=config.api_key or "no-key", base_url=config.url, timeout=config.timeout_ms / 1000, max_retries=0,
        )

    async def scores(self, query: str, texts: Sequence[str]) -> list[float]:
        import openai

        body: dict[str, Any] = {"query": query}
        if self.config.api == "tei":
            body["texts"] = list(texts)
        else:
            body.update(documents=list(texts), top_n=len(texts), return_documents=False)
        if self.config.model:
            body["model"] = self.config.model
        try:
            async with asyncio.timeout(self.config.timeout_ms / 1000):
                reply = await self._client.post("/rerank", cast_to=object, body=body)
        except (openai.APITimeoutError, TimeoutError) as exc:
            raise RerankerError(f"{self.config.url}/rerank did not answer within {self.config.timeout_ms} ms") from exc
        except openai.APIStatusError as exc:
            raise RerankerError(f"{self.config.url}/rerank answered HTTP {exc.status_code}") from exc
        except openai.OpenAIError as exc:
            raise RerankerError(f"{self.config.url}/rerank failed: {exc}") from exc
        return parse_scores(reply, len(texts))

    async def aclose(self) -> None:
        await self._client.close()


def parse_scores(reply: object, count: int) -> list[float]:
    """The scores of either reply shape (``{"results": [{index, relevance_score}]}`` or ``[{index, score}]``),
    by text; every text must have one."""
    items = reply.get("results") if isinstance(reply, dict) else reply
    if not isinstance(items, list):
        raise RerankerError("the reranker's answer holds no list of results")
    scores: dict[int, float] = {}
    for item in items:
        if not isinstance(item, dict):
            raise RerankerError("a result of the reranker is not an object")
        index, score = item.get("index"), item.get("relevance_score", item.get("score"))
        if not isinstance(index, int) or not 0 <= index < count or not isinstance(score, int | float):
            raise RerankerError(f"a result of the reranker has no valid index and score: {item!r}"[:300])
        scores[index] = float(score)
    if len(scores) != count:
        raise RerankerError(f"the reranker scored {len(scores)} of {count} texts")
    return [scores[i] for i in range(count)]
