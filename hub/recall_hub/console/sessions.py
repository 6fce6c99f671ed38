"""Browser sessions, and the sign-in form's token.

A session lives on the server: its cookie carries only a random id (the server keeps its SHA-256), so
signing out ends the session for every copy of the cookie, and so does its age (``SESSION_MAX_AGE_S``).
Each session has a token that its forms carry (cross-site request forgery).

The sign-in form comes before any session, so its token is a *signed double submit*: a random nonce in a
cookie of its own (``LOGIN_COOKIE``, only sent to ``/login``) and, in the form, the nonce's HMAC under the
console's secret with the time it was issued. Another site can neither read the cookie nor forge the HMAC.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

SESSION_COOKIE = "recall_console"
SESSION_MAX_AGE_S = 12 * 3600
MAX_SESSIONS = 10_000
"""Sessions kept at once; beyond it the oldest ends (sign-ins cost the server memory, and anyone who reaches
the console may sign in)."""
LOGIN_COOKIE = "recall_console_login"
LOGIN_FORM_MAX_AGE_S = 3600
NONCE = re.compile(r"^[A-Za-z0-9_\-]{32}$")


@dataclass(frozen=True)
class BrowserSession:
    """The identity a browser acts as, and the token its forms must carry."""

    ai_id: str
    csrf: str
    started: float


class Sessions:
    """The open sessions, by the SHA-256 of their cookie."""

    def __init__(self, *, max_age_s: float = SESSION_MAX_AGE_S, limit: int = MAX_SESSIONS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_age_s = max_age_s
        self.limit = limit
        self.clock = clock
        self._open: dict[str, BrowserSession] = {}  # oldest first

    @staticmethod
    def _key(cookie: str) -> str:
        return hashlib.sha256(cookie.encode()).hexdigest()

    def start(self, ai_id: str) -> tuple[str, BrowserSession]:
        """A new session as ``ai_id``: its cookie value and the session."""
        self._forget_expired()
        while len(self._open) >= self.limit:
            oldest = next(iter(self._open))
            log.warning("console: %d sessions open, the oldest (%s) ends", self.limit, self._open.pop(oldest).ai_id)
        cookie = secrets.token_urlsafe(32)
        session = BrowserSession(ai_id, secrets.token_urlsafe(24), self.clock())
        self._open[self._key(cookie)] = session
        return cookie, session

    def find(self, cookie: str | None) -> BrowserSession | None:
        """The session a cookie names, or None when it is missing, unknown, ended or too old."""
        if not cookie or len(cookie) > 100:
            return None
        key = self._key(cookie)
        session = self._open.get(key)
        if session is not None and self.clock() - session.started > self.max_age_s:
            del self._open[key]
            return None
        return session

    def end(self, cookie: str | None) -> None:
        if cookie:
            self._open.pop(self._key(cookie), None)

    def _forget_expired(self) -> None:
        now = self.clock()
        while self._open:
            key, oldest = next(iter(self._open.items()))
            if now - oldest.started <= self.max_age_s:
                return
            del self._open[key]


class SignInForms:
    """The sign-in form's token (signed double submit, see the module's docstring)."""

    def __init__(self, secret: str, *, max_age_s: float = LOGIN_FORM_MAX_AGE_S,
                 clock: Callable[[], float] = time.time) -> None:
        self._key = hashlib.sha256(b"recall console sign-in form\0" + secret.encode()).digest()
        self.max_age_s = max_age_s
        self.clock = clock

    @staticmethod
    def nonce(cookie: str | None) -> str:
        """The browser's nonce (so that two sign-in tabs both work), or a new one."""
        return cookie if cookie and NONCE.fullmatch(cookie) else secrets.token_urlsafe(24)

    def _mac(self, nonce: str, issued: int) -> str:
        return hmac.new(self._key, f"{nonce}|{issued}".encode(), hashlib.sha256).hexdigest()

    def token(self, nonce: str) -> str:
        issued = int(self.clock())
        return f"{issued}.{self._mac(nonce, issued)}"

    def valid(self, nonce: str | None, token: str) -> bool:
        """Whether ``token`` was issued for this browser's nonce, recently."""
        issued_text, _, mac = token.partition(".")
        if not nonce or not NONCE.fullmatch(nonce) or not issued_text.isdigit():
            return False
        issued = int(issued_text)
        if not 0 <= self.clock() - issued <= self.max_age_s:
            return False
        return hmac.compare_digest(mac.encode(), self._mac(nonce, issued).encode())
