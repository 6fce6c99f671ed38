"""Identifier types: every id is a one-letter kind prefix, an underscore and 4–32 lowercase letters/digits.

Ids travel inside NATS subjects (`recall.v1.req.<ai_id>.<op>`), so the alphabet excludes `.`, `*`, `>`
and whitespace by construction.
"""

from __future__ import annotations

import secrets
from typing import Annotated

from pydantic import StringConstraints

_BODY = r"[a-z0-9]{4,32}"

BEAD_ID_PATTERN = rf"^b_{_BODY}$"
GROUP_ID_PATTERN = rf"^g_{_BODY}$"
SESSION_ID_PATTERN = rf"^s_{_BODY}$"
BeadId = Annotated[str, StringConstraints(pattern=BEAD_ID_PATTERN)]
GroupId = Annotated[str, StringConstraints(pattern=GROUP_ID_PATTERN)]
SessionId = Annotated[str, StringConstraints(pattern=SESSION_ID_PATTERN)]
OpsId = Annotated[str, StringConstraints(pattern=rf"^o_{_BODY}$")]
AgentId = Annotated[str, StringConstraints(pattern=rf"^a_{_BODY}$")]
AiId = Annotated[str, StringConstraints(pattern=rf"^[oa]_{_BODY}$")]
"""An AI identity: an ops (`o_…`) or an agent (`a_…`)."""

AI_ID_PATTERN = rf"^[oa]_{_BODY}$"
ServiceId = Annotated[str, StringConstraints(pattern=rf"^svc_{_BODY}$")]
"""A service that publishes events (e.g. session events on behalf of agents); never a caller of the API."""
SERVICE_ID_PATTERN = rf"^svc_{_BODY}$"


def new_id(kind: str) -> str:
    """A fresh random id of the given kind (`b`, `g`, `s`, …): 16 lowercase hex digits."""
    return f"{kind}_{secrets.token_hex(8)}"
