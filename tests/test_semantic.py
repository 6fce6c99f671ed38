"""Semantic and graph recall through the bus: vector scopes, hybrid ranking, find_similar, why,
token budgets, automatic links, near-duplicates, and keeping vectors in step with the graph."""

from __future__ import annotations

import numpy as np
import pytest
from recall_hub.context import HubContext
from recall_hub.embedders import HashEmbedder
from recall_hub.ops.indexing import index_beads, reindex, repair
from recall_hub.retrieval.freshness import handed_off_work_done
from recall_hub.retrieval.ranking import KEYWORD_MIN_SPREAD, PRIOR_FACTOR, fuse, prior
from recall_hub.store.vectors import scope_of
from recall_hub.timeutil import now_ms
from recall_schemas import (
    ContextBlock,
    CreateBead,
    DeduplicateBeads,
    DuplicateReport,
    FindSimilar,
    GetContext,
    NotFound,
    SearchResult,
    Why,
    WhyResult,
    new_id,
)

from tests.conftest import new_ai


async def _similar(client, bead_id: str, threshold: float = 0.0, limit: int = 10) -> SearchResult:
    return await client.call(
        "find_similar", FindSimilar(bead_id=bead_id, threshold=threshold, limit=limit), SearchResult
    )


async def _bulk_private_beads(ctx: HubContext, owner: str, texts: list[str], base: np.ndarray) -> None:
    """Store many private beads of ``owner`` directly (one UNWIND), with vectors close to ``base``."""
    now = now_ms()
    rows = [
        {
            "bead_id": new_id("b"),
            "title": text,
            "content": text,
            "content_hash": new_id("h"),
            "bead_type": "fact",
            "importance": 5,
            "tags": [],
            "created_at": now,
            "updated_at": now,
            "accessed_at": now,
            "created_by": owner,
            "visibility": "private",
            "metadata": "{}",
            "status": "active",
            "provenance": "authored",
            "corroborated_by": [],
        }
        for text in texts
    ]
    await ctx.graph.query(
        "MERGE (a:AI {ai_id: $owner}) WITH a UNWIND $rows AS row CREATE (b:Bead) SET b = row, b.idem = row.bead_id",
        {"owner": owner, "rows": rows},
    )
    rng = np.random.default_rng(7)
    noisy = base + rng.normal(0, 0.01, size=(len(rows), base.shape[0])).astype(np.float32)
    noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
    await index_beads(ctx, rows, noisy)


async def test_thousands_of_invisible_near_duplicates_never_starve_the_visible_bead(connect, hub: HubContext):
    me, other = await connect(), new_ai()
    text = "rotate the payments signing key every ninety days"
    base = (await hub.embedder.embed([text]))[0]
    await _bulk_private_beads(hub, other, [f"{text} (copy {i})" for i in range(2000)], base)
    mine = await me.create_bead(
        "key rotation policy", f"{text}, says the policy", visibility="private"
    )  # the query's every word: no other test's visible bead can stand nearer it, only the hidden copies
    await handed_off_work_done(hub)  # its vector, read from the store below (it follows the create's reply)

    # The hidden copies really are closer to the query than the visible bead ...
    hidden = await hub.vectors.search([f"private:{other}"], base, 5)
    own = await hub.vectors.search([f"private:{me.ai_id}"], base, 1)
    assert len(hidden) == 5 and own[0].bead_id == mine.bead_id
    assert min(h.similarity for h in hidden) > own[0].similarity
    # ... yet the caller's top result is its own bead, in every mode.
    for mode in ("vector", "hybrid", "keyword"):
        result = await me.search_beads(text, limit=1, mode=mode)
        assert [h.bead.bead_id for h in result.hits] == [mine.bead_id], mode


async def test_hybrid_results_explain_their_rank(connect):
    me = await connect()
    tag = new_id("t")[2:]
    a = await me.create_bead("Postgres failover runbook", "promote the replica, then repoint pgbouncer", tags=[tag])
    await me.create_bead("Team lunch", "pizza on friday", tags=[tag])
    result = await me.search_beads("how do we fail over the database", filters={"tags": [tag]})
    top = result.hits[0]
    assert top.bead.bead_id == a.bead_id
    assert {s.list for s in top.explanation.sources} <= {"keyword", "vector", "tokens"} and top.explanation.sources
    assert top.score == pytest.approx(top.explanation.relevance * top.explanation.prior)
    keyword_only = await me.search_beads("failover runbook", mode="keyword", filters={"tags": [tag]})
    assert all(s.list == "keyword" for h in keyword_only.hits for s in h.explanation.sources)
    vector_only = await me.search_beads("failover runbook", mode="vector", filters={"tags": [tag]})
    assert all(s.list == "vector" for h in vector_only.hits for s in h.explanation.sources)


async def test_hybrid_search_admits_the_session_neighbour_of_a_best_hit_if_the_caller_may_see_it(connect):
    """The answer to a question often repeats none of its words; it follows the question in its session.
    Hybrid search admits the session neighbours of its best candidates, never one the caller may not see."""
    ops, mate = await connect(new_ai("o")), await connect()
    group = await ops.create_group("neighbours")
    await ops.add_member(group.group_id, mate.ai_id)
    word, session = f"zq{new_id('t')[2:]}", new_id("s")
    question = await ops.create_bead(
        f"{word} {word} where do the {word} nightly builds run", session_id=session,
        visibility="group", group_id=group.group_id,
    )
    answer = await ops.create_bead("on the spare machine in the basement", session_id=session, visibility="private")
    # Enough beads closer to the query than the answer that it is no candidate of either list by itself.
    for i in range(110):
        await ops.create_bead(f"{word} note {i}", visibility="private")
    keyword = await ops.search_beads(f"{word} nightly builds", mode="keyword", limit=50)
    assert answer.bead_id not in [h.bead.bead_id for h in keyword.hits]
    hybrid = await ops.search_beads(f"{word} nightly builds", limit=50)
    hits = {h.bead.bead_id: h for h in hybrid.hits}
    assert question.bead_id in hits and answer.bead_id in hits
    admitted = hits[answer.bead_id].explanation
    # In neither list: only the query's words matched one by one against its own (late interaction) weigh it.
    assert {s.list for s in admitted.sources} <= {"tokens"} and any(question.bead_id in n for n in admitted.notes)
    # The groupmate finds the question; the creator's private answer next to it is not admitted for it.
    theirs = await mate.search_beads(f"{word} nightly builds", limit=50)
    assert question.bead_id in [h.bead.bead_id for h in theirs.hits]
    assert answer.bead_id not in [h.bead.bead_id for h in theirs.hits]


async def test_superseded_best_matches_make_room_for_the_next_ones(connect):
    """Whether a bead is superseded is learnt when it is read; when the best matches all turn out to be,
    the beads after them are read too, so the answer is the same as if every candidate had been weighed."""
    me = await connect()
    tag = new_id("t")[2:]
    # Equal text; the stale ones weigh more (importance 7) until they turn out to be superseded.
    stale = [
        await me.create_bead(f"Rollback plan old{i}", "rollback steps", tags=[tag], importance=7) for i in range(3)
    ]
    newer = await me.create_bead("Runbook", "see the plans", tags=[tag])
    for old in stale:
        await me.add_relationship(newer.bead_id, old.bead_id, "UPDATES")
    fresh = [await me.create_bead(f"Rollback plan new{i}", "rollback steps", tags=[tag]) for i in range(3)]
    top3 = await me.search_beads("rollback plan", mode="keyword", filters={"tags": [tag]}, limit=3)
    everything = await me.search_beads("rollback plan", mode="keyword", filters={"tags": [tag]}, limit=20)
    assert [h.bead.bead_id for h in top3.hits] == [h.bead.bead_id for h in everything.hits][:3]
    assert {h.bead.bead_id for h in top3.hits} == {b.bead_id for b in fresh}
    demoted = [h for h in everything.hits if h.bead.bead_id in {b.bead_id for b in stale}]
    assert len(demoted) == 3 and all(any("superseded" in n for n in h.explanation.notes) for h in demoted)


async def test_archived_and_superseded_beads_are_demoted_not_hidden(connect):
    me = await connect()
    tag = new_id("t")[2:]
    old = await me.create_bead("Deploy window", "deploys happen on tuesday mornings", tags=[tag])
    new = await me.create_bead("Deploy window", "deploys happen on tuesday mornings", tags=[tag])
    await me.add_relationship(new.bead_id, old.bead_id, "UPDATES", replaces=True)
    result = await me.search_beads("when do deploys happen", filters={"tags": [tag]})
    ids = [h.bead.bead_id for h in result.hits]
    assert ids == [new.bead_id, old.bead_id]
    assert any("superseded" in n for n in result.hits[1].explanation.notes)
    await me.update_bead(new.bead_id, status="archived")
    result = await me.search_beads("when do deploys happen", filters={"tags": [tag]})
    assert {h.bead.bead_id for h in result.hits} == {new.bead_id, old.bead_id}
    only_active = await me.search_beads("when do deploys happen", filters={"tags": [tag], "status": "active"})
    assert [h.bead.bead_id for h in only_active.hits] == [old.bead_id]


def test_each_list_counts_its_best_one_and_its_worst_nothing_whatever_its_scale() -> None:
    bm25 = [("a", 24.0), ("b", 15.0), ("c", 6.0)]
    cosine = [("c", 0.71), ("d", 0.62), ("a", 0.53)]
    fused = fuse({"keyword": bm25, "vector": cosine}, {"keyword": 0.5, "vector": 0.5})
    assert fused["a"].relevance == pytest.approx(0.5 * 1.0 + 0.5 * 0.0)
    assert fused["b"].relevance == pytest.approx(0.5 * 0.5)
    assert fused["c"].relevance == pytest.approx(0.5 * 0.0 + 0.5 * 1.0)
    assert fused["d"].relevance == pytest.approx(0.5 * 0.5)
    # Scaled BM25 (x100) ranks and fuses the same: only the spread of a list's scores counts.
    scaled = fuse({"keyword": [(b, 100 * s) for b, s in bm25], "vector": cosine}, {"keyword": 0.5, "vector": 0.5})
    assert {b: e.relevance for b, e in scaled.items()} == pytest.approx({b: e.relevance for b, e in fused.items()})


def test_two_beads_that_match_about_equally_stay_about_equal() -> None:
    keyword_only = {"keyword": 1.0, "vector": 0.0}  # fused with an empty vector list
    fused = fuse({"keyword": [("a", 10.0), ("b", 9.5)], "vector": []}, keyword_only)
    assert fused["a"].relevance == 1.0
    assert fused["b"].relevance == pytest.approx(1.0 - 0.5 / (KEYWORD_MIN_SPREAD * 10.0))
    assert fuse({"keyword": [("a", 3.0), ("b", 3.0)], "vector": []}, keyword_only)["b"].relevance == 1.0


def test_keyword_search_alone_scores_each_bead_by_its_share_of_the_best() -> None:
    fused = fuse({"keyword": [("a", 24.0), ("b", 15.0), ("c", 6.0)]})
    assert [fused[b].relevance for b in "abc"] == pytest.approx([1.0, 0.625, 0.25])


def test_priors_are_bounded_jointly() -> None:
    now = now_ms()
    best = {"importance": 10, "created_at": now, "provenance": "observed", "status": "active"}
    worst = {"importance": 0, "created_at": now - 10 * 365 * 86_400_000, "provenance": "derived", "status": "archived"}
    high, _ = prior(best, superseded=False, now_ms=now)
    low, notes = prior(worst, superseded=True, now_ms=now)
    assert 1.0 < high <= PRIOR_FACTOR
    assert 1 / PRIOR_FACTOR <= low < 1.0
    assert notes


async def test_find_similar_respects_threshold_and_visibility(connect):
    me, other = await connect(), await connect()
    a = await me.create_bead("Cache invalidation bug", "stale entries after the TTL change in the session cache")
    b = await me.create_bead("Session cache TTL", "the session cache TTL change left stale entries behind")
    hidden = await other.create_bead("Session cache TTL", "the session cache TTL change left stale entries behind")
    c = await me.create_bead("Quarterly planning", "OKRs for the next quarter")
    result = await _similar(me, a.bead_id, threshold=0.5)
    ids = [h.bead.bead_id for h in result.hits]
    assert ids[0] == b.bead_id
    assert hidden.bead_id not in ids and c.bead_id not in ids
    assert all(h.score >= 0.5 for h in result.hits)
    with pytest.raises(NotFound):
        await _similar(me, hidden.bead_id)


async def test_auto_links_follow_the_session_and_relate_similar_beads(connect):
    me = await connect()
    session = new_id("s")
    first = await me.create_bead("Flaky test in checkout", "test_checkout fails one run in ten", session_id=session)
    second = await me.create_bead(
        "Flaky test in checkout fixed",
        "test_checkout fails one run in ten: fixed the race",
        session_id=session,
        idempotency_key="fix-1",
    )
    again = await me.create_bead(
        "Flaky test in checkout fixed",
        "test_checkout fails one run in ten: fixed the race",
        session_id=session,
        idempotency_key="fix-1",
    )
    assert again.bead_id == second.bead_id
    rels = await me.get_relationships(second.bead_id)
    follows = [r for r in rels if r.rel_type == "FOLLOWS_FROM"]
    related = [r for r in rels if r.rel_type == "RELATED_TO"]
    assert [(r.from_id, r.to_id) for r in follows] == [(second.bead_id, first.bead_id)]
    assert [(r.from_id, r.to_id) for r in related] == [(second.bead_id, first.bead_id)]
    assert related[0].properties.similarity is not None and related[0].properties.similarity >= 0.75


async def test_a_batch_links_its_beads_as_creates_one_at_a_time_would(connect):
    me = await connect()
    session = new_id("s")
    first = await me.create_bead("Flaky test in checkout", "test_checkout fails one run in ten", session_id=session)
    fixed, disk = await me.create_beads([
        CreateBead(title="Flaky test in checkout fixed", content="test_checkout fails one run in ten: fixed the race",
                   session_id=session),
        CreateBead(title="Disk quota on the build host", content="the build host ran out of disk space at noon",
                   session_id=session),
    ])
    assert fixed.bead_id is not None and disk.bead_id is not None

    async def links(bead_id: str, rel_type: str) -> set[tuple[str, str]]:
        return {(r.from_id, r.to_id) for r in await me.get_relationships(bead_id) if r.rel_type == rel_type}

    assert await links(fixed.bead_id, "FOLLOWS_FROM") == {(disk.bead_id, fixed.bead_id), (fixed.bead_id, first.bead_id)}
    assert await links(fixed.bead_id, "RELATED_TO") == {(fixed.bead_id, first.bead_id)}
    assert await links(disk.bead_id, "RELATED_TO") == set()


async def test_why_returns_the_connected_subgraph_inside_the_callers_view(connect):
    me, other = await connect(), await connect()
    incident = await me.create_bead(
        "Outage: queue backlog", "consumers stalled for 40 minutes", bead_type="observation"
    )
    cause = await me.create_bead("Root cause", "a poison message blocked the partition", bead_type="finding")
    fix = await me.create_bead("Dead-letter queue added", "poison messages now go to a DLQ", bead_type="decision")
    secret = await other.create_bead("Other team's note", "unrelated private", visibility="private")
    await me.add_relationship(cause.bead_id, incident.bead_id, "RELATED_TO")
    await me.add_relationship(fix.bead_id, cause.bead_id, "FOLLOWS_FROM")
    result = await me.call("why", Why(query="queue backlog outage", hops=2, seeds=1), WhyResult)
    assert result.seeds == [incident.bead_id]
    by_id = {n.bead.bead_id: n.depth for n in result.graph.nodes}
    assert by_id == {incident.bead_id: 0, cause.bead_id: 1, fix.bead_id: 2}
    assert secret.bead_id not in by_id
    assert {(e.from_id, e.to_id, e.rel_type.value) for e in result.graph.edges} >= {
        (cause.bead_id, incident.bead_id, "RELATED_TO"),
        (fix.bead_id, cause.bead_id, "FOLLOWS_FROM"),
    }
    shallow = await me.call(
        "why", Why(query="queue backlog outage", hops=1, seeds=1, rel_types=["RELATED_TO"]), WhyResult
    )
    assert {n.bead.bead_id for n in shallow.graph.nodes} == {incident.bead_id, cause.bead_id}


async def test_context_fits_the_budget_and_caps_siblings(connect):
    me = await connect()
    tag = new_id("t")[2:]
    for part in range(6):
        await me.create_bead(
            f"Design doc part {part}",
            "the ingestion pipeline batches writes " * 10,
            metadata={"source": "doc-ingest"},
            tags=[tag],
        )
    other = await me.create_bead("Ingestion decision", "we batch ingestion writes by 64", tags=[tag])
    block = await me.call(
        "context",
        GetContext(query="ingestion pipeline writes", max_tokens=400, filters={"tags": [tag]}, max_per_source=2),
        ContextBlock,
    )
    assert block.tokens <= 400
    assert other.bead_id in block.bead_ids
    assert len([b for b in block.bead_ids if b != other.bead_id]) <= 2
    assert block.dropped >= 4
    assert all(f"| {b}]" in block.text for b in block.bead_ids)
    tiny = await me.search_beads("ingestion pipeline writes", max_tokens=40, filters={"tags": [tag]})
    assert tiny.tokens is not None and tiny.tokens <= 40


async def test_near_duplicates_across_agents_merge_and_keep_every_author(connect):
    ops, alice, bob = await connect(new_ai("o")), await connect(), await connect()
    group = await ops.create_group("dedup")
    for member in (alice, bob):
        await ops.add_member(group.group_id, member.ai_id)
    a = await alice.create_bead(
        "Redis needs vm.overcommit",
        "Set vm.overcommit_memory=1 or background saves can fail",
        group_id=group.group_id,
        visibility="group",
    )
    b = await bob.create_bead(
        "Redis needs vm.overcommit",
        "Set vm.overcommit_memory = 1, or background saves may fail",
        group_id=group.group_id,
        visibility="group",
    )
    c = await bob.create_bead("Unrelated", "The office plants need water", group_id=group.group_id, visibility="group")
    exact_only = await ops.deduplicate_beads(group_id=group.group_id)
    assert exact_only.clusters == []
    report = await ops.call(
        "deduplicate_beads",
        DeduplicateBeads(group_id=group.group_id, similarity_threshold=0.9, merge=True),
        DuplicateReport,
    )
    assert [cl.bead_ids for cl in report.clusters] == [[a.bead_id, b.bead_id]]
    cluster = report.clusters[0]
    assert cluster.kind == "near" and cluster.merged_into == a.bead_id
    assert cluster.authors == sorted([alice.ai_id, bob.ai_id])
    keeper = await ops.get_bead(a.bead_id)
    assert keeper.corroborated_by == [bob.ai_id]
    assert (await ops.get_bead(b.bead_id)).status.value == "archived"
    assert (await ops.get_bead(c.bead_id)).status.value == "active"


async def test_a_bead_whose_vector_write_failed_is_repaired(connect, hub: HubContext):
    me = await connect()
    tag = new_id("t")[2:]  # other tests' visible beads may stand nearer "repair me" under the hashing embedder
    bead = await me.create_bead("Repair me", "a bead whose vector went missing", visibility="private", tags=[tag])
    props = {"bead_id": bead.bead_id, "visibility": "private", "created_by": me.ai_id}
    await handed_off_work_done(hub)  # the create's own work done (RECALL_CREATE_SETTLE=background), then undone
    await hub.vectors.remove(bead.bead_id, scope_of(props))
    await hub.graph.query("MATCH (b:Bead {bead_id: $id}) SET b.vec_model = NULL", {"id": bead.bead_id})
    mine = {"tags": [tag]}
    assert (await me.search_beads("repair me", mode="vector", filters=mine)).hits == []
    assert await repair(hub) >= 1
    hits = (await me.search_beads("repair me", mode="vector", filters=mine)).hits
    assert [h.bead.bead_id for h in hits] == [bead.bead_id]


async def test_switching_model_reindexes_and_never_mixes(settings, hub: HubContext):
    from recall_hub.ops.beads import create_bead
    from recall_hub.retrieval.search import search_beads
    from recall_schemas import SearchBeads

    isolated = settings.model_copy(update={"graph_name": f"model_switch_{new_id('x')[2:]}"})
    first = await HubContext.connect(isolated, embedder=HashEmbedder(dim=64))
    caller = new_ai()
    try:
        made = [
            await create_bead(first, caller, CreateBead(title=t, visibility="private"))
            for t in ("alpha release notes", "beta rollout plan", "gamma incident review")
        ]
        await handed_off_work_done(first)  # their vectors (they follow the creates' replies)
        first_keys = [k async for k in first.vectors.redis.scan_iter(match=first.vectors.all_keys_pattern())]
        assert first_keys
    finally:
        await first.aclose()
    second = await HubContext.connect(isolated, embedder=HashEmbedder(dim=128))
    try:
        assert second.vectors.model_id != first.vectors.model_id
        progress: list[tuple[int, int]] = []
        assert await reindex(second, progress=lambda done, total: progress.append((done, total))) == 3
        assert progress[-1] == (3, 3)
        rows = await second.graph.ro_query("MATCH (b:Bead) RETURN DISTINCT b.vec_model")
        assert rows == [[second.vectors.model_id]]
        assert await second.vectors.redis.exists(*first_keys) == 0
        result = await search_beads(second, caller, SearchBeads(query="beta rollout plan", mode="vector", limit=1))
        assert result.hits[0].bead.bead_id == made[1].bead_id
    finally:
        await second.graph.graph.delete()
        await second.aclose()


async def test_rank_fusion_is_available_and_explained_by_rank_positions(connect):
    me = await connect()
    tag = new_id("t")[2:]
    target = await me.create_bead("Kafka consumer lag alert", "alert when consumer lag exceeds 10k", tags=[tag])
    await me.create_bead("Gardening", "tomatoes need sun", tags=[tag])
    result = await me.search_beads("consumer lag alert", filters={"tags": [tag]}, fusion="rrf", use_priors=False)
    top = result.hits[0]
    assert top.bead.bead_id == target.bead_id
    expected = sum(1.0 / (60 + s.rank) for s in top.explanation.sources)
    assert top.explanation.relevance == pytest.approx(expected)
