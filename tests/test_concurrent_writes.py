"""Concurrent writers through the bus never lose each other's changes (contract 13).

Many clients change one bead, one key-value entry or one agent state at the same moment: atomic edits
(tags, metadata keys, importance) all land without any client retrying; replacing writes that carry
``if_version`` are refused with ``conflict`` and the current version when stale, and
``retry_on_conflict`` turns a read-modify-write into one that never loses a change.
"""

from __future__ import annotations

import asyncio

import pytest
from conftest import ClientFactory, World, new_ai
from recall_client import Conflict, Forbidden, InvalidRequest, NotFound, RecallClient, retry_on_conflict
from recall_schemas import MemoryBead, Visibility
from recall_schemas.coordination import AIState

WRITERS = 30


async def _writers(connect: ClientFactory, ai_id: str, n: int) -> list[RecallClient]:
    """``n`` connections of one identity: an agent's parallel tasks or sidecars."""
    return list(await asyncio.gather(*(connect(ai_id) for _ in range(n))))


async def _group_bead(world: World, **fields: object) -> MemoryBead:
    return await world.bead(Visibility.GROUP, "Release checklist", **fields)


async def test_concurrent_tag_additions_all_land(world: World, connect: ClientFactory) -> None:
    bead = await _group_bead(world, tags=["checklist"])
    writers = [*await _writers(connect, world.creator.ai_id, WRITERS - 1), world.ops]
    await asyncio.gather(*(w.edit_bead(bead.bead_id, add_tags=[f"done-{i}"]) for i, w in enumerate(writers)))
    after = await world.member.get_bead(bead.bead_id)
    assert sorted(after.tags) == sorted(["checklist", *(f"done-{i}" for i in range(WRITERS))])
    assert after.version == 1 + WRITERS


async def test_concurrent_importance_increments_all_count(world: World, connect: ClientFactory) -> None:
    bead = await _group_bead(world, importance=0)
    writers = await _writers(connect, world.creator.ai_id, 7)
    await asyncio.gather(*(w.edit_bead(bead.bead_id, add_importance=1) for w in writers))
    assert (await world.creator.get_bead(bead.bead_id)).importance == 7
    # Importance stays within 0..10 whatever the increments add up to.
    await asyncio.gather(*(w.edit_bead(bead.bead_id, add_importance=2) for w in writers))
    assert (await world.creator.get_bead(bead.bead_id)).importance == 10
    await asyncio.gather(*(w.edit_bead(bead.bead_id, add_importance=-3) for w in writers))
    assert (await world.creator.get_bead(bead.bead_id)).importance == 0


async def test_concurrent_metadata_keys_all_land(world: World, connect: ClientFactory) -> None:
    bead = await _group_bead(world, metadata={"owner": "team", "stale": True})
    writers = await _writers(connect, world.creator.ai_id, 20)
    await asyncio.gather(
        *(
            w.edit_bead(bead.bead_id, set_metadata={f"step-{i}": {"done": True, "by": i}})
            for i, w in enumerate(writers)
        ),
        world.ops.edit_bead(bead.bead_id, remove_metadata=["stale"], add_tags=["reviewed"]),
    )
    after = await world.creator.get_bead(bead.bead_id)
    assert after.metadata == {"owner": "team", **{f"step-{i}": {"done": True, "by": i} for i in range(20)}}
    assert after.tags == ["reviewed"]


async def test_mixed_edits_and_replacing_updates_lose_nothing(world: World, connect: ClientFactory) -> None:
    """Atomic edits racing read-modify-writes of the content (with if_version, retried on conflict)."""
    bead = await _group_bead(world, content="steps:")
    writers = await _writers(connect, world.creator.ai_id, 10)

    async def append_line(client: RecallClient, i: int) -> MemoryBead:
        return await client.modify_bead(bead.bead_id, lambda b: {"content": f"{b.content}\nstep {i}"}, attempts=100)

    await asyncio.gather(
        *(append_line(w, i) for i, w in enumerate(writers)),
        *(w.edit_bead(bead.bead_id, add_tags=[f"t{i}"], set_metadata={f"k{i}": i}) for i, w in enumerate(writers)),
    )
    after = await world.creator.get_bead(bead.bead_id)
    assert sorted(after.content.splitlines()[1:]) == sorted(f"step {i}" for i in range(10))
    assert sorted(after.tags) == sorted(f"t{i}" for i in range(10))
    assert after.metadata == {f"k{i}": i for i in range(10)}


async def test_a_stale_version_is_refused_with_the_current_one(world: World) -> None:
    bead = await _group_bead(world)
    await world.creator.edit_bead(bead.bead_id, add_tags=["a"])
    for write in (
        world.creator.update_bead(bead.bead_id, if_version=1, title="stale"),
        world.creator.edit_bead(bead.bead_id, add_tags=["b"], if_version=1),
        world.creator.delete_bead(bead.bead_id, if_version=1),
    ):
        with pytest.raises(Conflict) as refused:
            await write
        assert refused.value.details["version"] == 2
    after = await world.creator.get_bead(bead.bead_id)
    assert (after.title, after.tags, after.version) == (bead.title, ["a"], 2)
    assert (await world.creator.edit_bead(bead.bead_id, add_tags=["b"], if_version=2)).tags == ["a", "b"]


async def test_an_edit_that_changes_nothing_keeps_the_version(world: World) -> None:
    bead = await _group_bead(world, tags=["x"], importance=10, metadata={"k": 1})
    same = await world.creator.edit_bead(
        bead.bead_id, add_tags=["x"], add_importance=1, set_metadata={"k": 1}, remove_tags=["absent"]
    )
    assert (same.version, same.tags, same.importance, same.metadata) == (1, ["x"], 10, {"k": 1})


async def test_edits_are_checked_like_updates(world: World) -> None:
    bead = await _group_bead(world, tags=[f"t{i}" for i in range(30)])
    with pytest.raises(InvalidRequest, match="32 tags"):
        await world.creator.edit_bead(bead.bead_id, add_tags=["a", "b", "c"])
    with pytest.raises(InvalidRequest, match="reserved"):
        await world.creator.edit_bead(bead.bead_id, set_metadata={"_recall_source": "x"})
    with pytest.raises(InvalidRequest, match="reserved"):
        await world.creator.edit_bead(bead.bead_id, remove_metadata=["_recall_source"])
    with pytest.raises(InvalidRequest, match="both added and removed"):
        await world.creator.edit_bead(bead.bead_id, add_tags=["a"], remove_tags=["a"])
    with pytest.raises(InvalidRequest, match="nothing to change"):
        await world.creator.edit_bead(bead.bead_id)
    with pytest.raises(Forbidden):  # a member sees the bead but may not change it
        await world.member.edit_bead(bead.bead_id, add_tags=["a"])
    for stranger in (world.ex_member, world.outsider):  # an invisible bead is a missing one
        with pytest.raises(NotFound):
            await stranger.edit_bead(bead.bead_id, add_tags=["a"])
        with pytest.raises(NotFound):
            await stranger.edit_bead(bead.bead_id, set_metadata={"k": 1})
    assert (await world.creator.get_bead(bead.bead_id)).version == 1


async def test_edits_reach_search_filters_and_the_change_feed(world: World) -> None:
    bead = await _group_bead(world, content="rotate the signing keys before the audit")
    await world.creator.edit_bead(bead.bead_id, add_tags=["security"])
    world.member.read_after(world.creator.index_position)  # a reader of another client's fresh write
    found = await world.member.search_beads("signing keys", filters={"tags": ["security"]})
    assert [hit.bead.bead_id for hit in found.hits] == [bead.bead_id]
    changes = (await world.member.changes_since(world.group_id)).changes
    assert [(c.action, c.bead.tags if c.bead else None) for c in changes if c.bead_id == bead.bead_id] == [
        ("created", []), ("updated", ["security"])
    ]


async def test_key_value_memory_takes_an_expected_version(connect: ClientFactory) -> None:
    ai_id = new_ai()
    writers = await _writers(connect, ai_id, 20)
    # Only one of many "create if absent" writes wins.
    outcomes = await asyncio.gather(
        *(w.learn("lease", f"holder-{i}", if_version=0) for i, w in enumerate(writers)), return_exceptions=True
    )
    won = [o for o in outcomes if not isinstance(o, BaseException)]
    assert len(won) == 1 and won[0].version == 1
    assert all(isinstance(o, Conflict) and o.details["version"] == 1 for o in outcomes if o not in won)
    assert (await writers[0].recall("lease")).value == won[0].value

    # A counter incremented by every writer, read-modify-write retried on conflict: no increment lost.
    await writers[0].learn("counter", "0")

    async def increment(client: RecallClient) -> None:
        async def attempt() -> object:
            entry = await client.recall("counter")
            return await client.learn("counter", str(int(entry.value) + 1), if_version=entry.version)

        await retry_on_conflict(attempt, attempts=200)

    await asyncio.gather(*(increment(w) for w in writers))
    entry = await writers[0].recall("counter")
    assert (entry.value, entry.version) == ("20", 21)


async def test_agent_state_takes_an_expected_version(connect: ClientFactory) -> None:
    ai_id = new_ai()
    writers = await _writers(connect, ai_id, 15)
    assert (await writers[0].ai_state_get()).version == 0

    async def add_todo(client: RecallClient, i: int) -> None:
        async def attempt() -> AIState:
            state = await client.ai_state_get()
            todos = [*(t.model_dump() for t in state.todos), {"text": f"todo {i}"}]
            return await client.ai_state_save(todos=todos, if_version=state.version)

        await retry_on_conflict(attempt, attempts=200)

    await asyncio.gather(*(add_todo(w, i) for i, w in enumerate(writers)))
    state = await writers[0].ai_state_get()
    assert sorted(t.text for t in state.todos) == sorted(f"todo {i}" for i in range(15))
    assert state.version == 15
    with pytest.raises(Conflict) as refused:
        await writers[0].ai_state_save(working_notes="stale", if_version=3)
    assert refused.value.details["version"] == 15
    assert (await writers[0].ai_state_get()).working_notes == ""


def test_retry_on_conflict_gives_up_after_its_attempts() -> None:
    tries = 0

    async def always_stale() -> None:
        nonlocal tries
        tries += 1
        raise Conflict("stale", {"version": tries})

    with pytest.raises(Conflict):
        asyncio.run(retry_on_conflict(always_stale, attempts=3))
    assert tries == 3
