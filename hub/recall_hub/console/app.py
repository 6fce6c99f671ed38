"""The console's Starlette application: routes, error pages, static files, and the clients' lifetime."""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import quote

from recall_schemas import NotFound, RecallError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from . import api, pages
from .auth import Identities
from .html import COLOURS_CSS, colours_css, e, error_box
from .pool import CannotConnect, ClientPool, ReleaseClients
from .protect import AllowedHosts, SecurityHeaders, with_security_headers
from .sessions import Sessions, SignInForms
from .settings import ConsoleSettings
from .state import BadInput, Console, NotSignedIn, signed_in_session, status_of

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"


def _is_api(request: Request) -> bool:
    return request.url.path.startswith("/api/")


def _problem(request: Request, status: int, title: str, message: str) -> Response:
    if _is_api(request):
        return JSONResponse({"error": message, "status": status}, status_code=status)
    return pages.page(request, signed_in_session(request), title, error_box(message), status=status)


async def on_not_signed_in(request: Request, exc: Exception) -> Response:
    if _is_api(request):
        return JSONResponse({"error": "sign in first", "status": 401}, status_code=401)
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/login?next={quote(target)}", status_code=303)


async def on_bad_input(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, BadInput)
    return _problem(request, exc.status, "Cannot do that", exc.message)


async def on_hub_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RecallError)
    status = status_of(exc)
    if isinstance(exc, NotFound):
        message = "Not found: it does not exist, or it is not visible to you."
        return _problem(request, 404, "Not found", message)
    if status >= 500:  # the detail (addresses, the client's own errors) is for the log, not the browser
        log.warning("hub error on %s: %s", request.url.path, exc)
        return _problem(request, status, "The hub did not answer", "The hub is unavailable or slow; try again.")
    return _problem(request, status, "Refused by the hub", exc.message)


async def on_cannot_connect(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, CannotConnect)
    return _problem(request, exc.status, "Cannot connect to the hub", exc.message)


async def on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return _problem(request, 404, "Page not found", f"There is no page at {request.url.path}.")
    if exc.status_code == 405:
        return _problem(request, 405, "Not allowed", "This address does not take that kind of request.")
    return _problem(request, exc.status_code, "Cannot do that", str(exc.detail))


async def on_unexpected(request: Request, exc: Exception) -> Response:
    reference = secrets.token_hex(4)
    log.exception("console error %s on %s", reference, request.url.path)
    message = f"Something went wrong in the console (reference {e(reference)} in its log)."
    # Made by Starlette's outermost middleware, outside SecurityHeaders.
    return with_security_headers(_problem(request, 500, "Console error", message))


async def colours_stylesheet(request: Request) -> Response:
    return Response(colours_css(), media_type="text/css", headers={"Cache-Control": "max-age=3600"})


ROUTES = [
    Route("/", pages.home),
    Route("/login", pages.login, methods=["GET", "POST"]),
    Route("/logout", pages.logout, methods=["POST"]),
    Route("/groups", pages.groups_get),
    Route("/groups", pages.group_create, methods=["POST"]),
    Route("/groups/{group_id}/members", pages.member_add, methods=["POST"]),
    Route("/groups/{group_id}/members/remove", pages.member_remove, methods=["POST"]),
    Route("/groups/{group_id}/handoff", pages.ops_handoff, methods=["POST"]),
    Route("/groups/{group_id}/graph", pages.graph_page),
    Route("/groups/{group_id}/audit", pages.audit_page),
    Route("/search", pages.search_page),
    Route("/beads/{bead_id}", pages.bead_page),
    Route("/beads/{bead_id}/verify", pages.bead_verify, methods=["POST"]),
    Route("/beads/{bead_id}/reject", pages.bead_reject, methods=["POST"]),
    Route("/handoffs", pages.handoffs_page),
    Route("/handoffs/{handoff_id}/acknowledge", pages.handoff_acknowledge, methods=["POST"]),
    Route("/feed/{group_id}", pages.feed_page),
    Route("/api/groups/{group_id}/graph", api.graph_json),
    Route("/api/feed/{group_id}/events", api.feed_events),
    Route(COLOURS_CSS, colours_stylesheet),
    Mount("/static", StaticFiles(directory=STATIC), name="static"),
]


def create_app(nats_url: str, *, creds_dir: str | Path | None = None, dev: bool = True,
               secret: str | None = None, settings: ConsoleSettings | None = None) -> Starlette:
    """The console as an ASGI application (see the package docstring)."""
    settings = settings or ConsoleSettings()
    identities = Identities(dev=dev and creds_dir is None, creds_dir=creds_dir)
    pool = ClientPool(nats_url, identities, max_clients=settings.max_clients, idle_s=settings.client_idle_s)
    console = Console(
        identities, pool, Sessions(), SignInForms(secret or settings.secret or secrets.token_urlsafe(32))
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await console.close()

    app = Starlette(
        routes=ROUTES,
        lifespan=lifespan,
        middleware=[
            Middleware(SecurityHeaders),
            Middleware(AllowedHosts, hosts=settings.hosts),
            Middleware(ReleaseClients, pool=pool),
        ],
        exception_handlers={
            NotSignedIn: on_not_signed_in,
            BadInput: on_bad_input,
            CannotConnect: on_cannot_connect,
            RecallError: on_hub_error,
            HTTPException: on_http_error,
            Exception: on_unexpected,
        },
    )
    app.state.console = console
    return app
