"""Events published on JetStream (``recall.v1.evt.<publisher>.<kind>``) and applied by the hub.

The publisher is the subject's identity token, which NATS permissions bind to the connection. Each
event carries an ``event_id``: redelivered or replayed events change nothing twice.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field, TypeAdapter

from .coordination import TransferOps
from .enums import Role
from .ids import AiId, GroupId, SessionId
from .models import WireModel

EventId = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:\-]+$")]


class EventBase(WireModel):
    event_id: EventId
    occurred_at: datetime | None = None


class SessionStarted(EventBase):
    kind: Literal["session.started"] = "session.started"
    session_id: SessionId
    ai_id: AiId | None = Field(default=None, description="Whose session; default the publisher")
    group_id: GroupId | None = None


class SessionContinued(EventBase):
    kind: Literal["session.continued"] = "session.continued"
    session_id: SessionId
    ai_id: AiId | None = None


class SessionMigrated(EventBase):
    kind: Literal["session.migrated"] = "session.migrated"
    old_session_id: SessionId
    new_session_id: SessionId
    ai_id: AiId | None = None


class SessionEnded(EventBase):
    kind: Literal["session.ended"] = "session.ended"
    session_id: SessionId
    ai_id: AiId | None = None


class GroupCreated(EventBase):
    kind: Literal["group.created"] = "group.created"
    group_id: GroupId
    name: Annotated[str, Field(min_length=1, max_length=200)]


class MemberAdded(EventBase):
    kind: Literal["group.member_added"] = "group.member_added"
    group_id: GroupId
    ai_id: AiId
    role: Role = Role.AGENT


class MemberRemoved(EventBase):
    kind: Literal["group.member_removed"] = "group.member_removed"
    group_id: GroupId
    ai_id: AiId


class OpsTransferred(EventBase):
    kind: Literal["ops.transfer"] = "ops.transfer"
    transfer: TransferOps


Event = Annotated[
    SessionStarted
    | SessionContinued
    | SessionMigrated
    | SessionEnded
    | GroupCreated
    | MemberAdded
    | MemberRemoved
    | OpsTransferred,
    Field(discriminator="kind"),
]
EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)
EVENT_KINDS: tuple[str, ...] = (
    "session.started",
    "session.continued",
    "session.migrated",
    "session.ended",
    "group.created",
    "group.member_added",
    "group.member_removed",
    "ops.transfer",
)


class DeadLetter(WireModel):
    """What the hub records on ``recall.v1.dlq.<kind>`` for an event that can never apply.

    Bounded whatever the event held: the payload is an excerpt (its size and hash identify the whole),
    the subject and reason are cut, so a letter always fits the dead-letter stream.
    """

    subject: str = Field(max_length=512)
    publisher: str | None = Field(max_length=64)
    event_id: str | None = Field(default=None, max_length=128, description="When the payload named a valid one")
    reason: str = Field(max_length=2048)
    code: str = Field(max_length=32)
    payload: str = Field(
        max_length=16_384,
        description="The first bytes of the payload (RECALL_DEAD_LETTER_EXCERPT_BYTES), UTF-8, replaced where invalid",
    )
    payload_bytes: int = Field(ge=0, description="Size of the whole payload")
    payload_sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="Hash of the whole payload")
    truncated: bool = Field(description="Whether ``payload`` is shorter than the original")
    deliveries: int = Field(default=1, ge=1, description="Delivery attempts before the event was given up")
    at: datetime
