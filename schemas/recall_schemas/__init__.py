"""Nexus Recall wire contract: every message of the protocol as a pydantic model."""

from . import coordination, events
from .audit import *  # noqa: F403
from .audit import __all__ as _audit_names
from .capture import *  # noqa: F403
from .capture import __all__ as _capture_names
from .coordination import *  # noqa: F403
from .coordination import __all__ as _coordination_names
from .enums import BeadStatus, BeadType, Direction, Provenance, RelType, Role, Visibility
from .errors import (
    HTTP_STATUS,
    Conflict,
    ErrorBody,
    ErrorCode,
    ErrorReply,
    Forbidden,
    InternalError,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    RecallError,
    RecallTimeout,
    Unauthorized,
    Unavailable,
    describe_validation,
    error_from_reply,
)
from .forget import *  # noqa: F403
from .forget import __all__ as _forget_names
from .history import *  # noqa: F403
from .history import __all__ as _history_names
from .ids import AgentId, AiId, BeadId, GroupId, OpsId, ServiceId, SessionId, new_id
from .models import (
    GraphNode,
    Group,
    Member,
    MemoryBead,
    Relationship,
    RelationshipProperties,
    Subgraph,
    WireModel,
)
from .ops import OPERATIONS, Operation
from .requests import *  # noqa: F403
from .requests import __all__ as _request_names
from .trust import *  # noqa: F403
from .trust import __all__ as _trust_names
from .validity import *  # noqa: F403
from .validity import __all__ as _validity_names

__all__ = [
    "OPERATIONS",
    "AgentId",
    "AiId",
    "BeadId",
    "BeadStatus",
    "BeadType",
    "Conflict",
    "Direction",
    "ErrorBody",
    "ErrorCode",
    "ErrorReply",
    "HTTP_STATUS",
    "Forbidden",
    "GraphNode",
    "Group",
    "GroupId",
    "InternalError",
    "InvalidRequest",
    "Member",
    "MemoryBead",
    "NotFound",
    "Operation",
    "OpsId",
    "PayloadTooLarge",
    "Provenance",
    "RecallError",
    "RecallTimeout",
    "RelType",
    "Relationship",
    "RelationshipProperties",
    "Role",
    "ServiceId",
    "SessionId",
    "Subgraph",
    "Unauthorized",
    "Unavailable",
    "Visibility",
    "WireModel",
    "coordination",
    "describe_validation",
    "error_from_reply",
    "events",
    "new_id",
    *_coordination_names,
    *_capture_names,
    *_request_names,
    *_validity_names,
    *_forget_names,
    *_trust_names,
    *_history_names,
    *_audit_names,
]
