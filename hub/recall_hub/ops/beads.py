"""Bead lifecycle: create, get, update, delete."""

from __future__ import annotations

import json
import logging
from typing import Any

from recall_schemas import (
    BeadUpdates,
    CreateBead,
    DeleteBead,
    Deleted,
    Forbidden,
    GetBead,
    InvalidRequest,
    MemoryBead,
    NotFound,
    UpdateBead,
    Visibility,
    new_id,
)
from recall_schemas.models import RESERVED_METADATA_PREFIX

from recall_hub.context import HubContext
from recall_hub.ops import autolinks
from recall_hub.ops.groups import role_in
from recall_hub.ops.indexing import bead_text, embed_texts, index_beads, refresh_attributes, unindex
from recall_hub.store.records import bead_from_node, content_hash
from recall_hub.store.visibility import MY_GROUPS, may_modify, visible
from recall_hub.timeutil import now_ms

log = logging.getLogger(__name__)


def _check_metadata(metadata: dict[str, Any] | None) -> None:
    if metadata and any(key.startswith(RESERVED_METADATA_PREFIX) for key in metadata):
        raise InvalidRequest(f"metadata keys starting with {RESERVED_METADATA_PREFIX!r} are reserved")


async def create_bead(ctx: HubContext, caller: str, req: CreateBead) -> MemoryBead:
    """Store a bead as one atomic query.

    The same query checks group membership and session ownership and merges on the idempotency
    key, so a retried create returns the first bead and a refused one writes nothing.
    """
    _check_metadata(req.metadata)
    now = now_ms()
    bead_id = new_id("b")
    props = {
        "bead_id": bead_id,
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
    }
    idem = f"{caller}:{req.idempotency_key or bead_id}"
    cypher = "MERGE (me:AI {ai_id: $caller}) WITH me "
    if req.group_id is not None:
        cypher += "MATCH (me)-[:MEMBER_OF]->(:Group {group_id: $group_id}) WITH me "
    if req.session_id is not None:
        cypher += (
            "MERGE (s:Session {session_id: $session_id}) "
            "ON CREATE SET s.owner = $caller, s.created_at = $now, s.group_id = $group_id "
            "WITH me, s WHERE s.owner = $caller "
        )
    cypher += "MERGE (b:Bead {idem: $idem}) ON CREATE SET b += $props RETURN b"
    rows = await ctx.graph.query(
        cypher,
        {
            "caller": caller,
            "group_id": req.group_id,
            "session_id": req.session_id,
            "now": now,
            "idem": idem,
            "props": props,
        },
    )
    if rows:
        node = rows[0][0]
        if node.properties["bead_id"] == bead_id:  # new, not an idempotent replay
            await _after_create(ctx, node.properties)
            return bead_from_node(node)
        # A replay returns the first bead only while the caller may still see it.
        return await _visible_bead(ctx, caller, node.properties["bead_id"])
    if req.group_id is not None and await role_in(ctx, caller, req.group_id) is None:
        raise NotFound(f"group {req.group_id} not found")
    raise Forbidden(f"session {req.session_id} belongs to another identity")


async def _after_create(ctx: HubContext, props: dict[str, Any]) -> None:
    """Embed the new bead and add its automatic links. The bead is already stored: a failure
    here is logged and repaired later, never reported as a failed create."""
    try:
        await autolinks.link_session_predecessor(ctx, props)
        vectors = await embed_texts(ctx, [bead_text(props)])
        if await index_beads(ctx, [props], vectors):
            await autolinks.link_similar(ctx, props, vectors[0])
        await ctx.feed.bead_changed(props["created_by"], None, props)
    except Exception:  # the bead is stored; vectors are repaired on start-up or by `recall reindex`
        log.exception("post-create work for %s incomplete", props["bead_id"])


async def _visible_bead(ctx: HubContext, caller: str, bead_id: str) -> MemoryBead:
    rows = await ctx.graph.ro_query(
        MY_GROUPS + f"MATCH (b:Bead {{bead_id: $bead_id}}) WHERE {visible('b')} RETURN b",
        {"caller": caller, "bead_id": bead_id},
    )
    if not rows:
        raise NotFound(f"bead {bead_id} not found")
    return bead_from_node(rows[0][0])


async def get_bead(ctx: HubContext, caller: str, req: GetBead) -> MemoryBead:
    rows = await ctx.graph.query(
        MY_GROUPS + f"MATCH (b:Bead {{bead_id: $bead_id}}) WHERE {visible('b')} "
        "SET b.accessed_at = $now RETURN b",
        {"caller": caller, "bead_id": req.bead_id, "now": now_ms()},
    )
    if not rows:
        raise NotFound(f"bead {req.bead_id} not found")
    return bead_from_node(rows[0][0])


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
    # The bead's scope after the change: a group bead needs a group, and naming a group (new or
    # kept by a group bead) needs membership of it — checked inside the same atomic query.
    scope_ok = (
        "(new_visibility <> 'group' OR new_group IS NOT NULL) AND "
        "(new_group IS NULL OR new_group IN my_groups OR (NOT $group_changed AND new_visibility <> 'group'))"
    )
    rows = await ctx.graph.query(
        MY_GROUPS + f"MATCH (b:Bead {{bead_id: $bead_id}}) WHERE {visible('b')} "
        f"WITH b, my_groups, {may_modify('b')} AS may, coalesce($changes.visibility, b.visibility) AS new_visibility, "
        "CASE WHEN $group_changed THEN $changes.group_id ELSE b.group_id END AS new_group "
        f"WITH b, may, {scope_ok} AS scope_ok, properties(b) AS before, new_visibility, new_group "
        "FOREACH (_ IN CASE WHEN may AND scope_ok THEN [1] ELSE [] END | SET b += $changes) "
        "RETURN b, may, scope_ok, before, new_visibility, new_group",
        {"caller": caller, "bead_id": req.bead_id, "changes": changes, "group_changed": "group_id" in changes},
    )
    if not rows:
        raise NotFound(f"bead {req.bead_id} not found")
    node, may, scope_ok, before, new_visibility, new_group = rows[0]
    if not may:
        raise Forbidden(f"only the creator (or the group's ops) may change bead {req.bead_id}")
    if not scope_ok:
        if new_visibility == Visibility.GROUP.value and new_group is None:
            raise InvalidRequest("visibility 'group' needs a group_id")
        raise NotFound(f"group {new_group} not found")
    if {"title", "content", "visibility", "group_id"} & changes.keys():
        await index_beads(ctx, [node.properties])
    else:
        await refresh_attributes(ctx, node.properties)
    await ctx.feed.bead_changed(caller, before, node.properties)
    return bead_from_node(node)


async def delete_bead(ctx: HubContext, caller: str, req: DeleteBead) -> Deleted:
    rows = await ctx.graph.query(
        MY_GROUPS + f"MATCH (b:Bead {{bead_id: $bead_id}}) WHERE {visible('b')} "
        f"WITH b, {may_modify('b')} AS may "
        "WITH b, may, properties(b) AS before "
        "FOREACH (_ IN CASE WHEN may THEN [1] ELSE [] END | DETACH DELETE b) "
        "RETURN may, before",
        {"caller": caller, "bead_id": req.bead_id},
    )
    if not rows:
        raise NotFound(f"bead {req.bead_id} not found")
    if not rows[0][0]:
        raise Forbidden(f"only the creator (or the group's ops) may delete bead {req.bead_id}")
    before = rows[0][1]
    await unindex(ctx, before)
    await ctx.feed.bead_changed(caller, before, None)
    return Deleted(bead_id=req.bead_id, deleted=True)
