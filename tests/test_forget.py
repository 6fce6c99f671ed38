"""Forgetting, through the client against the real servers: a forgotten bead is found by no read path
(for anyone), leaves a tombstone without content, and its content is refused again in its scope — on
every path that stores a bead, exactly and as a near duplicate, and in no other scope; who may forget;
forget_by_author; the tombstone listing; audit; bad input; and a backup taken before a forget and
restored after it."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ClientFactory, new_ai
from recall_client import RecallClient
from recall_hub.config import HubSettings
from recall_hub.context import HubContext
from recall_hub.embedders import EmbedderConfig
from recall_hub.ops.after_commit import settle_created
from recall_hub.ops.beads import new_bead_props
from recall_hub.service.server import running_hub
from recall_hub.store.forget import CheckFirst
from recall_hub.store.records import content_hash
from recall_hub.timeutil import now_ms
from recall_hub.tooling.backup import backup, restore
from recall_hub.tooling.backup_file import read_records
from recall_hub.tooling.importer import import_file
from recall_hub.tooling.stack import EmbeddedStack
from recall_schemas import (
    FORGOTTEN_REASON,
    Conflict,
    CreateBead,
    Forbidden,
    InvalidRequest,
    NotFound,
    RecallError,
    RelType,
    SearchMode,
    new_id,
)

pytestmark = pytest.mark.asyncio


def secret_text(word: str) -> tuple[str, str]:
    return (
        f"Staging deploy key {word}",
        f"The staging deploy key {word} is stored in vault at secret/staging/deploy and rotates monthly.",
    )


def near_duplicate(word: str) -> tuple[str, str]:
    return (
        f"Staging deploy key {word}",
        f"The staging deploy key {word} is kept in vault at secret/staging/deploy and rotates every month.",
    )


async def team(connect: ClientFactory) -> tuple[RecallClient, RecallClient, RecallClient, RecallClient, str]:
    """ops (the group's ops), author and member (members), outsider (not a member); the group's id."""
    ops, author, member, outsider = [await connect(new_ai(kind)) for kind in ("o", "a", "a", "a")]
    group = await ops.create_group("forget team")
    await ops.add_member(group.group_id, author.ai_id)
    await ops.add_member(group.group_id, member.ai_id)
    return ops, author, member, outsider, group.group_id


async def raises(code: type[RecallError], call: Any) -> RecallError:
    with pytest.raises(code) as caught:
        await call
    return caught.value


# --- no read path finds it -------------------------------------------------------------------------


async def test_a_forgotten_bead_is_found_by_no_read_path(connect: ClientFactory, hub: HubContext) -> None:
    ops, author, member, _, group_id = await team(connect)
    word = f"zq{secrets.token_hex(4)}"
    tag = f"t{secrets.token_hex(4)}"
    session = f"s_{secrets.token_hex(6)}"
    title, content = secret_text(word)
    needle = f"{word} is stored in vault"
    first = await author.create_bead(
        f"Staging setup {word}", f"How staging {word} is set up: vault holds the deploy key.",
        visibility="group", group_id=group_id, tags=[tag], session_id=session,
    )
    secret = await author.create_bead(
        title, content, visibility="group", group_id=group_id, tags=[tag], session_id=session,
        metadata={"source": "chat"},
    )
    await author.add_relationship(secret.bead_id, first.bead_id, RelType.RELATED_TO)
    await author.learn(f"note-{word}", f"unrelated note {word}")
    await author.update_bead(secret.bead_id, importance=8)  # a kept version of it, too

    # Every path finds it before (so each check after can fail).
    assert secret.bead_id in [h.bead.bead_id for h in (await author.search_beads(word, mode=SearchMode.KEYWORD)).hits]
    changes = (await member.changes_since(group_id)).changes
    assert any(c.bead_id == secret.bead_id and c.bead is not None for c in changes)

    tombstone = await author.forget_bead(secret.bead_id, "a leaked credential")
    assert tombstone.bead_id == secret.bead_id and tombstone.content_hash == content_hash(content)
    assert (tombstone.forgotten_by, tombstone.created_by, tombstone.reason) == (author.ai_id, author.ai_id,
                                                                               "a leaked credential")
    assert tombstone.denied and tombstone.group_id == group_id
    assert not {"title", "content", "tags", "metadata"} & set(tombstone.model_dump())

    for reader in (author, member, ops):
        await raises(NotFound, reader.get_bead(secret.bead_id))
        for mode in (SearchMode.KEYWORD, SearchMode.VECTOR, SearchMode.HYBRID):
            hits = (await reader.search_beads(f"{title} {content}", mode=mode)).hits
            assert secret.bead_id not in [h.bead.bead_id for h in hits], (reader.ai_id, mode)
        similar = await reader.find_similar(first.bead_id, threshold=0.0)
        assert secret.bead_id not in [h.bead.bead_id for h in similar.hits]
        why = await reader.why(content, hops=2)
        assert secret.bead_id not in why.seeds + [n.bead.bead_id for n in why.graph.nodes]
        block = await reader.context(content, max_tokens=2000)
        assert secret.bead_id not in block.bead_ids and needle not in block.text
        listed = [
            *(await reader.get_by_group(group_id)), *(await reader.get_by_tag(tag)), *(await reader.get_recent(50)),
        ]
        assert secret.bead_id not in [b.bead_id for b in listed] and first.bead_id in [b.bead_id for b in listed]
        walk = await reader.traverse_graph(first.bead_id, max_depth=3)
        assert secret.bead_id not in [n.bead.bead_id for n in walk.nodes]
        edges = await reader.get_relationships(first.bead_id)
        assert secret.bead_id not in {e.from_id for e in edges} | {e.to_id for e in edges}
        unified = await reader.unified_recall(content)
        assert secret.bead_id not in [h.bead.bead_id for h in unified.beads.hits]
        clusters = (await reader.deduplicate_beads(group_id=group_id)).clusters
        assert all(secret.bead_id not in c.bead_ids for c in clusters)
    assert secret.bead_id not in [b.bead_id for b in await author.get_by_session(session)]
    await raises(NotFound, author.update_bead(secret.bead_id, importance=1))
    await raises(NotFound, author.forget_bead(secret.bead_id, "again"))

    # The change feed: a forgotten entry without content, and no earlier entry with it.
    changes = (await member.changes_since(group_id)).changes
    mine = [c for c in changes if c.bead_id == secret.bead_id]
    assert [c.action for c in mine][-1] == "forgotten" and all(c.bead is None for c in mine)

    # Nothing of the content is stored anywhere: graph, vector sets, change logs.
    rows = await hub.graph.ro_query(
        "MATCH (n) WHERE n.content CONTAINS $needle OR n.title = $title RETURN labels(n), n.bead_id",
        {"needle": needle, "title": title},
    )
    assert rows == []
    assert await hub.vectors.vector(secret.bead_id, f"group:{group_id}") is None
    raw = await hub.redis.xrange(hub.keys.changes(group_id), min="-", max="+")
    assert raw and not [f for _, f in raw if needle.encode() in f[b"change"]]


async def test_private_and_global_beads_are_forgotten_the_same_way(connect: ClientFactory) -> None:
    me, other = await connect(), await connect()
    word = f"zq{secrets.token_hex(4)}"
    for visibility in ("private", "global"):
        bead = await me.create_bead(f"{visibility} {word}", f"the {visibility} thing {word}", visibility=visibility)
        await me.forget_bead(bead.bead_id, "no longer true")
        for reader in (me, other):
            await raises(NotFound, reader.get_bead(bead.bead_id))
            hits = (await reader.search_beads(word)).hits
            assert bead.bead_id not in [h.bead.bead_id for h in hits]


# --- the deny-list ---------------------------------------------------------------------------------------


async def test_forgotten_content_is_refused_on_every_create_path_in_its_scope(
    connect: ClientFactory, tmp_path: Path
) -> None:
    ops, author, member, outsider, group_id = await team(connect)
    other_group = (await member.create_group("elsewhere")).group_id
    word = f"zq{secrets.token_hex(4)}"
    title, content = secret_text(word)
    bead = await author.create_bead(title, content, visibility="group", group_id=group_id)
    await ops.forget_bead(bead.bead_id, "leaked")
    before = {b.bead_id for b in await member.get_by_group(group_id)}

    def forgotten(exc: RecallError) -> None:
        assert isinstance(exc, Conflict) and exc.details["reason"] == FORGOTTEN_REASON
        assert bead.bead_id not in exc.message and bead.bead_id not in json.dumps(exc.details)

    # Exact (whitespace and case do not matter), by anyone of the group, and a near duplicate.
    forgotten(await raises(Conflict, member.create_bead(title, content, visibility="group", group_id=group_id)))
    forgotten(await raises(Conflict, author.create_bead(
        "other title", "  " + content.upper().replace(" ", "   "), visibility="group", group_id=group_id
    )))
    near = await raises(Conflict, member.create_bead(*near_duplicate(word), visibility="group", group_id=group_id))
    forgotten(near)
    assert near.details["match"] == "similar"
    unrelated = await member.create_bead(f"lunch {word}", "soup on thursday", visibility="group", group_id=group_id)

    # A batch: the forgotten one is refused, the rest stored.
    items = await member.create_beads([
        {"title": title, "content": content, "visibility": "group", "group_id": group_id},
        {"title": f"fine {word}", "content": "something else entirely", "visibility": "group", "group_id": group_id},
    ])
    assert items[0].error is not None and items[0].error.details["reason"] == FORGOTTEN_REASON
    assert items[1].error is None and items[1].bead_id

    # promote_to_bead and `recall import` go the same way.
    await member.learn("deploy-key", content)
    forgotten(await raises(Conflict, member.promote_to_bead("deploy-key", visibility="group", group_id=group_id)))
    lines = tmp_path / "beads.jsonl"
    lines.write_text(
        json.dumps({"title": title, "content": content, "visibility": "group", "group_id": group_id}) + "\n"
    )
    report = await import_file(member, lines)
    assert report.created == 0 and len(report.refused) == 1 and "conflict" in report.refused[0][1]

    # Extraction and the docs collector's path leave the forgotten fact out (and a topic left empty).
    given = await member.remember_topics(
        [{"name": f"deploy {word}", "facts": [{"title": title, "content": content}]}],
        visibility="group", group_id=group_id,
    )
    assert (given.created, given.forgotten, given.topics) == (0, 1, [])
    extracted = await member.remember_extracted(content, visibility="group", group_id=group_id)
    assert (extracted.created, extracted.forgotten) == (0, 1)

    after = {b.bead_id for b in await member.get_by_group(group_id)}
    assert after - before == {unrelated.bead_id, items[1].bead_id}  # nothing else was stored

    # An update may not turn a bead into the forgotten content, nor move a copy into the scope.
    stored = await member.get_bead(items[1].bead_id)
    forgotten(await raises(Conflict, member.update_bead(stored.bead_id, title=title, content=content)))
    copy = await member.create_bead(title, content)  # private: allowed
    forgotten(await raises(Conflict, member.update_bead(copy.bead_id, visibility="group", group_id=group_id)))
    assert (await member.get_bead(stored.bead_id)).version == stored.version

    # Other scopes are not blocked: another group, private, global.
    assert (await member.create_bead(title, content, visibility="group", group_id=other_group)).bead_id
    assert (await member.create_bead(title, content, visibility="private")).bead_id
    assert (await member.create_bead(title, content, visibility="global")).bead_id
    # A non-member learns nothing: the group is simply not found, as for any content.
    await raises(NotFound, outsider.create_bead(title, content, visibility="group", group_id=group_id))


async def test_a_retried_create_of_a_stored_bead_is_never_refused_by_the_deny_list(connect: ClientFactory) -> None:
    """A replay (the same idempotency key) returns the bead stored first, even when a bead of the same or
    nearly the same content was forgotten since: nothing new is stored, so nothing is refused."""
    ops, author, _, _, group_id = await team(connect)
    word = f"zr{secrets.token_hex(4)}"
    title, content = secret_text(word)
    near_title, near_content = near_duplicate(word)
    scope = {"visibility": "group", "group_id": group_id}
    same = await author.create_bead(title, content, idempotency_key="k-same", **scope)
    near = await author.create_bead(near_title, near_content, idempotency_key="k-near", **scope)
    doomed = await author.create_bead(title + " ", content, idempotency_key="k-doomed", **scope)  # same hash
    await ops.forget_bead(doomed.bead_id, "leaked")
    assert (await author.create_bead(title, content, idempotency_key="k-same", **scope)).bead_id == same.bead_id
    assert (await author.create_bead(near_title, near_content, idempotency_key="k-near", **scope)).bead_id == (
        near.bead_id
    )
    items = await author.create_beads([
        {"title": title, "content": content, "idempotency_key": "k-same", **scope},
        {"title": near_title, "content": near_content, "idempotency_key": "k-near", **scope},
        {"title": title, "content": content, "idempotency_key": "k-new", **scope},
    ])
    assert [(i.bead_id, i.created) for i in items[:2]] == [(same.bead_id, False), (near.bead_id, False)]
    assert items[2].error is not None and items[2].error.details["reason"] == FORGOTTEN_REASON
    # The forgotten bead's own key names nothing any more: its content stays refused.
    forgotten = await raises(Conflict, author.create_bead(title + " ", content, idempotency_key="k-doomed", **scope))
    assert forgotten.details["reason"] == FORGOTTEN_REASON


async def test_the_write_itself_refuses_forgotten_content(connect: ClientFactory, hub: HubContext) -> None:
    """The deny-list is checked again inside the create query: a forget that lands between a create's
    check and its write still wins (here the write is called without the check, as in that race)."""
    ops, author, member, _, group_id = await team(connect)
    word = f"zw{secrets.token_hex(4)}"
    title, content = secret_text(word)
    bead = await author.create_bead(title, content, visibility="group", group_id=group_id)
    await ops.forget_bead(bead.bead_id, "leaked")
    request = CreateBead(title=title, content=content, visibility="group", group_id=group_id,
                         session_id=new_id("s"))
    props, idem = new_bead_props(member.ai_id, request, now_ms())
    assert await hub.beads.create(member.ai_id, props, idem=idem) is None
    other = CreateBead(title=f"fine {word}", content="unrelated", visibility="group", group_id=group_id)
    fine, fine_idem = new_bead_props(member.ai_id, other, now_ms())
    written = await hub.beads.create_many(member.ai_id, [(props, idem), (fine, fine_idem)])
    assert list(written) == [1] and written[1][0]["title"] == f"fine {word}"
    await settle_created(hub, [written[1][0]["bead_id"]])  # its after-commit work, as the operation would
    assert await hub.sessions.get(member.ai_id, request.session_id) is None  # nothing of it was written
    titles = {b.title for b in await member.get_by_group(group_id)}
    assert title not in titles and f"fine {word}" in titles


async def test_a_write_compares_with_forgotten_vectors_before_it_stores(
    connect: ClientFactory, hub: HubContext
) -> None:
    """A create is one query while its scope's deny-list holds no vector; where it holds one, the write stores
    nothing until the text was compared with it (the operation compares, then writes again)."""
    ops, author, member, _, group_id = await team(connect)
    word = f"zv{secrets.token_hex(4)}"
    request = CreateBead(title=f"lunch {word}", content="soup on thursday", visibility="group", group_id=group_id)
    props, idem = new_bead_props(member.ai_id, request, now_ms())
    bead = await author.create_bead(*secret_text(word), visibility="group", group_id=group_id)
    await ops.forget_bead(bead.bead_id, "leaked")  # the tombstone keeps the bead's vector
    assert await hub.beads.create(member.ai_id, props, idem=idem, similar_checked=False) is None
    stored = await hub.beads.create(member.ai_id, props, idem=idem)
    assert stored is not None and stored.created
    await settle_created(hub, [stored.props["bead_id"]])
    elsewhere = (await member.create_group("elsewhere")).group_id
    other = CreateBead(title=f"lunch {word}", content="soup on friday", visibility="group", group_id=elsewhere)
    other_props, other_idem = new_bead_props(member.ai_id, other, now_ms())
    written = await hub.beads.create(member.ai_id, other_props, idem=other_idem, similar_checked=False)
    assert written is not None and written.created  # no deny-list there: stored at once
    await settle_created(hub, [written.props["bead_id"]])
    # Through the operation: a scope whose write stored nothing at first is checked first for a while.
    hub.check_first = CheckFirst()
    await member.create_bead(f"tea {word}", "green, no sugar", visibility="group", group_id=elsewhere)
    assert f"group:{elsewhere}" not in hub.check_first
    await member.create_bead(f"tea {word}", "green, no sugar", visibility="group", group_id=group_id)
    assert f"group:{group_id}" in hub.check_first
    again = await member.create_bead(f"cake {word}", "on friday", visibility="group", group_id=group_id)
    assert (await member.get_bead(again.bead_id)).content == "on friday"


async def test_a_private_forget_blocks_only_its_creator(connect: ClientFactory) -> None:
    me, other = await connect(), await connect()
    title, content = secret_text(f"zq{secrets.token_hex(4)}")
    bead = await me.create_bead(title, content)
    await me.forget_bead(bead.bead_id, "mine to forget")
    await raises(Conflict, me.create_bead(title, content))
    assert (await other.create_bead(title, content)).bead_id


async def test_allow_again_and_allow_forgotten_lift_the_block(connect: ClientFactory) -> None:
    ops, author, member, _, group_id = await team(connect)
    title, content = secret_text(f"zq{secrets.token_hex(4)}")
    once = await author.create_bead(title, content, visibility="group", group_id=group_id)
    lifted = await author.forget_bead(once.bead_id, "outdated", allow_again=True)
    assert not lifted.denied
    again = await author.create_bead(title, content, visibility="group", group_id=group_id)
    await raises(NotFound, author.get_bead(once.bead_id))  # the forgotten bead does not come back

    await author.forget_bead(again.bead_id, "outdated again")
    await raises(Conflict, author.create_bead(title, content, visibility="group", group_id=group_id))
    await raises(NotFound, member.allow_forgotten(again.bead_id))  # neither the forgetter nor ops
    assert not (await ops.allow_forgotten(again.bead_id)).denied
    assert (await member.create_bead(title, content, visibility="group", group_id=group_id)).bead_id


# --- who may forget ---------------------------------------------------------------------------------------


async def test_who_may_forget(connect: ClientFactory) -> None:
    ops, author, member, outsider, group_id = await team(connect)
    leaver = await connect()
    await ops.add_member(group_id, leaver.ai_id)
    group_bead = await author.create_bead("group thing", "a group memory", visibility="group", group_id=group_id)
    private_bead = await author.create_bead("private thing", "an own memory")
    global_bead = await author.create_bead("global thing", "a global memory", visibility="global")
    await ops.remove_member(group_id, leaver.ai_id)

    refusals = [
        (member, group_bead, Forbidden),  # sees it, may not change it
        (outsider, group_bead, NotFound),
        (leaver, group_bead, NotFound),  # removed member
        (ops, private_bead, NotFound),  # another identity's private bead
        (member, private_bead, NotFound),
        (ops, global_bead, Forbidden),  # ops of a group, not of global beads
    ]
    for caller, bead, error in refusals:
        await raises(error, caller.forget_bead(bead.bead_id, "not mine"))
        assert (await author.get_bead(bead.bead_id)).content == bead.content  # changed nothing

    assert (await ops.forget_bead(group_bead.bead_id, "the group's ops")).forgotten_by == ops.ai_id
    assert (await author.forget_bead(private_bead.bead_id, "own")).visibility.value == "private"
    assert (await author.forget_bead(global_bead.bead_id, "own")).visibility.value == "global"


# --- forget_by_author ----------------------------------------------------------------------------------------


async def test_forget_by_author_takes_what_the_caller_may_and_leaves_the_rest(connect: ClientFactory) -> None:
    ops, author, member, _, group_id = await team(connect)
    side = (await author.create_group("side")).group_id  # the author is its ops, ops is not a member
    mine = [
        (await author.create_bead(f"team {n}", f"team memory {n}", visibility="group", group_id=group_id)).bead_id
        for n in range(3)
    ]
    side_bead = await author.create_bead("side", "side memory", visibility="group", group_id=side)
    private_bead = await author.create_bead("own", "own memory")
    global_bead = await author.create_bead("everyone", "global memory", visibility="global")
    others = await member.create_bead("member's", "a member's memory", visibility="group", group_id=group_id)

    assert (await member.forget_by_author(author.ai_id, "not ops")).forgotten == 0
    by_ops = await ops.forget_by_author(author.ai_id, "left the team")
    assert (by_ops.forgotten, by_ops.by_scope, sorted(by_ops.bead_ids)) == (3, {group_id: 3}, sorted(mine))
    for bead_id in mine:
        await raises(NotFound, member.get_bead(bead_id))
    for bead in (side_bead, private_bead, global_bead):
        assert (await author.get_bead(bead.bead_id)).bead_id == bead.bead_id
    assert (await member.get_bead(others.bead_id)).content == "a member's memory"

    own = await author.forget_by_author(author.ai_id, "leaving")
    assert own.forgotten == 3 and own.by_scope == {side: 1, "private": 1, "global": 1}
    assert (await member.get_bead(others.bead_id)).bead_id == others.bead_id
    listed = {t.bead_id for t in await ops.list_forgotten(group_id)}
    assert set(mine) <= listed


# --- the tombstones ---------------------------------------------------------------------------------------


async def test_tombstones_are_seen_by_the_forgetter_and_the_groups_ops_only(connect: ClientFactory) -> None:
    ops, author, member, outsider, group_id = await team(connect)
    bead = await author.create_bead("to forget", "forget me", visibility="group", group_id=group_id)
    await author.forget_bead(bead.bead_id, "done with it")
    assert bead.bead_id in [t.bead_id for t in await author.list_forgotten()]
    assert bead.bead_id in [t.bead_id for t in await ops.list_forgotten(group_id)]
    assert bead.bead_id in [t.bead_id for t in await ops.list_forgotten()]
    assert bead.bead_id not in [t.bead_id for t in await member.list_forgotten(group_id)]
    assert bead.bead_id not in [t.bead_id for t in await outsider.list_forgotten()]
    await raises(NotFound, outsider.list_forgotten(group_id))
    await raises(NotFound, outsider.allow_forgotten(bead.bead_id))


async def test_forgetting_is_audited(connect: ClientFactory, hub: HubContext) -> None:
    me = await connect()
    bead = await me.create_bead("audited", "an audited memory")
    await me.forget_bead(bead.bead_id, "audit me")
    await raises(NotFound, me.forget_bead(bead.bead_id, "twice"))
    entries = [e for e in await hub.audit.entries(bead_id=bead.bead_id) if e.op == "forget_bead"]
    assert [(e.ai_id, e.allowed, e.code) for e in entries] == [(me.ai_id, True, "ok"), (me.ai_id, False, "not_found")]
    ops_entries = [e for e in await hub.audit.entries(ai_id=me.ai_id) if e.op == "forget_bead"]
    assert len(ops_entries) == 2


async def test_bad_input_is_a_typed_error_and_changes_nothing(connect: ClientFactory) -> None:
    me = await connect()
    bead = await me.create_bead("keep", "kept memory")
    await raises(InvalidRequest, me.forget_bead(bead.bead_id, ""))
    await raises(InvalidRequest, me.forget_bead("not-an-id", "why"))
    await raises(InvalidRequest, me.forget_bead(bead.bead_id, "x" * 501))
    await raises(InvalidRequest, me.forget_by_author("someone", "why"))
    await raises(InvalidRequest, me.list_forgotten(limit=0))
    await raises(NotFound, me.forget_bead(f"b_{secrets.token_hex(8)}", "never existed"))
    await raises(NotFound, me.allow_forgotten(bead.bead_id))  # not forgotten
    # The hub refuses them too (not only the client's models).
    await raises(InvalidRequest, me.call("forget_bead", _Raw({"bead_id": bead.bead_id}), _Raw))
    await raises(InvalidRequest, me.call("forget_bead", _Raw({"bead_id": bead.bead_id, "reason": "x",
                                                            "caller": me.ai_id}), _Raw))
    assert (await me.get_bead(bead.bead_id)).version == 1


class _Raw:
    """A request body sent as is (the hub validates it), for the refusals above."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body

    def model_dump_json(self, **_: Any) -> str:
        return json.dumps(self.body)


# --- backups ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def own_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStack]:
    """Servers of this module's own: restoring replaces a whole graph, and only one hub may serve a bus."""
    with EmbeddedStack(tmp_path_factory.mktemp("forget-backup")) as running:
        yield running


def settings_for(stack: EmbeddedStack, graph: str) -> HubSettings:
    return HubSettings(
        nats_url=stack.nats_url, falkordb_url=stack.redis_url, redis_url=stack.redis_url, graph_name=graph,
        embedder=EmbedderConfig(kind="hash"),
    )


async def _clients(stack: EmbeddedStack, *ids: str) -> AsyncIterator[RecallClient]:
    for ai_id in ids:
        yield await RecallClient(ai_id, stack.nats_url).connect()


def _file_mentions(path: Path, text: str) -> bool:
    return any(text in record.model_dump_json() for record in read_records(path))


async def test_a_backup_from_before_a_forget_does_not_bring_it_back(own_stack: EmbeddedStack, tmp_path: Path) -> None:
    settings = settings_for(own_stack, f"forget_{secrets.token_hex(3)}")
    ops_id, author_id = new_ai("o"), new_ai("a")
    word = f"zq{secrets.token_hex(4)}"
    session = f"s_{secrets.token_hex(6)}"
    title, content = secret_text(word)
    async with running_hub(settings):
        ops, author = [c async for c in _clients(own_stack, ops_id, author_id)]
        try:
            group_id = (await ops.create_group("team")).group_id
            await ops.add_member(group_id, author_id)
            opening = await author.create_bead("opening", "the session starts", visibility="group",
                                               group_id=group_id, session_id=session)
            secret = await author.create_bead(title, content, visibility="group", group_id=group_id,
                                              session_id=session)
            kept = await author.create_bead("kept", f"a memory that stays {word}", visibility="group",
                                            group_id=group_id, session_id=session)
            before = (await backup(settings, tmp_path / "before.backup")).path
            assert _file_mentions(before, "vault at secret/staging")
            await author.forget_bead(secret.bead_id, "leaked")
            after = (await backup(settings, tmp_path / "after.backup")).path
            assert not _file_mentions(after, "vault at secret/staging")  # nor in the change log it holds
        finally:
            for client in (ops, author):
                await client.close()

    async def check(graph_settings: HubSettings, *, forgotten: bool) -> None:
        async with running_hub(graph_settings):
            async with RecallClient(author_id, own_stack.nats_url) as reader:
                if forgotten:
                    await raises(NotFound, reader.get_bead(secret.bead_id))
                    hits = (await reader.search_beads(word, mode="keyword")).hits  # (hybrid adds kept's neighbour)
                    assert [h.bead.bead_id for h in hits] == [kept.bead_id]
                    changes = (await reader.changes_since(group_id)).changes
                    assert all(c.bead is None for c in changes if c.bead_id == secret.bead_id)
                    await raises(Conflict, reader.create_bead(title, content, visibility="group", group_id=group_id))
                else:
                    assert (await reader.get_bead(secret.bead_id)).content == content
                assert (await reader.get_bead(kept.bead_id)).bead_id == kept.bead_id
                # The session's chain stays whole: what followed the forgotten bead follows what it followed.
                follows = await reader.get_relationships(kept.bead_id, rel_type="FOLLOWS_FROM", direction="out")
                assert [r.to_id for r in follows] == [opening.bead_id if forgotten else secret.bead_id]
                assert (await reader.check_session(session)).problems == []

    # Restored with --force into the store that forgot it: the store's ledger stays.
    await restore(settings, before, force=True)
    await check(settings, forgotten=True)
    assert not _file_mentions((await backup(settings, tmp_path / "again.backup")).path, "vault at secret/staging")

    # Into an empty store: only with the ledger of a newer backup.
    fresh = settings_for(own_stack, f"forget_{secrets.token_hex(3)}")
    await restore(fresh, before, forget_ledger=after)
    await check(fresh, forgotten=True)
    unaware = settings_for(own_stack, f"forget_{secrets.token_hex(3)}")
    await restore(unaware, before)  # the documented limit: an empty store cannot know of later forgets
    await check(unaware, forgotten=False)
