"""Bead lifecycle: create, get, update, edit, delete.

Each write is one atomic store query that checks the caller's rights, changes the bead and records
its after-commit work in the outbox; the hub then settles that work before replying
(:func:`recall_hub.ops.after_commit.settle`), and the outbox sweep finishes it if the hub dies first.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import random
from typing import Any

from recall_schemas import (
    BeadUpdates,
    Conflict,
    CreateBead,
    CreateBeads,
    CreatedBeads,
    CreatedItem,
    DeleteBead,
    Deleted,
    EditBead,
    GetBead,
    InvalidRequest,
    MemoryBead,
    NotFound,
    RecallError,
    UpdateBead,
    new_id,
)
from recall_schemas.models import RESERVED_METADATA_PREFIX

from recall_hub.context import HubContext
from recall_hub.ops.after_commit import Created, settle_created, settle_quietly
from recall_hub.ops.deny_list import check_not_forgotten, check_update_not_forgotten, refuse_forgotten
from recall_hub.ops.time_fields import as_of_ms, validity_changes, validity_props
from recall_hub.retrieval.embedding import embed_early
from recall_hub.store.as_of import AsOfReads
from recall_hub.store.beads import BeadEdit
from recall_hub.store.records import bead_from_props, content_hash
from recall_hub.store.replica import request_scope
from recall_hub.store.sessions import AUTO_LINK_NOTE
from recall_hub.store.vectors import scope_of
from recall_hub.timeutil import new_moments, now_ms

log = logging.getLogger(__name__)

TEXT_FIELDS = {"title", "content"}
EDIT_ATTEMPTS = 64
"""Reads of the metadata an ``edit_bead`` of metadata keys may take while others keep changing it."""


def _check_metadata(metadata: dict[str, Any] | None) -> None:
    if metadata and any(key.startswith(RESERVED_METADATA_PREFIX) for key in metadata):
        raise InvalidRequest(f"metadata keys starting with {RESERVED_METADATA_PREFIX!r} are reserved")


def new_bead_props(caller: str, req: CreateBead, now: int) -> tuple[dict[str, Any], str]:
    """The stored properties of a new bead, and its idempotency key (scoped to the caller)."""
    _check_metadata(req.metadata)
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
        **validity_props(req.valid_from, req.valid_to),
    }
    return props, f"{caller}:{req.idempotency_key or props['bead_id']}"


async def _as_created(ctx: HubContext, caller: str, stored: dict[str, Any], created: bool) -> MemoryBead:
    if created:
        return bead_from_props(stored)
    # A replay returns the first bead only while the caller may still see it.
    visible = await ctx.beads.get(caller, stored["bead_id"])
    if visible is None:
        raise NotFound(f"bead {stored['bead_id']} not found")
    return bead_from_props(visible)


async def _settle_in_background(
    ctx: HubContext, stored: dict[str, Any], marked: asyncio.Future[int | None], relinked: list[str]
) -> None:
    """Handed-off after-commit work is a request of its own: done once the replicas have its writes too, so
    a read that waits for it (``BackgroundWork.wait_for``) finds them on a replica. It follows the work of
    the creates marked before it, as an inline create follows theirs: their vectors are what its auto-links
    are found among. Its mark is cleared when it ends (done, or left to be tried again), never before the create
    made it."""
    bead_id = stored["bead_id"]
    try:
        async with request_scope(stale_reads=False):
            at = await marked  # None: not marked (Redis failed), no earlier marks to tell either
            # Marked: the request logged the bead (the same gather); its work need not again.
            await settle_quietly(ctx, bead_id, until=0 if at is None else at - 1,
                                 created=Created(stored, linked=True, logged=at is not None, relinked=relinked))
    finally:
        ctx.early_vectors.drop(bead_id)
        with contextlib.suppress(Exception):
            await marked
            await ctx.outbox.clear_handed_off(bead_id)


async def create_bead(ctx: HubContext, caller: str, req: CreateBead) -> MemoryBead:
    """Store a bead as one atomic query.

    The same query checks group membership and session ownership and merges on the idempotency
    key, so a retried create returns the first bead (finishing its after-commit work if a crash
    interrupted it) and a refused one writes nothing.
    """
    props, idem = new_bead_props(caller, req, new_moments())
    embed_early(ctx, props)  # the model's time overlaps the checks and the commit below
    handed_off = False
    try:
        # The write checks the deny-list itself; only when it stores nothing (the caller is not in the group,
        # the text was forgotten, or the scope's deny-list holds vectors to compare it with) is the whole check
        # made, for its refusal or before writing again — forgetting is rare, so a create is one query. Where a
        # write lately stored nothing at first, the check comes first for a while (ctx.check_first).
        scope = scope_of(props)
        follows = AUTO_LINK_NOTE if ctx.settings.auto_follows else None
        outcome = None
        if scope not in ctx.check_first:
            outcome = await ctx.beads.create(caller, props, idem=idem, similar_checked=False, follows=follows)
            if outcome is None:
                ctx.check_first.add(scope)
        if outcome is None:
            await check_not_forgotten(ctx, caller, props, idem)
            outcome = await ctx.beads.create(caller, props, idem=idem, follows=follows)
        if outcome is None:
            await check_not_forgotten(ctx, caller, props)  # a forget that landed between the check and the write
            raise NotFound(f"group {req.group_id} not found")
        stored, created = outcome.props, outcome.created
        bead_id = stored["bead_id"]
        # Linked into its session's chain by the create's own query (where auto-links apply); the beads it re-linked
        # follow it now: the words they follow changed.
        relinked = outcome.relinked or []
        marked: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        handed_off = created and ctx.settings.create_settle == "background" and ctx.background.try_hand_off(
            lambda: _settle_in_background(ctx, stored, marked, relinked), name=f"recall-settle-{bead_id}", key=bead_id
        )
        if not handed_off:
            as_created = Created(stored, linked=True, relinked=relinked) if created else None
            await settle_quietly(ctx, bead_id, created=as_created)
        else:
            # The keyword index follows the log: logged now, a search right after finds the bead by its words —
            # and by the words of the bead it follows, as the handed-off work would have. The mark makes every read
            # that starts after the reply, at any hub, wait for the rest of the work.
            at = None
            try:
                if relinked:
                    await ctx.index_log.append_many(relinked)
                _, at = await asyncio.gather(ctx.index_log.append(bead_id), ctx.outbox.mark_handed_off(bead_id, scope))
            finally:
                marked.set_result(at)
    finally:
        if not handed_off:  # a refused create, a replay, or a settle that took its vectors or did without
            ctx.early_vectors.drop(props["bead_id"])
    return await _as_created(ctx, caller, stored, created)


async def create_beads(ctx: HubContext, caller: str, req: CreateBeads) -> CreatedBeads:
    """:func:`create_bead` for many beads: one query stores them all (each checked and idempotent on
    its own), then their after-commit work runs in bulk (one embedder batch, one query per step)."""
    start = new_moments(len(req.beads))
    items: list[CreatedItem | None] = [None] * len(req.beads)
    pending: list[tuple[int, dict[str, Any], str]] = []
    for i, bead in enumerate(req.beads):
        try:
            # A millisecond apart, in request order: listings and session chains keep the batch's order.
            pending.append((i, *new_bead_props(caller, bead, start + i)))
        except RecallError as exc:
            items[i] = CreatedItem(error=exc.to_reply().error)
    for _, props, _ in pending:
        embed_early(ctx, props)  # the model's time overlaps the checks, the commit and the links below
    try:
        await _create_batch(ctx, caller, req, pending, items)
    finally:
        for _, props, _ in pending:  # those the work did not take: refused, replayed, or it did without
            ctx.early_vectors.drop(props["bead_id"])
    return CreatedBeads(items=[item or CreatedItem() for item in items])


async def _create_batch(
    ctx: HubContext, caller: str, req: CreateBeads, pending: list[tuple[int, dict[str, Any], str]],
    items: list[CreatedItem | None],
) -> None:
    """:func:`create_beads` for the beads whose properties were made: each one's outcome into ``items``."""
    refusals = await refuse_forgotten(
        ctx, caller, [props for _, props, _ in pending], [idem for _, _, idem in pending]
    )
    for (i, _, _), refusal in zip(pending, refusals, strict=True):
        if refusal is not None:
            items[i] = CreatedItem(error=refusal.to_reply().error)
    pending = [p for p, refusal in zip(pending, refusals, strict=True) if refusal is None]
    # A key repeated within the batch names one bead: the first occurrence creates it, the rest replay it.
    first_of: dict[str, int] = {}
    for position, (_, _, idem) in enumerate(pending):
        first_of.setdefault(idem, position)
    unique = sorted(set(first_of.values()))
    written = await ctx.beads.create_many(caller, [pending[p][1:] for p in unique])
    stored: dict[int, tuple[dict[str, Any], bool]] = {}
    for position, (_, _, idem) in enumerate(pending):
        first = first_of[idem]
        if unique.index(first) in written:
            props, created = written[unique.index(first)]
            stored[position] = (props, created and position == first)
    fresh = {props["bead_id"]: props for props, created in written.values() if created}
    await settle_created(ctx, list(fresh), as_created=fresh)
    for props, created in written.values():
        if not created:  # a replay: finish the first create's work if a crash left any
            await settle_quietly(ctx, props["bead_id"])
    for position, (i, props, _) in enumerate(pending):
        try:
            if position not in stored:
                await check_not_forgotten(ctx, caller, props)  # forgotten between the check and the write
                raise NotFound(f"group {req.beads[i].group_id} not found")
            made = await _as_created(ctx, caller, *stored[position])
            items[i] = CreatedItem(bead_id=made.bead_id, created=stored[position][1])
        except RecallError as exc:
            items[i] = CreatedItem(error=exc.to_reply().error)


async def get_bead(ctx: HubContext, caller: str, req: GetBead) -> MemoryBead:
    if req.as_of is not None:  # a look into the past: not an access of the bead
        then = await AsOfReads(ctx.graph).get(caller, req.bead_id, as_of_ms(req.as_of))
        if then is None:
            raise NotFound(f"bead {req.bead_id} not found")
        return bead_from_props(then)
    props = await ctx.beads.get(caller, req.bead_id)
    if props is None:
        raise NotFound(f"bead {req.bead_id} not found")
    props["accessed_at"] = now_ms()
    ctx.accessed.note(req.bead_id, props["accessed_at"])
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
    fields.update(validity_changes(updates))
    for key in ("title", "bead_type", "importance", "status", "visibility"):
        if key in fields and fields[key] is None:
            raise InvalidRequest(f"{key} cannot be null")
    return fields


async def update_bead(ctx: HubContext, caller: str, req: UpdateBead) -> MemoryBead:
    changes = _changes(req.updates)
    if not changes:
        raise InvalidRequest("updates is empty")
    changes["updated_at"] = now_ms()
    await check_update_not_forgotten(ctx, caller, req.bead_id, changes)
    _, after = await ctx.beads.update(
        caller, req.bead_id, changes, if_version=req.if_version, text_changed=bool(TEXT_FIELDS & changes.keys())
    )
    await settle_quietly(ctx, req.bead_id)
    return bead_from_props(after)


async def edit_bead(ctx: HubContext, caller: str, req: EditBead) -> MemoryBead:
    """Tags, importance and metadata keys changed relative to the bead's current state. Tags and importance
    are computed inside the write itself; metadata (stored as one JSON text) is merged here and written only
    while the stored text is still the one merged into — else read again — so no concurrent edit is lost."""
    _check_metadata({**req.set_metadata, **dict.fromkeys(req.remove_metadata)})
    edit = BeadEdit(
        now=now_ms(), add_tags=list(dict.fromkeys(req.add_tags)), remove_tags=req.remove_tags,
        add_importance=req.add_importance,
    )
    for attempt in range(EDIT_ATTEMPTS):
        if req.set_metadata or req.remove_metadata:
            edit = _metadata_edit(edit, await ctx.beads.get(caller, req.bead_id), req)
        after = await ctx.beads.edit(caller, req.bead_id, edit, if_version=req.if_version)
        if after is not None:
            await settle_quietly(ctx, req.bead_id)
            return bead_from_props(after)
        await asyncio.sleep(random.uniform(0, 0.001 * min(attempt + 1, 10)))  # the metadata moved: read it again
    raise Conflict(f"bead {req.bead_id}'s metadata kept changing under {EDIT_ATTEMPTS} attempts; retry")


def _metadata_edit(edit: BeadEdit, props: dict[str, Any] | None, req: EditBead) -> BeadEdit:
    if props is None:
        raise NotFound(f"bead {req.bead_id} not found")
    before = props.get("metadata") or "{}"
    merged = {k: v for k, v in json.loads(before).items() if k not in req.remove_metadata} | req.set_metadata
    return dataclasses.replace(edit, metadata_before=before, metadata_after=json.dumps(merged, sort_keys=True))


async def delete_bead(ctx: HubContext, caller: str, req: DeleteBead) -> Deleted:
    await ctx.beads.delete(caller, req.bead_id, if_version=req.if_version)
    await settle_quietly(ctx, req.bead_id)
    return Deleted(bead_id=req.bead_id, deleted=True)
