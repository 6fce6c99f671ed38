"""A short scripted tour: a group with an ops and two agents, private/group/global beads, links,
and who can recall what. Runs against any hub through the client library only."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable

from recall_client import RecallClient
from recall_schemas import NotFound


def random_ids() -> tuple[str, str, str, str]:
    """Fresh ids for an ops, two agents and an outsider (the dev mode, where any id may connect)."""
    tag = secrets.token_hex(3)
    return f"o_lead{tag}", f"a_alice{tag}", f"a_bob{tag}", f"a_eve{tag}"


def plain_connect(nats_url: str) -> Callable[[str], Awaitable[RecallClient]]:
    """Connections without credentials (dev mode)."""

    async def connect(ai_id: str) -> RecallClient:
        return await RecallClient(ai_id, nats_url).connect()

    return connect


async def run_demo(
    connect: Callable[[str], Awaitable[RecallClient]],
    ids: tuple[str, str, str, str],
    say: Callable[[str], None] = print,
) -> dict[str, dict[str, bool]]:
    """Returns, for each bead title, which identity could read it."""
    clients = [await connect(ai_id) for ai_id in ids]
    try:
        ops, alice, bob, outsider = clients
        return await _tour(ops, alice, bob, outsider, say=say)
    finally:
        for client in clients:
            await client.close()


async def _tour(
    ops: RecallClient, alice: RecallClient, bob: RecallClient, outsider: RecallClient, say: Callable[[str], None]
) -> dict[str, dict[str, bool]]:
    ops_id, alice_id, bob_id, outsider_id = ops.ai_id, alice.ai_id, bob.ai_id, outsider.ai_id
    group = await ops.create_group(f"demo team {secrets.token_hex(3)}")
    gid = group.group_id
    await ops.add_member(gid, alice_id)
    await ops.add_member(gid, bob_id)
    say(f"group {gid}: ops {ops_id}, agents {alice_id} and {bob_id}; {outsider_id} is not a member")

    decision = await ops.create_bead(
        "Use FalkorDB for the memory graph", "Graph and Redis in one server; Cypher; fast traversal.",
        bead_type="decision", importance=8, group_id=gid, visibility="group", tags=["architecture"],
    )
    finding = await alice.create_bead(
        "Vector sets beat FILTER for scoping", "Per-scope vector sets avoid the 4-6x FILTER cost.",
        bead_type="finding", importance=7, group_id=gid, visibility="group", tags=["architecture"],
    )
    note = await alice.create_bead(
        "Alice's scratch note", "Try HNSW M=16 next.", bead_type="note", visibility="private"
    )
    policy = await ops.create_bead(
        "Hub etiquette", "Write decisions as beads with importance >= 7.", visibility="global"
    )
    await alice.add_relationship(finding.bead_id, decision.bead_id, "RELATED_TO", similarity=0.8)
    say(f"wrote 4 beads; linked '{finding.title}' -[RELATED_TO]-> '{decision.title}'")

    readers = {"ops": ops, "alice": alice, "bob": bob, "outsider": outsider}
    table: dict[str, dict[str, bool]] = {}
    for bead in (decision, finding, note, policy):
        table[bead.title] = {}
        for name, client in readers.items():
            try:
                await client.get_bead(bead.bead_id)
                table[bead.title][name] = True
            except NotFound:
                table[bead.title][name] = False
    width = max(len(t) for t in table) + 2
    say("")
    say(f"{'bead (visibility)':<{width + 10}}" + "".join(f"{n:>10}" for n in readers))
    for bead in (decision, finding, note, policy):
        row = table[bead.title]
        label = f"{bead.title} ({bead.visibility.value})"
        say(f"{label:<{width + 10}}" + "".join(f"{'yes' if row[n] else '-':>10}" for n in readers))

    hits = await bob.search_beads("FalkorDB vector", limit=5)
    say("")
    say(f"bob searches 'FalkorDB vector': {[h.bead.title for h in hits.hits]}")
    graph = await bob.traverse_graph(finding.bead_id, max_depth=2)
    say(f"bob walks the graph from the finding: {[n.bead.title for n in graph.nodes]}")
    await ops.remove_member(gid, bob_id)
    try:
        await bob.get_bead(decision.bead_id)
        say("bob still reads the decision after leaving (this must not happen)")
    except NotFound:
        say("ops removes bob from the group: bob's next read of the decision is refused (not found)")
        table[decision.title]["bob_after_leaving"] = False
    return table
