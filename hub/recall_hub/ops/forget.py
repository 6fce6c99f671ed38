"""Forgetting beads: ``forget_bead``, ``forget_by_author``, ``list_forgotten``, ``allow_forgotten``.

Who may forget a bead is who may delete it: its creator, or for a group bead the group's ops. The
bead is replaced by a tombstone in one atomic query (:meth:`recall_hub.store.forget.ForgetStore.forget`);
the after-commit work removes its vector and keyword entries and logs a ``forgotten`` change without
content; then the bead's content is erased from the change logs, the servers' own logs and the files on
disk (:mod:`recall_hub.ops.erasure`).
A tombstone is seen only by who forgot the bead and, for a group bead, the group's ops; to everyone
else a forgotten bead is missing, like any bead they cannot see.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from recall_schemas import (
    MAX_LISTED_IDS,
    AllowForgotten,
    Forbidden,
    ForgetBead,
    ForgetByAuthor,
    ForgottenByAuthor,
    ListForgotten,
    NotFound,
    RecallError,
    Tombstone,
    TombstoneList,
)

from recall_hub.context import HubContext
from recall_hub.ops.after_commit import settle_quietly
from recall_hub.ops.deny_list import encode_vector, forget_store
from recall_hub.ops.groups import role_in
from recall_hub.retrieval.embedding import bead_text, embed_texts
from recall_hub.timeutil import from_ms, now_ms

log = logging.getLogger(__name__)

BATCH = 200
"""Beads forgotten per atomic query by ``forget_by_author``."""


def _tombstone(props: Mapping[str, Any]) -> Tombstone:
    return Tombstone(**{**props, "forgotten_at": from_ms(int(props["forgotten_at"]))})


async def _with_vectors(ctx: HubContext, beads: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows for :meth:`ForgetStore.forget`: each bead's id and the embedding its near-duplicates are
    refused by. Without an embedder the tombstones deny the exact content only."""
    rows = [{"id": b["bead_id"], "vector": None, "model": None} for b in beads]
    try:
        vectors = await embed_texts(ctx, [bead_text(b) for b in beads])
    except RecallError as exc:
        log.warning("forgetting %d bead(s) without their embedding (near duplicates not denied): %s", len(beads), exc)
        return rows
    for row, vector in zip(rows, vectors, strict=True):
        row.update(vector=encode_vector(vector), model=ctx.vectors.model_id)
    return rows


async def _after_forget(ctx: HubContext, bead_ids: Sequence[str]) -> None:
    """The forgotten beads' after-commit work (vector, keyword entry, a ``forgotten`` change without content);
    their erasure from the change logs, the servers' logs and files is owed by their tombstones and starts at
    once (:mod:`recall_hub.ops.erasure`). Meanwhile the change feed withholds snapshots of beads its reader
    cannot see."""
    for bead_id in bead_ids:
        await settle_quietly(ctx, bead_id)
    ctx.forgotten.set()


async def forget_bead(ctx: HubContext, caller: str, req: ForgetBead) -> Tombstone:
    store = forget_store(ctx)
    found = await store.forgettable(caller, req.bead_id)
    if found is None:
        raise NotFound(f"bead {req.bead_id} not found")
    if not found["may"]:
        raise Forbidden(f"only the creator (or the group's ops) may forget bead {req.bead_id}")
    done = await store.forget(
        caller, await _with_vectors(ctx, [found]), reason=req.reason, denied=not req.allow_again, now=now_ms()
    )
    if req.bead_id not in done:  # gone between the two queries
        raise NotFound(f"bead {req.bead_id} not found")
    forgotten, tombstone = done[req.bead_id]
    if not forgotten:
        raise Forbidden(f"only the creator (or the group's ops) may forget bead {req.bead_id}")
    await _after_forget(ctx, [req.bead_id])
    return _tombstone(tombstone)


async def forget_by_author(ctx: HubContext, caller: str, req: ForgetByAuthor) -> ForgottenByAuthor:
    """Every bead ``req.ai_id`` created that the caller may modify: all of them when the caller is that
    identity, otherwise those of the groups the caller is ops of. A batch at a time, each atomic."""
    store = forget_store(ctx)
    forgotten: list[str] = []
    scopes: Counter[str] = Counter()
    while beads := await store.authored(caller, req.ai_id, BATCH):
        done = await store.forget(
            caller, await _with_vectors(ctx, beads), reason=req.reason, denied=not req.allow_again, now=now_ms()
        )
        batch = [bead_id for bead_id, (ok, _) in done.items() if ok]
        for bead_id in batch:
            tombstone = done[bead_id][1]
            scopes[tombstone["group_id"] if tombstone["visibility"] == "group" else tombstone["visibility"]] += 1
        forgotten += batch
        await _after_forget(ctx, batch)
        if not batch:
            break  # nothing the caller may forget was left (rights changed between the two queries)
    log.info("%s forgot %d bead(s) of %s", caller, len(forgotten), req.ai_id)
    return ForgottenByAuthor(
        ai_id=req.ai_id, forgotten=len(forgotten), by_scope=dict(scopes), bead_ids=forgotten[:MAX_LISTED_IDS]
    )


async def list_forgotten(ctx: HubContext, caller: str, req: ListForgotten) -> TombstoneList:
    if req.group_id is not None and await role_in(ctx, caller, req.group_id) is None:
        raise NotFound(f"group {req.group_id} not found")
    rows = await forget_store(ctx).listing(caller, req.group_id, req.limit)
    return TombstoneList(tombstones=[_tombstone(row) for row in rows])


async def allow_forgotten(ctx: HubContext, caller: str, req: AllowForgotten) -> Tombstone:
    tombstone = await forget_store(ctx).allow(caller, req.bead_id, now_ms())
    if tombstone is None:
        raise NotFound(f"forgotten bead {req.bead_id} not found")
    return _tombstone(tombstone)
