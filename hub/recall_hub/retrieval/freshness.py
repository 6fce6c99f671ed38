"""Reading your own writes on the keyword index, and paying for it only where it is read.

A request may carry its caller's last index-log position (``Recall-Index-After``; see
:mod:`recall_hub.store.index_log`). The transport puts it here with :func:`reading_after`; retrieval
then asks what it needs:

* a keyword search must find the caller's writes by their words, so :func:`keyword_index_caught_up`
  brings the index up to the position (applying, committing: milliseconds, and a segment merge soon
  after);
* screening — what a vector-only search or ``why`` uses the index for — needs no
  commit: :func:`written_since_index` names the beads written between the index and the position, and
  those are screened by the graph like a bead the index has never seen.

With ``create_settle = background`` a create's vector, links and feed entry follow its reply; a read of
them waits for the creates replied to before it (:func:`handed_off_work_done`). The transport opens
:func:`settling` around such a read; the read's steps that need the work await :func:`work_settled`, so a
hybrid search checks while its query is embedded and a keyword search, which needs none of it, never does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from recall_schemas.requests import index_seq_key as seq_key

from recall_hub.store.index_log import REBUILD
from recall_hub.store.vectors import caller_scopes
from recall_hub.timeutil import now_ms

if TYPE_CHECKING:
    from recall_hub.context import HubContext

log = logging.getLogger(__name__)

UNAPPLIED_MAX = 256
"""Beyond this many log entries between the index and a caller's position, screening reads every
candidate from the graph instead of naming the changed ones."""
GONE_CHECK_AFTER_S = 0.25
"""A read still waiting for other hubs' hand-offs after this long asks whether their hubs are still running (and
as often again while it waits): a hub's own work takes milliseconds, so by then it may be a dead hub's."""

@dataclass
class _Demand:
    position: str
    unapplied: dict[str, set[str] | None] = field(default_factory=dict)
    """What :func:`written_since_index` found, by the index position it read from (one log read a request)."""


_demand: ContextVar[_Demand | None] = ContextVar("recall_read_after", default=None)


@contextmanager
def reading_after(position: str | None) -> Iterator[None]:
    """Within this block, reads must see every write up to ``position`` (None: no such demand)."""
    token = _demand.set(_Demand(position[:64]) if position else None)
    try:
        yield
    finally:
        _demand.reset(token)


def _ahead(ctx: HubContext) -> _Demand | None:
    """The caller's demand when the keyword index has not applied its position yet."""
    demand = _demand.get()
    if demand is None or seq_key(demand.position) <= seq_key(ctx.keywords.applied):
        return None
    return demand


async def keyword_index_caught_up(ctx: HubContext) -> None:
    """Bring the keyword index up to the caller's position, within ``index_wait_s`` (then answer from what it
    has, and log it)."""
    demand = _ahead(ctx)
    if demand is None:
        return
    after = demand.position
    try:
        async with asyncio.timeout(ctx.settings.index_wait_s):
            await ctx.keywords.catch_up(after)
    except TimeoutError:
        log.warning("keyword index still behind %s after %.1f s; answering from %s",
                    after, ctx.settings.index_wait_s, ctx.keywords.applied)
    except Exception as exc:  # the index log's Redis away (a dead primary): the wait is for freshness only
        log.warning("keyword index cannot catch up to %s (%s: %s); answering from %s",
                    after, type(exc).__name__, exc, ctx.keywords.applied)


@dataclass
class _Settling:
    ctx: HubContext
    deadline: int | None
    caller: str | None
    check: asyncio.Future[None] | None = None


_settling: ContextVar[_Settling | None] = ContextVar("recall_settling", default=None)


@contextmanager
def settling(ctx: HubContext, deadline: int | None, caller: str | None = None) -> Iterator[None]:
    """Within this block, :func:`work_settled` waits for the creates handed off before it is first asked
    (:func:`handed_off_work_done`; nothing to wait for unless ``create_settle = background``) — with ``caller``,
    only for those into the scopes the caller may read, the only ones its read can show. The check runs once,
    when a step first needs it or :func:`start_settle_check` starts it early; a block that never asks pays
    nothing."""
    state = _Settling(ctx, deadline, caller) if ctx.settings.create_settle == "background" else None
    token = _settling.set(state)
    try:
        yield
    finally:
        _settling.reset(token)
        if state is not None and state.check is not None and not state.check.done():
            state.check.cancel()


def start_settle_check() -> asyncio.Future[None] | None:
    """Start :func:`work_settled`'s check now (once), so that its round trips overlap the caller's other work;
    the check, or None outside :func:`settling`."""
    state = _settling.get()
    if state is None:
        return None
    if state.check is None:
        state.check = asyncio.ensure_future(_settled_for(state))
    return state.check


async def _settled_for(state: _Settling) -> None:
    scopes = None
    if state.caller is not None:
        try:
            scopes = caller_scopes(state.caller, await state.ctx.memberships.groups_of(state.caller))
        except Exception as exc:  # the groups unreadable: wait for every create, as a read without a caller
            log.warning("cannot read %s's groups (%s: %s); waiting for every earlier create",
                        state.caller, type(exc).__name__, exc)
    await handed_off_work_done(state.ctx, state.deadline, scopes=scopes)


async def work_settled() -> None:
    """Within :func:`settling`: until the work of the creates handed off before the check began is done."""
    if (check := start_settle_check()) is not None:
        await check


async def handed_off_work_done(
    ctx: HubContext, deadline: int | None = None, until: int | None = None, scopes: Collection[str] | None = None
) -> None:
    """With ``create_settle = background``: wait, within ``index_wait_s``, until every create whose reply came
    before this read has its after-commit work done (vector, links, feed entry), whichever hub took it — this
    hub's own hand-offs as they finish, every hub's by the marks they leave in Redis until the work is done
    (on Redis's clock: no clock of a hub matters), asked again at growing intervals (2 to 50 ms). A mark whose
    work is no longer on its first try (done, or failed and left to the sweep's retries) is dropped. So after a
    create's reply every reader finds the bead as it would after an inline create. The documents' embedder
    works first come, first served, so waiting for every earlier create costs hardly more than waiting for
    one. A hand-off whose hub is gone (store/presence.py) is taken over by this hub
    (:func:`~recall_hub.ops.after_commit.take_over_forever`), so the wait ends within a fraction of a second of
    the work's own time, not at its budget. For the operations of
    :data:`~recall_hub.retrieval.search.SETTLED_READERS`. With the caller's
    ``deadline`` (epoch ms) it waits at most half the time left, so the read still answers in time. With
    ``until`` (Redis's epoch ms) only for the creates marked by then: a handed-off create's own work waits so
    for the creates before it (their vectors are what its auto-links are found among). With ``scopes`` (vector
    scopes) only for the creates into them."""
    if ctx.settings.create_settle != "background":
        return
    budget = ctx.settings.index_wait_s
    if deadline is not None:
        budget = min(budget, max(0.0, (deadline - now_ms()) / 2000))
    try:
        async with asyncio.timeout(budget):
            until, marked = await ctx.outbox.handed_off_before(until, scopes)
            if marked:  # this hub's own, as they finish; then what is left, the other hubs', by their marks
                await ctx.background.wait_for(marked)
                _, marked = await ctx.outbox.handed_off_before(until, scopes)
            pause, ask_hubs = 0.002, time.monotonic() + GONE_CHECK_AFTER_S
            while marked:
                working = await ctx.outbox.system_first_tries(marked)
                if stale := set(marked) - working:
                    await ctx.outbox.clear_handed_off(*stale)
                if not working:
                    break
                if time.monotonic() >= ask_hubs:
                    ask_hubs = time.monotonic() + GONE_CHECK_AFTER_S
                    if working & set(await ctx.outbox.handed_off_by_gone_hubs()):
                        ctx.left_by_gone_hubs.set()
                await asyncio.sleep(pause)
                pause = min(pause * 2, 0.05)
                _, marked = await ctx.outbox.handed_off_before(until, scopes)
    except TimeoutError:
        log.warning("creates up to %s ms still without their vectors after %.1f s; answering meanwhile",
                    until, budget)
    except Exception as exc:  # Redis away: the wait is for freshness only, the read says what it can
        log.warning("cannot tell whether earlier creates have their vectors (%s: %s); answering meanwhile",
                    type(exc).__name__, exc)


async def written_since_index(ctx: HubContext) -> set[str] | None:
    """The beads named in the index log after what the keyword index has applied, when the caller's position
    lies beyond it (empty when it does not); None when they cannot be named (the log unreadable, too many
    entries, a rebuild asked for): then no screening by the index can be trusted for this request."""
    demand = _ahead(ctx)
    if demand is None:
        return set()
    applied = ctx.keywords.applied
    if applied not in demand.unapplied:
        demand.unapplied[applied] = await _named_after(ctx, applied)
    return demand.unapplied[applied]


async def _named_after(ctx: HubContext, applied: str) -> set[str] | None:
    try:
        entries = await ctx.index_log.after(applied, UNAPPLIED_MAX + 1)
    except Exception as exc:
        log.warning("index log unreadable (%s: %s): screening by the graph", type(exc).__name__, exc)
        return None
    if len(entries) > UNAPPLIED_MAX or any(bead_id == REBUILD for _, bead_id in entries):
        return None
    return {bead_id for _, bead_id in entries}
