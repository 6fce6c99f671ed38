"""Forgotten means gone from every store (contract 14): a bead's text, once forgotten, is found in no Redis
key, no stream, no server log and no file under the data directory within the stated time, and a backup
made after the forget holds no trace of it.

The stack here records what a careless deployment would: FalkorDB's query telemetry on (``CMD_INFO``),
RDB snapshots as well as the append-only file, and no compression in the files (so a search of their
bytes is a real search). The check reads every key with ``DUMP``, which serialises a stream's entries
deleted with ``XDEL`` too.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from conftest import until
from recall_client import RecallClient
from recall_hub.config import HubSettings
from recall_hub.embedders import EmbedderConfig
from recall_hub.ops.erasure import erasure_store
from recall_hub.service.endpoints import HubService
from recall_hub.service.server import running_hub
from recall_hub.store.erasure import ErasureStore
from recall_hub.tooling.backup import backup
from recall_hub.tooling.stack import EmbeddedStack
from redis.asyncio import Redis

INTERVAL_S = 1.0
ERASED_WITHIN_S = 2 * INTERVAL_S + 30
"""The stated bound (docs/lifecycle.md): two sweep intervals, plus the servers' rewrite of their files
(well under a second for this store; 30 s of slack for a loaded machine)."""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStack]:
    with EmbeddedStack(tmp_path_factory.mktemp("erasure")) as running:
        yield running


@pytest.fixture(scope="module")
async def server(stack: EmbeddedStack) -> AsyncIterator[Redis]:
    client = Redis.from_url(stack.redis_url)
    await client.config_set("rdbcompression", "no")
    await client.config_set("save", "3600 1")
    await client.execute_command("GRAPH.CONFIG", "SET", "CMD_INFO", "yes")  # type: ignore[no-untyped-call]
    yield client
    await client.aclose()


@pytest.fixture(scope="module")
def settings(stack: EmbeddedStack) -> HubSettings:
    return HubSettings(
        nats_url=stack.nats_url, falkordb_url=stack.redis_url, redis_url=stack.redis_url,
        graph_name=f"erasure_{secrets.token_hex(4)}", embedder=EmbedderConfig(kind="hash"),
        outbox_interval_s=INTERVAL_S,
    )


@pytest.fixture(scope="module")
async def hub(server: Redis, settings: HubSettings) -> AsyncIterator[HubService]:
    async with running_hub(settings) as service:
        yield service


async def places_holding(text: str, server: Redis, data_dir: Path) -> list[str]:
    """Every key, server log and file that holds ``text``."""
    needle = text.encode()
    found = []
    async for key in server.scan_iter(count=1000):
        dumped = await server.dump(key)
        if dumped is not None and needle in dumped:
            found.append(f"key {key!r}")
    if needle in repr(await server.slowlog_get(128)).encode():
        found.append("SLOWLOG")
    for path in data_dir.rglob("*"):
        if path.is_file() and needle in path.read_bytes():
            found.append(f"file {path.relative_to(data_dir)}")
    return found


async def test_forgotten_text_leaves_every_key_log_and_file(
    stack: EmbeddedStack, server: Redis, hub: HubService, tmp_path: Path
) -> None:
    secret = f"leaked-token-{secrets.token_hex(16)}"
    async with RecallClient("o_erasure01", stack.nats_url) as ops, RecallClient("a_erasure01", stack.nats_url) as me:
        group = await ops.create_group("erasure")
        await ops.add_member(group.group_id, me.ai_id)
        bead = await me.create_bead(
            f"deploy notes {secret}", f"the token is {secret}", visibility="group", group_id=group.group_id
        )
        await me.update_bead(bead.bead_id, content=f"rotated, the old token was {secret}")  # a kept version
        await me.edit_bead(bead.bead_id, add_tags=["secrets"], set_metadata={"token": secret})
        await me.search_beads(secret)
        # The text really is in the change log, the graph and the append-only file, and (FalkorDB flushes its
        # telemetry every few seconds) soon in the telemetry.
        async def recorded() -> bool:
            places = " ".join(await places_holding(secret, server, stack.data_dir))
            graph = f"key {hub.ctx.settings.graph_name.encode()!r}"
            return all(where in places for where in ("changes", "telemetry", "appendonlydir", graph))

        await until("the text recorded everywhere it goes", recorded, within=30)

        await me.forget_bead(bead.bead_id, "a leaked secret")
        copy = tmp_path / "after-forget.recall"
        await backup(hub.ctx.settings, copy)  # made at once, erasure pending or not
        assert secret.encode() not in copy.read_bytes()

        store = erasure_store(hub.ctx)

        async def erased() -> bool:
            return not await places_holding(secret, server, stack.data_dir) and not await store.system_pending()

        await until("the forgotten text is gone from every key, log and file", erased, within=ERASED_WITHIN_S)
        # The feed still tells members that the bead was forgotten, without content.
        changes = (await me.changes_since(group.group_id)).changes
        assert [(c.action, c.bead) for c in changes if c.bead_id == bead.bead_id] == [
            ("created", None), ("updated", None), ("updated", None), ("forgotten", None)
        ]
        raw = await server.xrange(hub.ctx.keys.changes(group.group_id))
        assert len(raw) == len(changes)


async def test_a_rewritten_change_log_keeps_its_other_entries_ids_and_cursors(
    stack: EmbeddedStack, server: Redis, hub: HubService
) -> None:
    async with RecallClient("o_erasure02", stack.nats_url) as ops:
        group = await ops.create_group("cursors")
        kept = await ops.create_bead("kept one", "stays", visibility="group", group_id=group.group_id)
        doomed = await ops.create_bead("doomed", "goes", visibility="group", group_id=group.group_id)
        later = await ops.create_bead("kept two", "stays", visibility="group", group_id=group.group_id)
        before = (await ops.changes_since(group.group_id)).changes
        store = ErasureStore(hub.ctx.graph, hub.ctx.redis, hub.ctx.keys)
        assert await store.erase_from_change_logs([doomed.bead_id]) == 1
        after = (await ops.changes_since(group.group_id)).changes
        assert [(c.cursor, c.bead_id, c.action) for c in after] == [(c.cursor, c.bead_id, c.action) for c in before]
        assert [c.bead for c in after if c.bead_id == doomed.bead_id] == [None]
        assert [c.bead for c in after if c.bead_id != doomed.bead_id] == [
            c.bead for c in before if c.bead_id != doomed.bead_id
        ]
        # New entries still sort after every cursor handed out.
        newest = await ops.create_bead("kept three", "new", visibility="group", group_id=group.group_id)
        since = (await ops.changes_since(group.group_id, cursor=before[-1].cursor)).changes
        assert [c.bead_id for c in since] == [newest.bead_id]
        assert {kept.bead_id, later.bead_id} <= {c.bead_id for c in after}
        dumped = await server.dump(hub.ctx.keys.changes(group.group_id)) or b""
        assert b"goes" not in dumped and b"stays" in dumped


async def test_what_is_appended_during_a_rewrite_is_carried_over_without_snapshots(
    stack: EmbeddedStack, server: Redis, hub: HubService
) -> None:
    """The script that finishes a rewrite copies every entry after the last one copied page by page: here
    all of them (nothing was copied), as when a whole log was appended while the rewrite ran."""
    async with RecallClient("o_erasure03", stack.nats_url) as ops:
        group = await ops.create_group("tail")
        doomed = await ops.create_bead("doomed", "goes away", visibility="group", group_id=group.group_id)
        kept = await ops.create_bead("kept", "stays here", visibility="group", group_id=group.group_id)
        await ops.update_bead(doomed.bead_id, content="goes away again")
        before = (await ops.changes_since(group.group_id)).changes
        log_key = hub.ctx.keys.changes(group.group_id)
        await server.pexpire(log_key, 3_600_000)
        store = ErasureStore(hub.ctx.graph, hub.ctx.redis, hub.ctx.keys)
        await store._finish_rewrite(keys=[log_key, hub.ctx.keys.scratch("tail-test")], args=["", doomed.bead_id])
        after = (await ops.changes_since(group.group_id)).changes
        assert [(c.cursor, c.action, c.bead_id) for c in after] == [(c.cursor, c.action, c.bead_id) for c in before]
        assert [c.bead.content if c.bead else None for c in after] == [None, "stays here", None]
        assert 0 < await server.pttl(log_key) <= 3_600_000
        info = await server.xinfo_stream(log_key)
        assert info["last-generated-id"] == before[-1].cursor.encode()
        assert kept.bead_id in {c.bead_id for c in after}
