"""The hub's HTTP port: ``/metrics`` (Prometheus), ``/healthz`` (alive) and ``/readyz`` (ready to serve).

A deliberately tiny HTTP/1.1 server on the hub's own event loop — GET and HEAD, one request per connection
— so readiness is the serving process's real state and a probe needs no thread or framework.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from http import HTTPStatus

from prometheus_client import CONTENT_TYPE_LATEST

log = logging.getLogger(__name__)

READ_TIMEOUT_S = 5.0
MAX_REQUEST_HEAD = 16 * 1024
JSON = "application/json"

Exposition = Callable[[], Awaitable[bytes]]
"""The Prometheus text of the process, sampled when asked for."""
Problems = Callable[[], Awaitable[dict[str, str]]]
"""What keeps the process from serving, by check (empty: ready)."""


class StatusServer:
    def __init__(self, host: str, port: int, metrics: Exposition, problems: Problems) -> None:
        self.host = host
        self.port = port
        """The port asked for (0: any free one); the bound one once started."""
        self._metrics = metrics
        self._problems = problems
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, limit=MAX_REQUEST_HEAD)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("metrics and health on %s (/metrics, /healthz, /readyz)", self.url)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                async with asyncio.timeout(READ_TIMEOUT_S):
                    head = await reader.readuntil(b"\r\n\r\n")
                method, target, _version = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
            except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
                await _respond(writer, "GET", HTTPStatus.BAD_REQUEST, "text/plain", b"bad request\n")
                return
            status, content_type, body = await self._route(method, target.split("?", 1)[0])
            await _respond(writer, method, status, content_type, body)
        except Exception:
            log.exception("status request failed")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _route(self, method: str, path: str) -> tuple[HTTPStatus, str, bytes]:
        if method not in ("GET", "HEAD"):
            return HTTPStatus.METHOD_NOT_ALLOWED, "text/plain", b"GET or HEAD only\n"
        if path == "/metrics":
            return HTTPStatus.OK, CONTENT_TYPE_LATEST, await self._metrics()
        if path == "/healthz":
            return HTTPStatus.OK, JSON, b'{"alive": true}\n'
        if path == "/readyz":
            problems = await self._problems()
            status = HTTPStatus.SERVICE_UNAVAILABLE if problems else HTTPStatus.OK
            body = {"ready": not problems, "not_ready": problems}
            return status, JSON, json.dumps(body).encode() + b"\n"
        return HTTPStatus.NOT_FOUND, "text/plain", b"not found: /metrics, /healthz or /readyz\n"


async def _respond(
    writer: asyncio.StreamWriter, method: str, status: HTTPStatus, content_type: str, body: bytes
) -> None:
    head = (
        f"HTTP/1.1 {status.value} {status.phrase}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Cache-Control: no-store\r\n"
        "Connection: close\r\n\r\n"
    )
    writer.write(head.encode("latin-1") + (b"" if method == "HEAD" else body))
    await writer.drain()
