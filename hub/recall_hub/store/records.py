"""Conversion between graph nodes/edges and the wire models."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from falkordb import Edge
from recall_schemas import MemoryBead, Relationship, RelationshipProperties, RelType

from recall_hub.store.trust_marks import trust_marks_of
from recall_hub.timeutil import from_ms


def content_hash(content: str) -> str:
    """sha256 of the content with whitespace collapsed and case folded."""
    normalised = " ".join(content.split()).casefold()
    return hashlib.sha256(normalised.encode()).hexdigest()


def bead_from_props(p: Mapping[str, Any]) -> MemoryBead:
    return MemoryBead.model_validate(bead_fields(p))


def bead_fields(p: Mapping[str, Any]) -> dict[str, Any]:
    """A bead's stored properties as :class:`MemoryBead`'s fields (what :func:`bead_from_props` validates; the
    beads a hub holds are made once per version, :meth:`~recall_hub.store.bead_cache.BeadCache.bead`)."""
    return {
        "bead_id": p["bead_id"],
        "title": p["title"],
        "content": p.get("content", ""),
        "content_hash": p["content_hash"],
        "bead_type": p["bead_type"],
        "importance": p["importance"],
        "tags": p.get("tags") or [],
        "created_at": from_ms(p["created_at"]),
        "updated_at": from_ms(p["updated_at"]),
        "accessed_at": from_ms(p["accessed_at"]),
        "created_by": p["created_by"],
        "session_id": p.get("session_id"),
        "subsession_id": p.get("subsession_id"),
        "group_id": p.get("group_id"),
        "visibility": p["visibility"],
        "metadata": json.loads(p.get("metadata") or "{}"),
        "status": p.get("status", "active"),
        "provenance": p.get("provenance", "authored"),
        "corroborated_by": p.get("corroborated_by") or [],
        "version": p.get("version") or 1,
        "trust": trust_marks_of(p),
        "valid_from": from_ms(p["valid_from"]) if p.get("valid_from") is not None else None,
        "valid_to": from_ms(p["valid_to"]) if p.get("valid_to") is not None else None,
    }


def relationship_from_edge(edge: Edge, from_id: str, to_id: str) -> Relationship:
    return relationship_from_props(edge.relation, from_id, to_id, edge.properties)


def relationship_from_props(rel_type: str, from_id: str, to_id: str, p: Mapping[str, Any]) -> Relationship:
    return Relationship(
        from_id=from_id,
        to_id=to_id,
        rel_type=RelType(rel_type),
        properties=RelationshipProperties(
            strength=p.get("strength"),
            similarity=p.get("similarity"),
            replaces=p.get("replaces"),
            metadata=json.loads(p.get("metadata") or "{}"),
        ),
        created_at=from_ms(p["created_at"]),
        created_by=p["created_by"],
    )


def relationship_props(props: RelationshipProperties) -> dict[str, Any]:
    """Edge properties as stored (maps are not graph values, so metadata is JSON text)."""
    return {
        "strength": props.strength,
        "similarity": props.similarity,
        "replaces": props.replaces,
        "metadata": json.dumps(props.metadata, sort_keys=True),
    }


def rel_label(rel_type: RelType) -> str:
    """An edge label for Cypher. Labels cannot be parameters; this only ever returns an enum member."""
    return RelType(rel_type).value
