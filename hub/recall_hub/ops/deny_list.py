"""The deny-list of forgotten content: the one check every path that stores a bead goes through.

A bead whose content has the hash of a forgotten bead of the same scope, or whose embedding is at
least ``forget_similarity`` (cosine) close to one, is refused with ``conflict`` (``details.reason =
"forgotten"``) and nothing is stored. Only tombstones that still deny count (``allow_again`` or
``allow_forgotten`` lift them), and only in the scope the forgotten bead lived in: the same content in
another group is not refused, and a group's deny-list answers only for its members (a non-member's
create fails as "group not found" first), so it tells nothing outside the scope.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from recall_schemas import FORGOTTEN_REASON, Conflict

from recall_hub.context import HubContext
from recall_hub.retrieval.embedding import bead_text, embed_texts
from recall_hub.store.forget import ForgetStore
from recall_hub.store.vectors import scope_of

log = logging.getLogger(__name__)


def forget_store(ctx: HubContext) -> ForgetStore:
    return ForgetStore(ctx.graph, ctx.redis, ctx.keys)


def encode_vector(vector: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()


def decode_vector(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype="<f4")


def _refusal(how: str) -> Conflict:
    return Conflict(
        f"this content was forgotten in this scope and may not be stored again ({how})",
        {"reason": FORGOTTEN_REASON, "match": how},
    )


async def refuse_forgotten(
    ctx: HubContext, caller: str, beads: Sequence[Mapping[str, Any]], idems: Sequence[str] | None = None
) -> list[Conflict | None]:
    """For each bead about to be stored (its stored properties), the refusal it gets, or None. With ``idems``
    (each bead's idempotency key), a bead whose key already names a stored bead is a replay and is never
    refused: the create returns the bead stored first.

    One graph query for the exact hashes (and the replays); the texts are embedded only when a denying
    tombstone of one of the scopes carries a vector (forgetting is rare, so a create usually pays one cheap
    query)."""
    if not beads:
        return []
    scopes = [scope_of(b) for b in beads]
    store = forget_store(ctx)
    exact, with_vectors, replays = await store.denials(
        caller, sorted(set(scopes)), sorted({b["content_hash"] for b in beads}), sorted(set(idems or ()))
    )
    replayed = [idems is not None and idems[i] in replays for i in range(len(beads))]
    refusals: list[Conflict | None] = [
        _refusal("exact") if f"{scope} {bead['content_hash']}" in exact and not replay else None
        for scope, bead, replay in zip(scopes, beads, replayed, strict=True)
    ]
    open_ = [i for i, refusal in enumerate(refusals) if refusal is None and not replayed[i]]
    if not with_vectors or not open_:
        return refusals
    denied = await store.deny_vectors(caller, sorted({scopes[i] for i in open_}), ctx.vectors.model_id)
    by_scope: dict[str, list[np.ndarray]] = {}
    for scope, text in denied:
        by_scope.setdefault(scope, []).append(decode_vector(text))
    open_ = [i for i in open_ if scopes[i] in by_scope]
    if not open_:
        return refusals
    vectors = await embed_texts(ctx, [bead_text(beads[i]) for i in open_])
    threshold = ctx.settings.forget_similarity
    for i, vector in zip(open_, vectors, strict=True):
        similarity = float(np.max(np.stack(by_scope[scopes[i]]) @ np.asarray(vector, dtype=np.float32)))
        if similarity >= threshold:
            refusals[i] = _refusal("similar")
    return refusals


async def check_not_forgotten(ctx: HubContext, caller: str, bead: Mapping[str, Any], idem: str | None = None) -> None:
    """:func:`refuse_forgotten` for one bead: raises its refusal."""
    refusal = (await refuse_forgotten(ctx, caller, [bead], None if idem is None else [idem]))[0]
    if refusal is not None:
        raise refusal


MOVING_FIELDS = frozenset({"title", "content", "visibility", "group_id"})


async def check_update_not_forgotten(ctx: HubContext, caller: str, bead_id: str, changes: Mapping[str, Any]) -> None:
    """An update that changes a bead's text or scope is checked as the bead would be after it."""
    if not MOVING_FIELDS & changes.keys():
        return
    current = await ctx.beads.get(caller, bead_id)
    if current is None:
        return  # the update itself answers not_found
    after = {**current, **changes}
    if after["visibility"] == "group" and not after.get("group_id"):
        return  # no scope to check: the update itself refuses a group bead without a group
    await check_not_forgotten(ctx, caller, after)
