"""What the retrieval evals share: reading their data, where they send requests, connecting a set of clients,
fresh ids, and bootstrap intervals."""

from __future__ import annotations

import contextlib
import json
import random
import secrets
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recall_client import RecallClient

BOOTSTRAP_RESAMPLES = 1000
TITLE_MAX = 512

Progress = Callable[[str, int, int], None]
"""``progress(stage, done, total)``; stages are ``"ingest"`` and ``"query"``."""


def turn_title(title: str, whole: str | None = None) -> tuple[str, str]:
    """A conversation turn as a bead's ``(title, content)``: ``title`` cut at :data:`TITLE_MAX` characters and,
    when it was cut, the whole turn (``whole``, else the title) as the content."""
    if len(title) <= TITLE_MAX:
        return title, ""
    return title[: TITLE_MAX - 1] + "…", whole if whole is not None else title


class DatasetError(ValueError):
    """An eval's data cannot be read as the dataset it should be (missing, not JSON, not its shape)."""


def json_records(
    data: Path, what: str, order: Callable[[Path], Any] = lambda p: p.name
) -> list[tuple[str, dict[str, Any]]]:
    """``(name, record)`` of every record in ``data``: a JSON file, or a folder of them (``*.json``, sorted by
    ``order``, by default their names); a file holds one record (an object) or several (a list, as a dataset's
    release often ships them, each named ``<file>/<position>``). ``what`` names a record in errors."""
    path = Path(data)
    if path.is_dir():
        files = sorted(path.glob("*.json"), key=order)
        if not files:
            raise DatasetError(f"no {what} (*.json) in {path}")
    elif path.is_file():
        files = [path]
    else:
        raise DatasetError(f"no such file or folder: {path}")
    records: list[tuple[str, dict[str, Any]]] = []
    for file in files:
        try:
            loaded = json.loads(file.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise DatasetError(f"{file} is not a JSON file of {what}s: {exc}") from exc
        if isinstance(loaded, dict):
            records.append((file.stem, loaded))
        elif isinstance(loaded, list) and all(isinstance(item, dict) for item in loaded):
            records += [(f"{file.stem}/{n}", item) for n, item in enumerate(loaded)]
        else:
            raise DatasetError(f"{file} holds neither a {what} (a JSON object) nor a list of them")
    return records


def new_body() -> str:
    """The random part of an id (``a_<body>``, ``s_<body>``…)."""
    return secrets.token_hex(6)


def interval(values: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> tuple[float, float]:
    """95% bootstrap interval of the mean of ``values`` (percentile method, questions resampled with
    replacement; a fixed seed, so a report is reproducible)."""
    if not values:
        return (0.0, 0.0)
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(resamples))
    return means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]


@contextlib.asynccontextmanager
async def connected(clients: Sequence[RecallClient]) -> AsyncIterator[None]:
    try:
        for client in clients:
            await client.connect()
        yield
    finally:
        for client in clients:
            await client.close()


@dataclass
class Target:
    nats_url: str
    setup: str
    embedder: str


@contextlib.asynccontextmanager
async def eval_hub(
    nats_url: str | None, redis_url: str | None, falkordb_url: str | None, graph_name: str, work_dir: Path | None,
) -> AsyncIterator[Target]:
    """Where an eval sends its requests: an embedded stack and an in-process hub unless a hub is given (with
    ``nats_url`` only, a hub must already serve there; with a store URL too, an in-process hub is started
    against them)."""
    from recall_hub.config import HubSettings
    from recall_hub.service.server import running_hub
    from recall_hub.tooling.stack import EmbeddedStack

    if nats_url is not None and redis_url is None and falkordb_url is None:
        yield Target(nats_url, f"Hub already serving at {nats_url}.", "the serving hub's embedder")
        return
    with contextlib.ExitStack() as scope:
        if nats_url is None:
            directory = work_dir or Path(scope.enter_context(tempfile.TemporaryDirectory(prefix="recall-eval-")))
            stack = scope.enter_context(EmbeddedStack(directory))
            nats_url, redis_url = stack.nats_url, stack.redis_url
            setup = "Embedded stack (nats-server, redis-server 8 + FalkorDB) and an in-process hub."
        else:
            setup = f"In-process hub on {nats_url}."
        store = redis_url or falkordb_url or "redis://127.0.0.1:6379"
        settings = HubSettings(
            nats_url=nats_url, falkordb_url=falkordb_url or store, redis_url=redis_url or store, graph_name=graph_name,
        )
        async with running_hub(settings) as service:
            yield Target(nats_url, setup, service.ctx.embedder.model_id)
