"""``recall-mcp``: the Nexus Recall MCP sidecar.

One sidecar runs per agent, as that agent's AI id: every tool call is one request to the hub over NATS
under that identity (so the hub, not the sidecar, decides what the agent may see), and the sidecar
keeps no memory of its own. Transports: stdio (default) and streamable HTTP (``--http``).

    recall-mcp --ai-id a_worker1 --nats nats://127.0.0.1:4222            # stdio
    recall-mcp --ai-id a_worker1 --http --port 8765                      # http://127.0.0.1:8765/mcp
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Collection, Sequence
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from pydantic import ValidationError
from recall_schemas import (
    BeadList,
    ErrorCode,
    GetByGroup,
    GetRecent,
    GroupList,
    InvalidRequest,
    ListGroups,
    MemoryBead,
    RecallError,
    Unauthorized,
    describe_validation,
)
from recall_schemas.rendering import render_bead

from .link import HubLink
from .tools import PROFILES, build_tool, describe_error, tool_specs

log = logging.getLogger(__name__)

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
SERVER_NAME = "nexus-recall"
DEFAULT_HTTP_PORT = 8765
RECENT_LIMIT = 20
CHECK_TIMEOUT_S = 2.0
"""How long the start-up check waits for NATS and the hub before serving anyway."""

INSTRUCTIONS = """\
Nexus Recall is the durable memory you share with the other agents of your groups. It outlives this
conversation. Before starting a task, load what is known (`context` or `search_beads`); while working,
store decisions (with their reasons), findings and handoff notes (`create_bead`), one idea per bead, and
share them with your group (visibility='group', group_id from `list_groups`). Beads you may not see
behave exactly like missing ones. Never store secrets."""


def _version() -> str:
    try:
        return version("recall-client")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0.0.0"


def render_beads(heading: str, beads: Sequence[MemoryBead]) -> str:
    if not beads:
        return f"# {heading}\n\nNo memories yet."
    return f"# {heading}\n\n" + "\n\n".join(render_bead(b) for b in beads)


GUIDE: tuple[tuple[frozenset[str], str], ...] = (
    (
        frozenset({"context", "search_beads"}),
        "Recall before you act. Call `context` with the task as the query to load the most relevant memory\n"
        "   within a token budget, or `search_beads` when you need individual beads and scores.",
    ),
    (frozenset({"why"}), "Use `why` to learn what led to a decision or what followed it."),
    (frozenset({"get_recent"}), "`get_recent` shows what changed lately."),
    (
        frozenset({"create_bead"}),
        "Store what others (or a later you) will need: decisions with their reasons, findings, facts you\n"
        "   verified, open questions, todos, handoff notes. One idea per bead; a specific, searchable title;\n"
        "   the detail in content; a bead_type; importance 5 for normal, 8+ only for what must not be missed;\n"
        "   a few tags. Set provenance to 'observed' for what you saw yourself (command output, a test run).",
    ),
    (
        frozenset({"create_bead"}),
        "Choose visibility on purpose: 'private' (the default) for scratch notes, 'group' with the group_id\n"
        "   to share with your team, 'global' only for what every agent on the hub should know.",
    ),
    (
        frozenset({"update_bead"}),
        "Do not duplicate. Search first; if a memory exists, update_bead it. Archive what no longer holds\n"
        "   (update_bead status='archived') rather than delete it.",
    ),
    (
        frozenset({"add_relationship"}),
        "When a decision changes, store the new one and link it with add_relationship(new, old, 'UPDATES')\n"
        "   so the history stays; PART_OF for pieces of an investigation, FOLLOWS_FROM for cause and effect.\n"
        "   The hub already links beads of one session in order and links similar beads.",
    ),
    (frozenset({"deduplicate_beads"}), "Use deduplicate_beads to review duplicates."),
    (
        frozenset({"ai_state_save", "ai_state_get"}),
        "Keep your working state with ai_state_save (todos, notes, a context summary) and read it back\n"
        "   with ai_state_get when you resume.",
    ),
    (
        frozenset({"learn", "recall"}),
        "Exact look-ups by name go in learn/recall (private key-value notes).",
    ),
    (frozenset({"unified_recall"}), "unified_recall searches notes and beads together."),
    (
        frozenset({"changes_since"}),
        "Catch up on your group with changes_since(scope=<group_id>, cursor=<the cursor you kept>).",
    ),
    (
        frozenset({"transfer_ops", "handoff_brief", "acknowledge_handoff"}),
        "Ops handing over a group: transfer_ops with a real context summary. Taking over: handoff_brief,\n"
        "   then acknowledge_handoff.",
    ),
    (
        frozenset(),
        "When a tool reports `unavailable` or `timeout`, the hub is unreachable: continue your work and\n"
        "   retry the memory call later. `not_found` means the thing does not exist or you may not see it.\n"
        "   `unauthorized` is a setup mistake: tell the user instead of retrying. Never store secrets.",
    ),
)
"""The advice of the ``use_memory`` prompt, each with the tools it needs: only advice about the tools the
sidecar offers is given."""


def memory_guide(ai_id: str, groups: str, task: str | None, offered: Collection[str]) -> str:
    task_line = f"\nYour task: {task}\nStart with `context(query=<the task>)`.\n" if task else ""
    advice = [text for tools, text in GUIDE if tools <= set(offered)]
    numbered = "\n".join(f"{n}. {text}" for n, text in enumerate(advice, start=1))
    return f"""\
You have a shared, durable memory: the Nexus Recall hub. You act in it as {ai_id}; what you may see is
decided by the hub, never by you. {groups}
{task_line}
How to use it well:

{numbered}
"""


def build_server(link: HubLink, *, tools: str = "all", log_level: LogLevel = "WARNING") -> MCPServer[Any]:
    """The MCP server of one agent: a tool per hub operation (``tools`` selects which, see
    :func:`~recall_client.mcp.tools.tool_specs`), resources over the agent's groups and recent memory,
    and a prompt on how to use memory well. Every call goes to the hub through ``link``."""
    specs = tool_specs(tools)
    offered = {spec.name for spec in specs}

    @asynccontextmanager
    async def lifespan(_: MCPServer[Any]) -> AsyncIterator[None]:
        try:
            yield None
        finally:
            await link.close()

    server: MCPServer[Any] = MCPServer(
        SERVER_NAME,
        title="Nexus Recall",
        description="Shared, visibility-enforced memory for groups of AI agents",
        instructions=INSTRUCTIONS,
        version=_version(),
        lifespan=lifespan,
        log_level=log_level,
        tools=[build_tool(spec, link) for spec in specs],
    )

    async def read(op: str, request: Any, reply: Any) -> Any:
        try:
            return await link.call(op, request, reply)
        except RecallError as exc:
            if exc.code is ErrorCode.NOT_FOUND:
                raise ResourceNotFoundError(describe_error(exc)) from None
            raise ResourceError(describe_error(exc)) from None

    @server.resource(
        "recall://groups",
        name="groups",
        title="My groups",
        description="The groups this agent belongs to, with members and roles (JSON).",
        mime_type="application/json",
    )
    async def groups() -> str:
        reply: GroupList = await read("list_groups", ListGroups(), GroupList)
        return json.dumps(reply.model_dump(mode="json")["groups"], indent=1)

    @server.resource(
        "recall://recent",
        name="recent",
        title="My recent memory",
        description=f"The {RECENT_LIMIT} newest memories this agent may see (private, group and global).",
        mime_type="text/markdown",
    )
    async def recent() -> str:
        reply: BeadList = await read("get_recent", GetRecent(limit=RECENT_LIMIT), BeadList)
        return render_beads(f"Recent memory of {link.ai_id}", reply.beads)

    @server.resource(
        "recall://groups/{group_id}/recent",
        name="group_recent",
        title="Recent group memory",
        description=f"The {RECENT_LIMIT} newest memories of one of this agent's groups (see recall://groups).",
        mime_type="text/markdown",
    )
    async def group_recent(group_id: str) -> str:
        try:
            request = GetByGroup(group_id=group_id, limit=RECENT_LIMIT)
        except ValidationError as exc:
            raise ResourceNotFoundError(describe_error(InvalidRequest(describe_validation(exc, GetByGroup)))) from None
        reply: BeadList = await read("get_by_group", request, BeadList)
        return render_beads(f"Recent memory of group {group_id}", reply.beads)

    @server.prompt(
        name="use_memory",
        title="How to use shared memory",
        description="Guidance for an agent on recalling, storing and sharing memory with Nexus Recall; "
        "optionally for a given task.",
    )
    async def use_memory(task: str | None = None) -> str:
        try:
            found = (await link.call("list_groups", ListGroups(), GroupList)).groups
        except RecallError as exc:
            groups = f"(Your groups could not be listed just now: {describe_error(exc)}.)"
        else:
            if found:
                roles = {g.group_id: [m.role.value for m in g.members if m.ai_id == link.ai_id] for g in found}
                names = ", ".join(f"{g.group_id} '{g.name}' as {(roles[g.group_id] or ['?'])[0]}" for g in found)
                groups = f"Your groups: {names}."
            else:
                groups = "You belong to no group yet, so only your private and global memories exist for you."
        return memory_guide(link.ai_id, groups, task, offered)

    return server


# --- command line ------------------------------------------------------------------------------------


class _OneLineErrors(logging.Filter):
    """nats-py logs every failed (re)connect attempt with a traceback; one line each is enough."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            record.msg = f"{record.getMessage()}: {record.exc_info[1]!r}"
            record.args = None
            record.exc_info = None
        return True


def configure_logging(level: str) -> None:
    """Everything to stderr: under stdio, stdout carries the protocol and nothing else."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(_OneLineErrors())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    env = os.environ.get
    parser = argparse.ArgumentParser(
        prog="recall-mcp",
        description="Nexus Recall MCP sidecar: an MCP server that forwards every call to the hub over NATS "
        "as one agent. Flags override RECALL_* environment variables.",
    )
    parser.add_argument("--ai-id", default=env("RECALL_AI_ID"), help="the agent's AI id, o_… or a_… [RECALL_AI_ID]")
    parser.add_argument(
        "--nats", default=env("RECALL_NATS_URL", "nats://127.0.0.1:4222"), help="NATS server URL [RECALL_NATS_URL]"
    )
    parser.add_argument("--creds", default=env("RECALL_NATS_CREDS"), help="NATS credentials file [RECALL_NATS_CREDS]")
    parser.add_argument("--user", default=env("RECALL_NATS_USER"), help="NATS user [RECALL_NATS_USER]")
    parser.add_argument("--password", default=env("RECALL_NATS_PASSWORD"), help="NATS password [RECALL_NATS_PASSWORD]")
    parser.add_argument(
        "--timeout", type=float, default=float(env("RECALL_TIMEOUT", "5")), help="seconds per hub request [5]"
    )
    parser.add_argument(
        "--tools",
        default=env("RECALL_MCP_TOOLS", "core"),
        help="which tools to offer: 'core' (" + ", ".join(PROFILES["core"]) + "), 'all', or tool names and "
        "profiles separated by commas, e.g. core,traverse_graph [RECALL_MCP_TOOLS, default core]",
    )
    parser.add_argument(
        "--no-check",
        action="store_true",
        help="serve without first checking the identity and credentials against NATS and the hub",
    )
    parser.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    parser.add_argument("--host", default=env("RECALL_MCP_HOST", "127.0.0.1"), help="HTTP bind address [127.0.0.1]")
    parser.add_argument(
        "--port", type=int, default=int(env("RECALL_MCP_PORT", str(DEFAULT_HTTP_PORT))), help="HTTP port [8765]"
    )
    parser.add_argument("--path", default="/mcp", help="HTTP endpoint path [/mcp]")
    parser.add_argument(
        "--log-level",
        default=env("RECALL_LOG_LEVEL", "WARNING"),
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        type=str.upper,
        help="stderr log level [WARNING]",
    )
    parser.add_argument("--version", action="version", version=f"recall-mcp {_version()}")
    return parser.parse_args(argv)


async def check_setup(link: HubLink) -> str | None:
    """Ask the hub who we are, once, before serving: a configuration mistake (credentials NATS refuses
    or that belong to another identity, an unreadable creds file) is returned as a message to exit
    with; an outage (NATS or the hub not up yet) is only logged, since the sidecar serves through it."""
    try:
        groups = (await link.call("list_groups", ListGroups(), GroupList)).groups
    except (Unauthorized, InvalidRequest) as exc:
        return exc.message
    except RecallError as exc:
        log.warning("could not check the setup: %s (serving anyway; tools report it until it is back)", exc.message)
    else:
        log.info("checked: the hub answers %s, a member of %d group(s)", link.ai_id, len(groups))
    finally:
        await link.close()
    return None


def _link(args: argparse.Namespace, timeout: float, retries: int = 2) -> HubLink:
    return HubLink(
        args.ai_id, args.nats, creds=args.creds, user=args.user, password=args.password, timeout=timeout,
        retries=retries, connect_timeout=min(timeout, 3.0),
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.ai_id:
        print("recall-mcp: give the agent's AI id with --ai-id or RECALL_AI_ID", file=sys.stderr)
        return 2
    try:
        server = build_server(_link(args, args.timeout), tools=args.tools, log_level=args.log_level)
    except InvalidRequest as exc:
        print(f"recall-mcp: {exc.message}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"recall-mcp: --tools: {exc}", file=sys.stderr)
        return 2
    configure_logging(args.log_level)
    if not args.no_check:
        problem = asyncio.run(check_setup(_link(args, min(args.timeout, CHECK_TIMEOUT_S), retries=0)))
        if problem is not None:
            print(f"recall-mcp: {problem}", file=sys.stderr)
            return 2
    where = f"http://{args.host}:{args.port}{args.path}" if args.http else "stdio"
    print(f"recall-mcp {_version()}: {args.ai_id} via {args.nats}, serving MCP on {where}", file=sys.stderr)
    try:
        if args.http:
            server.run("streamable-http", host=args.host, port=args.port, streamable_http_path=args.path)
        else:
            server.run("stdio")
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
