"""A team writing at once, in whatever interleaving, through the bus to two hub processes.

While it writes, each writer's next read — whichever hub takes it — sees its write: by id and by the new words;
and a bead it deleted or forgot is gone from every read. Once the work is done, every view derived
from the graph agrees with it: each bead's vectors (in its current scope's set, none elsewhere, of its current
text), both hubs' keyword indexes and a third's started after them (its current words find it, its earlier
words and a gone bead's find nothing), each scope's change feed (every bead's last entry there says where and
what it is now, versions never go back, one writer's creates in its replies' order), the outbox (empty); each
agent finds, by words and by meaning, exactly the beads it may see with the memberships as they ended; and no
read that gathers beads (hybrid search, context, why, traversals, relationships, session listings) shows a
reader a bead that is gone or not its to see.

The workload is random and seeded: agents of two groups, all at once, each sending its requests one after
another — creates one at a time and in batches (private, group, global; short, with several sentences, longer
than the model's window), updates of content and of scope, edits, verdicts, links, supersedes, deletes and
forgets, of their own beads and each other's (a refusal is an answer too), migrations of one of an agent's two
sessions into the other — and the groups' ops adding and removing members meanwhile.
``RECALL_WORKLOAD_SEEDS=1,2,…`` runs other seeds; ``-m slow`` runs a third seed and a longer workload.
"""

from __future__ import annotations

import asyncio
import os
import random
import secrets
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from recall_client import RecallClient
from recall_hub.context import HubContext
from recall_hub.ops.after_commit import sweep
from recall_hub.retrieval.embedding import bead_text, embed_beads
from recall_hub.retrieval.search import search_beads
from recall_hub.store.feed import feed_scope
from recall_hub.store.vectors import SIGNS_KEPT, bead_of, scope_of, unpack_signs
from recall_schemas import (
    MemoryBead,
    NotFound,
    RecallError,
    RelType,
    SearchBeads,
    SearchMode,
    Visibility,
)

from tests.conftest import ClientFactory, new_ai

CHOSEN_SEEDS = os.environ.get("RECALL_WORKLOAD_SEEDS")
SEEDS = [int(s) for s in (CHOSEN_SEEDS or "11,23,37").split(",")]
SEED_PARAMS = [  # the default run takes two seeds, -m slow the third; seeds given in the environment all run
    pytest.param(seed, marks=() if CHOSEN_SEEDS or i < 2 else (pytest.mark.slow,), id=str(seed))
    for i, seed in enumerate(SEEDS)
]
FILLER = ("release", "checklist", "deploy", "rollback", "incident", "owner", "review", "budget", "schema", "index")


@dataclass
class Workload:
    """What the agents were told: every bead created, the words each write gave it, each agent's creates in
    the order of their replies."""

    ops: RecallClient
    groups: list[str]
    team: list[str]
    created: dict[str, str] = field(default_factory=dict)  # bead -> creator
    words: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))  # bead -> its words, oldest first
    creates_replied: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))  # agent -> beads
    answered: int = 0
    refused: int = 0
    marker: str = field(default_factory=lambda: f"m{secrets.token_hex(4)}")  # a word every text of this run holds


def _text(rng: random.Random, word: str, work: Workload) -> tuple[str, str]:
    """A title and content holding ``word`` and the run's marker: one sentence, several, or more than the model's
    window."""
    shape = rng.choice(["short", "sentences", "long"])
    filler = " ".join(rng.choices(FILLER, k=5)) + f" {work.marker}"
    if shape == "short":
        return f"Note {word}", f"The {word} {filler}."
    if shape == "sentences":
        return f"Notes {word}", " ".join(f"Point {i}: {' '.join(rng.choices(FILLER, k=5))}." for i in range(4)) + \
            f" Also {word} {work.marker}."
    return f"Log {word}", " ".join(rng.choices(FILLER, k=400)) + f" {word} {filler}"


def _scope(rng: random.Random, work: Workload) -> dict[str, Any]:
    visibility = rng.choice([Visibility.PRIVATE, Visibility.GROUP, Visibility.GLOBAL])
    return {"visibility": visibility.value, "group_id": rng.choice(work.groups) if visibility is Visibility.GROUP
            else None}


def _session(agent: RecallClient, n: int) -> str:
    return f"s_{agent.ai_id.replace('_', '')}{n}"


def _new_bead(rng: random.Random, agent: RecallClient, step: int, word: str, work: Workload) -> dict[str, Any]:
    title, content = _text(rng, word, work)
    return {"title": title, "content": content, "session_id": _session(agent, step % 2), **_scope(rng, work)}


async def _reads_its_write(agent: RecallClient, bead: MemoryBead, word: str) -> None:
    """The writer's next read, at whichever hub takes it, sees its write: by id and by its new words. Only a
    bead's creator changes its text here, so nothing else can have replaced it; a group bead is left out, since
    the ops may have just removed the writer from its group. (By meaning, a read waits for the embedding of the
    creates before it only up to ``index_wait_s``: with two hubs' models on two cores this workload can outrun
    that, so meaning is checked once the work is done, and the wait itself in tests/test_create_settle.py.)"""
    if bead.visibility is Visibility.GROUP:
        return
    read = await agent.get_bead(bead.bead_id)
    assert read.version >= bead.version, f"{agent.ai_id} reads {bead.bead_id} at {read.version} after {bead.version}"
    assert bead.bead_id in await _found_by_words(agent, word), f"{agent.ai_id}'s next search misses its {word}"


async def _reads_it_gone(agent: RecallClient, bead_id: str, words: list[str]) -> None:
    """After a delete or forget that was answered, the writer's next read, at whichever hub, finds nothing of it."""
    with pytest.raises(NotFound):
        await agent.get_bead(bead_id)
    for word in words:
        assert bead_id not in await _found_by_words(agent, word), f"{bead_id} found after it went"


async def _found_by_words(reader: RecallClient, word: str) -> list[str]:
    return [hit.bead.bead_id for hit in (await reader.search_beads(word, limit=10, mode="keyword")).hits]


async def _agent(agent: RecallClient, rng: random.Random, steps: int, work: Workload) -> None:
    for step in range(steps):
        word = f"w{secrets.token_hex(5)}"
        mine = [b for b, creator in work.created.items() if creator == agent.ai_id]
        known = mine if mine and rng.random() < 0.7 else list(work.created)  # others' beads: often refused
        op = rng.choices(
            ["create", "batch", "update", "move", "edit", "verdict", "link", "supersede", "delete", "forget",
             "membership", "migrate"], weights=[5, 1, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1])[0] if known else "create"
        bead_id = rng.choice(known) if known else ""
        try:
            if op == "create":
                bead = await agent.create_bead(**_new_bead(rng, agent, step, word, work))
                work.created[bead.bead_id] = agent.ai_id
                work.words[bead.bead_id].append(word)
                work.creates_replied[agent.ai_id].append(bead.bead_id)
                await _reads_its_write(agent, bead, word)
            elif op == "batch":
                words = [f"{word}x{i}" for i in range(3)]
                items = await agent.create_beads([_new_bead(rng, agent, step, w, work) for w in words])
                for item, w in zip(items, words, strict=True):
                    if item.bead_id is not None:
                        work.created[item.bead_id] = agent.ai_id
                        work.words[item.bead_id].append(w)
            elif op == "update":
                title, content = _text(rng, word, work)
                work.words[bead_id].append(word)  # before the reply: a write that fails may still have landed
                bead = await agent.update_bead(bead_id, title=title, content=content)
                await _reads_its_write(agent, bead, word)
            elif op == "move":
                await agent.update_bead(bead_id, **_scope(rng, work))
            elif op == "membership":
                group_id, member = rng.choice(work.groups), rng.choice(work.team)
                if rng.random() < 0.5:
                    await work.ops.remove_member(group_id, member)
                else:
                    await work.ops.add_member(group_id, member)
            elif op == "migrate":  # one of the agent's two sessions, with its beads, into the other
                sessions = [_session(agent, n) for n in rng.sample([0, 1], 2)]
                await agent.migrate_session_with_memories(*sessions)
            elif op == "edit":
                await agent.edit_bead(bead_id, add_tags=[f"t{step}"], add_importance=1)
            elif op == "verdict":
                if rng.random() < 0.5:
                    await agent.verify_bead(bead_id)
                else:
                    await agent.reject_bead(bead_id, "does not hold")
            elif op == "link":
                await agent.add_relationship(bead_id, rng.choice(list(work.created)),
                                             rng.choice([RelType.RELATED_TO, RelType.PART_OF]))
            elif op == "supersede":
                await agent.supersede_bead(bead_id, rng.choice(list(work.created)), "newer")
            elif op == "delete":
                await agent.delete_bead(bead_id)
                await _reads_it_gone(agent, bead_id, work.words[bead_id])
            else:
                await agent.forget_bead(bead_id, "asked to", allow_again=True)
                await _reads_it_gone(agent, bead_id, work.words[bead_id])
            work.answered += 1
        except RecallError:
            work.refused += 1


async def _run(ctxs: tuple[HubContext, HubContext], connect: ClientFactory, seed: int, agents: int,
               steps: int) -> Workload:
    ops = await connect(new_ai("o"))
    groups = [(await ops.create_group(f"workload {seed} {i}")).group_id for i in range(2)]
    team = [await connect() for _ in range(agents)]
    for i, agent in enumerate(team):
        for group_id in groups[: 1 + i % 2]:
            await ops.add_member(group_id, agent.ai_id)
    work = Workload(ops, groups, [a.ai_id for a in team])
    rng = random.Random(seed)
    await asyncio.gather(*(_agent(a, random.Random(rng.random()), steps, work) for a in team))
    for ctx in ctxs:
        await ctx.background.wait_for_earlier()
    await sweep(ctxs[0])
    return work


async def _vector_elements(ctx: HubContext) -> dict[str, dict[str, str]]:
    """Every vector element of the hub's model: by bead, element name -> the set that holds it."""
    out: dict[str, dict[str, str]] = defaultdict(dict)
    async for raw in ctx.redis.scan_iter(match=ctx.vectors.all_keys_pattern()):
        key = raw.decode()
        size = int(await ctx.redis.execute_command("VCARD", key))
        for name in await ctx.redis.execute_command("VRANDMEMBER", key, size) if size else []:
            name = name.decode()
            out[bead_of(name)][name] = key
    return out


async def _token_signs(ctx: HubContext) -> dict[str, dict[str, bytes]]:
    """Every bead's token signs of the hub's model: by bead, the hash that holds them -> the signs."""
    out: dict[str, dict[str, bytes]] = defaultdict(dict)
    async for raw in ctx.redis.scan_iter(match=f"{ctx.keys.token_root(ctx.vectors.model_id)}:*"):
        for bead_id, packed in (await ctx.redis.hgetall(raw)).items():
            out[bead_id.decode()][raw.decode()] = packed
    return out


async def _keyword_hits(ctx: HubContext, caller: str, word: str) -> list[str]:
    """At one hub in particular (the bus would pick either)."""
    result = await search_beads(ctx, caller, SearchBeads(query=word, mode=SearchMode.KEYWORD, limit=10))
    return [hit.bead.bead_id for hit in result.hits]


async def _check(ctxs: tuple[HubContext, HubContext], work: Workload) -> None:
    """With a third hub started after the writes beside the two that took them: its keyword index is built from
    what the others left."""
    first, _ = ctxs
    late = await HubContext.connect(first.settings)
    try:
        await _check_views((*ctxs, late), work)
    finally:
        await late.aclose()


async def _check_views(ctxs: tuple[HubContext, ...], work: Workload) -> None:
    first = ctxs[0]
    now = {b: await first.beads.system_get(b) for b in work.created}
    assert await first.outbox.system_pending_many(list(work.created)) == {b: [] for b in work.created}

    elements, signs = await _vector_elements(first), await _token_signs(first)
    for bead_id, props in now.items():
        held = elements.get(bead_id, {})
        if props is None:
            assert held == {}, f"vectors of gone bead {bead_id} left in {set(held.values())}"
            assert signs.get(bead_id, {}) == {}, f"token signs of gone bead {bead_id} left in {set(signs[bead_id])}"
            continue
        signs_key = first.vectors.signs_key(scope_of(props))
        assert set(signs.get(bead_id, {})) == {signs_key}, f"{bead_id}'s token signs: {set(signs.get(bead_id, {}))}"
        (expected,) = await embed_beads(first, [props])
        key = first.vectors.key(scope_of(props))
        stored = [name for name in held if held[name] == key]
        assert set(held.values()) == {key}, f"{bead_id} has vectors outside its scope's set: {set(held.values())}"
        assert len(stored) == len(expected.rows), f"{bead_id}: {len(stored)} vectors for {len(expected.rows)}"
        # Read through the store (redis-py's VEMB reply parsing, once its vector-set commands are used, reads a
        # plain execute_command's reply wrongly).
        whole = await first.vectors.vector(bead_id, scope_of(props))
        assert whole is not None, f"{bead_id} has no whole-text vector"
        assert float(whole @ expected.rows[0]) / float(np.linalg.norm(whole)) > 0.99, f"{bead_id}'s vector is stale"
        kept = unpack_signs(signs[bead_id][signs_key])
        assert expected.tokens is not None, f"{bead_id}: no token signs computed"
        head = expected.tokens[:SIGNS_KEPT]
        assert kept.shape == head.shape and (np.sign(kept) == np.sign(head)).mean() > 0.95, f"{bead_id}: stale signs"

    members = {g: {m.ai_id for m in (await work.ops.list_members(g)).members} for g in work.groups}
    readers = [*work.team, new_ai()]  # the last one an outsider

    def may_see(reader: str, props: dict[str, Any]) -> bool:
        if props["visibility"] == "global":
            return True
        if props["visibility"] == "private":
            return bool(props["created_by"] == reader)
        return reader in members[props["group_id"]]

    asked: dict[bool, int] = {True: 0, False: 0}
    for n, (bead_id, props) in enumerate(now.items()):
        ctx = ctxs[n % len(ctxs)]
        text = "" if props is None else f"{props['title']} {props.get('content') or ''}"
        held_words = [w for w in work.words[bead_id] if w in text]  # a refused update's word never landed
        assert props is None or len(held_words) == 1, f"{bead_id} holds {held_words}"
        for word in work.words[bead_id]:
            if word not in held_words:
                for reader in readers:
                    hits = await _keyword_hits(ctx, reader, word)
                    assert bead_id not in hits, f"{bead_id} found by words it no longer holds ({word})"
        if props is None:
            continue
        for reader in readers:
            visible = may_see(reader, props)
            asked[visible] += 1
            assert (bead_id in await _keyword_hits(ctx, reader, held_words[0])) == visible, (
                f"{reader} {'does not find' if visible else 'finds'} {bead_id} ({props['visibility']}) by its words")
            if props["title"].startswith("Log"):
                continue  # a long bead of filler words reads like every other one in its first window
            by_meaning = await search_beads(ctx, reader, SearchBeads(
                query=bead_text(props), mode=SearchMode.VECTOR, limit=5))
            assert (bead_id in [hit.bead.bead_id for hit in by_meaning.hits]) == visible, (
                f"{reader} {'does not find' if visible else 'finds'} {bead_id} ({props['visibility']}) by meaning")

    assert min(asked.values()) > 0, asked  # both who may and who may not see were asked
    await _nothing_else_shown(work, now, readers, may_see)
    await _sessions_are_chains(first, work)

    feeds: dict[str, list[Any]] = {}
    for scope in ("global", *work.groups):
        feeds[scope] = await first.feed.read(scope, None, 100_000)
    for scope, changes in feeds.items():
        by_bead: dict[str, list[Any]] = defaultdict(list)
        for change in changes:
            if change.bead_id in now:  # the global scope holds other tests' beads too
                by_bead[change.bead_id].append(change)
        for bead_id, entries in by_bead.items():
            versions = [c.bead.version for c in entries if c.bead is not None]
            assert versions == sorted(versions), f"{bead_id}'s versions go back in {scope}'s feed: {versions}"
            last, props = entries[-1], now[bead_id]
            if props is not None and feed_scope(props) == scope:
                assert last.action in ("created", "updated"), f"{bead_id} is in {scope}, its feed says {last.action}"
                assert last.bead is not None and last.bead.version == props["version"], (
                    f"{bead_id}'s last entry in {scope} shows version {last.bead and last.bead.version}, "
                    f"it is at {props['version']}")
            else:
                assert last.action in ("deleted", "forgotten"), f"{bead_id} left {scope}, its feed says {last.action}"
        firsts = {c.bead_id: i for i, c in reversed(list(enumerate(changes)))
                  if c.action == "created" and c.bead_id in now}
        for agent, beads in work.creates_replied.items():
            # created in this scope (a bead moved in later is "created" there at its move)
            logged = [b for b in beads if b in firsts and by_bead[b][0].bead is not None
                      and by_bead[b][0].bead.version == 1]
            assert logged == sorted(logged, key=firsts.__getitem__), f"{agent}'s creates out of reply order in {scope}"


async def _nothing_else_shown(work: Workload, now: dict[str, Any], readers: list[str],
                              may_see: Callable[[str, dict[str, Any]], bool]) -> None:
    """Every read that gathers beads — hybrid search, context, why, traversals, relationships, session listings —
    shows a reader only live beads it may see (the workload's; other tests' global beads may show too)."""
    clients = {reader: RecallClient(reader, work.ops.nats_url) for reader in readers}
    query = f"{work.marker} {' '.join(FILLER[:3])}"
    try:
        for reader, client in clients.items():
            await client.connect()
            shown: dict[str, set[str]] = {
                "search": {h.bead.bead_id for h in (await client.search_beads(query, limit=50)).hits},
                "context": set((await client.context(query, max_tokens=4000)).bead_ids),
                "why": {n.bead.bead_id for n in (await client.why(query, hops=2)).graph.nodes},
            }
            for bead_id in [b for b, props in now.items() if props is not None and may_see(reader, props)][:5]:
                traversed = await client.traverse_graph(bead_id, max_depth=3)
                shown[f"traverse {bead_id}"] = {n.bead.bead_id for n in traversed.nodes}
                related = await client.get_relationships(bead_id)
                shown[f"relationships {bead_id}"] = {end for r in related for end in (r.from_id, r.to_id)}
            for agent in work.team:
                for half in range(2):
                    listed = await client.get_by_session(f"s_{agent.replace('_', '')}{half}")
                    shown[f"session {half} of {agent}"] = {b.bead_id for b in listed}
            assert shown["search"] & now.keys() or reader not in work.team, f"{reader} was shown nothing to check"
            for read, beads in shown.items():
                for bead_id in beads & now.keys():
                    props = now[bead_id]
                    assert props is not None, f"{read} shows {reader} {bead_id}, which is gone"
                    assert may_see(reader, props), f"{read} shows {reader} {bead_id} ({props['visibility']})"
    finally:
        for client in clients.values():
            await client.close()


async def _sessions_are_chains(ctx: HubContext, work: Workload) -> None:
    """Each agent's sessions, whatever was removed from them: each live bead follows the one created before it."""
    for agent in work.team:
        for half in range(2):
            rows = await ctx.graph.ro_query(
                "MATCH (b:Bead) WHERE b.session_id = $session AND b.created_by = $agent "
                "OPTIONAL MATCH (b)-[:FOLLOWS_FROM]->(e:Bead) WHERE e.session_id = $session "
                "WITH b, collect(e.bead_id) AS earlier RETURN b.bead_id, earlier ORDER BY b.created_at, b.bead_id",
                {"session": f"s_{agent.replace('_', '')}{half}", "agent": agent},
            )
            order = [row[0] for row in rows]
            chain = [[]] + [[earlier] for earlier in order[:-1]] if order else []  # the first follows nothing
            assert [sorted(row[1]) for row in rows] == chain, (
                f"{agent}'s session {half} is not one chain")


@pytest.mark.parametrize("seed", SEED_PARAMS)
async def test_every_derived_view_agrees_with_the_graph_after_a_team_writes_at_once(
    two_hubs: tuple[HubContext, HubContext], connect: ClientFactory, seed: int
) -> None:
    work = await _run(two_hubs, connect, seed, agents=6, steps=25)
    assert work.answered > work.refused  # the workload did write, not only get refused
    await _check(two_hubs, work)


@pytest.mark.slow
async def test_a_longer_team_workload_leaves_every_view_agreeing(
    two_hubs: tuple[HubContext, HubContext], connect: ClientFactory
) -> None:
    work = await _run(two_hubs, connect, SEEDS[0], agents=16, steps=80)
    await _check(two_hubs, work)
