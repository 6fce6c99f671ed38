"""Which hub identities the console may act as, and with which credentials.

Two ways to know which identities exist:

* **dev** (NATS without auth): any AI id typed on the login page (checked against the AI id pattern);
* **credentials**: ``creds_dir`` is a directory of ``<id>.creds`` files (the login page lists those ids)
  or one ``.creds`` file (the console is that identity alone and needs no login).

The console never reads FalkorDB or Redis: every page is made of hub replies to that identity.
"""

from __future__ import annotations

import re
from pathlib import Path

from recall_schemas.ids import AI_ID_PATTERN


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
