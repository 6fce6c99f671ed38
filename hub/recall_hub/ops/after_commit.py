"""The outbox worker: the work that follows a committed write, done once, durably.

A write records its follow-up in the outbox in the same atomic query
(:mod:`recall_hub.store.outbox`). :func:`settle` works off the pending entries of one bead, oldest
first, under the bead's lock (shared by all hubs): the vector in the bead's current scope and no
other, the index-log entry every hub's keyword index applies, the auto-links of a new bead, the
change-feed entries (each logged exactly once) and their
notifications; then it deletes the entry. A step that fails leaves the entry with a retry time;
:func:`sweep` (at start-up and periodically) settles whatever a crash or a failure left behind; work that failed is
first tried again by the hub that started it, within the sweep's grace (:func:`settle_soon`): a store that restarts
is back in a second or two.

The hub settles a write's entries before replying (a create's, with ``create_settle = background``, right
after it, every read of that work waiting for it: :mod:`recall_hub.retrieval.freshness`), so a writer reads
its own writes; the sweep makes "acknowledged" mean "will all happen" even when the hub dies right after
the commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from recall_hub.context import HubContext
from recall_hub.ops.indexing import attributes, sync_bead_vector
from recall_hub.outages import log_failure
from recall_hub.retrieval.embedding import embed_beads
from recall_hub.retrieval.freshness import handed_off_work_done
from recall_hub.store.beads import Props
from recall_hub.store.feed import Logged, actions, feed_scope
from recall_hub.store.outbox import OutboxEntry
from recall_hub.store.sessions import AUTO_LINK_NOTE
from recall_hub.store.vectors import VectorHit, scope_of
from recall_hub.timeutil import now_ms

log = logging.getLogger(__name__)

MAX_BACKOFF_MS = 60_000
RETRY_FIRST_S = 0.25
RETRY_MAX_S = 1.0
""":func:`settle_soon`'s tries come at growing intervals, from the first to the longest."""
BULK_CONCURRENCY = 8
"""Per-bead queries a bulk settle runs at once (each holds a connection of a bounded pool)."""


@dataclass(frozen=True)
class Created:
    """What the request that created a bead hands its work: the bead as the create committed it (what the
    change feed's ``created`` entry shows, :func:`_changes`), whether the request already linked it to its
    session (the create's own query does) and whether it logged it for the keyword indexes (a handed-off
    create does before its reply), with the beads its link re-linked (``relinked``: they follow it now)."""

    props: Props
    linked: bool = False
    logged: bool = False
    relinked: list[str] = field(default_factory=list)


async def settle(ctx: HubContext, bead_id: str, wait_s: float = 30.0, created: Created | None = None) -> bool:
    """Work off every pending outbox entry of ``bead_id``. True when none is left.

    ``created``: from the request that created the bead — then only its ``created`` entry is worked off (True
    once it is done). Any other entry is a later request's, settled by that request after the work of the
    creates replied to before it (or by the sweep), so that each scope's change feed keeps the order of the
    replies: a handed-off create's work may still be running when the creator's next write commits, and logging
    that write with the create would put it before the creates replied to in between."""
    async with ctx.outbox.bead_lock(bead_id, wait_s) as locked:
        if not locked:
            return False  # another hub or task holds it and settles the same entries
        entries = await ctx.outbox.system_pending(bead_id)
        if created is not None:
            entries = [entry for entry in entries if entry.kind == "created"]
        while entries:
            for entry in entries:
                try:
                    await _work(ctx, entry, created)
                except Exception as exc:  # kept for a retry; later entries of the bead wait behind it
                    delay = min(MAX_BACKOFF_MS, 500 * 2 ** min(entry.attempts, 10))
                    log.warning("outbox entry %s of %s failed (attempt %d), retry in %d ms: %s",
                                entry.entry_id, bead_id, entry.attempts + 1, delay, exc)
                    await ctx.outbox.system_failed(entry.entry_id, repr(exc), now_ms() + delay)
                    return False
                left = await ctx.outbox.system_done(entry.entry_id, bead_id)
            entries = left if created is None else []  # after the last one: whatever was written since the first read
    return True


async def settle_quietly(
    ctx: HubContext, bead_id: str, until: int | None = None, created: Created | None = None
) -> None:
    """:func:`settle` on a request's path, after the work of the creates handed off before it (with ``until``,
    Redis's epoch ms: those marked by then; for a create's work, those into its scope), as if they had settled
    inline: the change feed keeps the order of the replies, and a new bead's auto-links are found among the
    vectors of the beads before it. The write is committed, so a failure here never turns an acknowledged write
    into an error: the work is tried again shortly (:func:`settle_soon`), then by the sweep. ``created``: as
    :func:`settle`."""
    try:
        # A create's work needs only the creates into its own scope: its auto-links are found there, and the
        # change feed is kept per scope.
        await handed_off_work_done(ctx, until=until, scopes=None if created is None else [scope_of(created.props)])
        if await settle(ctx, bead_id, created=created):
            return
    except Exception as exc:
        log_failure(log, f"after-commit work of {bead_id} failed; tried again shortly", exc)
    settle_soon(ctx, bead_id, created)


def settle_soon(ctx: HubContext, bead_id: str, created: Created | None = None) -> None:
    """Try the work again in the background (:func:`_settle_again`), unless that runs for the bead already or
    every slot is taken (then the sweep does it)."""
    key = f"again:{bead_id}"  # not the hand-off's key: reads wait for a first try only
    if not ctx.background.running(key):
        ctx.background.try_hand_off(functools.partial(_settle_again, ctx, bead_id, created),
                                    name=f"recall-settle-again-{bead_id}", key=key)


async def _settle_again(ctx: HubContext, bead_id: str, created: Created | None) -> None:
    """Work that failed (a store away, the model down), tried again as :func:`settle` at growing intervals
    (:data:`RETRY_FIRST_S` to :data:`RETRY_MAX_S`) until it is done, or until the sweep's grace has passed or
    the hub closes — the sweep takes it then: a store that restarts is back within a second or two, and its
    work should not wait for a sweep's pass. Done, it clears the bead's hand-off mark, which the failed try may
    not have cleared (Redis away): until then a read waits for work whose failure could not be recorded — it
    will be done — and not for work whose failure was (a later try is not waited for)."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + ctx.settings.outbox_grace_ms / 1000
    delay = RETRY_FIRST_S
    while loop.time() + delay <= give_up and await ctx.background.pause(delay):
        try:
            if await settle(ctx, bead_id, wait_s=0.5, created=created):
                with contextlib.suppress(Exception):  # Redis away again: the mark goes with its horizon
                    await ctx.outbox.clear_handed_off(bead_id)
                return
        except Exception as exc:
            log.debug("after-commit work of %s failed again: %s", bead_id, exc)
        delay = min(delay * 2, RETRY_MAX_S)
    log.warning("after-commit work of %s left for the sweep", bead_id)


async def settle_created(ctx: HubContext, bead_ids: list[str], as_created: Mapping[str, Props] | None = None) -> None:
    """:func:`settle` for beads a batch just created, in bulk: one query or pipeline per step for all of
    them instead of one per bead (``as_created``: by bead, as :func:`settle`). A bead that is busy elsewhere,
    has more than its create entry, or whose bulk step failed is settled on its own (so nothing differs but the
    number of round trips). After the creates handed off before them, as :func:`settle_quietly`."""
    as_created = as_created or {}
    rest = list(bead_ids)
    try:
        await handed_off_work_done(ctx)
        async with ctx.outbox.bead_locks(bead_ids) as held:
            pending = await ctx.outbox.system_pending_many(held)
            fresh = [entries[0] for entries in pending.values() if [e.kind for e in entries] == ["created"]]
            if fresh:
                await _work_created(ctx, fresh, as_created)
                await ctx.outbox.system_done_many([e.entry_id for e in fresh])
            done = {e.bead_id for e in fresh} | {b for b, entries in pending.items() if not entries}
            rest = [b for b in bead_ids if b not in done]
    except Exception as exc:
        log.warning("bulk after-commit work of %d bead(s) failed, settling them one by one: %s", len(bead_ids), exc)
    for bead_id in rest:
        props = as_created.get(bead_id)
        await settle_quietly(ctx, bead_id, created=None if props is None else Created(props))


async def _work_created(ctx: HubContext, entries: list[OutboxEntry], as_created: Mapping[str, Props]) -> None:
    """What :func:`_work` does for a ``created`` entry, for many beads at once."""
    ids = [e.bead_id for e in entries]
    beads = {str(p["bead_id"]): p for p in await ctx.beads.system_many(ids)}
    present = [b for b in ids if b in beads]
    relinked: list[str] = []
    if ctx.settings.auto_follows:
        # One query per bead, a few at once (each holds a connection of a bounded pool).
        chained = [b for b in present if beads[b].get("session_id")]
        for k in range(0, len(chained), BULK_CONCURRENCY):
            for moved in await asyncio.gather(*(
                ctx.beads.system_link_session_predecessor(b, str(beads[b]["session_id"]), AUTO_LINK_NOTE)
                for b in chained[k : k + BULK_CONCURRENCY]
            )):
                relinked += [b for b in moved if b not in beads]
    # After the links: a keyword document holds the words a bead follows (a bead re-linked to one of these too).
    await ctx.index_log.append_many([*ids, *dict.fromkeys(relinked)])
    chunked = await embed_beads(ctx, [beads[b] for b in present]) if present else []
    await ctx.vectors.add_many(
        [(b, scope_of(beads[b]), v, attributes(beads[b])) for b, v in zip(present, chunked, strict=True)]
    )
    vectors = [v.rows[0] for v in chunked]  # each bead's whole text: what its neighbours are found by
    await ctx.beads.system_mark_indexed_many(
        [{"id": b, "scope": scope_of(beads[b])} for b in present], ctx.vectors.model_id
    )
    settings = ctx.settings
    if settings.auto_related and settings.related_max > 0 and present:
        found = await ctx.vectors.search_many(
            [([scope_of(beads[b])], v, settings.related_max + 1) for b, v in zip(present, vectors, strict=True)]
        )
        links = [
            {"from": b, **row} for b, hits in zip(present, found, strict=True) for row in _similar(ctx, b, hits)
        ]
        if links:
            await ctx.beads.system_link_related_many(links, AUTO_LINK_NOTE)
    await ctx.feed.log_once(
        [c for entry in entries for c in _changes(entry, beads.get(entry.bead_id), as_created.get(entry.bead_id))]
    )


async def follow_session(ctx: HubContext, props: dict[str, Any]) -> None:
    """A new bead FOLLOWS_FROM its session's previous one (idempotent), unless auto-links are off; a bead of the
    session stamped after it that now follows it instead is logged for the keyword indexes (the words it follows
    changed)."""
    if ctx.settings.auto_follows and props.get("session_id"):
        session_id = str(props["session_id"])
        relinked = await ctx.beads.system_link_session_predecessor(str(props["bead_id"]), session_id, AUTO_LINK_NOTE)
        if relinked:
            await ctx.index_log.append_many(relinked)


async def _work(ctx: HubContext, entry: OutboxEntry, created: Created | None = None) -> None:
    props = await ctx.beads.system_get(entry.bead_id)
    logged = created is not None and created.logged
    if entry.kind == "created" and props is not None and not (created is not None and created.linked):
        await follow_session(ctx, props)
    # Every hub's keyword index re-reads the bead — after its session link, whose words it holds too, and
    # before its vector, so a failing embedder delays nothing but the vector.
    if not logged:
        if created is not None and created.relinked:
            await ctx.index_log.append_many(created.relinked)
        await ctx.index_log.append(entry.bead_id)
    reembed = entry.kind == "created" or entry.text_changed
    if entry.kind == "created" and props is not None:
        # A created bead is always embedded here; its neighbours are linked while its vectors are being stored.
        await sync_bead_vector(
            ctx, entry.bead_id, props, entry.old_vector_scopes, reembed,
            alongside=lambda v: _link_related(ctx, props, v),
        )
    elif entry.kind != "attributes" or props is not None:
        await sync_bead_vector(ctx, entry.bead_id, props, entry.old_vector_scopes, reembed)
    if entry.kind == "attributes":
        return  # a move between sessions: filters follow, the change log does not record it
    await ctx.feed.log_once(_changes(entry, props, None if created is None else created.props))


def _changes(entry: OutboxEntry, props: Props | None, as_created: Props | None = None) -> list[Logged]:
    """The change-feed entries of one outbox entry. A ``created`` entry shows the bead as created when the
    creating request says how (``as_created``, given for ``created`` entries only): an edit committed before the
    work ran (a handed-off create's, or one between an inline create's commit and its work) has an ``updated``
    entry of its own. Otherwise the bead as it is now."""
    shown = as_created if as_created is not None else props
    changes = []
    for scope, action in actions(entry.old_feed, entry.new_feed, exists=entry.kind not in ("deleted", "forgotten")):
        if entry.kind == "forgotten":
            action = "forgotten"  # gone like a deletion, and its earlier entries lose their content (ops/forget.py)
        # The bead as it is now may have moved on; a snapshot goes only where the bead still is.
        snapshot = shown if props is not None and feed_scope(props) == scope else None
        changes.append(Logged(entry.entry_id, scope, action, entry.bead_id, entry.by, entry.at, snapshot))
    return changes


async def _link_related(ctx: HubContext, props: dict[str, Any], vector: np.ndarray) -> None:
    """RELATED_TO the nearest beads of the same scope (a link never reveals a bead to someone who could not
    see it); the FOLLOWS_FROM link to the session's previous bead is made first (:func:`follow_session`)."""
    settings = ctx.settings
    if not settings.auto_related or settings.related_max == 0:
        return
    bead_id = str(props["bead_id"])
    similar = _similar(ctx, bead_id, await ctx.vectors.search([scope_of(props)], vector, settings.related_max + 1))
    if similar:
        await ctx.beads.system_link_related(bead_id, similar, AUTO_LINK_NOTE)


def _similar(ctx: HubContext, bead_id: str, hits: list[VectorHit]) -> list[dict[str, Any]]:
    """Of a new bead's nearest ``hits`` (itself among them), those it is RELATED_TO: ``{"id", "sim"}`` rows."""
    settings = ctx.settings
    near = [h for h in hits if h.bead_id != bead_id and h.similarity >= settings.related_threshold]
    return [{"id": h.bead_id, "sim": round(h.similarity, 4)} for h in near[: settings.related_max]]


async def sweep(ctx: HubContext, older_than_ms: int = 0, limit: int = 256) -> int:
    """Settle the beads whose entries are older than ``older_than_ms`` milliseconds; how many settled."""
    return await _settle_left(ctx, await ctx.outbox.system_due(now_ms() - older_than_ms, limit))


async def take_over(ctx: HubContext) -> int:
    """Settle the creates handed off by hubs that are gone (store/presence.py); how many settled. Their locks
    are taken over at once (store/locks.py), so this need not wait out their time to live."""
    return await _settle_left(ctx, await ctx.outbox.handed_off_by_gone_hubs())


async def _settle_left(ctx: HubContext, bead_ids: list[str]) -> int:
    """:func:`settle` for beads whose work a crash or a failure left; each one's hand-off mark cleared once done."""
    settled = 0
    for bead_id in bead_ids:
        try:
            if await settle(ctx, bead_id, wait_s=0.5):
                settled += 1
                await ctx.outbox.clear_handed_off(bead_id)  # a create handed off by a hub that died first
        except Exception as exc:
            log_failure(log, f"outbox sweep: {bead_id} left for the next pass", exc)
    return settled


async def sweep_forever(ctx: HubContext, interval_s: float, grace_ms: int) -> None:
    """Sweep at start (everything) and then every ``interval_s`` (entries older than ``grace_ms``,
    so a request still settling its own write is left alone); the marks of hand-offs whose hub died go too."""
    older = 0
    while True:
        try:
            while await sweep(ctx, older) > 0:
                pass
            await ctx.outbox.prune_handed_off()
        except Exception as exc:
            log_failure(log, "outbox sweep failed", exc)
        older = grace_ms
        await asyncio.sleep(interval_s)


async def take_over_forever(ctx: HubContext) -> None:
    """Whenever a read finds a create's work handed off by a hub that is gone
    (:func:`~recall_hub.retrieval.freshness.handed_off_work_done` sets ``ctx.left_by_gone_hubs``), do it here
    (:func:`take_over`): the read waits a fraction of a second, not its whole budget, and not for a sweep."""
    while True:
        await ctx.left_by_gone_hubs.wait()
        ctx.left_by_gone_hubs.clear()
        try:
            await take_over(ctx)
        except Exception as exc:
            log_failure(log, "taking over the work of a hub that is gone failed", exc)
