"""What every request handler needs: the console's shared state, the browser's identity and its client,
form checks, and the refusals a handler raises (turned into pages or JSON by ``app.py``)."""

from __future__ import annotations

import hmac
import logging
import re
from dataclasses import dataclass
from typing import Any

from recall_client import RecallClient
from recall_schemas import HTTP_STATUS, RecallError
from recall_schemas.ids import BEAD_ID_PATTERN, GROUP_ID_PATTERN, SESSION_ID_PATTERN
from starlette.requests import Request

from .auth import Identities
from .pool import HELD_CLIENTS, ClientPool
from .protect import cross_site
from .sessions import SESSION_COOKIE, BrowserSession, Sessions, SignInForms

log = logging.getLogger(__name__)

GROUP_ID = re.compile(GROUP_ID_PATTERN)
BEAD_ID = re.compile(BEAD_ID_PATTERN)
SESSION_ID = re.compile(SESSION_ID_PATTERN)


@dataclass
class Console:
    identities: Identities
    pool: ClientPool
    sessions: Sessions
    sign_in_forms: SignInForms

    async def close(self) -> None:
        await self.pool.close()


class NotSignedIn(Exception):
    """The request has no valid session: pages send the browser to the login page, the API answers 401."""


class BadInput(Exception):
    """A parameter the browser sent is malformed (400), or a form came without its session's token (403)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def signed_in_session(request: Request) -> BrowserSession | None:
    console = console_of(request)
    session = console.sessions.find(request.cookies.get(SESSION_COOKIE))
    return session if session and console.identities.problem(session.ai_id) is None else None


def session_of(request: Request) -> BrowserSession:
    session = signed_in_session(request)
    if session is None:
        raise NotSignedIn()
    return session


async def hold_client(request: Request, ai_id: str) -> RecallClient:
    """The identity's client, held until the response is done (``pool.ReleaseClients``)."""
    client = await console_of(request).pool.hold(ai_id)
    request.scope[HELD_CLIENTS].append(client)
    return client


async def client_of(request: Request) -> tuple[BrowserSession, RecallClient]:
    session = session_of(request)
    return session, await hold_client(request, session.ai_id)


FORGED = "This form has expired or did not come from this console; reload the page and try again."


def refuse_cross_site(request: Request) -> None:
    """:class:`BadInput` (403) for a post that another site's page sent."""
    reason = cross_site(request)
    if reason is not None:
        log.warning("console refused a cross-site post to %s (%s)", request.url.path, reason)
        raise BadInput(FORGED, 403)


async def posted_fields(request: Request) -> dict[str, str]:
    form = await request.form()
    return {key: value.strip() for key, value in form.items() if isinstance(value, str)}


async def checked_form(request: Request, session: BrowserSession) -> dict[str, str]:
    """The posted form's text fields, after checking it came from this console with this session's token."""
    refuse_cross_site(request)
    fields = await posted_fields(request)
    if not hmac.compare_digest(fields.get("csrf", "").encode(), session.csrf.encode()):  # bytes: any text compares
        raise BadInput(FORGED, 403)
    return fields


def valid_id(kind: re.Pattern[str], value: str, what: str) -> str:
    if not kind.fullmatch(value):
        raise BadInput(f"{value!r} is not a {what} id.")
    return value


def status_of(error: RecallError) -> int:
    return HTTP_STATUS.get(error.code, 500)


def int_param(params: Any, name: str, default: int, low: int, high: int) -> int:
    raw = params.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadInput(f"{name} must be a whole number between {low} and {high}.") from None
    if not low <= value <= high:
        raise BadInput(f"{name} must be between {low} and {high}.")
    return value
