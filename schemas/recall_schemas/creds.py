"""Reading a NATS credentials file (user JWT + nkey seed), for the client and the hub's tools alike.

Checked before nats-py sees the file: given a file without a JWT, nats-py loops forever. The JWT's claims are
read *unverified* — the server verifies; this only reads the name an identity was issued.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

CREDS_PATTERN = re.compile(
    r"-----BEGIN NATS USER JWT-----\s*\n\s*(?P<jwt>[A-Za-z0-9_\-.]+)\s*\n.*?"
    r"-----BEGIN USER NKEY SEED-----\s*\n\s*(?P<seed>SU[A-Z2-7]+)\s*\n",
    re.DOTALL,
)


def parse_creds(text: str) -> tuple[str, str]:
    """``(jwt, seed)`` of a credentials file's text; :class:`ValueError` if it is not one."""
    match = CREDS_PATTERN.search(text)
    if match is None:
        raise ValueError("not a NATS credentials file (user JWT + nkey seed)")
    return match["jwt"], match["seed"]


def jwt_claims(token: str) -> dict[str, Any]:
    """The claims of a JWT, unverified; :class:`ValueError` if it is not one."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError) as exc:
        raise ValueError("not a JWT") from exc
    if not isinstance(claims, dict):
        raise ValueError("not a JWT")
    return claims
