"""The reranking stage, against a local ``/rerank`` server of the two shapes hubs meet (Cohere's, which Infinity,
Jina and vLLM share, and text-embeddings-inference's): it reorders the best fused candidates, explains itself,
and never fails a search — a slow, failing or confused reranker leaves the fused order."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import uvicorn
from conftest import until
from recall_client import RecallClient
from recall_hub.config import HubSettings
from recall_hub.embedders import EmbedderConfig
from recall_hub.rerankers import RerankerConfig, RerankerError
from recall_hub.rerankers.http import parse_scores
from recall_hub.service.server import running_hub
from recall_hub.tooling.stack import EmbeddedStack, free_port
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

FAVOURED = "zebra"
"""The test reranker scores a text by how often it says this word (the fused order knows nothing of it)."""


@dataclass
class RerankServer:
    url: str
    behaviour: str = "ok"
    """``ok``, ``slow`` (answers after 2 s), ``error`` (HTTP 500) or ``short`` (scores one text too few)."""
    requests: list[dict[str, Any]] = field(default_factory=list)


async def _rerank(request: Request) -> JSONResponse:
    server: RerankServer = request.app.state.server
    body = await request.json()
    server.requests.append(body)
    if server.behaviour == "slow":
        await asyncio.sleep(2.0)
    if server.behaviour == "error":
        return JSONResponse({"error": "model crashed"}, status_code=500)
    texts = body.get("documents") or body.get("texts") or []
    scores = [float(text.lower().count(FAVOURED)) for text in texts]
    if server.behaviour == "short":
        scores = scores[:-1]
    if "texts" in body:  # text-embeddings-inference
        return JSONResponse([{"index": i, "score": s} for i, s in enumerate(scores)])
    return JSONResponse({"results": [{"index": i, "relevance_score": s} for i, s in enumerate(scores)]})


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStack]:
    """A stack of this module's own: the hubs started here must be the only ones in its queue group (the
    session's hub serves the session's stack, from another graph)."""
    with EmbeddedStack(tmp_path_factory.mktemp("rerank")) as running:
        yield running


@pytest.fixture(scope="module")
async def rerank_server() -> AsyncIterator[RerankServer]:
    port = free_port()
    app = Starlette(routes=[Route("/rerank", _rerank, methods=["POST"])])
    app.state.server = RerankServer(f"http://127.0.0.1:{port}")
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve())
    await until("the rerank server listens", lambda: server.started)
    yield app.state.server
    server.should_exit = True
    await task


async def _hub_with(stack: EmbeddedStack, reranker: RerankerConfig) -> Any:
    settings = HubSettings(
        nats_url=stack.nats_url, falkordb_url=stack.redis_url, redis_url=stack.redis_url,
        graph_name=f"rerank_{secrets.token_hex(4)}", embedder=EmbedderConfig(kind="hash"), reranker=reranker,
    )
    return running_hub(settings)


BEADS = [
    "The deployment checklist: tag the release, run the migrations, watch the error rate",
    "Deployment notes: the zebra canary goes first, then the rest of the deployment",
    "Zebra zebra: the canary host is called zebra, the deployment waits for it",
    "Lunch order for the deployment party",
]


async def _search(stack: EmbeddedStack, reranker: RerankerConfig) -> tuple[list[str], list[list[str]], float]:
    """Titles and explanation notes of a search for 'deployment' over :data:`BEADS`, and its time in s."""
    async with await _hub_with(stack, reranker), RecallClient(f"a_{secrets.token_hex(5)}", stack.nats_url) as me:
        for title in BEADS:
            await me.create_bead(title)
        started = time.perf_counter()
        result = await me.search_beads("deployment checklist", limit=4, mode="keyword")
        took = time.perf_counter() - started
    return [h.bead.title for h in result.hits], [h.explanation.notes for h in result.hits], took


@pytest.mark.parametrize("api", ["cohere", "tei"])
async def test_the_reranker_reorders_the_best_fused_candidates(
    stack: EmbeddedStack, rerank_server: RerankServer, api: str
) -> None:
    fused, _, _ = await _search(stack, RerankerConfig())
    rerank_server.behaviour, rerank_server.requests = "ok", []
    config = RerankerConfig(url=rerank_server.url, model="test-cross-encoder", api=api)  # type: ignore[arg-type]
    titles, notes, _ = await _search(stack, config)
    assert titles[:2] == [BEADS[2], BEADS[1]] != fused[:2]
    assert all(any("reranked by test-cross-encoder" in n for n in hit) for hit in notes)
    (sent,) = rerank_server.requests
    assert sent["query"] == "deployment checklist" and sent["model"] == "test-cross-encoder"
    assert ("texts" in sent) == (api == "tei") and ("documents" in sent) == (api == "cohere")


@pytest.mark.parametrize("behaviour", ["slow", "error", "short"])
async def test_a_failing_reranker_leaves_the_fused_order_and_no_error(
    stack: EmbeddedStack, rerank_server: RerankServer, behaviour: str
) -> None:
    fused, _, _ = await _search(stack, RerankerConfig())
    rerank_server.behaviour = behaviour
    titles, notes, took = await _search(stack, RerankerConfig(url=rerank_server.url, timeout_ms=300))
    assert titles == fused
    assert not any("reranked" in n for hit in notes for n in hit)
    assert took < 1.5  # the time budget held (the slow server answers after 2 s)


def test_both_reply_shapes_are_read_and_anything_else_refused() -> None:
    assert parse_scores({"results": [{"index": 1, "relevance_score": 0.2}, {"index": 0, "relevance_score": 0.9}]},
                        2) == [0.9, 0.2]
    assert parse_scores([{"index": 0, "score": 1}, {"index": 1, "score": -2.5}], 2) == [1.0, -2.5]
    for bad in ({"results": [{"index": 0, "relevance_score": 1}]}, [{"index": 3, "score": 1}, {"index": 0, "score": 1}],
                {"data": []}, [{"index": "0", "score": 1}], [{"index": 0, "score": "high"}]):
        with pytest.raises(RerankerError):
            parse_scores(bad, 2)
