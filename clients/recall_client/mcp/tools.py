"""MCP tools derived from the wire contract.

Every tool is one hub operation of :data:`recall_schemas.OPERATIONS`. Its parameters are the fields of
the operation's request model — same names, types, constraints and defaults, so the JSON Schema an
LLM sees is the wire contract's — and its structured result is the operation's reply model. What is
written by hand here is only what an LLM needs to use the tool well: the description (what it is for,
when to prefer it, its limits), parameter descriptions, and behaviour hints. An operation without a
:class:`ToolSpec` still becomes a tool, described from its operation summary.

To add a tool for a new operation: add its line to ``OPERATIONS`` (the hub and client do that) and a
``ToolSpec`` to :data:`TOOL_SPECS` below.
"""

from __future__ import annotations

import difflib
import inspect
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError
from recall_schemas import OPERATIONS, ContextBlock, ErrorCode, InvalidRequest, RecallError, describe_validation
from recall_schemas.coordination import HandoffBrief

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


# --- shared parameter descriptions -------------------------------------------------------------------

BEAD_ID = "Id of the bead (memory), 'b_' followed by 4–32 lowercase letters/digits, as returned by other tools."
LIMIT = "Maximum number of results (1–500)."
FILTERS = (
    "Optional constraints, all of which must hold: tags (the bead carries every one), bead_types, "
    "session_id, group_id, created_by (an AI id), visibility, min_importance/max_importance (0–10), "
    "created_after/created_before (ISO 8601), status ('active'/'archived'; default any, archived rank lower), "
    "valid_at (ISO 8601: only facts that held then)."
)
REL_TYPES = (
    "Relationship types to follow; empty means all. FOLLOWS_FROM (came after/because of), RELATED_TO "
    "(about the same thing), UPDATES (supersedes), PART_OF (is a piece of)."
)
DIRECTION = "'out' (edges from this bead), 'in' (edges to it) or 'both' (default)."
SESSION_ID = "Id of the session, 's_' followed by 4–32 lowercase letters/digits."
GROUP_ID = "Id of the group, 'g_' followed by 4–32 lowercase letters/digits (see list_groups)."
VISIBILITY = (
    "Who may read the bead: 'private' (only you; the default), 'group' (current members of group_id; "
    "needs group_id) or 'global' (every agent on the hub). Enforced by the hub on every read."
)
AS_OF = "Optional ISO 8601 time with zone: answer as memory was then (later beads absent, old versions shown)."
IF_VERSION = (
    "Optional: the version you read. The change applies only if nobody changed it since; otherwise the "
    "answer is 'conflict' with the current version: read again and redo your change on what you find."
)


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
    ToolSpec(
        "create_bead",
        "Remember something",
        "Use when you learn something that should outlive this conversation: a decision and its reason, a "
        "finding, a fact, a todo, a handoff note. One idea per bead: a specific, searchable title, details "
        "in content. Search first to avoid a duplicate; to revise a memory use update_bead. Share with "
        "visibility='group' and a group_id (list_groups). Never store secrets. Returns the bead and its id.",
        params={
            "title": "Short, specific, searchable summary, e.g. 'Payments retry: 3 tries with 2^n s backoff'.",
            "content": "The memory in full: details, reasons, evidence, commands, links. Plain text or Markdown.",
            "bead_type": "Kind of memory: fact, decision, observation, finding, todo, handoff, summary, note, "
            "question or event.",
            "importance": "0–10; 5 is normal, 8 or more only for what others must not miss. A bounded ranking "
            "prior, never a filter.",
            "tags": "Labels to file the bead under and list it by (get_by_tag), e.g. ['payments', 'retry']. "
            "Letters, digits and _ . : / - ; at most 32.",
            "session_id": "Your current work session, 's_…'. Beads of a session are linked in order "
            "(get_by_session). A session belongs to the agent that first used it.",
            "subsession_id": "Optional finer label inside the session, e.g. a sub-task name.",
            "group_id": "Group the bead belongs to (required with visibility='group'); you must be a member.",
            "visibility": VISIBILITY,
            "metadata": "Optional JSON object of extra attributes (e.g. {'source': 'docs/api.md'}). Keys "
            "starting with '_recall' are reserved.",
            "provenance": "How you know it: 'observed' (seen directly, e.g. command output), 'authored' "
            "(your own conclusion; default), 'recorded' (copied from a source), 'derived' (inferred or "
            "summarised). Stronger provenance ranks higher.",
            "valid_from": "Optional ISO 8601 time with zone when the fact starts to hold in the world.",
            "valid_to": "Optional ISO 8601 time with zone when it stops holding (not before valid_from).",
        },
        hidden={"idempotency_key": _new_idempotency_key},
    ),
    ToolSpec(
        "create_beads",
        "Remember many things at once",
        "Use to store several memories in one call (the findings of a review, notes taken from a file): up to "
        "256 beads, each checked and stored on its own exactly as create_bead would. The reply has one item per "
        "bead, in order: its bead_id, or the error that kept that bead out (the others are stored).",
        params={
            "beads": "The beads (1–256), each an object with create_bead's parameters: title (required), "
            "content, bead_type, importance, tags, session_id, group_id, visibility, metadata, provenance, …. "
            "Give each an idempotency_key (any string unique to it) so that sending the batch again stores "
            "nothing twice.",
        },
    ),
    ToolSpec(
        "get_bead",
        "Read a memory",
        "Use when you have a bead_id and need the whole memory. A bead you may not see is reported as not "
        "found, exactly like one that does not exist.",
        params={"bead_id": BEAD_ID, "as_of": AS_OF},
        read_only=True,
    ),
    ToolSpec(
        "update_bead",
        "Change a memory",
        "Use to correct, extend, retire (status='archived') or share (visibility='group') a memory you "
        "created or whose group you are ops of; fields left out of `updates` stay as they are. When a "
        "decision is replaced rather than corrected, create the new bead and link it UPDATES the old one.",
        params={
            "bead_id": BEAD_ID,
            "updates": "Object with only the fields to change: title, content, bead_type, importance, tags "
            "(replaces the list), metadata (replaces the object), status ('active'/'archived'), visibility, "
            "group_id, valid_from/valid_to (ISO 8601 with zone; null clears).",
            "if_version": IF_VERSION + " Give it whenever others may edit the same memory.",
        },
        destructive=True,
        idempotent=True,
    ),
    ToolSpec(
        "edit_bead",
        "Tag, annotate or re-weigh a memory",
        "Use to add or remove tags, set or remove metadata keys, or raise or lower importance of a memory you "
        "created or whose group you are ops of, without reading it first: the hub applies the change to the "
        "memory as it is now, so edits by other agents at the same moment are never lost (prefer it to "
        "update_bead for these fields).",
        params={
            "bead_id": BEAD_ID,
            "add_tags": "Tags to add (kept once); a bead carries at most 32.",
            "remove_tags": "Tags to remove, if present.",
            "set_metadata": "JSON object of metadata keys to set; the bead's other keys stay.",
            "remove_metadata": "Metadata keys to remove, if present.",
            "add_importance": "Added to importance (−10..10; negative lowers it); the result stays within 0–10.",
            "if_version": IF_VERSION,
        },
        destructive=True,
    ),
    ToolSpec(
        "delete_bead",
        "Delete a memory",
        "Use only to remove a memory for good (with its relationships); only its creator or the group's ops "
        "may, and it cannot be undone. To retire a memory that may still explain history, archive it with "
        "update_bead instead.",
        params={"bead_id": BEAD_ID},
        destructive=True,
        idempotent=True,
    ),
    # --- recall --------------------------------------------------------------------------------------
    ToolSpec(
        "search_beads",
        "Search memory",
        "Use before a task or before storing a bead, when you need individual memories with their scores: "
        "finds what you may see (private, your groups', global) by meaning and keywords, best first, each "
        "hit with the full bead and how it was ranked. For a ready-to-read block within a token budget use "
        "`context`; for causes and consequences, `why`.",
        params={
            "query": "What you are looking for, in natural language or keywords (ids and error strings work "
            "best with mode='keyword').",
            "limit": LIMIT + " Default 20.",
            "filters": FILTERS,
            "mode": "'hybrid' (default; best in general), 'keyword' (exact words, identifiers, error "
            "messages) or 'vector' (meaning only).",
            "max_tokens": "Optional token budget: return only the best hits whose beads fit in it.",
            "use_priors": "Weigh importance, recency, provenance and status into the ranking (bounded). "
            "False ranks by relevance alone.",
            "as_of": AS_OF,
        },
        read_only=True,
    ),
    ToolSpec(
        "context",
        "Memory context for a task",
        "Use at the start of a task to load what the team knows: the most relevant memory for a query as "
        "one text block within a token budget, each entry with its type, date, author and bead_id. Use "
        "search_beads instead when you need scores or want to act on individual beads.",
        params={
            "query": "The task or question the context is for.",
            "max_tokens": "Token budget of the whole block (16–200000; default 1000).",
            "filters": FILTERS,
            "max_per_source": "At most this many beads cut from one source (beads sharing metadata.source, "
            "e.g. one document), so a single source cannot crowd out the rest (1–50; default 2).",
        },
        read_only=True,
        render=render_context,
    ),
    ToolSpec(
        "why",
        "Explain the background",
        "Use for 'why did we…', 'what led to…', 'what happened after…': the beads closest to the query, "
        "then the typed relationships around them up to `hops` steps — causes, decisions and follow-ups "
        "a similarity search alone misses. Nodes carry their depth, edges their type.",
        params={
            "query": "The topic or question to explain.",
            "hops": "How many relationship steps to follow from the seeds (0–4; default 2).",
            "rel_types": REL_TYPES,
            "seeds": "How many best-matching beads to start from (1–20; default 3).",
            "limit": "Maximum beads in the returned subgraph (1–500; default 50).",
            "filters": "Constraints on the seeds. " + FILTERS,
        },
        read_only=True,
    ),
    ToolSpec(
        "find_similar",
        "Similar memories",
        "Use before creating, merging or linking, to spot duplicates or related work: the beads whose meaning"
        " is closest to a given bead (cosine similarity at least `threshold`), most similar first.",
        params={
            "bead_id": BEAD_ID,
            "threshold": "Minimum cosine similarity, -1 to 1 (default 0.7; 0.9 or more means near-duplicate).",
            "limit": "Maximum results (1–500; default 10).",
        },
        read_only=True,
    ),
    # --- listings ------------------------------------------------------------------------------------
    ToolSpec(
        "get_recent",
        "Recent memories",
        "Use for a quick 'what happened lately': the most recently created memories you may see (private, "
        "group and global), newest first.",
        params={
            "limit": "Maximum beads (1–500; default 10).",
            "since": "Optional ISO 8601 time: only beads created at or after it.",
            "as_of": AS_OF,
        },
        read_only=True,
    ),
    ToolSpec(
        "get_by_session",
        "Memories of a session",
        "Use to replay one work session, to resume work or prepare a handoff: every bead of it you may see, "
        "oldest first.",
        params={"session_id": SESSION_ID, "limit": LIMIT + " Default 100.", "as_of": AS_OF},
        read_only=True,
    ),
    ToolSpec(
        "get_by_group",
        "Memories of a group",
        "Use to list one of your groups' memories, newest first. Only members may list a group; to anyone "
        "else it does not exist.",
        params={"group_id": GROUP_ID, "limit": LIMIT + " Default 100.", "as_of": AS_OF},
        read_only=True,
    ),
    ToolSpec(
        "get_by_tag",
        "Memories with a tag",
        "Use to list everything filed under one label: the beads you may see with a tag, newest first. To "
        "combine tags with a query, use search_beads with filters.tags.",
        params={
            "tag": "The tag, exactly as stored (case-sensitive).", "limit": LIMIT + " Default 100.", "as_of": AS_OF
        },
        read_only=True,
    ),
    # --- relationships -------------------------------------------------------------------------------
    ToolSpec(
        "add_relationship",
        "Link two memories",
        "Use to connect two beads you can see with a directed edge from_id → to_id: FOLLOWS_FROM (came "
        "after or because of), RELATED_TO (same subject), UPDATES (supersedes; the old one ranks lower), "
        "PART_OF (a piece of). The hub already links a session's beads in order and similar beads.",
        params={
            "from_id": "The bead the edge starts at. " + BEAD_ID,
            "to_id": "The bead the edge points to; must differ from from_id.",
            "rel_type": "FOLLOWS_FROM, RELATED_TO, UPDATES or PART_OF.",
            "properties": "Optional: strength (0–1), similarity (-1 to 1), replaces (true when from_id "
            "fully replaces to_id), metadata (JSON object).",
        },
        idempotent=True,
    ),
    ToolSpec(
        "get_relationships",
        "Links of a memory",
        "Use to see how one bead is linked: its edges — type, direction, properties, who linked them and when"
        " — to beads you may see.",
        params={
            "bead_id": BEAD_ID,
            "rel_type": "Only edges of this type (FOLLOWS_FROM, RELATED_TO, UPDATES, PART_OF); default all.",
            "direction": DIRECTION,
        },
        read_only=True,
    ),
    ToolSpec(
        "get_edges",
        "Links among many memories",
        "Use to see how a set of beads hang together in one call (e.g. the results of a search or a listing): "
        "every edge out of them to beads you may see.",
        params={
            "bead_ids": "Ids of the beads (up to 500); ids you cannot see add nothing.",
            "rel_types": "Only edges of these types; default all.",
        },
        read_only=True,
    ),
    ToolSpec(
        "traverse_graph",
        "Walk the memory graph",
        "Use when you start from a bead (not a question) and want what is connected to it: a breadth-first "
        "walk returning the beads reached, with their depth, and the edges between them; it never passes "
        "through a bead you may not see.",
        params={
            "start_id": "The bead to start from. " + BEAD_ID,
            "max_depth": "Maximum hops from the start (1–6; default 3).",
            "rel_types": REL_TYPES,
            "direction": DIRECTION,
            "limit": "Maximum beads returned (1–500; default 200).",
            "as_of": AS_OF,
        },
        read_only=True,
    ),
    # --- maintenance ---------------------------------------------------------------------------------
    ToolSpec(
        "deduplicate_beads",
        "Find or merge duplicates",
        "Use to find clusters of duplicate memories you may see: exact, and with similarity_threshold "
        "near-duplicates. Review with merge=false (default); merge=true keeps each cluster's oldest bead, "
        "records every author on it and archives the others you may change.",
        params={
            "bead_id": "Only the cluster of this bead.",
            "group_id": "Only beads of this group.",
            "similarity_threshold": "Also cluster near-duplicates whose cosine similarity reaches this, "
            "e.g. 0.95 (0–1). Omit for exact duplicates only.",
            "merge": "Merge each cluster (see above). Default false: only report.",
        },
        destructive=True,
    ),
    ToolSpec(
        "rank_by_importance",
        "Rank memories by importance",
        "Use to order a list of beads by importance, highest first (newest first on ties); beads you may not "
        "see are left out.",
        params={"bead_ids": "Ids of the beads to rank (1–500)."},
        read_only=True,
    ),
    ToolSpec(
        "decay_old_memories",
        "Archive stale memories",
        "Use to tidy up: archives (never deletes) the active beads you may change that nobody read or changed"
        " for threshold_days. Run with dry_run=true first; archived beads stay readable but rank lower.",
        params={
            "threshold_days": "Days without a read or change (default 90).",
            "dry_run": "Only report what would be archived.",
        },
        destructive=True,
        idempotent=True,
    ),
    # --- groups --------------------------------------------------------------------------------------
    ToolSpec(
        "list_groups",
        "My groups",
        "Use to find the group_id to share memories with (visibility='group'): the groups you belong to, "
        "with their members and roles.",
        read_only=True,
    ),
    ToolSpec(
        "list_members",
        "Members of a group",
        "Use to see who is in one of your groups and their roles (ops or agent). Members only.",
        params={"group_id": GROUP_ID},
        read_only=True,
    ),
    ToolSpec(
        "create_group",
        "Create a group",
        "Use to start a team that shares memory: creates a group with you as its ops (coordinator); then "
        "add_member the agents.",
        params={
            "name": "Human-readable name, e.g. 'payments team'.",
            "group_id": "Optional id to give it, 'g_…'; default a fresh one.",
        },
    ),
    ToolSpec(
        "add_member",
        "Add a group member",
        "Use, as a group's ops, to give an AI access to the group's beads, or to change a member's role.",
        params={
            "group_id": GROUP_ID,
            "ai_id": "The AI id to add: 'a_…' for an agent, 'o_…' for an ops.",
            "role": "'agent' (default) or 'ops' (may manage membership).",
        },
        idempotent=True,
    ),
    ToolSpec(
        "remove_member",
        "Remove a group member",
        "Use, as a group's ops, to take an AI out of the group; it loses access to the group's beads at once.",
        params={"group_id": GROUP_ID, "ai_id": "The AI id to remove."},
        destructive=True,
        idempotent=True,
    ),
    # --- sessions ------------------------------------------------------------------------------------
    ToolSpec(
        "get_session",
        "Session info",
        "Use to learn a work session's owner, group and state (active, ended or migrated, with its "
        "successor). Visible to its owner and its group's members.",
        params={"session_id": SESSION_ID},
        read_only=True,
    ),
    ToolSpec(
        "migrate_session_with_memories",
        "Move a session's memories",
        "Use when you resume work under a new session id: moves every bead of one of your sessions to another"
        " of yours in one atomic step, keeping ids and links; the old session is marked migrated.",
        params={
            "old_session_id": "The session whose beads move. " + SESSION_ID,
            "new_session_id": "The session they move to; yours, or new (it becomes yours).",
        },
    ),
    ToolSpec(
        "check_session",
        "Check a session",
        "Use when a session's memory looks wrong: reports beads whose session, group or author is "
        "inconsistent, whose search vector is missing, or whose FOLLOWS_FROM chain is broken. No problems "
        "means healthy.",
        params={"session_id": SESSION_ID},
        read_only=True,
    ),
    # --- agent state ---------------------------------------------------------------------------------
    ToolSpec(
        "ai_state_save",
        "Save my working state",
        "Use to keep your working state across restarts and handovers: todos, working notes, a context "
        "summary, custom state. Only the fields you give are replaced; private until you hand it over.",
        params={
            "todos": "Your whole todo list, replacing the saved one: [{text, done, bead_id?}] (at most 500).",
            "working_notes": "Free-form scratch notes, replacing the saved ones (at most 64 KiB).",
            "context_summary": "Where you are in your work, for a successor or a later you (at most 64 KiB).",
            "custom_state": "Any JSON object, replacing the saved one.",
            "if_version": IF_VERSION + " The version is in ai_state_get's answer (0: never saved).",
        },
        idempotent=True,
    ),
    ToolSpec(
        "ai_state_get",
        "My working state",
        "Use when you start or resume work: your saved todos, working notes, context summary, custom state, "
        "and whose state was merged into yours.",
        read_only=True,
    ),
    ToolSpec(
        "ai_state_transfer",
        "Hand my state to a peer",
        "Use when passing work to an AI who shares a group with you: your open todos, notes and summary are "
        "merged into theirs (nothing of theirs is lost).",
        params={"to_ai_id": "The AI id (a_… or o_…) that takes over your work."},
    ),
    # --- ops handoff ---------------------------------------------------------------------------------
    ToolSpec(
        "transfer_ops",
        "Hand over the ops role",
        "Use when you, the group's ops, hand your role to another member: in one atomic step the role "
        "moves, a handoff bead with your context summary is stored and linked, and your working state goes "
        "along. The new ops is notified and should call handoff_brief, then acknowledge_handoff.",
        params={
            "group_id": GROUP_ID,
            "to_agent": "The current member (AI id) who becomes the ops.",
            "context_summary": "What the new ops must know: state of the work, open decisions, risks, next "
            "steps (at most 64 KiB).",
            "bead_ids": "Beads the summary covers (at most 200); default the group's most important ones.",
        },
        hidden={"from_ops": _own_ai_id, "handoff_id": _new_handoff_id},
        destructive=True,
    ),
    ToolSpec(
        "acknowledge_handoff",
        "Accept an ops handoff",
        "Use, as the new ops of a group, to accept the handoff made to you (until then it reads as pending); "
        "the handoff_id is in handoff_brief's result.",
        params={"handoff_id": "Id of the handoff, 'h_…'."},
        idempotent=True,
    ),
    ToolSpec(
        "list_handoffs",
        "Past ops handoffs",
        "Use to see who led a group when: its ops transfers, newest first, with their status and when each was"
        " acknowledged.",
        params={"group_id": GROUP_ID, "limit": "Maximum handoffs (1–500; default 50)."},
        read_only=True,
    ),
    ToolSpec(
        "handoff_brief",
        "Brief for a (new) ops",
        "Use first after taking over a group: the latest handoff, the group's most important and recent "
        "memory within max_tokens, the open todos and the working state handed to you. Members only.",
        params={"group_id": GROUP_ID, "max_tokens": "Token budget of the rendered memory (64–100000; default 1500)."},
        read_only=True,
        render=render_brief,
    ),
    # --- key-value memory ----------------------------------------------------------------------------
    ToolSpec(
        "learn",
        "Remember a key-value note",
        "Use for a fact you will look up by exact name later (recall): stores a value under a key in your "
        "private key-value memory, e.g. 'build.command' = 'make test'; learning a key again replaces it. "
        "What others should find by meaning belongs in create_bead.",
        params={
            "key": "The name to file it under (at most 256 characters, not starting with whitespace).",
            "value": "The value (at most 64 KiB).",
            "metadata": "Optional JSON object of extra attributes.",
            "if_version": IF_VERSION + " The version is in recall's answer; 0 stores only if the key is new.",
        },
        idempotent=True,
    ),
    ToolSpec(
        "recall",
        "Look up a key-value note",
        "Use to look up a value you stored with learn, by its exact key; not_found if nothing was learnt "
        "under it. To search keys, values and beads by words, use unified_recall.",
        params={
            "key": "The exact key used with learn.",
            "max_length": "Optional: truncate the value to this many characters.",
        },
        read_only=True,
    ),
    ToolSpec(
        "unified_recall",
        "Search notes and memories",
        "Use when you do not remember whether you learnt something as a key-value note or stored it as a "
        "bead: searches both, notes sharing words with the query plus what search_beads finds.",
        params={
            "query": "What you are looking for.",
            "limit": "Maximum notes and maximum bead hits (1–100; default 10).",
            "filters": "Constraints on the beads. " + FILTERS,
        },
        read_only=True,
    ),
    ToolSpec(
        "promote_to_bead",
        "Turn a note into a memory",
        "Use to share a key-value note you learnt: turns it into a bead (title = key, content = value), e.g. "
        "with visibility='group'. Promoting the same value again returns the same bead.",
        params={
            "key": "The key of the note.",
            "bead_type": "Kind of memory: fact, decision, observation, finding, todo, handoff, summary, note, "
            "question or event.",
            "visibility": VISIBILITY,
            "group_id": "Group of the bead (required with visibility='group'); you must be a member.",
            "importance": "0–10; 5 is normal.",
            "tags": "Labels for the bead (at most 32).",
        },
    ),
    # --- change feed ---------------------------------------------------------------------------------
    ToolSpec(
        "changes_since",
        "What changed in a group",
        "Use to catch up on what your team did while you were away: the changes to a group's beads (or global"
        " ones, scope='global') after a cursor, oldest first. Keep the returned cursor and pass it next time.",
        params={
            "scope": "A group id you belong to, or 'global'.",
            "cursor": "The cursor returned by your previous call; omit to start from the beginning.",
            "limit": "Maximum changes (1–1000; default 200).",
        },
        read_only=True,
    ),
    # --- lifecycle: trust, supersede, history ---
    ToolSpec(
        "verify_bead",
        "Vouch for a memory",
        "Use after checking that a memory someone else wrote is right: records you as its verifier (with an "
        "optional note), which makes it rank a little higher. Verifying again changes nothing; your own beads "
        "cannot be verified by you.",
        params={"bead_id": "The bead you checked. " + BEAD_ID, "note": "Optional: what you checked, or how."},
        idempotent=True,
    ),
    ToolSpec(
        "reject_bead",
        "Mark a memory as wrong",
        "Use when a memory someone else wrote is wrong: records your rejection and reason; the bead stays "
        "readable but ranks lower in every search, and search explanations say it was rejected. If you have "
        "the right answer, store it and use supersede_bead.",
        params={"bead_id": "The wrong bead. " + BEAD_ID, "reason": "Why it is wrong (required)."},
        idempotent=True,
    ),
    ToolSpec(
        "list_stale",
        "Memories due for a re-check",
        "Use to find memories worth re-checking: unverified beads of weak provenance (recorded, derived) older "
        "than older_than_days, and beads whose source (metadata.source_bead_id) was superseded or is gone. "
        "Each comes with its causes; verify, reject or supersede them.",
        params={
            "group_id": "Optional: only this group's beads. " + GROUP_ID,
            "older_than_days": "Age after which an unverified weak bead counts as stale (default 30).",
            "limit": LIMIT + " Default 50.",
            "cursor": "The next_cursor of a previous reply, to continue; omit to start from the oldest.",
        },
        read_only=True,
    ),
    ToolSpec(
        "supersede_bead",
        "Replace a memory by a newer one",
        "Use when a memory is outdated and you stored its replacement: links new_id UPDATES old_id, so the old "
        "one ranks lower everywhere but stays readable. You need the right to change the old bead (its creator "
        "or the group's ops). Repeating it changes nothing.",
        params={
            "old_id": "The outdated bead. " + BEAD_ID,
            "new_id": "The bead that replaces it; must differ from old_id.",
            "reason": "Optional: why it was replaced.",
        },
        idempotent=True,
    ),
    ToolSpec(
        "get_history",
        "Versions of a memory",
        "Use to see how a memory changed over time: its older and newer versions you may see, oldest first "
        "(offset < 0 older, > 0 newer), and who replaced which, when and why.",
        params={"bead_id": BEAD_ID, "limit": "Maximum versions returned (1–200; default 50)."},
        read_only=True,
    ),
    # --- lifecycle: forget ---
    ToolSpec(
        "forget_bead",
        "Forget a memory for good",
        "Use when a memory must not exist any more (a leaked secret, personal data, a retraction): removes its "
        "content, vectors and links and leaves a tombstone (who, when, why). Unless allow_again, the same or "
        "nearly the same content is refused in that scope from then on. Only the creator or the group's ops.",
        params={
            "bead_id": BEAD_ID,
            "reason": "Why it is forgotten, kept on the tombstone (never repeat the content here).",
            "allow_again": "True: the same content may be stored again later; default false (refused).",
        },
        destructive=True,
    ),
    ToolSpec(
        "forget_by_author",
        "Forget everything an identity wrote",
        "Use when an identity leaves and its memories must go: forgets every bead it created in the groups "
        "you are ops of (or, for your own id, all of yours). Others' beads are untouched. Returns counts.",
        params={
            "ai_id": "The identity whose beads are forgotten ('a_…' or 'o_…').",
            "reason": "Why, kept on each tombstone.",
            "allow_again": "True: the same contents may be stored again later; default false (refused).",
        },
        destructive=True,
    ),
    ToolSpec(
        "list_forgotten",
        "List forgotten memories",
        "Use to review what was forgotten: the tombstones (bead id, content hash, who, when, why, still "
        "refused or not) of beads you forgot or of groups you are ops of. Never shows the forgotten content.",
        params={"group_id": "Only this group's tombstones (you must be a member).", "limit": LIMIT},
        read_only=True,
    ),
    ToolSpec(
        "allow_forgotten",
        "Allow forgotten content again",
        "Use to lift the refusal a forget left: the same content may then be stored again in that scope. Only "
        "who forgot the bead or the group's ops. The forgotten bead itself does not come back.",
        params={"bead_id": "Id of the forgotten bead, as listed by list_forgotten."},
        idempotent=True,
    ),
    # --- lifecycle: time ---
    # --- capture: extraction, collectors ---
    ToolSpec(
        "remember_extracted",
        "Remember the facts of a text",
        "Use to store what a longer text (notes, a transcript, a report) says: the hub splits it into facts by "
        "topic, each a bead linked PART_OF one topic hub per topic, in one step. Sending the same text again "
        "stores nothing new. For one idea you wrote yourself, create_bead is simpler.",
        params={
            "text": "The text to extract facts from (at most 256 KiB).",
            "visibility": VISIBILITY,
            "group_id": "Group of the beads (required with visibility='group'); you must be a member.",
            "session_id": SESSION_ID,
            "max_facts": "At most this many facts are stored (1–256; default 50).",
            "importance": "0–10 for every fact; 5 is normal.",
            "tags": "Labels put on every fact (at most 32).",
        },
        idempotent=True,
    ),
    ToolSpec(
        "remember_topics",
        "Remember facts under topics",
        "Use when you have already split knowledge by topic (sections of a document, say): stores each fact as "
        "a bead PART_OF its topic's hub, atomically. A fact with a key replaces the text stored under that key "
        "when it changed; without a key, the same fact is never stored twice.",
        params={
            "topics": "[{name, facts: [{title, content, key?, metadata?}]}]: at most 64 topics, 256 facts.",
            "visibility": VISIBILITY,
            "group_id": "Group of the beads (required with visibility='group'); you must be a member.",
            "session_id": SESSION_ID,
            "importance": "0–10 for every fact; 5 is normal.",
            "tags": "Labels put on every fact (at most 32).",
            "bead_type": "Kind of every fact: fact (default), note, decision, … (not 'topic').",
            "provenance": "How you know them: 'recorded' (copied from a source; default), 'observed', "
            "'authored' or 'derived'.",
            "hub_metadata": "JSON object put on topic hubs this call creates.",
        },
        idempotent=True,
    ),
    ToolSpec(
        "recall_where",
        "Where was this met",
        "Use to find where a subject came up: the files (documents), commits, sessions and commands (runs) "
        "of the memories about it that you may see, grouped by kind, best first, each with the bead ids.",
        params={
            "query": "The subject, in words or identifiers.",
            "limit": "How many matching beads to look at (1–100; default 30).",
            "filters": FILTERS,
        },
        read_only=True,
    ),
    # --- audit ---
    ToolSpec(
        "audit_log",
        "Read a group's audit trail",
        "Use as a group's ops to see who read and wrote the group's memories, when, and whether the hub "
        "allowed it (refusals carry their error code). Newest first. Members who are not ops are refused.",
        params={
            "group_id": "The group ('g_…') you are ops of.",
            "member": "Only this current member's entries ('a_…' or 'o_…').",
            "bead_id": "Only entries naming this bead of the group.",
            "limit": "Maximum number of entries (1–1000; default 100).",
        },
        read_only=True,
    ),
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
