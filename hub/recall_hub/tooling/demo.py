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
    return f"o_lead{tag}", f"a_writer{tag}", f"a_reader{tag}", f"a_other{tag}"


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
        ops, writer, reader, outsider = clients
        return await _tour(ops, writer, reader, outsider, say=say)
    finally:
        for client in clients:
            await client.close()


async def _tour(
    ops: RecallClient, writer: RecallClient, reader: RecallClient, outsider: RecallClient, say: Callable[[str], None]
) -> dict[str, dict[str, bool]]:
    ops_id, writer_id, reader_id, outsider_id = ops.ai_id, writer.ai_id, reader.ai_id, outsider.ai_id
    group = await ops.create_group(f"demo team {secrets.token_hex(3)}")
    gid = group.group_id
    await ops.add_member(gid, writer_id)
    await ops.add_member(gid, reader_id)
    say(
        f"a new group for this tour, {gid}: ops {ops_id}, agents {writer_id} and {reader_id}; "
        f"{outsider_id} is not a member"
    )

    decision = await ops.create_bead(
        "Use FalkorDB for the memory graph", "Graph and Redis in one server; Cypher; fast traversal.",
        bead_type="decision", importance=8, group_id=gid, visibility="group", tags=["architecture"],
    )
    finding = await writer.create_bead(
        "Vector sets beat FILTER for scoping", "Per-scope vector sets avoid the 4-6x FILTER cost.",
        bead_type="finding", importance=7, group_id=gid, visibility="group", tags=["architecture"],
    )
    note = await writer.create_bead(
        "A private scratch note", "Try HNSW M=16 next.", bead_type="note", visibility="private"
    )
    policy = await ops.create_bead(
        "Hub etiquette", "Write decisions as beads with importance >= 7.", visibility="global"
    )
    await writer.add_relationship(finding.bead_id, decision.bead_id, "RELATED_TO", similarity=0.8)
    say(f"wrote 4 beads; linked '{finding.title}' -[RELATED_TO]-> '{decision.title}'")

    readers = {client.ai_id: client for client in (ops, writer, reader, outsider)}
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
    column = max(len(n) for n in readers) + 2
    say("")
    say(f"{'bead (visibility)':<{width + 10}}" + "".join(f"{n:>{column}}" for n in readers))
    for bead in (decision, finding, note, policy):
        row = table[bead.title]
        label = f"{bead.title} ({bead.visibility.value})"
        say(f"{label:<{width + 10}}" + "".join(f"{'yes' if row[n] else '-':>{column}}" for n in readers))

    mine = {bead.bead_id for bead in (decision, finding, note, policy)}
    hits = await reader.search_beads("FalkorDB vector", limit=5)
    titles = [h.bead.title + ("" if h.bead.bead_id in mine else " (an earlier run's)") for h in hits.hits]
    say("")
    say(f"{reader_id} searches 'FalkorDB vector': {titles}")
    graph = await reader.traverse_graph(finding.bead_id, max_depth=2)
    say(f"{reader_id} walks the graph from the finding: {[n.bead.title for n in graph.nodes]}")
    await ops.remove_member(gid, reader_id)
    try:
        await reader.get_bead(decision.bead_id)
        say(f"{reader_id} still reads the decision after leaving (this must not happen)")
    except NotFound:
        say(f"{ops_id} removes {reader_id} from the group: its next read of the decision is refused (not found)")
        table[decision.title]["after_leaving"] = False
    return table
