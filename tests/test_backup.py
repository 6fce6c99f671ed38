"""Backup and restore through the real servers: a restored store answers every read as the original did,
for every identity; a backup taken during writes is one instant; a damaged file or a non-empty target
changes nothing; and the CLI does the same."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import secrets
import sys
import time
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from recall_client import RecallClient
from recall_hub.config import HubSettings
from recall_hub.context import HubContext
from recall_hub.embedders import EmbedderConfig
from recall_hub.ops.dispatch import dispatch
from recall_hub.service.server import running_hub
from recall_hub.store.audit import AuditLog
from recall_hub.store.backup import SnapshotReader
from recall_hub.store.backup_records import (
    EdgeRecord,
    HashRecord,
    Header,
    NodeRecord,
    StreamRecord,
    StringRecord,
)
from recall_hub.store.keys import Keys
from recall_hub.tooling.backup import TargetNotEmpty, backup, restore
from recall_hub.tooling.backup_file import BackupFileError, read_records
from recall_hub.tooling.stack import EmbeddedStack
from recall_schemas import CreateBead, DeleteBead, RecallError, RelType, Subgraph
from recall_schemas.coordination import Learn, SaveAIState, Todo
from recall_schemas.requests import AddRelationship
from redis.asyncio import Redis

TOPICS = [
    "payments retry with exponential backoff",
    "database migration of the orders table",
    "deploy pipeline flakes on the arm runners",
    "coffee preference of the on-call engineer",
    "latency budget for the search endpoint",
]
QUERIES = ["payments retry", "database migration", "deploy pipeline", "coffee", "latency search", "orders"]


def settings_for(stack: EmbeddedStack, graph: str) -> HubSettings:
    return HubSettings(
        nats_url=stack.nats_url, falkordb_url=stack.redis_url, redis_url=stack.redis_url, graph_name=graph,
        embedder=EmbedderConfig(kind="hash"),
    )


@pytest.fixture(scope="module")
def source_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStack]:
    with EmbeddedStack(tmp_path_factory.mktemp("backup-source")) as running:
        yield running


@pytest.fixture(scope="module")
def target_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStack]:
    with EmbeddedStack(tmp_path_factory.mktemp("backup-target")) as running:
        yield running


# --- a populated store -----------------------------------------------------------------------------


@dataclass
class World:
    """What the population made: whose reads to compare, and what to read."""

    identities: list[str]
    groups: list[str] = field(default_factory=list)
    sessions: list[str] = field(default_factory=list)
    bead_ids: list[str] = field(default_factory=list)
    kv_keys: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)


async def populate(nats_url: str) -> World:
    suffix = secrets.token_hex(4)
    ops, a1, a2, a3 = f"o_lead{suffix}", f"a_one{suffix}", f"a_two{suffix}", f"a_three{suffix}"
    world = World(identities=[ops, a1, a2, a3], tags=["note", "incident", "handoff", *[f"by-{n}" for n in "0123"]])
    clients = [await RecallClient(ai, nats_url).connect() for ai in world.identities]
    try:
        c_ops, c1, c2, c3 = clients
        team = await c_ops.create_group("team")
        await c_ops.add_member(team.group_id, a1)
        await c_ops.add_member(team.group_id, a2, role="ops")
        side = await c3.create_group("side")
        await c3.add_member(side.group_id, a1)
        world.groups = [team.group_id, side.group_id]
        for n, client in enumerate(clients):
            session = f"s_{secrets.token_hex(6)}"
            world.sessions.append(session)
            group = team.group_id if client is not c3 else side.group_id
            for k, topic in enumerate(TOPICS):
                visibility = ("private", "group", "global")[(n + k) % 3]
                bead = await client.create_bead(
                    f"{topic} ({n}.{k})", f"Notes by {client.ai_id}: {topic}. Step {k} of the plan.",
                    tags=["note" if k % 2 else "incident", f"by-{n}"], importance=3 + k, session_id=session,
                    visibility=visibility, group_id=group if visibility == "group" else None,
                    bead_type=("fact", "decision", "observation")[k % 3],
                )
                world.bead_ids.append(bead.bead_id)
            await client.learn(f"pref-{n}", f"{client.ai_id} prefers {TOPICS[n]}", metadata={"n": n})
            await client.learn("shared", f"the shared key of {client.ai_id}")
            await client.ai_state_save(
                todos=[{"text": f"follow up on {TOPICS[n]}"}, {"text": "write the report", "done": True}],
                working_notes=f"notes of {client.ai_id}", context_summary=f"summary {n}", custom_state={"n": n},
            )
        world.kv_keys = ["shared", *[f"pref-{n}" for n in range(4)], "missing"]
        first, second, third = world.bead_ids[0], world.bead_ids[1], world.bead_ids[2]
        await c_ops.update_bead(first, title="payments retry with jitter (revised)", importance=9)
        await c_ops.add_relationship(third, first, RelType.UPDATES, replaces=True, metadata={"why": "newer plan"})
        await c_ops.add_relationship(second, third, RelType.PART_OF, strength=0.4)
        await c_ops.add_relationship(first, world.bead_ids[6], RelType.RELATED_TO, similarity=0.66)  # a1's, global
        await c_ops.delete_bead(world.bead_ids[4])
        moved = f"s_{secrets.token_hex(6)}"
        await c2.migrate_session_with_memories(world.sessions[2], moved)
        world.sessions.append(moved)
        promoted = await c1.promote_to_bead("shared", tags=["note"], visibility="group", group_id=team.group_id)
        world.bead_ids.append(promoted.bead_id)
        handoff = await c_ops.transfer_ops(
            team.group_id, a1, "You lead the payments work now.", bead_ids=world.bead_ids[:3]
        )
        await c1.acknowledge_handoff(handoff.handoff_id)
        await c3.ai_state_transfer(a1)
    finally:
        for client in clients:
            await client.close()
    return world


# --- reading everything an identity can read --------------------------------------------------------


def normal(value: Any) -> Any:
    """A reply as plain data, without read times (``get_bead`` moves ``accessed_at`` to now), the edges
    of a subgraph as a set: their order within a hop follows FalkorDB's internal numbering of edges
    and edge types, which no restore reproduces (the nodes' order is kept and compared)."""
    if isinstance(value, Subgraph):
        value = value.model_copy(update={"edges": sorted(value.edges, key=lambda e: e.model_dump_json())})
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json")
    if isinstance(value, dict):
        return {k: normal(v) for k, v in value.items() if k != "accessed_at"}
    if isinstance(value, list):
        return [normal(v) for v in value]
    return value


async def readings(client: RecallClient, world: World) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """Every read's answer (or error code), and the search scores apart, compared with a tolerance: the
    recency prior moves with the clock, and the original hub's keyword index still counts the replaced
    and deleted documents of its segments in its BM25 statistics, where the rebuilt one starts clean."""
    answers: dict[str, Any] = {}
    scores: dict[str, list[float]] = {}

    async def note(name: str, call: Awaitable[Any]) -> Any:
        try:
            answers[name] = normal(await call)
        except RecallError as exc:
            answers[name] = f"error {exc.code}"
        return answers[name]

    async def ranked(name: str, call: Awaitable[Any]) -> None:
        try:
            result = await call
        except RecallError as exc:
            answers[name] = f"error {exc.code}"
            return
        answers[name] = [hit.bead.bead_id for hit in result.hits]
        scores[name] = [hit.score for hit in result.hits]

    await note("groups", client.list_groups())
    for group in [*world.groups, "global"]:
        if group != "global":
            await note(f"members {group}", client.list_members(group))
            await note(f"by group {group}", client.get_by_group(group))
            await note(f"brief {group}", client.handoff_brief(group))
        await note(f"changes {group}", client.changes_since(group))
    for query in QUERIES:
        await ranked(f"search {query}", client.search_beads(query, limit=10))
        why = await note(f"why {query}", client.why(query, hops=2))
        if isinstance(why, dict):
            why["graph"]["edges"].sort(key=lambda e: json.dumps(e, sort_keys=True))
        await note(f"context {query}", client.context(query, max_tokens=400))
        recalled = await note(f"unified {query}", client.unified_recall(query))
        if isinstance(recalled, dict):
            recalled["beads"] = [hit["bead"]["bead_id"] for hit in recalled["beads"]["hits"]]
    await note("recent", client.get_recent(limit=100))
    for tag in world.tags:
        await note(f"tag {tag}", client.get_by_tag(tag))
    for session in world.sessions:
        await note(f"session {session}", client.get_session(session))
        await note(f"check {session}", client.check_session(session))
        await note(f"session beads {session}", client.get_by_session(session))
    await note("state", client.ai_state_get())
    for key in world.kv_keys:
        await note(f"recall {key}", client.recall(key))
    await note("ranked", client.rank_by_importance(world.bead_ids))
    for bead_id in world.bead_ids:
        await note(f"get {bead_id}", client.get_bead(bead_id))
        await note(f"edges {bead_id}", client.get_relationships(bead_id))
        await note(f"walk {bead_id}", client.traverse_graph(bead_id, max_depth=2))
        await ranked(f"similar {bead_id}", client.find_similar(bead_id, threshold=0.0))
    return answers, scores


# --- the contents of a backup file, independent of node ids ------------------------------------------


@dataclass
class Contents:
    header: Header
    nodes: list[NodeRecord]
    edges: list[EdgeRecord]
    hashes: dict[str, dict[str, str]]
    streams: dict[str, list[tuple[str, dict[str, str]]]]
    strings: dict[str, str]

    @classmethod
    def read(cls, path: Path) -> Contents:
        records = list(read_records(path))
        header = records[0]
        assert isinstance(header, Header)
        contents = cls(header, [], [], {}, {}, {})
        for record in records[1:]:
            if isinstance(record, NodeRecord):
                contents.nodes.append(record)
            elif isinstance(record, EdgeRecord):
                contents.edges.append(record)
            elif isinstance(record, HashRecord):
                contents.hashes.setdefault(record.name, {}).update(record.fields)
            elif isinstance(record, StreamRecord):
                contents.streams.setdefault(record.name, []).extend(record.entries)
            elif isinstance(record, StringRecord):
                contents.strings[record.name] = record.value
        return contents

    def canonical(self) -> tuple[list[str], list[str]]:
        """Nodes and edges as sorted text, an edge naming its endpoints by their contents."""
        by_id = {n.id: json.dumps([n.labels, n.props], sort_keys=True) for n in self.nodes}
        edges = [json.dumps([e.type, by_id[e.start], by_id[e.end], e.props], sort_keys=True) for e in self.edges]
        return sorted(by_id.values()), sorted(edges)

    def beads(self) -> dict[str, dict[str, Any]]:
        return {n.props["title"]: n.props for n in self.nodes if "Bead" in n.labels}

    def kv(self, ai_id: str, key: str) -> str | None:
        raw = self.hashes.get(f"kv:{ai_id}", {}).get(key)
        return json.loads(raw)["value"] if raw is not None else None


# --- the round trip ------------------------------------------------------------------------------------


async def test_a_restored_store_answers_every_read_as_the_original(
    source_stack: EmbeddedStack, target_stack: EmbeddedStack, tmp_path: Path
) -> None:
    source = settings_for(source_stack, "bk_source")
    target = settings_for(target_stack, "bk_restored")  # another server and another graph name
    async with running_hub(source) as source_hub:
        world = await populate(source_stack.nats_url)
        report = await backup(source, tmp_path / "source.backup")
        counts = report.header.counts
        assert report.header.consistency == "one-transaction"
        assert {"Bead", "AI", "Group", "Session", "Handoff"} <= set(counts.nodes)
        assert {"MEMBER_OF", "FOLLOWS_FROM", "RELATED_TO", "UPDATES", "PART_OF"} <= set(counts.edges)
        assert {"kv", "changes", "audit"} <= set(counts.keys)
        assert counts.nodes["Bead"] == len(world.bead_ids) - 1 + 1  # one deleted; the handoff's own bead
        assert report.header.embedder_models == {"hash:384": counts.nodes["Bead"]}

        stages: list[str] = []
        restored = await restore(target, report.path, progress=lambda stage, done, total: stages.append(stage))
        assert restored.embedded == counts.nodes["Bead"] and restored.nodes == sum(counts.nodes.values())
        assert restored.edges == sum(counts.edges.values()) and restored.keys == sum(counts.keys.values())
        assert list(dict.fromkeys(stages)) == ["nodes", "edges", "keys", "vectors"]

        # Everything a backup holds comes back as it was: a backup of the restored store says the same.
        again = Contents.read((await backup(target, tmp_path / "restored.backup")).path)
        original = Contents.read(report.path)
        assert again.canonical() == original.canonical()
        assert (again.hashes, again.streams, again.strings) == (original.hashes, original.streams, original.strings)

        # The audit trail too, read through the store.
        source_redis, target_redis = Redis.from_url(source.redis_url), Redis.from_url(target.redis_url)
        try:
            for ai_id in world.identities:
                before = await AuditLog(source_redis, Keys(source.graph_name)).entries(ai_id=ai_id, limit=1000)
                after = await AuditLog(target_redis, Keys(target.graph_name)).entries(ai_id=ai_id, limit=1000)
                assert after == before and before
        finally:
            await source_redis.aclose()
            await target_redis.aclose()

        # The keyword index is derived: BM25 statistics count a replaced document until its segment merges,
        # so an index built up over the writes scores slightly apart from one built at once. The stores are
        # compared, so the source hub's index is built from its graph like the restored hub's.
        await source_hub.ctx.keywords.rebuild()
        async with running_hub(target):
            for ai_id in world.identities:
                async with RecallClient(ai_id, source.nats_url) as old, RecallClient(ai_id, target.nats_url) as new:
                    answers, scores = await readings(old, world)
                    restored_answers, restored_scores = await readings(new, world)
                differing = [name for name in answers if restored_answers.get(name) != answers[name]]
                assert differing == [], (differing[:3], [(answers[n], restored_answers.get(n)) for n in differing[:1]])
                for name, values in scores.items():
                    assert restored_scores[name] == pytest.approx(values, rel=0.05), name
                # The comparison covered real answers and real refusals.
                assert any(isinstance(v, list) and v for k, v in answers.items() if k.startswith("search"))
                assert any(v == "error not_found" for v in answers.values())


# --- one instant -----------------------------------------------------------------------------------------


async def _poll(condition: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not await condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


def violations(contents: Contents, writers: dict[str, str]) -> list[str]:
    """What a backup read at one instant can never hold, given how the writers write."""
    found: list[str] = []
    ids = {n.id for n in contents.nodes}
    found += [f"edge {e.type} {e.start}->{e.end} without an endpoint" for e in contents.edges
              if e.start not in ids or e.end not in ids]
    beads = contents.beads()
    # "after": the bead is committed before its number is learnt.
    after = contents.kv(writers["after"], "last")
    if after is not None and f"after {after}" not in beads:
        found.append(f"kv says bead 'after {after}' was written, the graph does not hold it")
    # "before": the number is learnt before its bead is written.
    before = contents.kv(writers["before"], "last")
    written = [int(title.split()[1]) for title in beads if title.startswith("before ")]
    if written and (before is None or max(written) > int(before)):
        found.append(f"bead 'before {max(written)}' is there, kv says only {before}")
    for node in contents.nodes:
        if "AI" in node.labels and node.props.get("state"):
            state = json.loads(node.props["state"])
            if not state["working_notes"] == state["context_summary"] == state["todos"][0]["text"]:
                found.append(f"agent state of {node.props['ai_id']} half-applied: {state}")
    for name, fields in contents.hashes.items():
        keys, _ = fields.get(" usage", "0:0").split(":")
        if name.startswith("kv:") and int(keys) != len(fields) - 1:
            found.append(f"{name} counts {keys} keys and holds {len(fields) - 1}")
    return found


async def _write_until(ctx: HubContext, stop: asyncio.Event, writers: dict[str, str]) -> None:
    async def after() -> None:  # bead, edge to the previous one, then its number, then the state
        caller, previous = writers["after"], None
        for i in range(100_000):
            if stop.is_set():
                return
            bead: Any = await dispatch(ctx, caller, "create_bead", CreateBead(
                title=f"after {i}", content=f"written {i}", idempotency_key=f"after-{i}"))
            if previous is not None:
                await dispatch(ctx, caller, "add_relationship", AddRelationship(
                    from_id=bead.bead_id, to_id=previous, rel_type=RelType.RELATED_TO))
            previous = bead.bead_id
            await dispatch(ctx, caller, "learn", Learn(key="last", value=str(i)))
            await dispatch(ctx, caller, "learn", Learn(key=f"k{i % 50}", value="x" * (i % 7)))
            await dispatch(ctx, caller, "ai_state_save", SaveAIState(
                todos=[Todo(text=str(i))], working_notes=str(i), context_summary=str(i)))

    async def before() -> None:  # the number first, then its bead
        caller = writers["before"]
        for i in range(100_000):
            if stop.is_set():
                return
            await dispatch(ctx, caller, "learn", Learn(key="last", value=str(i)))
            await dispatch(ctx, caller, "create_bead", CreateBead(
                title=f"before {i}", content="b", idempotency_key=f"before-{i}"))

    async def churn() -> None:  # beads linked to an anchor, each deleted (its edge with it) three beads later
        caller = writers["churn"]
        anchor: Any = await dispatch(ctx, caller, "create_bead", CreateBead(title="anchor", idempotency_key="anchor"))
        alive: list[str] = []
        for i in range(100_000):
            if stop.is_set():
                return
            bead: Any = await dispatch(ctx, caller, "create_bead", CreateBead(
                title=f"churn {i}", idempotency_key=f"churn-{i}"))
            await dispatch(ctx, caller, "add_relationship", AddRelationship(
                from_id=bead.bead_id, to_id=anchor.bead_id, rel_type=RelType.PART_OF))
            alive.append(bead.bead_id)
            if len(alive) > 3:
                await dispatch(ctx, caller, "delete_bead", DeleteBead(bead_id=alive.pop(0)))

    await asyncio.gather(after(), before(), churn())


async def test_a_backup_taken_during_writes_holds_one_instant(source_stack: EmbeddedStack, tmp_path: Path) -> None:
    settings = settings_for(source_stack, f"bk_live_{secrets.token_hex(3)}")
    writers = {role: f"a_{role}{secrets.token_hex(3)}" for role in ("after", "before", "churn")}
    ctx = await HubContext.connect(settings)
    redis = Redis.from_url(settings.redis_url)
    reader = SnapshotReader(redis, redis, Keys(settings.graph_name))
    stop = asyncio.Event()
    writing = asyncio.create_task(_write_until(ctx, stop, writers))

    async def learnt_after() -> int:
        raw = await ctx.kv.get(writers["after"], "last")
        return int(json.loads(raw)["value"]) if raw else -1

    async def progressed(since: int, by: int) -> None:
        await _poll(lambda: _at_least(learnt_after, since + by))

    try:
        await progressed(-1, 5)
        backups = []
        for i in range(5):
            backups.append(Contents.read((await backup(settings, tmp_path / f"live{i}.backup")).path))
            await progressed(await learnt_after(), 2)
        # The check can tell two instants from one: the graph of one snapshot, the keys of a later one.
        early = await reader.take()
        await progressed(await learnt_after(), 3)
        late = await reader.take()
        skewed = Contents(backups[0].header, early.nodes, early.edges, {}, {}, {})
        async for record in reader.key_records(late):
            if isinstance(record, HashRecord):
                skewed.hashes.setdefault(record.name, {}).update(record.fields)
        await reader.drop(early)
        await reader.drop(late)
    finally:
        stop.set()
        await writing
        await redis.aclose()
        await ctx.aclose()
    assert any("the graph does not hold it" in v for v in violations(skewed, writers))
    for contents in backups:
        assert violations(contents, writers) == []
        assert any(e.type == "PART_OF" for e in contents.edges) and any(t.startswith("churn") for t in contents.beads())
    sizes = [len(c.beads()) for c in backups]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]  # every backup was taken while writes went on
    # No copy outlives its backup.
    redis = Redis.from_url(settings.redis_url)
    try:
        assert [k async for k in redis.scan_iter(match=f"{Keys(settings.graph_name).backup_copies('*')}")] == []
    finally:
        await redis.aclose()


async def _at_least(value: Any, bound: int) -> bool:
    return bool(await value() >= bound)


# --- refusals ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def small_backup(source_stack: EmbeddedStack, tmp_path_factory: pytest.TempPathFactory) -> Path:
    settings = settings_for(source_stack, "bk_small")
    ctx = await HubContext.connect(settings)
    try:
        for i in range(20):
            await dispatch(ctx, "a_small1", "create_bead", CreateBead(title=f"small {i}", idempotency_key=f"s{i}"))
        await dispatch(ctx, "a_small1", "learn", Learn(key="k", value="v"))
    finally:
        await ctx.aclose()
    return (await backup(settings, tmp_path_factory.mktemp("small") / "small.backup")).path


async def _untouched(stack: EmbeddedStack, graph: str) -> bool:
    redis = Redis.from_url(stack.redis_url)
    try:
        graphs = [g.decode() for g in await redis.execute_command("GRAPH.LIST")]
        keys = [k async for k in redis.scan_iter(match=Keys(graph).pattern())]
    finally:
        await redis.aclose()
    return graph not in graphs and keys == []


def _rewrite(source: Path, target: Path, change: Any) -> Path:
    lines = gzip.decompress(source.read_bytes()).splitlines(keepends=True)
    target.write_bytes(gzip.compress(b"".join(change(lines))))
    return target


async def test_a_damaged_file_is_refused_and_changes_nothing(
    small_backup: Path, target_stack: EmbeddedStack, tmp_path: Path
) -> None:
    whole = small_backup.read_bytes()
    cut = tmp_path / "cut.backup"
    cut.write_bytes(whole[: len(whole) // 2])

    def edit_a_title(lines: list[bytes]) -> list[bytes]:
        return [line.replace(b'"small 7"', b'"small 8"') for line in lines]

    def drop_the_end(lines: list[bytes]) -> list[bytes]:
        return lines[:-1]

    def newer_version(lines: list[bytes]) -> list[bytes]:
        return [lines[0].replace(b'"version":1', b'"version":2'), *lines[1:]]

    cases = {
        cut: "cut short",
        _rewrite(small_backup, tmp_path / "edited.backup", edit_a_title): "checksum mismatch",
        _rewrite(small_backup, tmp_path / "no-end.backup", drop_the_end): "no end record",
        _rewrite(small_backup, tmp_path / "v2.backup", newer_version): "format version 2",
    }
    (tmp_path / "other.backup").write_bytes(gzip.compress(b'{"hello": "world"}\n'))
    cases[tmp_path / "other.backup"] = "not a Nexus Recall backup"
    for path, reason in cases.items():
        graph = f"bk_bad_{secrets.token_hex(3)}"
        with pytest.raises(BackupFileError, match=reason):
            await restore(settings_for(target_stack, graph), path)
        assert await _untouched(target_stack, graph), path


async def test_a_target_holding_data_is_refused_unless_forced(small_backup: Path, target_stack: EmbeddedStack) -> None:
    settings = settings_for(target_stack, f"bk_busy_{secrets.token_hex(3)}")
    await restore(settings, small_backup)
    ctx = await HubContext.connect(settings)
    try:
        await dispatch(ctx, "a_other1", "create_bead", CreateBead(title="written after the restore"))
        await dispatch(ctx, "a_other1", "learn", Learn(key="k", value="after the restore"))
        beads = await ctx.beads.system_count()
        with pytest.raises(TargetNotEmpty, match="--force"):
            await restore(settings, small_backup)
        assert await ctx.beads.system_count() == beads == 21
        report = await restore(settings, small_backup, force=True)
        assert await ctx.beads.system_count() == report.header.counts.nodes["Bead"] == 20
        assert await ctx.kv.get("a_other1", "k") is None and await ctx.kv.get("a_small1", "k") is not None
    finally:
        await ctx.aclose()


# --- the command line ----------------------------------------------------------------------------------


async def _recall(*args: str) -> tuple[int, str]:
    env = {**os.environ, "RECALL_EMBEDDER__KIND": "hash"}
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "recall"), *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    return int(proc.returncode or 0), (out + err).decode()


async def test_the_cli_backs_up_and_restores(
    small_backup: Path, source_stack: EmbeddedStack, tmp_path: Path
) -> None:
    url = source_stack.redis_url
    urls = ["--falkordb", url, "--redis", url]
    code, printed = await _recall("backup", "--out", str(tmp_path / "cli.backup"), *urls, "--graph", "bk_small")
    assert code == 0, printed
    assert "nodes" in printed and "backed up graph bk_small" in printed
    assert Contents.read(tmp_path / "cli.backup").canonical() == Contents.read(small_backup).canonical()

    restored = f"bk_cli_{secrets.token_hex(3)}"
    code, printed = await _recall("restore", str(tmp_path / "cli.backup"), *urls, "--graph", restored)
    assert code == 0, printed
    assert "vectors" in printed and f"into graph {restored}" in printed and "embedded with hash:384" in printed
    code, printed = await _recall("restore", str(tmp_path / "cli.backup"), *urls, "--graph", restored)
    assert code == 1 and "already holds data" in printed and "nothing was changed" in printed
    code, printed = await _recall("restore", str(tmp_path / "cli.backup"), *urls, "--graph", restored, "--force")
    assert code == 0, printed
