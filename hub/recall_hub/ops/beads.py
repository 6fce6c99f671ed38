"""Bead lifecycle: create, get, update, delete.

Each write is one atomic store query that checks the caller's rights, changes the bead and records
its after-commit work in the outbox; the hub then settles that work before replying
(:func:`recall_hub.ops.after_commit.settle`), and the outbox sweep finishes it if the hub dies first.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from recall_schemas import (
    BeadUpdates,
    CreateBead,
    DeleteBead,
    Deleted,
    GetBead,
    InvalidRequest,
    MemoryBead,
    NotFound,
    UpdateBead,
    new_id,
)
from recall_schemas.models import RESERVED_METADATA_PREFIX

from recall_hub.context import HubContext
from recall_hub.ops.after_commit import settle_quietly
from recall_hub.store.records import bead_from_props, content_hash
from recall_hub.timeutil import now_ms

log = logging.getLogger(__name__)

TEXT_FIELDS = {"title", "content"}


def _check_metadata(metadata: dict[str, Any] | None) -> None:
    if metadata and any(key.startswith(RESERVED_METADATA_PREFIX) for key in metadata):
        raise InvalidRequest(f"metadata keys starting with {RESERVED_METADATA_PREFIX!r} are reserved")


async def create_bead(ctx: HubContext, caller: str, req: CreateBead) -> MemoryBead:
    """Store a bead as one atomic query.

    The same query checks group membership and session ownership and merges on the idempotency
    key, so a retried create returns the first bead (finishing its after-commit work if a crash
    interrupted it) and a refused one writes nothing.
    """
    _check_metadata(req.metadata)
    now = now_ms()
    props = {
        "bead_id": new_id("b"),
        "title": req.title,
        "content": req.content,
        "content_hash": content_hash(req.content or req.title),
        "bead_type": req.bead_type.value,
        "importance": req.importance,
        "tags": list(dict.fromkeys(req.tags)),
        "created_at": now,
        "updated_at": now,
        "accessed_at": now,
        "created_by": caller,
        "session_id": req.session_id,
        "subsession_id": req.subsession_id,
        "group_id": req.group_id,
        "visibility": req.visibility.value,
        "metadata": json.dumps(req.metadata, sort_keys=True),
        "status": "active",
        "provenance": req.provenance.value,
        "corroborated_by": [],
        "version": 1,
    }
    idem = f"{caller}:{req.idempotency_key or props['bead_id']}"
    outcome = await ctx.beads.create(caller, props, idem=idem)
    if outcome is None:
        raise NotFound(f"group {req.group_id} not found")
    stored, created = outcome
    await settle_quietly(ctx, stored["bead_id"])
    if created:
        return bead_from_props(stored)
    # A replay returns the first bead only while the caller may still see it.
    visible = await ctx.beads.get(caller, stored["bead_id"])
    if visible is None:
        raise NotFound(f"bead {stored['bead_id']} not found")
    return bead_from_props(visible)


async def get_bead(ctx: HubContext, caller: str, req: GetBead) -> MemoryBead:
    props = await ctx.beads.get(caller, req.bead_id, touch=True)
    if props is None:
        raise NotFound(f"bead {req.bead_id} not found")
    return bead_from_props(props)


def _changes(updates: BeadUpdates) -> dict[str, Any]:
    fields = updates.model_dump(exclude_unset=True, mode="json")
    if "metadata" in fields:
        _check_metadata(fields["metadata"])
        fields["metadata"] = json.dumps(fields["metadata"], sort_keys=True)
    if "tags" in fields:
        fields["tags"] = list(dict.fromkeys(fields["tags"]))
    if "content" in fields:
        fields["content_hash"] = content_hash(fields["content"])
    for key in ("title", "bead_type", "importance", "status", "visibility"):
        if key in fields and fields[key] is None:
            raise InvalidRequest(f"{key} cannot be null")
    return fields


async def update_bead(ctx: HubContext, caller: str, req: UpdateBead) -> MemoryBead:
    changes = _changes(req.updates)
    if not changes:
        raise InvalidRequest("updates is empty")
    changes["updated_at"] = now_ms()
    _, after = await ctx.beads.update(
        caller, req.bead_id, changes, if_version=req.if_version, text_changed=bool(TEXT_FIELDS & changes.keys())
    )
    await settle_quietly(ctx, req.bead_id)
    return bead_from_props(after)


async def delete_bead(ctx: HubContext, caller: str, req: DeleteBead) -> Deleted:
    await ctx.beads.delete(caller, req.bead_id, if_version=req.if_version)
    await settle_quietly(ctx, req.bead_id)
    return Deleted(bead_id=req.bead_id, deleted=True)
