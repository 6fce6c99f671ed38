"""The end-to-end coordination scenario, over the bus only, on a nats-server running the security
configuration that `recall auth init` generates from the shipped example roster."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from recall_client import RecallClient
from recall_hub.config import HubSettings
from recall_hub.embedders import EmbedderConfig
from recall_hub.service.server import running_hub
from recall_hub.tooling.auth import generate, load_roster
from recall_hub.tooling.demo import run_demo
from recall_hub.tooling.scenario import run_scenario
from recall_hub.tooling.stack import EmbeddedStack

ROSTER = Path(__file__).resolve().parent.parent / "examples" / "roster.yaml"


@pytest.fixture(scope="module")
async def secure(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[EmbeddedStack, Path]]:
    auth_dir = tmp_path_factory.mktemp("auth")
    bundle = generate(ROSTER, auth_dir)
    with EmbeddedStack(tmp_path_factory.mktemp("stack"), nats_config=bundle.server_config) as stack:
        settings = HubSettings(
            nats_url=stack.nats_url, nats_creds=str(bundle.hub_creds), auth_required=True,
            falkordb_url=stack.redis_url, redis_url=stack.redis_url,
            graph_name=f"scenario_{secrets.token_hex(3)}", embedder=EmbedderConfig(kind="local"),
        )
        async with running_hub(settings):
            yield stack, auth_dir / "creds"


async def test_the_coordination_scenario_runs_end_to_end_with_real_credentials(secure) -> None:
    stack, creds = secure
    opened: list[RecallClient] = []

    async def connect(ai_id: str) -> RecallClient:
        client = await RecallClient(ai_id, stack.nats_url, creds=str(creds / f"{ai_id}.creds")).connect()
        opened.append(client)
        return client

    roster = load_roster(ROSTER)
    lines: list[str] = []
    try:
        result = await run_scenario(connect, roster.ops[0], roster.agents[0], roster.agents[1], say=lines.append)
        table = await run_demo(connect, (roster.ops[0], *roster.agents[:3]), say=lines.append)
    finally:
        for client in opened:
            await client.close()
    failed = [name for name, passed in result.checks.items() if not passed]
    assert failed == [], "\n".join(lines)
    assert len(result.checks) >= 10
    ops, writer, reader, outsider = roster.ops[0], *roster.agents[:3]
    assert table["A private scratch note"] == {ops: False, writer: True, reader: False, outsider: False}
    assert table["Use FalkorDB for the memory graph"]["after_leaving"] is False
    # What the demo prints names the identities it really uses, never stand-ins.
    header = next(line for line in lines if line.startswith("bead (visibility)"))
    assert header.split()[2:] == [ops, writer, reader, outsider]
    assert not any(name in " ".join(lines).lower() for name in ("alice", "bob", "outsider"))
