"""Visibility on every endpoint, including relationships and traversal, and membership changes.

The matrix: every endpoint is called by the bead's creator, a member of the bead's group, a
non-member and an ex-member, for a private, a group and a global bead. The rules come from the
design (contract 3), not from the code:

* private = the creator only; group = current members of the bead's group; global = everyone;
* a bead the caller may not see is indistinguishable from a missing one (the same NotFound, with
  the same message shape as for a random id that never existed; list endpoints simply omit it);
* a visible bead that is not the caller's may not be changed (Forbidden), except that the
  group's ops may change and delete the group's group beads.

Each test builds its own world with fresh ids, so tests are independent.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import nats
import pytest
from conftest import ClientFactory, new_ai
from recall_client import RecallClient
from recall_hub.context import HubContext
from recall_hub.store.records import content_hash
from recall_hub.timeutil import DAY_MS, to_ms
from recall_hub.tooling.stack import EmbeddedStack
from recall_schemas import (
    BeadStatus,
    Conflict,
    Direction,
    Forbidden,
    MemoryBead,
    NotFound,
    RecallError,
    RelType,
    Role,
    SearchMode,
    Visibility,
    new_id,
)

ROLES = ("creator", "member", "non_member", "ex_member")
VISIBILITIES = (Visibility.PRIVATE, Visibility.GROUP, Visibility.GLOBAL)
MATRIX = [pytest.param(vis, role, id=f"{vis.value}-{role}") for vis in VISIBILITIES for role in ROLES]


# --- the rules, written from the design -------------------------------------------------------


def sees(role: str, vis: Visibility) -> bool:
    """May ``role`` see a bead of visibility ``vis`` that the creator put in the group?"""
    if vis is Visibility.GLOBAL:
        return True
    if vis is Visibility.PRIVATE:
        return role == "creator"
    return role in ("creator", "member")


def modify_error(role: str, vis: Visibility) -> type[RecallError] | None:
    """What update/delete by ``role`` gives: None (allowed), NotFound (invisible) or Forbidden."""
    if not sees(role, vis):
        return NotFound
    return None if role == "creator" else Forbidden


def is_member(role: str) -> bool:
    return role in ("creator", "member")


# --- helpers ----------------------------------------------------------------------------------


async def assert_like_missing(call: Callable[[str], Awaitable[Any]], hidden_id: str) -> None:
    """``call(hidden_id)`` fails exactly like ``call(<an id that never existed>)``: NotFound, same shape."""
    missing_id = new_id(hidden_id.split("_", 1)[0])
    with pytest.raises(RecallError) as missing:
        await call(missing_id)
    with pytest.raises(RecallError) as hidden:
        await call(hidden_id)
    assert type(missing.value) is NotFound, f"a missing id should give NotFound, got {missing.value!r}"
    assert type(hidden.value) is NotFound, f"a hidden id must look missing, got {hidden.value!r}"
    assert hidden.value.message.replace(hidden_id, "<id>") == missing.value.message.replace(missing_id, "<id>")
    assert hidden.value.details == missing.value.details


def assert_may_see_all(caller: str, member_of: set[str], beads: Iterable[MemoryBead]) -> None:
    """Every bead a listing returned is one the caller may see (the invariant behind every list)."""
    for bead in beads:
        ok = (
            bead.visibility is Visibility.GLOBAL
            or (bead.visibility is Visibility.PRIVATE and bead.created_by == caller)
            or (bead.visibility is Visibility.GROUP and bead.group_id in member_of)
        )
        assert ok, f"{caller} was shown {bead.visibility.value} bead {bead.bead_id} of {bead.created_by}"


def ids(beads: Iterable[MemoryBead]) -> list[str]:
    return [b.bead_id for b in beads]


async def edge_count(hub: HubContext, a: str, b: str) -> int:
    rows = await hub.graph.ro_query(
        "MATCH (:Bead {bead_id: $a})-[r]-(:Bead {bead_id: $b}) RETURN count(r)", {"a": a, "b": b}
    )
    return int(rows[0][0])


async def bead_count(hub: HubContext) -> int:
    rows = await hub.graph.ro_query("MATCH (b:Bead) RETURN count(b)")
    return int(rows[0][0])


async def stored_status(hub: HubContext, bead_id: str) -> str:
    rows = await hub.graph.ro_query("MATCH (b:Bead {bead_id: $id}) RETURN b.status", {"id": bead_id})
    return str(rows[0][0])


async def backdate(hub: HubContext, bead_id: str, days: int) -> None:
    """Test setup: make a bead look untouched for ``days`` (nobody read or changed it since)."""
    await hub.accessed.flush()  # the reads made so far are part of what is backdated
    await hub.graph.query(
        "MATCH (b:Bead {bead_id: $id}) SET b.accessed_at = b.accessed_at - $ms, b.updated_at = b.updated_at - $ms",
        {"id": bead_id, "ms": days * DAY_MS},
    )


def token() -> str:
    """A word that no other bead contains."""
    return f"zq{secrets.token_hex(6)}"


NewClient = Callable[..., Awaitable[RecallClient]]


@pytest.fixture
async def new_client(connect: ClientFactory, stack: EmbeddedStack) -> AsyncIterator[NewClient]:
    """``await new_client("o")`` gives a client for a fresh AI id of that kind. The clients of one
    test share one NATS connection (the hub takes the caller from the subject, not the connection)."""
    bus = await nats.connect(stack.nats_url, connect_timeout=10)

    async def make(kind: str = "a") -> RecallClient:
        return await connect(new_ai(kind), nc=bus)

    yield make
    await bus.drain()


# --- the world of one matrix cell -------------------------------------------------------------


@dataclass
class World:
    vis: Visibility
    ops: RecallClient
    by_role: dict[str, RecallClient]
    group_id: str
    session_id: str
    word: str
    tag: str
    target: MemoryBead
    linked_anchor: MemoryBead | None

    @property
    def anchor(self) -> MemoryBead:
        assert self.linked_anchor is not None, "build the world with linked=True"
        return self.linked_anchor

    @property
    def creator(self) -> RecallClient:
        return self.by_role["creator"]

    def member_of(self, role: str) -> set[str]:
        return {self.group_id} if is_member(role) else set()


async def build_world(new_client: NewClient, vis: Visibility, linked: bool = False) -> World:
    """An ops with a group of creator + member (+ an ex-member, removed after the bead was made),
    an outsider, the creator's target bead (in the group and the creator's session, with a unique
    word and tag) and, when ``linked``, a global anchor bead linked to it."""
    ops, *people = await asyncio.gather(new_client("o"), *(new_client() for _ in ROLES))
    by_role = dict(zip(ROLES, people, strict=True))
    group = await ops.create_group(f"visibility {vis.value}")
    await asyncio.gather(
        *(ops.add_member(group.group_id, by_role[r].ai_id) for r in ("creator", "member", "ex_member"))
    )
    word, tag, session_id = token(), f"tag-{secrets.token_hex(6)}", new_id("s")
    creator = by_role["creator"]
    target = await creator.create_bead(
        f"target {word}",
        f"memory {word} for the {vis.value} cell",
        visibility=vis,
        group_id=group.group_id,
        session_id=session_id,
        tags=[tag],
        importance=3,
    )
    anchor = None
    if linked:
        anchor = await creator.create_bead(f"anchor {token()}", "global bead linked to the target", visibility="global")
        await creator.add_relationship(anchor.bead_id, target.bead_id, RelType.RELATED_TO)
    # The ex-member saw what members see, and then left the group.
    ex_member = by_role["ex_member"]
    if sees("member", vis):
        assert (await ex_member.get_bead(target.bead_id)).bead_id == target.bead_id
    await ops.remove_member(group.group_id, ex_member.ai_id)
    for reader in (ops, *people):  # as the creator would tell its team "I wrote it"
        reader.read_after(creator.index_position)
    return World(vis, ops, by_role, group.group_id, session_id, word, tag, target, anchor)


# --- the matrix ------------------------------------------------------------------------------
# Each test covers one endpoint, or a family of endpoints that share a setup (each assertion names
# its endpoint), parametrised over visibility x role; test ids read "<visibility>-<role>".


@pytest.mark.parametrize(("vis", "role"), MATRIX)
async def test_reads(new_client: NewClient, vis: Visibility, role: str) -> None:
    """get_bead, get_by_session, get_by_group, get_by_tag, get_recent and rank_by_importance."""
    w = await build_world(new_client, vis, linked=True)
    caller, target = w.by_role[role], w.target.bead_id
    if sees(role, vis):
        got = await caller.get_bead(target)
        assert (got.bead_id, got.content) == (target, w.target.content), "get_bead"
    else:
        await assert_like_missing(caller.get_bead, target)

    # A session is seen by its owner and the current members of its group; listing it shows what of
    # it the caller may see. Anyone else naming the id lists their own (empty) session of that id.
    by_session = await caller.get_by_session(w.session_id)
    sees_session = role in ("creator", "member")
    assert (target in ids(by_session)) is (sees_session and sees(role, vis)), "get_by_session"
    by_tag = await caller.get_by_tag(w.tag)
    assert ids(by_tag) == ([target] if sees(role, vis) else []), "get_by_tag"
    recent = await caller.get_recent(limit=500, since=w.target.created_at)
    assert (target in ids(recent)) is sees(role, vis), "get_recent"
    assert w.anchor.bead_id in ids(recent), "get_recent"  # the global anchor, created just after
    if is_member(role):
        by_group = await caller.get_by_group(w.group_id)
        assert (target in ids(by_group)) is sees(role, vis), "get_by_group"
    else:
        # A non-member learns nothing about the group, not even that it exists.
        by_group = []
        await assert_like_missing(caller.get_by_group, w.group_id)
    for listing in (by_session, by_tag, recent, by_group):
        assert_may_see_all(caller.ai_id, w.member_of(role), listing)

    ranked = await caller.rank_by_importance([target, new_id("b"), w.anchor.bead_id])
    # The anchor (importance 5) outranks the target (importance 3) whenever both are shown.
    assert ids(ranked) == ([w.anchor.bead_id, target] if sees(role, vis) else [w.anchor.bead_id]), "rank"


@pytest.mark.parametrize(("vis", "role"), MATRIX)
async def test_update_bead(new_client: NewClient, vis: Visibility, role: str) -> None:
    w = await build_world(new_client, vis)
    caller = w.by_role[role]
    new_title = f"changed by {role} {token()}"
    expected = modify_error(role, vis)
    if expected is None:
        assert (await caller.update_bead(w.target.bead_id, title=new_title)).title == new_title
    elif expected is Forbidden:
        with pytest.raises(Forbidden):
            await caller.update_bead(w.target.bead_id, title=new_title)
    else:
        await assert_like_missing(lambda b: caller.update_bead(b, title=new_title), w.target.bead_id)
    stored = await w.creator.get_bead(w.target.bead_id)
    assert (stored.title == new_title) is (expected is None)


@pytest.mark.parametrize(("vis", "role"), MATRIX)
async def test_delete_bead(new_client: NewClient, hub: HubContext, vis: Visibility, role: str) -> None:
    w = await build_world(new_client, vis)
    caller = w.by_role[role]
    expected = modify_error(role, vis)
    if expected is None:
        assert (await caller.delete_bead(w.target.bead_id)).deleted
    elif expected is Forbidden:
        with pytest.raises(Forbidden):
            await caller.delete_bead(w.target.bead_id)
    else:
        await assert_like_missing(caller.delete_bead, w.target.bead_id)
    rows = await hub.graph.ro_query("MATCH (b:Bead {bead_id: $id}) RETURN count(b)", {"id": w.target.bead_id})
    assert (rows[0][0] == 0) is (expected is None)


@pytest.mark.parametrize(("vis", "role"), MATRIX)
async def test_search_beads_and_context(new_client: NewClient, vis: Visibility, role: str) -> None:
    w = await build_world(new_client, vis)
    caller = w.by_role[role]
    plain = await caller.search_beads(w.word, limit=50)
    assert (w.target.bead_id in ids(h.bead for h in plain.hits)) is sees(role, vis)
    assert_may_see_all(caller.ai_id, w.member_of(role), (h.bead for h in plain.hits))
    narrowed = {"tags": [w.tag], "session_id": w.session_id, "created_by": w.creator.ai_id}
    for mode in SearchMode:
        result = await caller.search_beads(w.word, limit=20, filters=narrowed, mode=mode)
        found = ids(h.bead for h in result.hits)
        assert_may_see_all(caller.ai_id, w.member_of(role), (h.bead for h in result.hits))
        if not sees(role, vis):
            assert w.target.bead_id not in found, mode
        elif mode is not SearchMode.VECTOR:  # a vector search need not return a keyword match
            assert w.target.bead_id in found, mode
    block = await caller.context(w.word, max_tokens=2000, filters={"session_id": w.session_id})
    assert block.bead_ids == ([w.target.bead_id] if sees(role, vis) else [])
    assert (w.target.content in block.text) is sees(role, vis)
    assert (w.target.bead_id in block.text) is sees(role, vis)


@pytest.mark.parametrize(("vis", "role"), MATRIX)
async def test_relationships_traversal_and_why(
    new_client: NewClient, hub: HubContext, vis: Visibility, role: str
) -> None:
    """get_relationships, traverse_graph, why, then add_relationship."""
    w = await build_world(new_client, vis, linked=True)
    caller, target, anchor = w.by_role[role], w.target.bead_id, w.anchor.bead_id
    link = (anchor, target, RelType.RELATED_TO)

    from_anchor = await caller.get_relationships(anchor)
    assert (link in {(e.from_id, e.to_id, e.rel_type) for e in from_anchor}) is sees(role, vis)
    assert any(target in (e.from_id, e.to_id) for e in from_anchor) is sees(role, vis)
    if sees(role, vis):
        of_target = await caller.get_relationships(target, direction="in")
        assert link in {(e.from_id, e.to_id, e.rel_type) for e in of_target}
    else:
        await assert_like_missing(caller.get_relationships, target)

    # get_edges: an edge appears only when the caller sees both ends; naming a hidden bead adds nothing.
    batch = await caller.get_edges([anchor, target])
    assert (link in {(e.from_id, e.to_id, e.rel_type) for e in batch}) is sees(role, vis), "get_edges"
    assert any(target in (e.from_id, e.to_id) for e in batch) is sees(role, vis), "get_edges"
    if not sees(role, vis):
        assert await caller.get_edges([target]) == [], "get_edges"

    # Outward from the anchor: the target is one hop away (the hub's own RELATED_TO links between
    # similar global beads point the same way, so the walk stays small as the graph grows).
    sub = await caller.traverse_graph(anchor, max_depth=2, direction="out")
    nodes = {n.bead.bead_id: n.depth for n in sub.nodes}
    assert (nodes.get(target) == 1) is sees(role, vis), "traverse_graph"
    assert (target in nodes) is sees(role, vis), "traverse_graph"
    assert all(e.from_id in nodes and e.to_id in nodes for e in sub.edges)
    assert_may_see_all(caller.ai_id, w.member_of(role), (n.bead for n in sub.nodes))
    if sees(role, vis):
        back = await caller.traverse_graph(target, max_depth=1)
        depths = {n.bead.bead_id: n.depth for n in back.nodes}
        assert (depths[target], depths[anchor]) == (0, 1)
    else:
        await assert_like_missing(caller.traverse_graph, target)

    # why, seeded on the target itself (its session holds nothing else).
    seeded = await caller.why(w.word, hops=1, filters={"session_id": w.session_id})
    assert seeded.seeds == ([target] if sees(role, vis) else []), "why"
    shown = {n.bead.bead_id for n in seeded.graph.nodes}
    assert (target in shown) is sees(role, vis), "why"
    assert (anchor in shown) is sees(role, vis), "why"  # reached only through the target
    # why, seeded on the anchor: the walk reaches the target only when the caller may see it.
    from_anchor_why = await caller.why(
        w.anchor.title.split()[-1], hops=1, seeds=1, filters={"created_by": w.creator.ai_id}
    )
    assert from_anchor_why.seeds == [anchor], "why"
    assert (target in {n.bead.bead_id for n in from_anchor_why.graph.nodes}) is sees(role, vis), "why"
    for result in (seeded, from_anchor_why):
        assert_may_see_all(caller.ai_id, w.member_of(role), (n.bead for n in result.graph.nodes))
        shown = {n.bead.bead_id for n in result.graph.nodes}
        assert all(e.from_id in shown and e.to_id in shown for e in result.graph.edges)

    # add_relationship: only between beads the caller can see.
    mine = await caller.create_bead(f"own bead of the {role}", "visible to its creator")
    if sees(role, vis):
        out = await caller.add_relationship(mine.bead_id, target, RelType.RELATED_TO)
        back_link = await caller.add_relationship(target, mine.bead_id, RelType.FOLLOWS_FROM)
        assert (out.from_id, out.to_id, back_link.from_id, back_link.to_id) == (
            mine.bead_id,
            target,
            target,
            mine.bead_id,
        )
    else:
        await assert_like_missing(lambda b: caller.add_relationship(mine.bead_id, b, RelType.RELATED_TO), target)
        await assert_like_missing(lambda b: caller.add_relationship(b, mine.bead_id, RelType.FOLLOWS_FROM), target)
    assert await edge_count(hub, mine.bead_id, target) == (2 if sees(role, vis) else 0), "add_relationship"


@pytest.mark.parametrize(("vis", "role"), MATRIX)
async def test_find_similar_and_deduplicate_beads(
    new_client: NewClient, hub: HubContext, vis: Visibility, role: str
) -> None:
    w = await build_world(new_client, vis)
    caller, target = w.by_role[role], w.target.bead_id
    # A global copy of the target (same text, so the same content hash and the nearest vector).
    # The target is older, so a merge would keep it and archive the twin.
    twin = await w.creator.create_bead(w.target.title, w.target.content, visibility="global", group_id=w.group_id)
    pair = {target, twin.bead_id}

    similar = await caller.find_similar(twin.bead_id, threshold=0.9, limit=10)
    assert (target in ids(h.bead for h in similar.hits)) is sees(role, vis), "find_similar"
    assert_may_see_all(caller.ai_id, w.member_of(role), (h.bead for h in similar.hits))
    if sees(role, vis):
        from_target = await caller.find_similar(target, threshold=0.9, limit=10)
        assert twin.bead_id in ids(h.bead for h in from_target.hits), "find_similar"
    else:
        await assert_like_missing(lambda b: caller.find_similar(b, threshold=0.9), target)

    report = await caller.deduplicate_beads(bead_id=twin.bead_id, group_id=w.group_id)
    assert [set(c.bead_ids) for c in report.clusters] == ([pair] if sees(role, vis) else []), "deduplicate"
    whole_group = await caller.deduplicate_beads(group_id=w.group_id)
    assert any(target in c.bead_ids for c in whole_group.clusters) is sees(role, vis), "deduplicate"
    if sees(role, vis):
        own = await caller.deduplicate_beads(bead_id=target, group_id=w.group_id)
        assert [set(c.bead_ids) for c in own.clusters] == [pair], "deduplicate"
    else:
        await assert_like_missing(lambda b: caller.deduplicate_beads(bead_id=b, group_id=w.group_id), target)

    # A merge changes only what the caller may change: here only the creator may archive the twin.
    merged = await caller.deduplicate_beads(bead_id=twin.bead_id, group_id=w.group_id, merge=True)
    merges = sees(role, vis) and role == "creator"
    expected = [target] if merges else [None] if sees(role, vis) else []
    assert [c.merged_into for c in merged.clusters] == expected, "deduplicate merge"
    assert (await stored_status(hub, twin.bead_id) == BeadStatus.ARCHIVED.value) is merges
    assert await stored_status(hub, target) == BeadStatus.ACTIVE.value
    rows = await hub.graph.ro_query(
        "MATCH (:Bead {bead_id: $k})-[r:UPDATES]->(:Bead {bead_id: $d}) RETURN count(r)",
        {"k": target, "d": twin.bead_id},
    )
    assert (rows[0][0] == 1) is merges


@pytest.mark.parametrize(("vis", "role"), MATRIX)
async def test_decay_old_memories(new_client: NewClient, hub: HubContext, vis: Visibility, role: str) -> None:
    w = await build_world(new_client, vis)
    caller = w.by_role[role]
    await backdate(hub, w.target.bead_id, days=400)
    archives = modify_error(role, vis) is None  # only what the caller may change is archived
    dry = await caller.decay_old_memories(threshold_days=365, dry_run=True)
    assert (w.target.bead_id in dry.archived) is archives
    assert await stored_status(hub, w.target.bead_id) == BeadStatus.ACTIVE.value
    report = await caller.decay_old_memories(threshold_days=365)
    assert (w.target.bead_id in report.archived) is archives
    assert (await stored_status(hub, w.target.bead_id) == BeadStatus.ARCHIVED.value) is archives


# --- the group's ops --------------------------------------------------------------------------


@pytest.mark.parametrize("vis", VISIBILITIES, ids=[v.value for v in VISIBILITIES])
async def test_group_ops_may_change_and_delete_group_beads_only(new_client: NewClient, vis: Visibility) -> None:
    w = await build_world(new_client, vis)
    new_title = f"edited by ops {token()}"
    if vis is Visibility.GROUP:
        assert (await w.ops.update_bead(w.target.bead_id, title=new_title)).title == new_title
        assert (await w.creator.get_bead(w.target.bead_id)).title == new_title
        assert (await w.ops.delete_bead(w.target.bead_id)).deleted
        await assert_like_missing(w.creator.get_bead, w.target.bead_id)
    elif vis is Visibility.GLOBAL:
        with pytest.raises(Forbidden):
            await w.ops.update_bead(w.target.bead_id, title=new_title)
        with pytest.raises(Forbidden):
            await w.ops.delete_bead(w.target.bead_id)
        assert (await w.creator.get_bead(w.target.bead_id)).title == w.target.title
    else:
        await assert_like_missing(lambda b: w.ops.update_bead(b, title=new_title), w.target.bead_id)
        await assert_like_missing(w.ops.delete_bead, w.target.bead_id)
        assert (await w.creator.get_bead(w.target.bead_id)).title == w.target.title


async def test_demoted_ops_loses_its_rights_on_the_next_request(new_client: NewClient) -> None:
    w = await build_world(new_client, Visibility.GROUP)
    second_ops = await new_client("o")
    await w.ops.add_member(w.group_id, second_ops.ai_id, role="ops")
    assert (await w.ops.update_bead(w.target.bead_id, importance=7)).importance == 7
    await second_ops.add_member(w.group_id, w.ops.ai_id, role="agent")
    with pytest.raises(Forbidden):
        await w.ops.update_bead(w.target.bead_id, importance=1)
    with pytest.raises(Forbidden):
        await w.ops.add_member(w.group_id, new_ai())
    assert (await w.creator.get_bead(w.target.bead_id)).importance == 7


# --- membership changes take effect on the very next request ----------------------------------


async def test_removed_member_is_refused_at_once_and_readmitted_member_sees_again(new_client: NewClient) -> None:
    w = await build_world(new_client, Visibility.GROUP)
    member = w.by_role["member"]
    target = w.target.bead_id
    assert (await member.get_bead(target)).bead_id == target

    await w.ops.remove_member(w.group_id, member.ai_id)
    await assert_like_missing(member.get_bead, target)
    assert target not in ids(h.bead for h in (await member.search_beads(w.word)).hits)
    assert target not in ids(await member.get_by_tag(w.tag))
    await assert_like_missing(member.get_by_group, w.group_id)
    await assert_like_missing(member.traverse_graph, target)

    await w.ops.add_member(w.group_id, member.ai_id)
    assert (await member.get_bead(target)).bead_id == target
    assert target in ids(h.bead for h in (await member.search_beads(w.word)).hits)
    assert target in ids(await member.get_by_group(w.group_id))


@pytest.mark.parametrize("mode", [SearchMode.KEYWORD, SearchMode.HYBRID])
async def test_a_search_finds_a_group_the_caller_joined_after_its_last_search(
    new_client: NewClient, mode: SearchMode
) -> None:
    """The hub keeps each caller's groups between searches (and a keyword search starts in them while it checks
    they are current): one made right after joining is answered in the new group too, one right after leaving
    is not."""
    w = await build_world(new_client, Visibility.GROUP)
    caller = w.by_role["non_member"]

    async def found() -> list[str]:
        return ids(h.bead for h in (await caller.search_beads(w.word, mode=mode)).hits)

    assert w.target.bead_id not in await found()
    await w.ops.add_member(w.group_id, caller.ai_id)
    assert w.target.bead_id in await found()
    await w.ops.remove_member(w.group_id, caller.ai_id)
    assert w.target.bead_id not in await found()


async def test_member_who_leaves_is_refused_at_once(new_client: NewClient) -> None:
    w = await build_world(new_client, Visibility.GROUP)
    member = w.by_role["member"]
    assert (await member.get_bead(w.target.bead_id)).bead_id == w.target.bead_id
    left = await member.remove_member(w.group_id, member.ai_id)
    assert member.ai_id not in {m.ai_id for m in left.members}
    await assert_like_missing(member.get_bead, w.target.bead_id)
    await assert_like_missing(member.list_members, w.group_id)
    assert w.group_id not in {g.group_id for g in await member.list_groups()}


async def test_creator_who_leaves_loses_its_own_group_beads(new_client: NewClient, hub: HubContext) -> None:
    w = await build_world(new_client, Visibility.GROUP)
    creator, target = w.creator, w.target.bead_id
    await creator.remove_member(w.group_id, creator.ai_id)

    await assert_like_missing(creator.get_bead, target)
    await assert_like_missing(lambda b: creator.update_bead(b, title="mine, surely"), target)
    await assert_like_missing(creator.delete_bead, target)
    await assert_like_missing(creator.get_relationships, target)
    await assert_like_missing(creator.traverse_graph, target)
    assert target not in ids(h.bead for h in (await creator.search_beads(w.word)).hits)
    assert target not in ids(await creator.get_by_session(w.session_id))  # even in its own session
    assert target not in ids(await creator.get_by_tag(w.tag))
    assert target not in ids(await creator.rank_by_importance([target]))
    await backdate(hub, target, days=400)
    assert target not in (await creator.decay_old_memories(threshold_days=365)).archived
    # The bead is still there for the members.
    member = w.by_role["member"]
    assert (await member.get_bead(target)).title == w.target.title
    assert await stored_status(hub, target) == BeadStatus.ACTIVE.value


async def test_visibility_change_takes_effect_on_the_next_request(new_client: NewClient) -> None:
    w = await build_world(new_client, Visibility.PRIVATE)
    member, outsider, target = w.by_role["member"], w.by_role["non_member"], w.target.bead_id
    await assert_like_missing(member.get_bead, target)
    await w.creator.update_bead(target, visibility="group")
    assert (await member.get_bead(target)).visibility is Visibility.GROUP
    await assert_like_missing(outsider.get_bead, target)
    await w.creator.update_bead(target, visibility="global")
    assert (await outsider.get_bead(target)).visibility is Visibility.GLOBAL
    await w.creator.update_bead(target, visibility="private")
    await assert_like_missing(outsider.get_bead, target)
    await assert_like_missing(member.get_bead, target)


# --- traversal never walks through a hidden bead ----------------------------------------------

HIDERS = ("private_of_another", "group_not_joined", "group_left")
# Texts far apart in meaning, so the hub's automatic RELATED_TO links never join them.
START_TEXT = "Quarterly invoices for the Lisbon office were reconciled against the ledger."
HIDDEN_TEXT = "The database migration will run on Saturday night."
END_TEXT = "Photosynthesis in chloroplasts converts sunlight into chemical energy."


@pytest.mark.parametrize("hider", HIDERS)
async def test_traversal_never_walks_through_or_returns_a_hidden_bead(new_client: NewClient, hider: str) -> None:
    owner = await new_client("o")
    caller = await new_client()
    shared = await owner.create_group("the caller sees this group")
    closed = await owner.create_group("the hidden bead's group")
    await owner.add_member(shared.group_id, caller.ai_id)
    if hider == "group_left":
        await owner.add_member(closed.group_id, caller.ai_id)
    in_shared: dict[str, Any] = {"visibility": "group", "group_id": shared.group_id}
    start = await owner.create_bead(START_TEXT, **in_shared)
    if hider == "private_of_another":
        hidden = await owner.create_bead(HIDDEN_TEXT, visibility="private")
    else:
        hidden = await owner.create_bead(HIDDEN_TEXT, visibility="group", group_id=closed.group_id)
    end = await owner.create_bead(END_TEXT, **in_shared)
    await owner.add_relationship(start.bead_id, hidden.bead_id, RelType.FOLLOWS_FROM)
    await owner.add_relationship(hidden.bead_id, end.bead_id, RelType.PART_OF)
    a, h, c = start.bead_id, hidden.bead_id, end.bead_id

    # Control: the owner walks the whole chain A -> H -> C, and C is reachable only through H.
    full = await owner.traverse_graph(a, max_depth=3, direction="out")
    assert {(n.bead.bead_id, n.depth) for n in full.nodes} == {(a, 0), (h, 1), (c, 2)}
    assert [(e.from_id, e.to_id) for e in await owner.get_relationships(c)] == [(h, c)]
    if hider == "group_left":
        assert {n.bead.bead_id for n in (await caller.traverse_graph(a, max_depth=3)).nodes} == {a, h, c}
        await caller.remove_member(closed.group_id, caller.ai_id)

    assert (await caller.get_bead(c)).bead_id == c  # C itself is visible, only the path to it is not
    for direction in Direction:
        for rel_types in ([], [RelType.FOLLOWS_FROM, RelType.PART_OF]):
            from_a = await caller.traverse_graph(a, max_depth=6, rel_types=rel_types, direction=direction)
            assert [n.bead.bead_id for n in from_a.nodes] == [a], (direction, rel_types)
            assert from_a.edges == []
            from_c = await caller.traverse_graph(c, max_depth=6, rel_types=rel_types, direction=direction)
            assert [n.bead.bead_id for n in from_c.nodes] == [c], (direction, rel_types)
            assert from_c.edges == []
    assert await caller.get_relationships(a) == []
    assert await caller.get_relationships(c) == []
    await assert_like_missing(caller.get_relationships, h)
    await assert_like_missing(caller.traverse_graph, h)
    why = await caller.why("invoices Lisbon ledger", hops=4, filters={"group_id": shared.group_id})
    assert why.seeds[:1] == [a]
    assert {n.bead.bead_id for n in why.graph.nodes} == set(why.seeds)
    assert h not in why.seeds and c not in {n.bead.bead_id for n in why.graph.nodes} - set(why.seeds)

    # Control: a visible path A -> C is walked, and H still is not.
    await owner.add_relationship(a, c, RelType.RELATED_TO)
    sub = await caller.traverse_graph(a, max_depth=6)
    assert {(n.bead.bead_id, n.depth) for n in sub.nodes} == {(a, 0), (c, 1)}
    assert [(e.from_id, e.to_id) for e in sub.edges] == [(a, c)]
    assert [(e.from_id, e.to_id) for e in await caller.get_relationships(a)] == [(a, c)]


# --- invisible beads never starve visible ones -------------------------------------------------


def stored_bead(owner: str, title: str, content: str, created_at: int, **fields: Any) -> dict[str, Any]:
    """The stored properties of a bead, for test setup written straight into the graph."""
    bead_id = new_id("b")
    return {
        "bead_id": bead_id,
        "idem": f"{owner}:{bead_id}",
        "title": title,
        "content": content,
        "content_hash": content_hash(content),
        "bead_type": "fact",
        "importance": 10,
        "tags": [],
        "created_at": created_at,
        "updated_at": created_at,
        "accessed_at": created_at,
        "created_by": owner,
        "metadata": "{}",
        "status": "active",
        "provenance": "observed",
        "corroborated_by": [],
        **fields,
    }


async def test_a_dense_band_of_invisible_beads_never_starves_a_visible_one(
    new_client: NewClient, hub: HubContext
) -> None:
    owner = await new_client("o")
    caller = await new_client()
    shared = await owner.create_group("shared with the caller")
    closed = await owner.create_group("not shared with the caller")
    await owner.add_member(shared.group_id, caller.ai_id)
    word, tag, session = token(), f"dense-{secrets.token_hex(5)}", new_id("s")
    common: dict[str, Any] = {"tags": [tag], "session_id": session}

    visible = await owner.create_bead(
        f"{word} once", "plain content", visibility="group", group_id=shared.group_id, importance=0, **common
    )
    # The band: more relevant (the word over and over), more important, in the same session, tag
    # and groups, and both older and newer than the visible bead. Most are written straight into
    # the graph (several times any candidate depth); some go through the API (vectors, links too).
    at = to_ms(visible.created_at)
    band: list[dict[str, Any]] = []
    for i in range(1, 301):
        scope = (
            {"visibility": "private", "group_id": shared.group_id}
            if i % 2
            else {"visibility": "group", "group_id": closed.group_id}
        )
        band.append(
            stored_bead(
                owner.ai_id, f"{word} {word} {word}", f"{word} " * 20, at + (i if i % 3 else -i), **common, **scope
            )
        )
    await hub.graph.query("UNWIND $rows AS row CREATE (b:Bead) SET b += row", {"rows": band})
    through_api = await asyncio.gather(
        *(
            owner.create_bead(f"{word} {word}", f"{word} " * 10, importance=10, visibility="private", **common)
            for _ in range(10)
        )
    )
    hidden = [p["bead_id"] for p in band] + [b.bead_id for b in through_api]
    rows = await hub.graph.ro_query("MATCH (b:Bead) WHERE b.bead_id IN $ids RETURN count(b)", {"ids": hidden})
    assert rows[0][0] == 310

    caller.read_after(owner.index_position)
    assert ids(h.bead for h in (await caller.search_beads(word, limit=1, mode="keyword")).hits) == [visible.bead_id]
    for mode in SearchMode:
        hits = (await caller.search_beads(word, limit=1, mode=mode, filters={"group_id": shared.group_id})).hits
        assert ids(h.bead for h in hits) == [visible.bead_id], mode
    assert ids(await caller.get_by_tag(tag, limit=1)) == [visible.bead_id]
    assert ids(await caller.get_recent(limit=1, since=visible.created_at)) == [visible.bead_id]
    assert ids(await caller.get_by_session(session, limit=1)) == [visible.bead_id]
    assert ids(await caller.get_by_group(shared.group_id, limit=1)) == [visible.bead_id]
    assert ids(await caller.rank_by_importance([*hidden[:499], visible.bead_id])) == [visible.bead_id]
    assert (await caller.context(word, max_tokens=500, filters={"tags": [tag]})).bead_ids == [visible.bead_id]

    hub_bead = await owner.create_bead(
        "Index of everything the team wrote this week", visibility="group", group_id=shared.group_id
    )
    await asyncio.gather(
        *(owner.add_relationship(hub_bead.bead_id, b, RelType.RELATED_TO) for b in hidden[:150]),
        owner.add_relationship(hub_bead.bead_id, visible.bead_id, RelType.RELATED_TO),
    )
    sub = await caller.traverse_graph(hub_bead.bead_id, max_depth=1, limit=2)
    assert {n.bead.bead_id for n in sub.nodes} == {hub_bead.bead_id, visible.bead_id}
    assert [(e.from_id, e.to_id) for e in await caller.get_relationships(hub_bead.bead_id)] == [
        (hub_bead.bead_id, visible.bead_id)
    ]


# --- membership rules -------------------------------------------------------------------------


async def test_only_the_ops_changes_membership(new_client: NewClient) -> None:
    ops = await new_client("o")
    agent = await new_client()
    outsider = await new_client()
    newcomer = new_ai()
    group = await ops.create_group("membership")
    gid = group.group_id
    await ops.add_member(gid, agent.ai_id)

    with pytest.raises(Forbidden):
        await agent.add_member(gid, newcomer)
    with pytest.raises(Forbidden):
        await agent.add_member(gid, agent.ai_id, role="ops")
    with pytest.raises(Forbidden):
        await agent.remove_member(gid, ops.ai_id)
    await assert_like_missing(lambda g: outsider.add_member(g, newcomer), gid)
    await assert_like_missing(lambda g: outsider.add_member(g, outsider.ai_id), gid)
    await assert_like_missing(lambda g: outsider.remove_member(g, agent.ai_id), gid)
    await assert_like_missing(lambda g: outsider.remove_member(g, outsider.ai_id), gid)
    await assert_like_missing(outsider.list_members, gid)
    members = {(m.ai_id, m.role) for m in (await ops.list_members(gid)).members}
    assert members == {(ops.ai_id, Role.OPS), (agent.ai_id, Role.AGENT)}

    # A member may leave; then it is an outsider.
    await agent.remove_member(gid, agent.ai_id)
    await assert_like_missing(agent.list_members, gid)
    await assert_like_missing(lambda g: agent.add_member(g, agent.ai_id), gid)
    assert {m.ai_id for m in (await ops.list_members(gid)).members} == {ops.ai_id}

    # The last ops may not leave.
    with pytest.raises(Conflict):
        await ops.remove_member(gid, ops.ai_id)
    assert {(m.ai_id, m.role) for m in (await ops.list_members(gid)).members} == {(ops.ai_id, Role.OPS)}

    # With a second ops, the first may leave.
    await ops.add_member(gid, newcomer, role="ops")
    await ops.remove_member(gid, ops.ai_id)
    await assert_like_missing(ops.list_members, gid)


async def test_the_last_ops_may_not_demote_itself(new_client: NewClient) -> None:
    ops = await new_client("o")
    group = await ops.create_group("one ops")
    with pytest.raises(Conflict):
        await ops.add_member(group.group_id, ops.ai_id, role="agent")
    assert [m.role for m in (await ops.list_members(group.group_id)).members] == [Role.OPS]


# --- creates ----------------------------------------------------------------------------------


@pytest.mark.parametrize("vis", VISIBILITIES, ids=[v.value for v in VISIBILITIES])
async def test_create_into_a_group_the_caller_is_not_in_is_not_found(
    new_client: NewClient, hub: HubContext, vis: Visibility
) -> None:
    w = await build_world(new_client, Visibility.GROUP)
    before = await bead_count(hub)
    for role in ("non_member", "ex_member"):
        caller = w.by_role[role]
        await assert_like_missing(
            lambda g, c=caller: c.create_bead(f"sneak {token()}", visibility=vis, group_id=g), w.group_id
        )
        await assert_like_missing(
            lambda g, c=caller: c.create_bead(f"sneak {token()}", visibility=vis, group_id=g, session_id=new_id("s")),
            w.group_id,
        )
    assert await bead_count(hub) == before
    assert ids(await w.ops.get_by_group(w.group_id)) == [w.target.bead_id]


async def test_naming_another_ais_session_neither_writes_into_it_nor_reveals_it(
    new_client: NewClient, hub: HubContext
) -> None:
    """A session is its owner's: the same id named by another identity is that identity's own session.
    So the create is answered exactly as for an id nobody uses, and the owner's session is untouched."""
    w = await build_world(new_client, Visibility.GROUP)
    for role in ("member", "non_member"):
        caller = w.by_role[role]
        used = await caller.create_bead(f"in your session {token()}", session_id=w.session_id)
        fresh = await caller.create_bead(f"in a new session {token()}", session_id=new_id("s"))
        assert (used.created_by, used.visibility) == (fresh.created_by, fresh.visibility)
        assert (await caller.get_session(w.session_id)).owner == caller.ai_id
        assert ids(await caller.get_by_session(w.session_id)) == [used.bead_id]
        assert await caller.get_relationships(used.bead_id, RelType.FOLLOWS_FROM) == []
    assert ids(await w.creator.get_by_session(w.session_id)) == [w.target.bead_id]
    report = await w.creator.check_session(w.session_id)
    assert (report.beads, report.problems) == (1, [])
    rows = await hub.graph.ro_query("MATCH (s:Session {session_id: $s}) RETURN s.owner", {"s": w.session_id})
    assert sorted(r[0] for r in rows) == sorted([w.creator.ai_id, w.by_role["member"].ai_id,
                                                 w.by_role["non_member"].ai_id])


async def test_a_retried_create_returns_the_same_bead(new_client: NewClient, hub: HubContext) -> None:
    writer = await new_client()
    other = await new_client()
    key = f"retry-{secrets.token_hex(6)}"
    first = await writer.create_bead("retried", "same memory", idempotency_key=key)
    again = await writer.create_bead("retried", "same memory", idempotency_key=key)
    assert (again.bead_id, again.created_at) == (first.bead_id, first.created_at)

    racing_key = f"race-{secrets.token_hex(6)}"
    raced = await asyncio.gather(*(writer.create_bead("raced", idempotency_key=racing_key) for _ in range(8)))
    assert len({b.bead_id for b in raced}) == 1

    rows = await hub.graph.ro_query("MATCH (b:Bead {created_by: $me}) RETURN count(b)", {"me": writer.ai_id})
    assert rows[0][0] == 2
    # Keys are per identity: another AI using the same key gets its own bead.
    theirs = await other.create_bead("retried", "same memory", idempotency_key=key)
    assert theirs.bead_id != first.bead_id and theirs.created_by == other.ai_id


# --- regressions (bugs found by this file, fixed in the hub) ----------------------------------


async def test_a_retried_create_never_returns_a_bead_the_caller_may_no_longer_see(new_client: NewClient) -> None:
    w = await build_world(new_client, Visibility.GROUP)
    creator = w.creator
    key = f"leak-{secrets.token_hex(6)}"
    bead = await creator.create_bead(
        "group note", "draft", visibility="group", group_id=w.group_id, idempotency_key=key
    )
    secret = f"ops only {token()}"
    await creator.remove_member(w.group_id, creator.ai_id)
    await w.ops.update_bead(bead.bead_id, content=secret)
    await assert_like_missing(creator.get_bead, bead.bead_id)
    try:
        retried = await creator.create_bead("group note", "draft", idempotency_key=key)
    except RecallError:
        return  # refusing the retry is fine
    assert secret not in retried.content
    assert retried.bead_id != bead.bead_id


async def test_an_update_cannot_strip_the_group_of_a_group_bead(new_client: NewClient) -> None:
    w = await build_world(new_client, Visibility.GROUP)
    try:
        await w.creator.update_bead(w.target.bead_id, group_id=None)
    except RecallError:
        pass  # refusing is fine
    stored = await w.creator.get_bead(w.target.bead_id)
    assert (stored.visibility, stored.group_id) == (Visibility.GROUP, w.group_id)


async def test_an_update_cannot_move_a_bead_into_a_group_the_caller_is_not_in(new_client: NewClient) -> None:
    w = await build_world(new_client, Visibility.GLOBAL)
    outsider = w.by_role["non_member"]
    own = await outsider.create_bead(f"outsider global {token()}", visibility="global")
    with pytest.raises(NotFound):
        await outsider.update_bead(own.bead_id, group_id=w.group_id)
    assert own.bead_id not in ids(await w.ops.get_by_group(w.group_id))
    assert (await outsider.get_bead(own.bead_id)).group_id is None
