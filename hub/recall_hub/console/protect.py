"""What keeps other sites out of the console, besides the forms' tokens (``sessions.py``):

* response headers on every response: a Content-Security-Policy that allows only the console's own scripts,
  styles and connections (no inline script), no framing, no MIME sniffing, no referrer to other sites;
* the Host check: a page of another site cannot reach a console on loopback by DNS rebinding;
* the same-origin check of form posts, from the browser's ``Sec-Fetch-Site``, ``Origin`` or ``Referer``.
"""

from __future__ import annotations

import base64
import hashlib
import logging
from urllib.parse import urlsplit

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)

CYTOSCAPE_STYLE = ".__________cytoscape_container { position: relative; }"
"""The one stylesheet cytoscape adds to the page by itself (a <style> element): allowed by its hash."""


def _hash_source(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


CONTENT_SECURITY_POLICY = "; ".join((
    "default-src 'none'",
    "script-src 'self'",
    f"style-src 'self' {_hash_source(CYTOSCAPE_STYLE)}",
    "img-src 'self'",
    "connect-src 'self'",
    "form-action 'self'",
    "frame-ancestors 'none'",
    "base-uri 'none'",
))

SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


def with_security_headers(response: Response) -> Response:
    """For the responses made outside :class:`SecurityHeaders` (the unexpected-error page)."""
    response.headers.update(SECURITY_HEADERS)
    return response


class SecurityHeaders:
    """ASGI middleware: :data:`SECURITY_HEADERS` on every response, and ``Cache-Control: no-store`` on every
    response but the static files (the pages and their data are one identity's)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = str(scope.get("path", "")).startswith("/static/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
                if not static and "cache-control" not in headers:
                    headers["Cache-Control"] = "no-store"
            await send(message)

        await self.app(scope, receive, send_with_headers)


def host_name(host_header: str) -> str:
    """The host name of a Host header (or of an address's netloc), without the port, lower case."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    name, colon, port = host.rpartition(":")
    return (name if colon and port.isdigit() else host).rstrip(".")


class AllowedHosts:
    """ASGI middleware: a request whose Host header names another host than the allowed ones gets a 400."""

    def __init__(self, app: ASGIApp, hosts: frozenset[str] | None) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.hosts is not None and scope["type"] in ("http", "websocket"):
            host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
            if host_name(host) not in self.hosts:
                log.warning("console refused a request for host %r (allowed: %s)", host, ", ".join(sorted(self.hosts)))
                refusal = PlainTextResponse(
                    "This console does not answer to that host name (see RECALL_CONSOLE_ALLOWED_HOSTS).", 400
                )
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)


def cross_site(request: Request) -> str | None:
    """Why a form post did not come from the console's own pages, or None. Browsers send ``Sec-Fetch-Site``
    and ``Origin`` with every post; where both are missing (an old browser, a script) the form's token decides."""
    site = request.headers.get("sec-fetch-site")
    if site in ("cross-site", "same-site"):
        return f"Sec-Fetch-Site: {site}"
    source = request.headers.get("origin") or request.headers.get("referer")
    if source is None:
        return None
    if urlsplit(source).netloc.lower() != request.headers.get("host", "").lower():
        return f"posted from {source!r}"
    return None
