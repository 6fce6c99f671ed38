"""The token signs a hub process read last are kept in memory (``store/sign_cache.py``), so a search need not read
its candidates' signs again: the candidates of a team's searches are mostly the same beads. The process's own
writes replace or drop them at once; another hub process's change is read once the entry is
``SIGNS_KEPT_S`` old; an entry is only given to a search of the scope it was read from."""

from __future__ import annotations

import secrets

import numpy as np
from recall_hub.context import HubContext
from recall_hub.store.sign_cache import SignCache
from recall_hub.store.vectors import BeadVectors, VectorStore, pack_signs


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_signs_held_are_given_until_they_are_too_old() -> None:
    clock = Clock()
    cache = SignCache(10, kept_s=30, clock=clock)
    cache.read({"b1": ("group:g", b"one"), "b2": ("group:g", b"two")})
    assert cache.held(["group:g"], ["b1", "b2", "b3"]) == ({"b1": b"one", "b2": b"two"}, ["b3"])
    assert (cache.hits, cache.misses) == (2, 1)
    clock.now += 31
    assert cache.held(["group:g"], ["b1"]) == ({}, ["b1"])


def test_signs_are_given_only_to_a_search_of_their_scope() -> None:
    cache = SignCache(10, clock=Clock())
    cache.read({"b1": ("private:a_x", b"one")})
    assert cache.held(["group:g", "global"], ["b1"]) == ({}, ["b1"])
    assert cache.held(["private:a_x"], ["b1"]) == ({"b1": b"one"}, [])


def test_a_write_of_this_process_is_not_undone_by_a_read_that_started_before_it() -> None:
    clock = Clock()
    cache = SignCache(10, clock=clock)
    cache.written("group:g", "b1", b"new")
    cache.read({"b1": ("group:g", b"old")})  # a read sent before the write, answered after it
    assert cache.held(["group:g"], ["b1"])[0] == {"b1": b"new"}
    cache.written("group:g", "b1", None)
    assert cache.held(["group:g"], ["b1"]) == ({}, ["b1"])
    clock.now += 60  # an old entry is replaced by what a read finds
    cache.written("group:g", "b2", b"new")
    clock.now += 31
    cache.read({"b2": ("group:g", b"newer")})
    assert cache.held(["group:g"], ["b2"])[0] == {"b2": b"newer"}


def test_the_least_recently_used_go_first_and_size_zero_keeps_nothing() -> None:
    cache = SignCache(2, clock=Clock())
    cache.read({"b1": ("s", b"1"), "b2": ("s", b"2")})
    cache.held(["s"], ["b1"])
    cache.read({"b3": ("s", b"3")})
    assert cache.held(["s"], ["b1", "b2", "b3"]) == ({"b1": b"1", "b3": b"3"}, ["b2"])
    none = SignCache(0, clock=Clock())
    none.read({"b1": ("s", b"1")})
    none.written("s", "b2", b"2")
    assert none.held(["s"], ["b1", "b2"]) == ({}, ["b1", "b2"])


def _bead_vectors(seed: int, tokens: int) -> BeadVectors:
    rng = np.random.default_rng(seed)
    row = rng.normal(size=384).astype(np.float32)
    return BeadVectors(row / np.linalg.norm(row), tokens=rng.normal(size=(tokens, 384)).astype(np.float32))


async def test_a_search_reads_a_bead_s_signs_once_and_sees_another_hub_s_change_in_time(hub: HubContext) -> None:
    clock = Clock()
    here = VectorStore(hub.redis, hub.keys, f"signs-{secrets.token_hex(3)}", signs_cache_size=100)
    here.signs = SignCache(100, clock=clock)
    elsewhere = VectorStore(hub.redis, hub.keys, here.model_id)  # another hub process, same stores
    scope, bead_id = "global", f"b_{secrets.token_hex(8)}"
    await elsewhere.add(bead_id, scope, _bead_vectors(1, 3), {})
    first = pack_signs(_bead_vectors(1, 3).tokens)  # type: ignore[arg-type]
    assert await here.token_signs([scope], [bead_id]) == {bead_id: first}
    assert await here.token_signs([scope], [bead_id]) == {bead_id: first}
    assert (here.signs.hits, here.signs.misses) == (1, 1)  # the second search read nothing

    await elsewhere.add(bead_id, scope, _bead_vectors(2, 5), {})  # its text changed, at the other hub
    second = pack_signs(_bead_vectors(2, 5).tokens)  # type: ignore[arg-type]
    assert await here.token_signs([scope], [bead_id]) == {bead_id: first}  # ranking as of a moment ago
    clock.now += here.signs.kept_s + 1
    assert await here.token_signs([scope], [bead_id]) == {bead_id: second}

    await here.add(bead_id, scope, _bead_vectors(3, 2), {})  # this process's own write: at once
    assert await here.token_signs([scope], [bead_id]) == {bead_id: pack_signs(_bead_vectors(3, 2).tokens)}  # type: ignore[arg-type]
    await here.remove(bead_id, scope)
    assert await here.token_signs([scope], [bead_id]) == {}
    await here.drop_model_sets(keep_current=False)


def test_a_hub_keeps_as_many_beads_signs_as_its_setting_says(hub: HubContext) -> None:
    assert hub.vectors.signs.size == hub.settings.signs_cache_size == 20_000
