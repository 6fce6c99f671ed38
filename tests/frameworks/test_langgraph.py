"""RecallStore: LangGraph's store interface on a real hub, with the hub deciding who reads what.

A namespace's first label is its scope — ``("private", ...)``, ``("group", <group_id>, ...)``, ``("global", ...)``
— and every item is a bead of that scope, so one identity's store never shows what the hub would not show it.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from pathlib import Path
from typing import Any, TypedDict

import pytest
from conftest import ClientFactory, new_ai, roster_bundle, team
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore, GetOp, InvalidNamespaceError, Item, PutOp, SearchItem, SearchOp
from recall_client import Forbidden, RecallClient
from recall_client.integrations.langgraph import RecallStore, item_tag, namespace_tag
from recall_hub.service.endpoints import HubService
from recall_hub.tooling.auth import AuthBundle, format_creds, read_creds
from recall_hub.tooling.stack import EmbeddedStack
from recall_schemas import Unauthorized

pytestmark = pytest.mark.timeout(180)


def unique(label: str) -> str:
    return f"{label}-{secrets.token_hex(4)}"


# --- every operation ---------------------------------------------------------------------------------


async def test_put_get_update_and_delete_round_trip_an_item_as_a_bead(connect: ClientFactory) -> None:
    client = await connect()
    store = RecallStore(client)
    ns = ("private", "profile")

    await store.aput(ns, "diet", {"text": "Vegetarian, no mushrooms", "since": 2019})
    first = await store.aget(ns, "diet")
    assert isinstance(first, Item) and first.value == {"text": "Vegetarian, no mushrooms", "since": 2019}
    assert (first.namespace, first.key) == (ns, "diet")

    await store.aput(ns, "diet", {"text": "Vegan", "since": 2024})
    second = await store.aget(ns, "diet")
    assert second is not None and second.value == {"text": "Vegan", "since": 2024}
    assert second.created_at == first.created_at and second.updated_at > first.updated_at

    # One bead per item, in the namespace's scope, holding the value as JSON under a readable title.
    (bead,) = await client.get_by_tag(item_tag(ns, "diet"))
    assert bead.visibility.value == "private" and bead.created_by == client.ai_id
    assert json.loads(bead.content) == {"text": "Vegan", "since": 2024}
    assert bead.title == "diet: Vegan 2024" and bead.metadata == {"namespace": list(ns), "key": "diet"}
    assert {namespace_tag(("private",)), namespace_tag(ns), "langgraph"} <= set(bead.tags)

    await store.adelete(ns, "diet")
    assert await store.aget(ns, "diet") is None
    assert await client.get_by_tag(item_tag(ns, "diet")) == []
    await store.adelete(ns, "diet")  # deleting what is gone changes nothing


async def test_search_by_meaning_ranks_the_items_under_a_prefix_with_the_hub_s_scores(connect: ClientFactory) -> None:
    store = RecallStore(await connect())
    decisions, chatter = ("private", "project", "decisions"), ("private", "project", "chatter")
    elsewhere = ("private", "elsewhere")
    await store.aput(decisions, "db", {"text": "We chose FalkorDB as the graph database for the memory hub"})
    await store.aput(decisions, "lang", {"text": "The services are written in Python 3.11"})
    await store.aput(chatter, "lunch", {"text": "Lunch is at noon in the canteen"})
    await store.aput(elsewhere, "db", {"text": "A graph database called Neo4j was rejected", "kind": "rejected"})

    hits = await store.asearch(("private", "project"), query="which graph database did we choose?", limit=3)
    assert all(isinstance(h, SearchItem) and isinstance(h.score, float) for h in hits)
    assert hits[0].key == "db" and hits[0].namespace == decisions
    assert {h.namespace for h in hits} <= {decisions, chatter}  # nothing from outside the prefix
    scores = [h.score or 0.0 for h in hits]
    assert scores == sorted(scores, reverse=True)

    assert [h.key for h in await store.asearch(decisions, query="graph database", limit=1)] == ["db"]
    rest = await store.asearch(("private", "project"), query="which graph database did we choose?", limit=2, offset=1)
    assert [h.key for h in rest] == [h.key for h in hits[1:3]]
    # A filter applies to what the search found: the matches that also have the value asked for.
    filtered = await store.asearch(("private",), query="graph database", filter={"kind": "rejected"})
    assert [(h.namespace, h.key) for h in filtered] == [(elsewhere, "db")]


async def test_search_without_a_query_filters_values_newest_first(connect: ClientFactory) -> None:
    store = RecallStore(await connect())
    ns = ("private", "restaurants")
    for key, value in [
        ("a", {"cuisine": "thai", "stars": 4, "where": {"city": "Lyon"}}),
        ("b", {"cuisine": "thai", "stars": 2, "where": {"city": "Paris"}}),
        ("c", {"cuisine": "french", "stars": 5, "where": {"city": "Lyon"}}),
        ("d", {"cuisine": "thai", "stars": 5, "where": {"city": "Lyon"}}),
    ]:
        await store.aput(ns, key, value)
    await store.aput(("private", "other"), "e", {"cuisine": "thai", "stars": 5})

    assert [i.key for i in await store.asearch(ns)] == ["d", "c", "b", "a"]
    assert all(i.score is None for i in await store.asearch(ns))
    assert [i.key for i in await store.asearch(ns, filter={"cuisine": "thai"})] == ["d", "b", "a"]
    assert [i.key for i in await store.asearch(ns, filter={"cuisine": "thai", "stars": {"$gte": 4}})] == ["d", "a"]
    assert [i.key for i in await store.asearch(ns, filter={"where": {"city": "Lyon"}, "stars": {"$ne": 5}})] == ["a"]
    assert [i.key for i in await store.asearch(ns, filter={"cuisine": "thai"}, limit=1, offset=1)] == ["b"]
    assert [i.key for i in await store.asearch(("private",), filter={"cuisine": "thai", "stars": 5})] == ["e", "d"]
    assert await store.asearch(ns, filter={"cuisine": "korean"}) == []


async def test_list_namespaces_matches_prefix_suffix_and_depth(connect: ClientFactory) -> None:
    store = RecallStore(await connect())
    for ns in [("private", "a", "x"), ("private", "a", "y"), ("private", "b"), ("private", "c", "y")]:
        await store.aput(ns, "k", {"n": 1})

    everything = [("private", "a", "x"), ("private", "a", "y"), ("private", "b"), ("private", "c", "y")]
    assert await store.alist_namespaces(prefix=("private",)) == everything
    assert await store.alist_namespaces(prefix=("private", "a")) == everything[:2]
    assert await store.alist_namespaces(prefix=("private",), suffix=("y",)) == [everything[1], everything[3]]
    assert await store.alist_namespaces(prefix=("private", "*", "y")) == [everything[1], everything[3]]
    assert await store.alist_namespaces(prefix=("private",), max_depth=2) == [
        ("private", "a"), ("private", "b"), ("private", "c")
    ]
    assert await store.alist_namespaces(prefix=("private",), limit=2, offset=1) == everything[1:3]


async def test_one_batch_runs_its_operations_in_order(connect: ClientFactory) -> None:
    store = RecallStore(await connect())
    ns = ("private", "batch")
    results = await store.abatch([
        GetOp(ns, "k"),
        PutOp(ns, "k", {"v": 1}),
        GetOp(ns, "k"),
        PutOp(ns, "k", {"v": 2}),
        SearchOp(ns),
        PutOp(ns, "k", None),
        GetOp(ns, "k"),
    ])
    assert results[0] is None and results[1] is None
    assert isinstance(results[2], Item) and results[2].value == {"v": 1}
    searched = results[4]
    assert isinstance(searched, list) and [i.value for i in searched if isinstance(i, Item)] == [{"v": 2}]
    assert results[6] is None


async def test_index_fields_become_the_title_search_reads_first(connect: ClientFactory) -> None:
    client = await connect()
    store = RecallStore(client)
    ns = ("private", "docs")
    await store.aput(ns, "r1", {"summary": "Quarterly revenue grew", "body": {"raw": "x" * 50}}, index=["summary"])
    await store.aput(ns, "r2", {"summary": "Not indexed"}, index=False)
    titles = {b.metadata["key"]: b.title for b in await client.get_by_tag(namespace_tag(ns))}
    assert titles == {"r1": "r1: Quarterly revenue grew", "r2": "r2"}


# --- the sync interface ------------------------------------------------------------------------------


async def test_sync_methods_work_from_other_threads_and_refuse_the_client_s_own_loop(connect: ClientFactory) -> None:
    store = RecallStore(await connect())
    ns = ("private", "sync")
    await asyncio.to_thread(store.put, ns, "k", {"text": "written from a worker thread"})
    item = await asyncio.to_thread(store.get, ns, "k")
    assert item is not None and item.value == {"text": "written from a worker thread"}
    assert [i.key for i in await asyncio.to_thread(store.search, ns)] == ["k"]
    assert await asyncio.to_thread(store.list_namespaces, prefix=("private",)) == [ns]
    await asyncio.to_thread(store.delete, ns, "k")
    assert await store.aget(ns, "k") is None

    with pytest.raises(asyncio.InvalidStateError, match="use the async methods"):
        store.get(ns, "k")  # on the loop the client runs on: it would wait for itself


# --- what the store refuses --------------------------------------------------------------------------


async def test_a_namespace_naming_no_hub_scope_is_refused(connect: ClientFactory) -> None:
    store = RecallStore(await connect())
    for bad in [("memories", "user-1"), ("group",), ("group", "team-a", "facts"), ("private", "a.b")]:
        with pytest.raises(InvalidNamespaceError):
            await store.aput(bad, "k", {"v": 1})
    with pytest.raises(ValueError, match="'private', 'global' or"):
        await store.asearch(("memories",))
    assert not store.supports_ttl
    with pytest.raises(NotImplementedError):
        await store.aput(("private", "ttl"), "k", {"v": 1}, ttl=5)


# --- who sees what -----------------------------------------------------------------------------------


async def test_one_agent_cannot_read_another_agent_s_private_items(connect: ClientFactory) -> None:
    alice, bob = RecallStore(await connect()), RecallStore(await connect())
    ns = ("private", "notes")
    await alice.aput(ns, "plan", {"text": "Alice's secret launch plan for Friday"})

    assert await bob.aget(ns, "plan") is None
    assert await bob.asearch(ns) == []
    assert await bob.asearch(("private",), query="secret launch plan Friday") == []
    assert ns not in await bob.alist_namespaces()

    # The same namespace and key are Bob's own item, not Alice's: each keeps its own.
    await bob.aput(ns, "plan", {"text": "Bob's plan"})
    mine, hers = await bob.aget(ns, "plan"), await alice.aget(ns, "plan")
    assert mine is not None and mine.value == {"text": "Bob's plan"}
    assert hers is not None and hers.value == {"text": "Alice's secret launch plan for Friday"}


async def test_group_items_are_shared_with_the_group_s_current_members(connect: ClientFactory) -> None:
    ops, group_id, (alice_client, bob_client) = await team(connect)
    alice, bob, outsider = RecallStore(alice_client), RecallStore(bob_client), RecallStore(await connect())
    ns = ("group", group_id, "decisions")
    await alice.aput(ns, "db", {"text": "We store the team's memory in FalkorDB"})

    item = await bob.aget(ns, "db")
    assert item is not None and item.value == {"text": "We store the team's memory in FalkorDB"}
    bob_client.read_after(alice_client.index_position)  # Alice told Bob she wrote: his searches wait for it
    assert [h.key for h in await bob.asearch(("group", group_id), query="where is the team memory stored?")] == ["db"]
    assert await bob.alist_namespaces(prefix=("group", group_id)) == [ns]

    assert await outsider.aget(ns, "db") is None
    assert await outsider.asearch(("group",), query="team memory FalkorDB") == []
    with pytest.raises(Forbidden):  # only the bead's creator (or the group's ops) may change it
        await bob.aput(ns, "db", {"text": "overwritten"})
    with pytest.raises(Forbidden):
        await bob.adelete(ns, "db")

    await ops.remove_member(group_id, bob_client.ai_id)
    assert await bob.aget(ns, "db") is None  # a former member reads nothing of the group
    ops_store = RecallStore(ops)
    await ops_store.aput(ns, "db", {"text": "Moved to the new cluster"})  # the group's ops may
    after = await alice.aget(ns, "db")
    assert after is not None and after.value == {"text": "Moved to the new cluster"}


async def test_global_items_are_read_by_everyone_and_changed_by_their_writer(connect: ClientFactory) -> None:
    writer, reader = RecallStore(await connect()), RecallStore(await connect())
    ns = ("global", unique("handbook"))
    await writer.aput(ns, "hours", {"text": "Office hours are 9 to 5"})
    item = await reader.aget(ns, "hours")
    assert item is not None and item.value == {"text": "Office hours are 9 to 5"}
    with pytest.raises(Forbidden):
        await reader.aput(ns, "hours", {"text": "Always open"})


async def test_a_bead_claiming_an_item_of_another_scope_is_not_that_item(connect: ClientFactory) -> None:
    _, group_id, (member_client,) = await team(connect, 1)
    member, forger = RecallStore(member_client), await connect()
    ns = ("group", group_id, "config")
    await member.aput(ns, "limits", {"max": 10})
    # Anyone may write tags and metadata: a global bead dressed as the group's item.
    await forger.create_bead(
        "limits: forged", json.dumps({"max": 1000}), visibility="global",
        tags=[item_tag(ns, "limits"), namespace_tag(("group",)), namespace_tag(("group", group_id)),
              namespace_tag(ns), "langgraph"],
        metadata={"namespace": list(ns), "key": "limits"},
    )
    item = await member.aget(ns, "limits")
    assert item is not None and item.value == {"max": 10}
    assert [i.value for i in await member.asearch(ns)] == [{"max": 10}]


# --- refused credentials -----------------------------------------------------------------------------

OPS, ALICE, BOB = new_ai("o"), new_ai(), new_ai()


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> AuthBundle:
    return roster_bundle(tmp_path_factory.mktemp("langgraph-secure"), [OPS], [ALICE, BOB])


async def test_refused_credentials_fail_the_store_s_first_call_clearly(
    secure_stack: EmbeddedStack, secure_hub: HubService, bundle: AuthBundle, tmp_path: Path
) -> None:
    url = secure_stack.nats_url
    alice_client = RecallClient(ALICE, url, creds=str(bundle.creds[ALICE]))
    bob_client = RecallClient(BOB, url, creds=str(bundle.creds[BOB]))
    try:
        # With their own credentials, the store connects its client and the hub keeps Alice's items hers.
        alice, bob = RecallStore(alice_client), RecallStore(bob_client)
        await alice.aput(("private", "keys"), "door", {"code": "1234"})
        assert (await alice.aget(("private", "keys"), "door")) is not None
        assert await bob.aget(("private", "keys"), "door") is None

        # Bob's credentials presented as Alice: refused before anything is sent, naming whose they are.
        with pytest.raises(Unauthorized, match=BOB):
            await RecallStore(RecallClient(ALICE, url, creds=str(bundle.creds[BOB]))).aget(("private", "keys"), "door")
        # Alice's JWT with a key the account never signed: the server refuses the connection.
        forged = tmp_path / "forged.creds"
        forged.write_text(format_creds(read_creds(bundle.creds[ALICE])[0], _new_user_seed()))
        with pytest.raises(Unauthorized, match="refused"):
            await RecallStore(RecallClient(ALICE, url, creds=str(forged))).aget(("private", "keys"), "door")
    finally:
        await alice_client.close()
        await bob_client.close()


def _new_user_seed() -> str:
    import nkeys

    return bytes(nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_USER)).decode()


# --- a graph end to end ------------------------------------------------------------------------------


class TeamState(TypedDict, total=False):
    topic: str
    decision: str
    found: list[str]
    private_note: str


async def test_a_compiled_graph_s_nodes_share_memory_through_the_injected_store(connect: ClientFactory) -> None:
    _, group_id, (planner_client, coder_client) = await team(connect)
    shared = ("group", group_id, "decisions")

    async def decide(state: TeamState, *, store: BaseStore) -> dict[str, Any]:
        decision = f"For {state['topic']} we use FalkorDB as the graph database"
        await store.aput(shared, "storage", {"text": decision, "by": "planner"})
        return {"decision": decision}

    def note(state: TeamState, *, store: BaseStore) -> dict[str, Any]:  # a sync node: LangGraph runs it in a thread
        store.put(("private", "scratch"), "todo", {"text": "benchmark the graph queries"})
        return {"private_note": "todo"}

    async def recall(state: TeamState, *, store: BaseStore) -> dict[str, Any]:
        hits = await store.asearch(("group", group_id), query=f"which database for {state['topic']}?", limit=3)
        return {"found": [str(h.value["text"]) for h in hits]}

    planner = StateGraph(TeamState)
    planner.add_node("decide", decide)
    planner.add_node("note", note)
    planner.add_edge(START, "decide")
    planner.add_edge("decide", "note")
    planner.add_edge("note", END)
    planned = await planner.compile(store=RecallStore(planner_client)).ainvoke({"topic": "the memory hub"})
    assert planned["decision"] == "For the memory hub we use FalkorDB as the graph database"

    coder = StateGraph(TeamState)
    coder.add_node("recall", recall)
    coder.add_edge(START, "recall")
    coder.add_edge("recall", END)
    coder_store = RecallStore(coder_client)
    coder_client.read_after(planner_client.index_position)
    coded = await coder.compile(store=coder_store).ainvoke({"topic": "the memory hub"})
    assert coded["found"] == [planned["decision"]]
    # The planner's private scratch note stayed the planner's.
    assert await coder_store.aget(("private", "scratch"), "todo") is None
    assert await RecallStore(planner_client).aget(("private", "scratch"), "todo") is not None
