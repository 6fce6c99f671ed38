"""`recall upgrade`: a first release's store keeps its key-value memory, change logs, audit, vectors
and applied events when the hub moves to graph-namespaced keys."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator

import pytest
from recall_hub.config import HubSettings
from recall_hub.context import HubContext
from recall_hub.embedders import HashEmbedder
from recall_hub.ops.beads import create_bead
from recall_hub.ops.changes import changes_since
from recall_hub.ops.kv import learn, recall
from recall_hub.retrieval.freshness import handed_off_work_done
from recall_hub.store.keys import LEGACY_APPLIED_EVENTS, Keys
from recall_hub.store.upgrade import legacy_keys_present
from recall_schemas import CreateBead, NotFound, new_id
from recall_schemas.coordination import ChangesSince, Learn, Recall

from tests.conftest import new_ai


@pytest.fixture
async def old_store(settings: HubSettings) -> AsyncIterator[HubContext]:
    ctx = await HubContext.connect(
        settings.model_copy(update={"graph_name": f"upgrade_{new_id('x')[2:]}"}), embedder=HashEmbedder(dim=64)
    )
    try:
        yield ctx
    finally:
        await ctx.graph.graph.delete()
        async for key in ctx.redis.scan_iter(match=ctx.keys.pattern()):
            await ctx.redis.delete(key)
        await ctx.aclose()


def _first_release_name(keys: Keys, key: str) -> str | None:
    """Where the first release kept this key (no graph in the name), or None for keys it did not have."""
    rest = key.removeprefix(f"{keys.root}:")
    return f"recall:{rest}" if rest.split(":", 1)[0] in ("kv", "audit", "changes", "vec") else None


def _upgrade(settings: HubSettings, graph: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "recall_hub.tooling.cli", "upgrade", "--redis", settings.redis_url, "--graph", graph],
        capture_output=True, text=True, timeout=60, check=False,
    )


async def test_upgrade_moves_a_first_release_store_under_its_graph(old_store: HubContext, settings: HubSettings):
    ctx, owner = old_store, new_ai("a")
    bead = await create_bead(ctx, owner, CreateBead(title="the deploy key rotates monthly", visibility="global"))
    await learn(ctx, owner, Learn(key="editor", value="helix"))
    await ctx.audit.record(owner, "get_bead", True, "", [bead.bead_id])
    await handed_off_work_done(ctx)  # its vector and feed entry (RECALL_CREATE_SETTLE=background: after the reply)
    before = await changes_since(ctx, owner, ChangesSince(scope="global"))
    # Lay the store out as the first release did: the same keys without the graph's name ...
    moved = 0
    async for raw in ctx.redis.scan_iter(match=ctx.keys.pattern()):
        old_name = _first_release_name(ctx.keys, raw.decode())
        if old_name is not None:
            await ctx.redis.rename(raw, old_name)
            moved += 1
    assert moved >= 4  # kv, audit (identity and bead), change log, vector set
    # ... and applied events in one set that never expires.
    await ctx.redis.sadd(LEGACY_APPLIED_EVENTS, f"{owner}:ev1", f"{owner}:ev2")
    # Another graph whose name happens to read like a first-release key is not mistaken for one.
    lookalike = Keys("kv").kv(owner)
    await ctx.redis.set(lookalike, b"not ours")
    try:
        assert await legacy_keys_present(ctx.redis)
        with pytest.raises(NotFound, match="editor"):
            await recall(ctx, owner, Recall(key="editor"))  # as the new hub sees it before the upgrade

        done = _upgrade(settings, ctx.settings.graph_name)
        assert done.returncode == 0, done.stderr
        assert f"{moved} key(s) moved" in done.stdout and "2 applied event id(s)" in done.stdout

        assert (await recall(ctx, owner, Recall(key="editor"))).value == "helix"
        after = await changes_since(ctx, owner, ChangesSince(scope="global"))
        assert [c.bead_id for c in after.changes] == [c.bead_id for c in before.changes]
        assert await ctx.vectors.vector(bead.bead_id, "global") is not None  # under the new name
        assert [e.op for e in await ctx.audit.entries(ai_id=owner, bead_id=None, limit=10)] == ["get_bead"]
        ttl = await ctx.redis.ttl(ctx.keys.applied_event(owner, "ev1"))
        assert 0 < ttl <= ctx.settings.applied_event_ttl_s
        assert not await legacy_keys_present(ctx.redis)
        assert await ctx.redis.get(lookalike) == b"not ours"

        again = _upgrade(settings, ctx.settings.graph_name)
        assert again.returncode == 0 and "0 key(s) moved" in again.stdout
    finally:
        await ctx.redis.delete(lookalike, LEGACY_APPLIED_EVENTS)
