"""Who the browser is: one hub identity per browser session, held in an HMAC-signed cookie, and one
connected :class:`RecallClient` per identity, shared by that identity's sessions.

Two ways to know which identities exist:

* **dev** (NATS without auth): any AI id typed on the login page (checked against the AI id pattern);
* **credentials**: ``creds_dir`` is a directory of ``<id>.creds`` files (the login page lists those ids)
  or one ``.creds`` file (the console is that identity alone and needs no login).

The console never reads FalkorDB or Redis: every page is made of hub replies to that identity.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from recall_client import RecallClient
from recall_schemas.ids import AI_ID_PATTERN

log = logging.getLogger(__name__)

SESSION_COOKIE = "recall_console"
SESSION_MAX_AGE_S = 12 * 3600


@dataclass(frozen=True)
class BrowserSession:
    """The identity a browser acts as, and the token its forms must carry (cross-site request forgery)."""

    ai_id: str
    csrf: str


class CookieSigner:
    """``payload.signature``: URL-safe base64 JSON and its HMAC-SHA256 under the console's secret."""

    def __init__(self, secret: str) -> None:
        self._key = hashlib.sha256(secret.encode()).digest()

    def _mac(self, payload: str) -> str:
        return hmac.new(self._key, payload.encode(), hashlib.sha256).hexdigest()

    def sign(self, session: BrowserSession) -> str:
        data = json.dumps({"ai": session.ai_id, "csrf": session.csrf, "t": int(time.time())}, separators=(",", ":"))
        payload = base64.urlsafe_b64encode(data.encode()).decode().rstrip("=")
        return f"{payload}.{self._mac(payload)}"

    def unsign(self, value: str | None) -> BrowserSession | None:
        """The session a cookie names, or None when it is missing, forged, malformed or too old."""
        if not value or "." not in value:
            return None
        payload, _, mac = value.rpartition(".")
        if not hmac.compare_digest(mac, self._mac(payload)):
            return None
        try:
            data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
            ai_id, csrf, issued = str(data["ai"]), str(data["csrf"]), int(data["t"])
        except (ValueError, KeyError, TypeError):
            return None
        if time.time() - issued > SESSION_MAX_AGE_S:
            return None
        return BrowserSession(ai_id, csrf)


def new_session(ai_id: str) -> BrowserSession:
    return BrowserSession(ai_id, secrets.token_urlsafe(24))


class Identities:
    """The identities the console may act as, and how to connect as each."""

    def __init__(self, *, dev: bool, creds_dir: str | Path | None) -> None:
        self.dev = dev
        self._creds: dict[str, Path] = {}
        if creds_dir is not None:
            path = Path(creds_dir).expanduser()
            files = [path] if path.is_file() else sorted(path.glob("*.creds"))
            self._creds = {f.stem: f for f in files if re.fullmatch(AI_ID_PATTERN, f.stem)}
            if not self._creds:
                raise ValueError(f"{path}: no <ai id>.creds file (o_… or a_…)")
        elif not dev:
            raise ValueError("give creds_dir (a directory of <id>.creds files, or one .creds file) or dev=True")

    @property
    def listed(self) -> list[str]:
        """The identities offered on the login page (none in dev mode: the id is typed)."""
        return sorted(self._creds)

    @property
    def single(self) -> str | None:
        """The only identity, when the console was started with one credentials file."""
        return next(iter(self._creds)) if len(self._creds) == 1 and not self.dev else None

    def problem(self, ai_id: str) -> str | None:
        """Why the console may not act as ``ai_id``, or None when it may."""
        if not re.fullmatch(AI_ID_PATTERN, ai_id):
            return "An AI id is o_ or a_ followed by 4–32 lowercase letters or digits."
        if self._creds and ai_id not in self._creds:
            return "The console holds no credentials for that identity."
        return None

    def creds_for(self, ai_id: str) -> str | None:
        path = self._creds.get(ai_id)
        return str(path) if path is not None else None


class ClientPool:
    """One connected client per identity, made on first use and closed by :meth:`close`."""

    def __init__(self, nats_url: str, identities: Identities, timeout: float = 10.0) -> None:
        self.nats_url = nats_url
        self.identities = identities
        self.timeout = timeout
        self._clients: dict[str, RecallClient] = {}
        self._lock = asyncio.Lock()

    async def client(self, ai_id: str) -> RecallClient:
        found = self._clients.get(ai_id)
        if found is not None:
            return found
        async with self._lock:
            found = self._clients.get(ai_id)
            if found is None:
                found = RecallClient(
                    ai_id, self.nats_url, creds=self.identities.creds_for(ai_id), timeout=self.timeout
                )
                await found.connect()
                log.info("console connected as %s", ai_id)
                self._clients[ai_id] = found
            return found

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            try:
                await client.close()
            except Exception:
                log.exception("closing the console's client of %s", client.ai_id)
