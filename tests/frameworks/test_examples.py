"""Each framework's example team runs end to end against a real hub, as docs/integrations.md tells a user to
run it (one command, the hub's NATS URL), and says it all went as described."""

from __future__ import annotations

import asyncio
import sys

import pytest
from conftest import repo_root
from recall_hub.context import HubContext
from recall_hub.tooling.stack import EmbeddedStack

EXAMPLES = ["langgraph_team.py", "adk_team.py", "autogen_team.py", "openai_agents_team.py"]


@pytest.mark.parametrize("example", EXAMPLES)
async def test_the_example_team_runs_against_a_hub(example: str, stack: EmbeddedStack, hub: HubContext) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(repo_root() / "examples" / example), "--nats-url", stack.nats_url,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), timeout=120)
    text = output.decode()
    assert process.returncode == 0, text
    assert "Traceback" not in text, text
