"""Late interaction: each bead keeps the signs of the local model's outputs for the words of its text (48 bytes a
word token, from the same model run as its vector), kept beside its vectors in its scope — replaced when its
text changes, moved with its scope, removed with it — and a hybrid search adds how well the query's words match
a candidate's, one by one, to its fused relevance. The session hub runs the local model with it on (the
default)."""

from __future__ import annotations

import secrets

import numpy as np
import pytest
from conftest import World
from recall_hub.context import HubContext
from recall_hub.ops.indexing import repair_token_signs
from recall_hub.retrieval.embedding import bead_text
from recall_hub.retrieval.freshness import handed_off_work_done
from recall_hub.retrieval.keyword import STOPWORDS
from recall_hub.retrieval.ranking import Fused, add_token_matches, token_rarity
from recall_hub.store.vectors import SIGNS_KEPT, match_signs, pack_signs, scope_of, unpack_signs
from recall_schemas import Visibility


async def signs_of(hub: HubContext, bead_id: str, scope: str) -> np.ndarray | None:
    """The bead's token signs in ``scope`` (once the creates handed off before have their vectors, as a read
    through the bus would wait for)."""
    await handed_off_work_done(hub)
    packed = (await hub.vectors.token_signs([scope], [bead_id])).get(bead_id)
    return None if packed is None else unpack_signs(packed)


def test_signs_are_a_bit_a_dimension_and_unpack_to_unit_rows() -> None:
    tokens = np.random.default_rng(3).standard_normal((5, 384)).astype(np.float32)
    packed = pack_signs(tokens)
    assert len(packed) == 5 * 48
    rows = unpack_signs(packed)
    assert rows.shape == (5, 384)
    assert np.allclose(np.linalg.norm(rows, axis=1), 1.0)
    assert (np.sign(rows) == np.sign(tokens)).all()


def test_a_match_is_each_query_token_s_best_cosine_averaged() -> None:
    rng = np.random.default_rng(5)
    query = rng.standard_normal((4, 384)).astype(np.float32)
    query /= np.linalg.norm(query, axis=1, keepdims=True)
    packed = {f"b{n}": pack_signs(rng.standard_normal((n, 384))) for n in (1, 3, 40)}
    matches = match_signs(query, packed)
    for bead_id, signs in packed.items():  # the query's tokens as signs too
        expected = float((unpack_signs(pack_signs(query)) @ unpack_signs(signs).T).max(axis=1).mean())
        assert matches[bead_id] == pytest.approx(expected, abs=1e-5)
    assert match_signs(query, {}) == {} and match_signs(np.zeros((0, 384)), packed) == {}


def test_a_query_word_every_candidate_holds_counts_less_than_one_few_hold() -> None:
    """With ``TOKEN_COMMON`` set, each query token weighs by BM25's IDF of how many candidates hold it (a token
    of theirs at least that close), and a bead's match is the weighed mean of its best cosines."""
    best = np.array([[0.9, 0.8, 0.1], [0.9, 0.2, 0.1], [0.95, 0.1, 0.2], [0.9, 0.3, 0.7]])
    weights = token_rarity(best, common=0.6)
    assert weights[0] < weights[1] == weights[2]  # held by all four against one each
    assert weights[0] == pytest.approx(np.log(0.5 / 4.5 + 1)) and weights[1] == pytest.approx(np.log(3.5 / 1.5 + 1))
    rng = np.random.default_rng(11)
    query = rng.standard_normal((3, 384)).astype(np.float32)
    packed = {f"b{n}": pack_signs(rng.standard_normal((n, 384))) for n in (2, 5, 9)}
    plain = match_signs(query, packed)
    weighed = match_signs(query, packed, lambda found: np.array([1.0, 0.0, 0.0]))
    for bead_id, signs in packed.items():  # only the first token counts
        first = float((unpack_signs(pack_signs(query[:1])) @ unpack_signs(signs).T).max())
        assert weighed[bead_id] == pytest.approx(first, abs=1e-5)
    assert match_signs(query, packed, lambda found: np.ones(found.shape[1])) == pytest.approx(plain)


def test_matches_are_scaled_over_the_candidates_and_weighed() -> None:
    fused = {b: Fused(b, relevance=0.5) for b in ("a", "b", "c", "d")}
    add_token_matches(fused, {"a": 0.9, "b": 0.85, "c": 0.5, "gone": 1.0}, weight=0.4)
    assert fused["a"].relevance == pytest.approx(0.9)  # the best match gains the whole weight
    assert fused["b"].relevance == pytest.approx(0.5 + 0.4 * (1 - 0.05 / 0.4))
    assert fused["c"].relevance == pytest.approx(0.5)  # the worst gains nothing
    assert fused["d"].relevance == 0.5 and fused["d"].sources == []  # no signs kept: not in the list
    assert fused["a"].sources == [("tokens", 1, 0.9)]
    # Two candidates that match about equally stay about equal (the cosine list's spread floor).
    close = {b: Fused(b) for b in ("x", "y")}
    add_token_matches(close, {"x": 0.80, "y": 0.79}, weight=1.0)
    assert close["y"].relevance == pytest.approx(0.9)


async def test_a_bead_keeps_the_signs_of_its_words_as_the_model_reads_them(world: World, hub: HubContext) -> None:
    bead = await world.bead(Visibility.GROUP, "Caroline: I went to the LGBTQ support group yesterday, it was great!")
    stored = await signs_of(hub, bead.bead_id, f"group:{world.group_id}")
    props = {"title": bead.title, "content": bead.content}
    ((_, tokens),) = await hub.embedder.embed_spans_and_tokens([bead_text(props)], [[]], STOPWORDS)  # type: ignore[attr-defined]
    assert stored is not None and stored.shape == tokens.shape
    assert 4 <= len(tokens) <= 12  # the words that say something: no "I", "to", "the", no punctuation
    assert (np.sign(stored) == np.sign(tokens)).mean() > 0.97  # batch-dependent rounding of int8 activations


async def test_a_long_bead_keeps_the_signs_of_its_first_words(world: World, hub: HubContext) -> None:
    words = " ".join(f"topic{i} detail" for i in range(400))
    bead = await world.bead(Visibility.GROUP, "Notes", content=words)
    stored = await signs_of(hub, bead.bead_id, f"group:{world.group_id}")
    ((_, tokens),) = await hub.embedder.embed_spans_and_tokens(  # type: ignore[attr-defined]
        [bead_text({"title": "Notes", "content": words})], [[]], STOPWORDS)
    assert len(tokens) > SIGNS_KEPT
    assert stored is not None and stored.shape == (SIGNS_KEPT, 384)
    assert (np.sign(stored) == np.sign(tokens[:SIGNS_KEPT])).mean() > 0.97  # int8 activations round per batch


async def test_signs_follow_the_bead_through_updates_moves_and_removal(world: World, hub: HubContext) -> None:
    group_scope, private_scope = f"group:{world.group_id}", f"private:{world.creator.ai_id}"
    bead = await world.bead(Visibility.GROUP, f"Runbook {secrets.token_hex(3)} for the payment gateway")
    first = await signs_of(hub, bead.bead_id, group_scope)
    assert first is not None
    await world.creator.update_bead(bead.bead_id, content="Restart the ledger workers, then replay the queue.")
    changed = await signs_of(hub, bead.bead_id, group_scope)
    assert changed is not None and len(changed) > len(first)
    await world.creator.update_bead(bead.bead_id, visibility="private")
    assert await signs_of(hub, bead.bead_id, group_scope) is None
    moved = await signs_of(hub, bead.bead_id, private_scope)
    assert moved is not None and np.array_equal(moved, changed)
    await world.creator.delete_bead(bead.bead_id)
    assert await signs_of(hub, bead.bead_id, private_scope) is None
    doomed = await world.bead(Visibility.GROUP, "A secret the team must not keep")
    assert await signs_of(hub, doomed.bead_id, group_scope) is not None
    await world.ops.forget_bead(doomed.bead_id, "leaked")
    assert await signs_of(hub, doomed.bead_id, group_scope) is None


async def test_a_hybrid_search_weighs_the_query_words_matched_one_by_one(world: World, hub: HubContext) -> None:
    tag = secrets.token_hex(3)
    beads = [
        await world.bead(Visibility.GROUP, f"{tag} The sanctuary feeds its hedgehogs mealworms on Thursdays."),
        await world.bead(Visibility.GROUP, f"{tag} Our team retro is on Thursday afternoons."),
        await world.bead(Visibility.GROUP, f"{tag} Hedgehogs hibernate from November to March."),
    ]
    query = f"{tag} what do the hedgehogs at the sanctuary eat?"
    found = await world.member.search_beads(query, limit=3, filters={"group_id": world.group_id})
    assert {h.bead.bead_id for h in found.hits} == {b.bead_id for b in beads}
    for hit in found.hits:
        assert [s.rank for s in hit.explanation.sources if s.list == "tokens"] != []
    assert found.hits[0].bead.bead_id == beads[0].bead_id
    # The plain lists stay plain.
    for mode in ("keyword", "vector"):
        plain = await world.member.search_beads(query, limit=3, mode=mode, filters={"group_id": world.group_id})
        assert plain.hits and all(s.list != "tokens" for h in plain.hits for s in h.explanation.sources)


async def test_signs_are_read_only_from_the_caller_s_scopes(world: World, hub: HubContext) -> None:
    private = await world.bead(Visibility.PRIVATE, "The creator's own note about hedgehogs")
    scope = scope_of({"visibility": "private", "created_by": world.creator.ai_id})
    assert await signs_of(hub, private.bead_id, scope) is not None
    outsider_scopes = [f"private:{world.outsider.ai_id}", "global"]
    assert await hub.vectors.token_signs(outsider_scopes, [private.bead_id]) == {}


async def test_beads_embedded_before_get_their_signs_at_start_up(world: World, hub: HubContext) -> None:
    """A hub that starts with late interaction on gives the beads embedded without it their signs (as
    ``repair_token_signs`` does at start-up), from the graph as they are now, and leaves the others' alone."""
    scope = f"group:{world.group_id}"
    older = [await world.bead(Visibility.GROUP, f"Deploy note {i}: the canary runs for an hour") for i in range(3)]
    kept = await signs_of(hub, older[0].bead_id, scope)
    await hub.redis.hdel(hub.vectors.signs_key(scope), older[1].bead_id, older[2].bead_id)
    assert (await hub.vectors.beads_without_signs()).get(scope) == sorted(b.bead_id for b in older[1:])
    assert await repair_token_signs(hub) >= 2
    assert scope not in await hub.vectors.beads_without_signs()
    for bead in older[1:]:
        again = await signs_of(hub, bead.bead_id, scope)
        assert again is not None and kept is not None and again.shape == kept.shape
    assert np.array_equal(await signs_of(hub, older[0].bead_id, scope), kept)


async def test_signs_repaired_for_a_bead_no_longer_in_the_scope_are_not_kept(world: World, hub: HubContext) -> None:
    bead = await world.bead(Visibility.GROUP, "Moved away while its signs were being computed")
    await world.creator.update_bead(bead.bead_id, visibility="private")
    await handed_off_work_done(hub)
    group_scope = f"group:{world.group_id}"
    await hub.vectors.add_missing_signs(group_scope, {bead.bead_id: np.ones((3, 384), dtype=np.float32)})
    assert await signs_of(hub, bead.bead_id, group_scope) is None


async def test_a_bead_without_a_word_keeps_empty_signs_and_is_not_repaired_again(world: World, hub: HubContext) -> None:
    bead = await world.bead(Visibility.GROUP, "?!")
    scope = f"group:{world.group_id}"
    await handed_off_work_done(hub)
    assert await hub.redis.hget(hub.vectors.signs_key(scope), bead.bead_id) == b""
    assert bead.bead_id not in (await hub.vectors.beads_without_signs()).get(scope, [])
    assert await hub.vectors.token_signs([scope], [bead.bead_id]) == {}
