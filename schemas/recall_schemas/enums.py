"""Closed vocabularies of the wire contract."""

from __future__ import annotations

from enum import StrEnum


class BeadType(StrEnum):
    FACT = "fact"
    DECISION = "decision"
    OBSERVATION = "observation"
    FINDING = "finding"
    TODO = "todo"
    HANDOFF = "handoff"
    SUMMARY = "summary"
    NOTE = "note"
    QUESTION = "question"
    EVENT = "event"
    TOPIC = "topic"
    """A topic hub: the beads about one topic link to it PART_OF (searches leave hubs out by default)."""


class Visibility(StrEnum):
    PRIVATE = "private"
    """Only the creator."""
    GROUP = "group"
    """Current members of the bead's group."""
    GLOBAL = "global"
    """Every identity on the hub."""


class BeadStatus(StrEnum):
    ACTIVE = "active"
    ARCHIVED = "archived"


class Provenance(StrEnum):
    """How a bead came to be, strongest first: observed > authored > recorded > derived."""

    OBSERVED = "observed"
    AUTHORED = "authored"
    RECORDED = "recorded"
    DERIVED = "derived"


class RelType(StrEnum):
    FOLLOWS_FROM = "FOLLOWS_FROM"
    RELATED_TO = "RELATED_TO"
    UPDATES = "UPDATES"
    PART_OF = "PART_OF"


class Direction(StrEnum):
    OUT = "out"
    IN = "in"
    BOTH = "both"


class Role(StrEnum):
    OPS = "ops"
    AGENT = "agent"
