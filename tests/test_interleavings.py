"""Two writes to the same beads and sessions, the second landing at every query boundary of the first.

A team's writes arrive at two hubs at once; each is atomic where it must be, and its follow-up work (vectors,
links, the change feed) runs after it under the bead's lock. Whatever order their queries interleave in,
what they leave must be what either order would leave: every live bead's vectors and token signs in its scope
and nowhere else (none for a bead that is gone), each hub's keyword index finding each bead by the words it holds now
and by no others, each author's session one chain of its beads in the order of their stamps, and no follow-up
work left behind. Each pair of writes below is run once for every boundary between the first one's graph queries
(:class:`conftest.Interleaved`), the second sent to the same hub at one boundary and to another hub process at
the next (a third of the pairs in the default run, the rest with ``-m slow``), or to each at every boundary (``-m
slow``; see ``_cases``). The random team workload (``tests/test_team_workload.py``) meets the same interleavings
only by chance.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import secrets
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from conftest import Interleaved, new_ai
from recall_hub.context import HubContext
from recall_hub.ops import beads as bead_ops
from recall_hub.ops.after_commit import settle_quietly
from recall_hub.ops.beads import new_bead_props
from recall_hub.ops.forget import forget_bead
from recall_hub.ops.history import supersede_bead
from recall_hub.ops.sessions import migrate_session_with_memories
from recall_hub.retrieval.freshness import handed_off_work_done
from recall_hub.store.sessions import AUTO_LINK_NOTE
from recall_hub.store.vectors import scope_of
from recall_hub.timeutil import new_moments
from recall_schemas import BeadFilters, CreateBead, CreateBeads, DeleteBead, RecallError, UpdateBead, new_id
from recall_schemas.coordination import MigrateSession
from recall_schemas.forget import ForgetBead
from recall_schemas.history import SupersedeBead
from recall_schemas.requests import BeadUpdates


@dataclass
class Scene:
    """One author's two sessions: ``main`` holds beads 0, 2 and 3, ``side`` bead 1 (stamped in that order); a
    create stamped between beads 0 and 1 is ready to commit late. Every text is made of this scene's own words
    (the beads are global: another test's search must not meet them)."""

    hub: HubContext
    me: str
    main: str
    side: str
    ids: list[str] = field(default_factory=list)
    late: dict[str, Any] = field(default_factory=dict)
    words: dict[str, str] = field(default_factory=dict)
    """Each bead's own word, by id (the late one's too, and those of a batch once created)."""

    @property
    def scopes(self) -> list[str]:
        return ["global", f"private:{self.me}"]


async def _scene(hub: HubContext) -> Scene:
    scene = Scene(hub, new_ai(), new_id("s"), new_id("s"))
    marker = scene.main[2:]

    def bead(i: int, session: str) -> CreateBead:
        return CreateBead(title=f"t{i}x{marker}", content=f"c{i}x{marker} w{i}x{marker}", session_id=session,
                          visibility="global")

    scene.ids.append((await bead_ops.create_bead(hub, scene.me, bead(0, scene.main))).bead_id)
    late = CreateBead(title=f"lx{marker}", session_id=scene.main, visibility="global")
    scene.late = new_bead_props(scene.me, late, new_moments())[0]  # stamped now: after bead 0, before the rest
    rest = [bead(1, scene.side), bead(2, scene.main), bead(3, scene.main)]
    created = await bead_ops.create_beads(hub, scene.me, CreateBeads(beads=rest))
    scene.ids += [str(item.bead_id) for item in created.items]
    scene.words = {bead_id: f"w{i}x{marker}" for i, bead_id in enumerate(scene.ids)}
    scene.words[scene.late["bead_id"]] = f"lx{marker}"
    await handed_off_work_done(hub)
    return scene


def _update(ctx: HubContext, scene: Scene, index: int, **updates: Any) -> Awaitable[object]:
    request = UpdateBead(bead_id=scene.ids[index], updates=BeadUpdates(**updates))
    return bead_ops.update_bead(ctx, scene.me, request)


async def _late_create(ctx: HubContext, scene: Scene) -> None:
    outcome = await ctx.beads.create(scene.me, scene.late, idem=f"{scene.me}:{scene.late['bead_id']}",
                                     follows=AUTO_LINK_NOTE)
    assert outcome is not None
    await ctx.index_log.append_many([*(outcome.relinked or []), scene.late["bead_id"]])
    await settle_quietly(ctx, scene.late["bead_id"])


async def _batch_create(ctx: HubContext, scene: Scene) -> None:
    words = [f"b{secrets.token_hex(4)}x{scene.main[2:]}" for _ in range(2)]
    batch = CreateBeads(beads=[CreateBead(title=word, session_id=scene.main, visibility="global") for word in words])
    created = await bead_ops.create_beads(ctx, scene.me, batch)
    scene.words.update({item.bead_id: word for item, word in zip(created.items, words, strict=True) if item.bead_id})


Write = Callable[[HubContext, Scene], Awaitable[object]]
WRITES: dict[str, Write] = {
    "move": lambda ctx, s: _update(ctx, s, 2, visibility="private"),
    "move back": lambda ctx, s: _update(ctx, s, 2, visibility="global"),
    "rewrite": lambda ctx, s: _update(ctx, s, 2, content=f"r{s.main[2:]}"),
    "delete": lambda ctx, s: bead_ops.delete_bead(ctx, s.me, DeleteBead(bead_id=s.ids[2])),
    "forget": lambda ctx, s: forget_bead(ctx, s.me, ForgetBead(bead_id=s.ids[2], reason="wrong", allow_again=True)),
    "delete neighbour": lambda ctx, s: bead_ops.delete_bead(ctx, s.me, DeleteBead(bead_id=s.ids[3])),
    "migrate": lambda ctx, s: migrate_session_with_memories(
        ctx, s.me, MigrateSession(old_session_id=s.side, new_session_id=s.main)
    ),
    "late create": _late_create,
    "supersede": lambda ctx, s: supersede_bead(ctx, s.me, SupersedeBead(old_id=s.ids[0], new_id=s.ids[2])),
    "hide first": lambda ctx, s: _update(ctx, s, 0, visibility="private"),
    "batch create": _batch_create,
}
"""Writes of one author to the scene (a teammate's would be refused or the same): each may be refused once the
other has landed — a refusal is an answer too."""

PAIRS = [pair for pair in itertools.product(sorted(WRITES), repeat=2) if pair != ("late create", "late create")]


async def _answered(write: Awaitable[object], hubs: Sequence[HubContext]) -> None:
    """The write, refused or not; then each hub's keyword index applies what it logged (an index that follows
    the log applies each change as it comes, or several at once: the first is the harder)."""
    with contextlib.suppress(RecallError):
        await write
    for ctx in hubs:  # in a context of its own: not a query of the write, nowhere for the other write to land
        await asyncio.create_task(ctx.keywords.catch_up(), context=contextvars.Context())


async def _check(scene: Scene, hubs: tuple[HubContext, HubContext], case: str) -> None:
    hub = scene.hub
    for ctx in hubs:
        await handed_off_work_done(ctx)
    beads = list(scene.words)
    assert await hub.outbox.system_pending_many(beads) == {b: [] for b in beads}
    for ctx in hubs:
        await ctx.keywords.catch_up()  # everything logged by now
    now = {bead_id: await hub.beads.system_get(bead_id) for bead_id in beads}
    live = {bead_id: props for bead_id, props in now.items() if props is not None}
    for bead_id, props in now.items():
        where = [] if props is None else [scope_of(props)]
        assert [s for s in scene.scopes if await hub.vectors.vector(bead_id, s) is not None] == where, case
        signed = [s for s in scene.scopes if await hub.redis.hexists(hub.vectors.signs_key(s), bead_id)]
        assert signed == where, f"{bead_id}'s token signs, {case}"
    for session in (scene.main, scene.side):
        chain = sorted((p for p in live.values() if p.get("session_id") == session),
                       key=lambda p: (p["created_at"], p["bead_id"]))
        ids = [p["bead_id"] for p in chain]
        assert sorted(await _links(hub, session)) == sorted(zip(ids[1:], ids, strict=False)), case
    # Each hub's keyword index finds a bead by the words it holds now, and the bead that follows it (weighed
    # down) where everyone who sees the follower may see it too — by no other words.
    follows = {pair for session in (scene.main, scene.side) for pair in await _links(hub, session)}
    wrong = []
    for owner, word in scene.words.items():
        props = now[owner]
        if props is None or word not in f"{props['title']} {props.get('content') or ''}":
            expected = set()
        else:
            expected = {owner} | {
                later for later, earlier in follows if earlier == owner and _shared(props, live[later])
            }
        for ctx in hubs:  # the index itself: a search's screening in the graph would hide a stale document
            hits = {bead_id for bead_id, _ in ctx.keywords.search(scene.scopes, [word], BeadFilters(), 10)} & set(now)
            if hits != expected:
                wrong.append(f"{'first' if ctx is hub else 'second'} hub: {owner}'s word finds {hits}, not {expected}")
    order = {bead_id: i for i, bead_id in enumerate(scene.ids)}
    assert wrong == [], f"{case}; beads {order}, links {follows}"
    # The session edges hybrid search reads from each hub's index are the graph's.
    rows = await hub.graph.ro_query(
        "MATCH (x:Bead)-[:FOLLOWS_FROM]->(y:Bead) WHERE x.bead_id IN $ids AND y.bead_id IN $ids "
        "RETURN x.bead_id, y.bead_id",
        {"ids": beads},
    )
    edges = sorted((str(later), str(earlier)) for later, earlier in rows)
    for ctx in hubs:
        assert sorted(set(ctx.keywords.session_edges(beads, beads))) == edges, f"index's session edges, {case}"


async def _links(hub: HubContext, session: str) -> list[tuple[str, str]]:
    """The ``FOLLOWS_FROM`` links within a session, ``(later, earlier)``."""
    rows = await hub.graph.ro_query(
        "MATCH (x:Bead)-[:FOLLOWS_FROM]->(y:Bead) WHERE x.session_id = $session AND y.session_id = $session "
        "RETURN x.bead_id, y.bead_id",
        {"session": session},
    )
    return [(str(later), str(earlier)) for later, earlier in rows]


def _shared(earlier: dict[str, Any], later: dict[str, Any]) -> bool:
    """Whether everyone who may see ``later`` may see ``earlier`` (one author's beads: global or private)."""
    return bool(earlier["visibility"] == "global" or earlier["visibility"] == later["visibility"])


def _cases() -> list[Any]:
    """``(where, first, second)`` of every run. Alternating — boundary 0 at the same hub, 1 at the other, … — every
    boundary of every pair is met; the default run takes a third of the pairs, each write first beside a third of
    the writes and second beside a third (``-m slow`` the rest). ``-m slow`` adds every boundary at each hub for every
    pair. Each scene adds and removes vectors in tiny sets and in the tests' shared global set: the churn that met
    Redis 8.2's VREM crash once, before removals went through the store's removal script
    (recall_hub.store.vector_removal)."""
    names = sorted(WRITES)
    cases = []
    for first, second in PAIRS:
        for where in ("alternating", "same hub", "another hub"):
            default = where == "alternating" and (names.index(first) + names.index(second)) % 3 == 0
            marks = () if default else (pytest.mark.slow,)
            cases.append(pytest.param(where, first, second, marks=marks, id=f"{where}-{first}|{second}"))
    return cases


@pytest.mark.parametrize("where,first,second", _cases())
async def test_two_writes_leave_what_either_order_would_whatever_their_queries_interleave(
    two_hubs: tuple[HubContext, HubContext], monkeypatch: pytest.MonkeyPatch, first: str, second: str, where: str
) -> None:
    hub, other_hub = two_hubs

    async def case(after: int | None, at: HubContext) -> int:
        """The second write lands after the first's query ``after`` (None: after the first write); the first's
        number of queries."""
        scene = await _scene(hub)
        with monkeypatch.context() as patch:
            interleaved = Interleaved(
                patch, two_hubs, sys.maxsize if after is None else after,
                lambda: _answered(WRITES[second](at, scene), two_hubs),
            )
            await interleaved.run(lambda: _answered(WRITES[first](hub, scene), two_hubs))
        landed = "after it" if after is None else f"after its query {after}"
        await _check(scene, two_hubs, f"{second} at {'the same' if at is hub else 'another'} hub {landed}")
        return interleaved.calls

    def at(after: int) -> HubContext:
        return hub if where == "same hub" or (where == "alternating" and after % 2 == 0) else other_hub

    queries = await case(None, at(1))  # how many the first write makes here, hence its boundaries
    for after in range(queries):
        await case(after, at(after))
