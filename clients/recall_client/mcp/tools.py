"""MCP tools derived from the wire contract.

Every tool is one hub operation of :data:`recall_schemas.OPERATIONS`. Its parameters are the fields of
the operation's request model — same names, types, constraints and defaults, so the JSON Schema an
LLM sees is the wire contract's — and its structured result is the operation's reply model. What is
written by hand is only what an LLM needs to use the tool well: its text (the description — what it is
for, when to prefer it, its limits — and parameter descriptions, in :mod:`.descriptions`) and its
behaviour hints, here. An operation without a :class:`ToolSpec` still becomes a tool, described from
its operation summary.

To add a tool for a new operation: add its line to ``OPERATIONS`` (the hub and client do that), its
text to :data:`~.descriptions.TOOL_TEXTS`, and a ``described(...)`` line to :data:`TOOL_SPECS` below.
"""

from __future__ import annotations

import difflib
import inspect
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, TypedDict, Unpack

from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError
from recall_schemas import OPERATIONS, ContextBlock, ErrorCode, InvalidRequest, RecallError, describe_validation
from recall_schemas.coordination import HandoffBrief

from .descriptions import TOOL_TEXTS
from .link import HubLink
from .schema import compact, strict_input

log = logging.getLogger(__name__)

_Annotated: Any = Annotated  # subscripted at run time with a tuple built from a request model's field


@dataclass(frozen=True)
class ToolSpec:
    """How one hub operation is offered to an LLM."""

    name: str
    """The tool name and, unless ``op`` says otherwise, the hub operation."""
    title: str
    description: str
    params: Mapping[str, str] = field(default_factory=dict)
    """Parameter descriptions for the LLM, by request field; a field's own description is the fallback."""
    op: str | None = None
    hidden: Mapping[str, Callable[[HubLink], Any]] = field(default_factory=dict)
    """Request fields the LLM does not see; the sidecar fills each with the callable's value."""
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False
    render: Callable[[Any], str] | None = None
    """Text the LLM reads; default: the reply as compact JSON. The structured result is always the reply."""

    @property
    def operation(self) -> str:
        return self.op or self.name


class Behaviour(TypedDict, total=False):
    """A :class:`ToolSpec`'s fields besides its name and text, as :func:`described` takes them."""

    op: str | None
    hidden: Mapping[str, Callable[[HubLink], Any]]
    read_only: bool
    destructive: bool
    idempotent: bool
    render: Callable[[Any], str] | None


def described(name: str, **behaviour: Unpack[Behaviour]) -> ToolSpec:
    """The spec of tool ``name``, with its text from :data:`~.descriptions.TOOL_TEXTS`."""
    text = TOOL_TEXTS[name]
    return ToolSpec(name, text.title, text.description, text.params, **behaviour)


def _new_idempotency_key(_: HubLink) -> str:
    return f"mcp-{uuid.uuid4().hex}"


def _new_handoff_id(_: HubLink) -> str:
    return f"h_{uuid.uuid4().hex}"


def _own_ai_id(link: HubLink) -> str:
    return link.ai_id


def render_context(block: ContextBlock) -> str:
    footer = (
        f"[context: {len(block.bead_ids)} beads, {block.tokens}/{block.max_tokens} tokens, "
        f"{block.dropped} relevant beads left out]"
    )
    return f"{block.text}\n\n{footer}" if block.text else f"No memory matches this query.\n{footer}"


def render_brief(brief: HandoffBrief) -> str:
    lines = []
    if brief.handoff is not None:
        h = brief.handoff
        lines.append(
            f"[handoff {h.handoff_id}: {h.from_ops} -> {h.to_ops}, {h.status}, {h.created_at:%Y-%m-%d %H:%M}Z; "
            f"summary in bead {h.handoff_bead_id}]"
        )
    lines.append(brief.text or "(the group has no active group memory yet)")
    if brief.open_todos:
        todos = (f"- {t.text}" + (f" ({t.bead_id})" if t.bead_id else "") for t in brief.open_todos)
        lines.append("Open todos:\n" + "\n".join(todos))
    if brief.state is not None:
        if brief.state.context_summary:
            lines.append(f"Handed-over context summary:\n{brief.state.context_summary}")
        if brief.state.working_notes:
            lines.append(f"Handed-over working notes:\n{brief.state.working_notes}")
    lines.append(f"[brief: {len(brief.bead_ids)} beads, {brief.tokens} tokens]")
    return "\n\n".join(lines)


TOOL_SPECS: tuple[ToolSpec, ...] = (
    # --- beads ---------------------------------------------------------------------------------------
    described("create_bead", hidden={"idempotency_key": _new_idempotency_key}),
    described("create_beads"),
    described("get_bead", read_only=True),
    described("update_bead", destructive=True, idempotent=True),
    described("edit_bead", destructive=True),
    described("delete_bead", destructive=True, idempotent=True),
    # --- recall --------------------------------------------------------------------------------------
    described("search_beads", read_only=True),
    described("context", read_only=True, render=render_context),
    described("why", read_only=True),
    described("find_similar", read_only=True),
    # --- listings ------------------------------------------------------------------------------------
    described("get_recent", read_only=True),
    described("get_by_session", read_only=True),
    described("get_by_group", read_only=True),
    described("get_by_tag", read_only=True),
    # --- relationships -------------------------------------------------------------------------------
    described("add_relationship", idempotent=True),
    described("get_relationships", read_only=True),
    described("get_edges", read_only=True),
    described("traverse_graph", read_only=True),
    # --- maintenance ---------------------------------------------------------------------------------
    described("deduplicate_beads", destructive=True),
    described("rank_by_importance", read_only=True),
    described("decay_old_memories", destructive=True, idempotent=True),
    # --- groups --------------------------------------------------------------------------------------
    described("list_groups", read_only=True),
    described("list_members", read_only=True),
    described("create_group"),
    described("add_member", idempotent=True),
    described("remove_member", destructive=True, idempotent=True),
    # --- sessions ------------------------------------------------------------------------------------
    described("get_session", read_only=True),
    described("migrate_session_with_memories"),
    described("check_session", read_only=True),
    # --- agent state ---------------------------------------------------------------------------------
    described("ai_state_save", idempotent=True),
    described("ai_state_get", read_only=True),
    described("ai_state_transfer"),
    # --- ops handoff ---------------------------------------------------------------------------------
    described("transfer_ops", hidden={"from_ops": _own_ai_id, "handoff_id": _new_handoff_id}, destructive=True),
    described("acknowledge_handoff", idempotent=True),
    described("list_handoffs", read_only=True),
    described("handoff_brief", read_only=True, render=render_brief),
    # --- key-value memory ----------------------------------------------------------------------------
    described("learn", idempotent=True),
    described("recall", read_only=True),
    described("unified_recall", read_only=True),
    described("promote_to_bead"),
    # --- change feed ---------------------------------------------------------------------------------
    described("changes_since", read_only=True),
    # --- lifecycle: trust, supersede, history ---
    described("verify_bead", idempotent=True),
    described("reject_bead", idempotent=True),
    described("list_stale", read_only=True),
    described("supersede_bead", idempotent=True),
    described("get_history", read_only=True),
    # --- lifecycle: forget ---
    described("forget_bead", destructive=True),
    described("forget_by_author", destructive=True),
    described("list_forgotten", read_only=True),
    described("allow_forgotten", idempotent=True),
    # --- capture: extraction, collectors ---
    described("remember_extracted", idempotent=True),
    described("remember_topics", idempotent=True),
    described("recall_where", read_only=True),
    # --- audit ---
    described("audit_log", read_only=True),
)

EXCLUDED_OPERATIONS: frozenset[str] = frozenset()
"""Hub operations deliberately not offered as tools (none today)."""

PROFILES: dict[str, tuple[str, ...]] = {
    "core": (
        "search_beads",
        "context",
        "why",
        "create_bead",
        "update_bead",
        "get_bead",
        "learn",
        "recall",
        "list_groups",
    ),
}
"""Named tool selections; ``all`` is every tool. ``core`` is what an agent uses every turn."""


def tool_specs(selection: str = "all") -> list[ToolSpec]:
    """The specs of the tools ``selection`` names: ``all``, a profile of :data:`PROFILES`, or tool names
    and profiles separated by commas (``core,traverse_graph``). Raises ``ValueError`` naming an unknown
    part and the closest valid one."""
    specs = list(TOOL_SPECS)
    covered = {spec.operation for spec in specs} | EXCLUDED_OPERATIONS
    for name, op in OPERATIONS.items():
        if name not in covered:
            specs.append(ToolSpec(name, op.summary, f"{op.summary}."))
    wanted: set[str] = set()
    for part in (p.strip() for p in selection.split(",")):
        if part == "all":
            wanted.update(spec.name for spec in specs)
        elif part in PROFILES:
            wanted.update(PROFILES[part])
        elif part in {spec.name for spec in specs}:
            wanted.add(part)
        else:
            choices = ["all", *PROFILES, *(spec.name for spec in specs)]
            close = difflib.get_close_matches(part, choices, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f"; choose from: {', '.join(choices)}"
            raise ValueError(f"unknown tool or profile '{part}'{hint}")
    return [spec for spec in specs if spec.name in wanted]


# --- errors ------------------------------------------------------------------------------------------

_HINTS: dict[ErrorCode, str] = {
    ErrorCode.NOT_FOUND: " (it does not exist, or you may not see it)",
    ErrorCode.UNAVAILABLE: " — the Nexus Recall hub cannot be reached right now; retry in a few seconds",
    ErrorCode.TIMEOUT: " — the Nexus Recall hub did not answer in time; retry in a few seconds",
    ErrorCode.UNAUTHORIZED: " — the memory sidecar is misconfigured (credentials or AI id); retrying will not "
    "help, tell the user",
    ErrorCode.INTERNAL: " (a fault in the hub, not in your request)",
}


def describe_error(exc: RecallError) -> str:
    """One line per problem for the LLM: the error code, the hub's message and what it means."""
    hint = _HINTS.get(exc.code, "")
    if exc.code is ErrorCode.CONFLICT and "version" in exc.details:
        hint = " — someone changed it since you read it: read it again and redo your change on what you find"
    return "\n".join(f"{exc.code.value}: {line}{hint}" for line in exc.message.splitlines() or [""])


# --- derivation --------------------------------------------------------------------------------------


def parameters(spec: ToolSpec, request: type[BaseModel]) -> list[inspect.Parameter]:
    """The request model's fields as keyword parameters, each annotated with its type, constraints,
    default and the LLM-facing description."""
    unknown = (set(spec.params) | set(spec.hidden)) - set(request.model_fields)
    if unknown:
        raise ValueError(f"tool {spec.name}: {sorted(unknown)} are not fields of {request.__name__}")
    result = []
    for name, info in request.model_fields.items():
        if name in spec.hidden:
            continue
        extra: dict[str, Any] = {"description": spec.params.get(name) or info.description}
        default: Any = inspect.Parameter.empty
        if info.default_factory is not None:
            extra["default_factory"] = info.default_factory
        elif not info.is_required():
            default = info.default
        annotation = _Annotated[(info.annotation, *info.metadata, Field(**extra))]
        result.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default))
    return result


def _same(value: Any, default: Any) -> bool:
    if isinstance(value, BaseModel) and isinstance(default, BaseModel):
        return type(value) is type(default) and value.model_dump() == default.model_dump()
    return bool(value == default)


def given(arguments: Mapping[str, Any], request: type[BaseModel]) -> dict[str, Any]:
    """The arguments that say something: one equal to its field's default (an explicit null for an
    optional field, say) is left unset, exactly as if it had been left out — the hub reads some
    requests by which fields are set (``exclude_unset``: "replace the fields given, keep the others")."""
    out: dict[str, Any] = {}
    for name, value in arguments.items():
        info = request.model_fields.get(name)
        if info is not None and not info.is_required() and _same(value, info.get_default(call_default_factory=True)):
            continue
        out[name] = value
    return out


class _ArgumentsAsSent(FuncMetadata):
    """Hands a tool its arguments as the caller sent them (lists and objects sent as JSON text decoded,
    as the SDK does), so the tool checks them against the request model itself: the SDK's own check
    would drop a misspelled argument silently and report a bad one as a multi-line pydantic dump."""

    def validate_arguments(self, arguments_to_validate: dict[str, Any]) -> dict[str, Any]:
        return self.pre_parse_json(arguments_to_validate)


def build_tool(spec: ToolSpec, link: HubLink) -> Tool:
    """The MCP tool for ``spec``: its input schema is the request model's (minus the fields the sidecar
    fills), compact and closed to unknown arguments; a call is checked against the request model — an
    unknown argument is refused naming the closest valid one, each bad value gets one line — and
    forwarded to the hub as one request."""
    operation = OPERATIONS[spec.operation]
    request_model, reply_model = operation.request, operation.reply
    render = spec.render or (lambda reply: reply.model_dump_json(exclude_none=True))

    async def tool(**arguments: Any) -> CallToolResult:
        set_by_sidecar = sorted(set(arguments) & set(spec.hidden))
        if set_by_sidecar:
            lines = (f"invalid: {name}: set by the sidecar, not an argument" for name in set_by_sidecar)
            raise ToolError("\n".join(lines))
        fields = {**given(arguments, request_model), **{name: fill(link) for name, fill in spec.hidden.items()}}
        try:
            request = request_model.model_validate(fields)
        except ValidationError as exc:
            message = describe_validation(exc, request_model, hidden=spec.hidden)
            raise ToolError(describe_error(InvalidRequest(message))) from None
        started = time.perf_counter()
        try:
            reply = await link.call(operation.name, request, reply_model)
        except RecallError as exc:
            log.info("%s failed: %s", spec.name, exc.code.value)
            raise ToolError(describe_error(exc)) from None
        log.debug("%s in %.1f ms", spec.name, (time.perf_counter() - started) * 1000)
        return CallToolResult(
            content=[TextContent(type="text", text=render(reply))],
            structured_content=reply.model_dump(mode="json"),
        )

    tool.__name__ = tool.__qualname__ = spec.name
    signature = inspect.Signature(
        parameters(spec, request_model), return_annotation=_Annotated[CallToolResult, reply_model]
    )
    setattr(tool, "__signature__", signature)  # noqa: B010 - read by inspect.signature, i.e. by the SDK
    derived = Tool.from_function(
        tool,
        name=spec.name,
        title=spec.title,
        description=spec.description,
        annotations=tool_annotations(spec),
        structured_output=True,
    )
    metadata = derived.fn_metadata
    output_schema = metadata.output_schema
    return derived.model_copy(
        update={
            "parameters": strict_input(derived.parameters),
            "fn_metadata": _ArgumentsAsSent(
                arg_model=metadata.arg_model,
                output_schema=compact(output_schema, structure_only=True) if output_schema else None,
                output_model=metadata.output_model,
                wrap_output=metadata.wrap_output,
            ),
        }
    )


def tool_annotations(spec: ToolSpec) -> ToolAnnotations:
    return ToolAnnotations(
        title=spec.title,
        read_only_hint=spec.read_only,
        destructive_hint=spec.destructive if not spec.read_only else False,
        idempotent_hint=spec.idempotent or spec.read_only,
        open_world_hint=False,
    )
