"""Starting ``recall-mcp`` as a user would, against a nats-server running the generated secure configuration:
a setup mistake (credentials missing, of another identity, refused, or without the right to act as the AI
id) stops the sidecar at once with one clear line and exit status 2, instead of an MCP server whose every
tool later reports "unavailable, retry"; an outage does not stop it; tool profiles keep the listing small."""

from __future__ import annotations

import asyncio
import json
import re
import secrets
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from recall_client.mcp import HubLink, build_server
from recall_client.mcp.overhead import measure, tool_list_sizes
from recall_client.mcp.tools import PROFILES, tool_specs
from recall_hub.service.endpoints import HubService
from recall_hub.tooling.auth import AuthBundle, generate
from recall_hub.tooling.stack import EmbeddedStack, free_port

from tests.conftest import repo_root

pytestmark = pytest.mark.timeout(120)

SCRIPT = repo_root() / ".venv" / "bin" / "recall-mcp"
AGENT, OTHER = f"a_{secrets.token_hex(5)}", f"a_{secrets.token_hex(5)}"


def _bundle(base: Path, agents: list[str]) -> AuthBundle:
    roster = base / "roster.yaml"
    roster.write_text(json.dumps({"ops": [f"o_{secrets.token_hex(5)}"], "agents": agents}))  # JSON is YAML
    return generate(roster, base / "auth")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> AuthBundle:
    return _bundle(tmp_path_factory.mktemp("mcp-setup"), [AGENT, OTHER])




async def start(*args: str) -> tuple[int, str]:
    """Run ``recall-mcp`` with stdin closed (an MCP client that went away): its exit status and stderr."""
    proc = await asyncio.create_subprocess_exec(
        str(SCRIPT), *args,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert out == b"", "nothing but the protocol may reach stdout"
    assert proc.returncode is not None
    return proc.returncode, err.decode()


def _refusal(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("recall-mcp: ")]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


async def test_a_creds_file_that_is_not_there_stops_the_sidecar(secure_stack: EmbeddedStack, tmp_path: Path) -> None:
    status, err = await start("--ai-id", AGENT, "--nats", secure_stack.nats_url, "--creds", str(tmp_path / "no.creds"))
    assert status == 2
    assert "cannot read NATS credentials" in _refusal(err)


async def test_credentials_of_another_identity_stop_the_sidecar(
    secure_stack: EmbeddedStack, bundle: AuthBundle
) -> None:
    status, err = await start("--ai-id", AGENT, "--nats", secure_stack.nats_url, "--creds", str(bundle.creds[OTHER]))
    assert status == 2
    assert f"belong to {OTHER}, not {AGENT}" in _refusal(err)


async def test_credentials_the_server_refuses_stop_the_sidecar(
    secure_stack: EmbeddedStack, tmp_path: Path
) -> None:
    stranger = _bundle(tmp_path, [AGENT])  # the same AI id, signed by an operator this server does not trust
    status, err = await start("--ai-id", AGENT, "--nats", secure_stack.nats_url, "--creds", str(stranger.creds[AGENT]))
    assert status == 2
    assert "refused the credentials" in _refusal(err)


async def test_credentials_without_the_right_to_act_as_the_ai_id_stop_the_sidecar(
    secure_stack: EmbeddedStack, secure_hub: HubService, bundle: AuthBundle
) -> None:
    # The hub's own credentials name no AI id, so only the server can tell: it refuses the request subject.
    status, err = await start("--ai-id", AGENT, "--nats", secure_stack.nats_url, "--creds", str(bundle.hub_creds))
    assert status == 2
    assert f"does not let this connection act as {AGENT}" in _refusal(err)


async def test_the_right_credentials_serve_after_the_check(
    secure_stack: EmbeddedStack, secure_hub: HubService, bundle: AuthBundle, tmp_path: Path
) -> None:
    params = StdioServerParameters(
        command=str(SCRIPT),
        args=["--ai-id", AGENT, "--nats", secure_stack.nats_url, "--creds", str(bundle.creds[AGENT]),
              "--log-level", "INFO"],
    )  # fmt: skip
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            result = await client.call_tool("create_bead", {"title": "secure sidecar remembers"})
            assert not result.is_error and result.structured_content is not None
            assert result.structured_content["created_by"] == AGENT
    assert f"checked: the hub answers {AGENT}" in (tmp_path / "stderr.log").read_text()


async def test_an_outage_at_start_is_not_a_setup_mistake(tmp_path: Path) -> None:
    """NATS is not up yet: the sidecar says so and serves (its tools report the outage until it is back)."""
    params = StdioServerParameters(
        command=str(SCRIPT), args=["--ai-id", AGENT, "--nats", f"nats://127.0.0.1:{free_port()}"]
    )
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            result = await client.call_tool("get_bead", {"bead_id": "b_00001234"})
            assert result.is_error
    assert "could not check the setup" in (tmp_path / "stderr.log").read_text()


async def test_an_unknown_tool_profile_is_refused_with_the_closest_name() -> None:
    status, err = await start("--ai-id", AGENT, "--tools", "core,travers_graph", "--no-check")
    assert status == 2
    refusal = _refusal(err)
    assert refusal == "recall-mcp: --tools: unknown tool or profile 'travers_graph'; did you mean 'traverse_graph'?"


async def test_profiles_select_tools_and_core_is_a_small_part_of_the_listing() -> None:
    link = HubLink(AGENT, "nats://127.0.0.1:1")  # listing needs no hub
    async with Client(build_server(link, tools="core,traverse_graph")) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
    assert names == {*PROFILES["core"], "traverse_graph"}
    assert {spec.name for spec in tool_specs("all")} >= names
    sizes = {row.profile: row for row in await tool_list_sizes(["core", "all"])}
    assert sizes["core"].tools == len(PROFILES["core"]) and sizes["all"].tools == len(tool_specs("all"))
    assert sizes["core"].bytes * 3 < sizes["all"].bytes


async def test_the_tool_list_sizes_in_the_docs_are_what_the_sidecar_lists() -> None:
    documented = {}
    for line in (repo_root() / "docs" / "mcp.md").read_text().splitlines():
        if match := re.match(r"\| `(core|all)`[^|]*\| (\d+) \| ([\d,]+) \|$", line):
            documented[match[1]] = (int(match[2]), int(match[3].replace(",", "")))
    measured = {row.profile: (row.tools, row.bytes) for row in await tool_list_sizes(["core", "all"])}
    assert documented == measured, "update the tool-list table of docs/mcp.md"


async def test_the_overhead_measurement_runs_against_a_secure_stack(
    secure_stack: EmbeddedStack, secure_hub: HubService, bundle: AuthBundle
) -> None:
    rows = await measure(secure_stack.nats_url, rounds=3, warmup=1, creds=str(bundle.creds[AGENT]))
    assert {(row.operation, row.path) for row in rows} == {
        (op, path)
        for op in ("search_beads", "create_bead")
        for path in ("library", "mcp in-process", "mcp stdio", "mcp http")
    }
    assert all(row.p50_ms > 0 for row in rows)
