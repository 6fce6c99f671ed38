"""Bad input: malformed JSON, wrong types, unknown fields, oversize payloads, bad ids, bad caller
tokens and Cypher/RediSearch-looking text. Each gets a typed error reply (the
``Nats-Service-Error-Code`` header and an :class:`ErrorReply` body); none crashes the hub or
changes stored data; text that looks like query syntax is stored verbatim and found as plain words.

Requests here go over a raw NATS connection, byte for byte, the way a buggy or hostile client
would send them; the last tests check that the client library refuses bad arguments itself.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
import secrets
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest
from conftest import ClientFactory, new_ai
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from recall_client import RecallClient
from recall_hub.context import HubContext
from recall_hub.retrieval.freshness import handed_off_work_done
from recall_hub.service.endpoints import ERROR_STATUS
from recall_hub.tooling.stack import EmbeddedStack
from recall_schemas import (
    OPERATIONS,
    ErrorCode,
    ErrorReply,
    InvalidRequest,
    RecallError,
    Unavailable,
    new_id,
)
from recall_schemas.subjects import REQUEST_ROOT, request_subject

ERROR_CODE_HEADER = "Nats-Service-Error-Code"
TIMEOUT = 10.0

# --- helpers ----------------------------------------------------------------------------------


@pytest.fixture
async def raw(stack: EmbeddedStack, hub: HubContext) -> AsyncIterator[NATS]:
    """A plain NATS connection: requests are sent exactly as written here."""
    nc = await nats.connect(stack.nats_url, connect_timeout=10)
    yield nc
    await nc.drain()


def encode(body: bytes | dict[str, Any]) -> bytes:
    return body if isinstance(body, bytes) else json.dumps(body).encode()


async def ask(nc: NATS, caller: str, op: str, body: bytes | dict[str, Any]) -> Msg:
    return await nc.request(request_subject(caller, op), encode(body), timeout=TIMEOUT)


def error_of(msg: Msg) -> ErrorReply | None:
    """The typed error a reply carries, or None for a success. Fails on anything untyped."""
    if not msg.headers or ERROR_CODE_HEADER not in msg.headers:
        return None
    reply = ErrorReply.model_validate_json(msg.data)
    assert msg.headers[ERROR_CODE_HEADER] == ERROR_STATUS[reply.error.code.value], (msg.headers, msg.data)
    return reply


def assert_error(msg: Msg, code: ErrorCode, context: object = "") -> ErrorReply:
    reply = error_of(msg)
    assert reply is not None, f"expected a {code.value} error, got a success: {msg.data[:300]!r} ({context})"
    assert reply.error.code is code, f"expected {code.value}, got {reply.error!r} ({context})"
    assert reply.error.message, context
    return reply


def assert_not_error(msg: Msg, codes: set[ErrorCode], context: object = "") -> None:
    reply = error_of(msg)
    assert reply is None or reply.error.code not in codes, f"{reply!r} ({context})"


def token() -> str:
    """A word that no other bead contains."""
    return f"zq{secrets.token_hex(6)}"


async def bead_count(hub: HubContext) -> int:
    rows = await hub.graph.ro_query("MATCH (b:Bead) RETURN count(b)")
    return int(rows[0][0])


NODE_KEY = "coalesce(n.bead_id, n.ai_id, n.group_id, n.session_id, n.handoff_id, toString(id(n)))"


async def graph_state(hub: HubContext) -> list[str]:
    """Every node and edge of the graph with all its properties, canonically ordered. Nodes are
    named by their own id (bead_id, ai_id, …), so a row mentions every bead it touches. Read times noted
    by earlier reads are written first, and the creates' after-commit work handed off before is done (as a read
    through the bus would wait for), so none lands between two snapshots."""
    await handed_off_work_done(hub)
    await hub.accessed.flush()
    nodes = await hub.graph.ro_query(f"MATCH (n) RETURN {NODE_KEY}, labels(n), properties(n)")
    edges = await hub.graph.ro_query(f"MATCH (n)-[r]->(b) RETURN {NODE_KEY}, type(r), properties(r), b")
    rows = [*nodes, *([start, kind, props, _key(end)] for start, kind, props, end in edges)]
    return sorted(json.dumps(row, sort_keys=True, default=str) for row in rows)


def _key(node: Any) -> str:
    p = node.properties
    for field in ("bead_id", "ai_id", "group_id", "session_id", "handoff_id"):
        if p.get(field):
            return str(p[field])
    return str(node.id)


async def redis_state(hub: HubContext) -> dict[bytes, bytes | None]:
    """The hub's other stored state in Redis (vectors, change logs, key-value memory, agent state…),
    except the audit log, which records every request by design."""
    state: dict[bytes, bytes | None] = {}
    async for key in hub.redis.scan_iter(match="recall:*"):
        if b":audit:" not in key:
            state[key] = await hub.redis.dump(key)
    return state


def valid_payloads(caller: str) -> dict[str, dict[str, Any]]:
    """A well-formed request for every operation, naming things that do not exist."""
    b, b2, g, s, other = new_id("b"), new_id("b"), new_id("g"), new_id("s"), new_ai()
    return {
        "create_bead": {"title": "well formed"},
        "create_beads": {"beads": [{"title": "well formed"}, {"title": "also well formed", "tags": ["t"]}]},
        "get_bead": {"bead_id": b},
        "update_bead": {"bead_id": b, "updates": {"title": "well formed"}},
        "edit_bead": {"bead_id": b, "add_tags": ["well-formed"], "set_metadata": {"k": 1}, "add_importance": 1},
        "delete_bead": {"bead_id": b},
        "search_beads": {"query": "well formed"},
        "find_similar": {"bead_id": b},
        "why": {"query": "well formed"},
        "context": {"query": "well formed"},
        "get_by_session": {"session_id": s},
        "get_by_group": {"group_id": g},
        "get_by_tag": {"tag": "well-formed"},
        "get_recent": {"limit": 1},
        "add_relationship": {"from_id": b, "to_id": b2, "rel_type": "RELATED_TO"},
        "get_relationships": {"bead_id": b},
        "get_edges": {"bead_ids": [b, b2]},
        "list_handoffs": {"group_id": g},
        "traverse_graph": {"start_id": b},
        "deduplicate_beads": {"group_id": g},
        "rank_by_importance": {"bead_ids": [b]},
        "decay_old_memories": {"threshold_days": 36500, "dry_run": True},
        "create_group": {"name": "well formed"},
        "add_member": {"group_id": g, "ai_id": other},
        "remove_member": {"group_id": g, "ai_id": other},
        "list_members": {"group_id": g},
        "list_groups": {},
        "get_session": {"session_id": s},
        "migrate_session_with_memories": {"old_session_id": s, "new_session_id": new_id("s")},
        "check_session": {"session_id": s},
        "ai_state_save": {"working_notes": "well formed"},
        "ai_state_get": {},
        "ai_state_transfer": {"to_ai_id": other},
        "transfer_ops": {"group_id": g, "from_ops": caller, "to_agent": other, "context_summary": "well formed"},
        "acknowledge_handoff": {"handoff_id": f"h_{secrets.token_hex(6)}"},
        "handoff_brief": {"group_id": g},
        "learn": {"key": "well formed", "value": "well formed"},
        "recall": {"key": "well formed"},
        "unified_recall": {"query": "well formed"},
        "promote_to_bead": {"key": "well formed"},
        "changes_since": {"scope": "global"},
        "verify_bead": {"bead_id": b},
        "reject_bead": {"bead_id": b, "reason": "well formed"},
        "list_stale": {"older_than_days": 1},
        "supersede_bead": {"old_id": b, "new_id": b2},
        "get_history": {"bead_id": b},
        "forget_bead": {"bead_id": b, "reason": "well formed"},
        "forget_by_author": {"ai_id": other, "reason": "well formed"},
        "list_forgotten": {"group_id": g},
        "allow_forgotten": {"bead_id": b},
        "remember_extracted": {"text": "Well formed.", "visibility": "group", "group_id": g},
        "remember_topics": {
            "topics": [{"name": "well formed", "facts": [{"title": "well formed"}]}], "visibility": "group",
            "group_id": g,
        },
        "recall_where": {"query": "well formed"},
        "audit_log": {"group_id": g},
    }


def with_value(payload: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``payload`` with ``value`` at ``path`` ("a.b" for nesting, "a[0]" for a list item)."""
    result = copy.deepcopy(payload)
    parts = path.split(".")
    node = result
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    last = parts[-1]
    if last.endswith("[0]"):
        node[last[:-3]] = [value]
    else:
        node[last] = value
    return result


# --- every operation is covered -----------------------------------------------------------------


def test_every_operation_has_a_well_formed_request_here() -> None:
    assert set(valid_payloads(new_ai())) == set(OPERATIONS), "extend valid_payloads() for new operations"


@pytest.mark.parametrize("op", sorted(OPERATIONS))
async def test_the_well_formed_requests_are_accepted(raw: NATS, op: str) -> None:
    """The control for every rejection below: without the defect, the same request is not invalid."""
    caller = new_ai()
    msg = await ask(raw, caller, op, valid_payloads(caller)[op])
    assert_not_error(msg, {ErrorCode.INVALID, ErrorCode.INTERNAL, ErrorCode.TOO_LARGE}, op)


# --- malformed JSON -----------------------------------------------------------------------------

MALFORMED = [
    pytest.param(b"not json", id="text"),
    pytest.param(b"{", id="truncated"),
    pytest.param(b'{"title": "x",}', id="trailing-comma"),
    pytest.param(b"{'title': 'x'}", id="single-quotes"),
    pytest.param(b'{"title": }', id="missing-value"),
    pytest.param(b"[]", id="array"),
    pytest.param(b'[{"title": "x"}]', id="array-of-object"),
    pytest.param(b"null", id="null"),
    pytest.param(b"42", id="number"),
    pytest.param(b'"a string"', id="string"),
    pytest.param(b"true", id="bool"),
    pytest.param(b"\xff\xfe\xfd", id="not-utf8"),
    pytest.param(b'{"title": "\xff"}', id="not-utf8-inside-string"),
    pytest.param(b'{"title": "\\ud800"}', id="lone-surrogate"),
    pytest.param(b"\x00", id="nul-byte"),
    pytest.param(b'{"title": "x"} {"title": "y"}', id="two-documents"),
    pytest.param(b'{"metadata": ' + b'{"a": ' * 400 + b"1" + b"}" * 400 + b"}", id="nested-400-deep"),
]


@pytest.mark.parametrize("body", MALFORMED)
async def test_malformed_json_is_invalid_on_every_operation(raw: NATS, body: bytes) -> None:
    caller = new_ai()
    replies = await asyncio.gather(*(ask(raw, caller, op, body) for op in OPERATIONS))
    for op, msg in zip(OPERATIONS, replies, strict=True):
        assert_error(msg, ErrorCode.INVALID, op)


# --- unknown fields, and payloads that name a caller ------------------------------------------

CALLER_FIELDS = ("created_by", "caller", "ai_id", "as_ai", "owner", "identity")


@pytest.mark.parametrize("op", sorted(OPERATIONS))
async def test_unknown_fields_are_invalid(raw: NATS, op: str) -> None:
    caller, someone_else = new_ai(), new_ai()
    base = valid_payloads(caller)[op]
    fields = [f for f in CALLER_FIELDS if f not in OPERATIONS[op].request.model_fields]
    replies = await asyncio.gather(*(ask(raw, caller, op, {**base, f: someone_else}) for f in fields))
    for field, msg in zip(fields, replies, strict=True):
        reply = assert_error(msg, ErrorCode.INVALID, (op, field))
        assert field in reply.error.message, "the message names the offending field"


NESTED_UNKNOWN = [
    ("update_bead", "updates.created_by"),
    ("update_bead", "updates.bead_id"),
    ("update_bead", "updates.created_at"),
    ("update_bead", "updates.corroborated_by"),
    ("search_beads", "filters.caller"),
    ("why", "filters.owner"),
    ("add_relationship", "properties.created_by"),
    ("ai_state_save", "todos[0]"),
]


@pytest.mark.parametrize(("op", "path"), NESTED_UNKNOWN)
async def test_nested_unknown_fields_are_invalid(raw: NATS, op: str, path: str) -> None:
    caller = new_ai()
    value: Any = new_ai()
    if path == "todos[0]":
        value = {"text": "a todo", "assigned_by": new_ai()}
    msg = await ask(raw, caller, op, with_value(valid_payloads(caller)[op], path, value))
    assert_error(msg, ErrorCode.INVALID, path)


async def test_a_payload_naming_another_caller_changes_nothing(
    raw: NATS, connect: ClientFactory, hub: HubContext
) -> None:
    ops = await connect(new_ai("o"))
    agent = await connect(new_ai())
    group = await ops.create_group("impersonation")
    await ops.add_member(group.group_id, agent.ai_id)
    before = await graph_state(hub)
    # An agent writing "as" the ops, and an agent handing over the ops's role.
    impersonate = {"title": "written by the ops, honest", "created_by": ops.ai_id}
    assert_error(await ask(raw, agent.ai_id, "create_bead", impersonate), ErrorCode.INVALID)
    handover = {
        "group_id": group.group_id,
        "from_ops": ops.ai_id,
        "to_agent": agent.ai_id,
        "context_summary": "take over",
    }
    reply = error_of(await ask(raw, agent.ai_id, "transfer_ops", handover))
    assert reply is not None and reply.error.code in (ErrorCode.FORBIDDEN, ErrorCode.INVALID), reply
    assert await graph_state(hub) == before
    roles = {m.ai_id: m.role.value for m in (await ops.list_members(group.group_id)).members}
    assert roles == {ops.ai_id: "ops", agent.ai_id: "agent"}


# --- wrong types and out-of-range values ----------------------------------------------------------

B, G, S = new_id("b"), new_id("g"), new_id("s")
WRONG: list[tuple[str, dict[str, Any]]] = [
    ("create_bead", {}),
    ("create_bead", {"title": 42}),
    ("create_bead", {"title": ""}),
    ("create_bead", {"title": None}),
    ("create_bead", {"title": ["x"]}),
    ("create_bead", {"title": "x" * 513}),
    ("create_bead", {"title": "x", "content": 5}),
    ("create_bead", {"title": "x", "content": "x" * 262_145}),
    ("create_bead", {"title": "x", "importance": "high"}),
    ("create_bead", {"title": "x", "importance": 11}),
    ("create_bead", {"title": "x", "importance": -1}),
    ("create_bead", {"title": "x", "importance": 5.5}),
    ("create_bead", {"title": "x", "tags": "one-tag"}),
    ("create_bead", {"title": "x", "tags": [1]}),
    ("create_bead", {"title": "x", "tags": [f"t{i}" for i in range(33)]}),
    ("create_bead", {"title": "x", "bead_type": "gossip"}),
    ("create_bead", {"title": "x", "visibility": "public"}),
    ("create_bead", {"title": "x", "visibility": "group"}),
    ("create_bead", {"title": "x", "metadata": []}),
    ("create_bead", {"title": "x", "metadata": "{}"}),
    ("create_bead", {"title": "x", "metadata": {"_recall_owner": "a_abcd1234"}}),
    ("create_bead", {"title": "x", "provenance": "rumour"}),
    ("create_bead", {"title": "x", "idempotency_key": ""}),
    ("create_bead", {"title": "x", "idempotency_key": "has space"}),
    ("create_bead", {"title": "x", "idempotency_key": "k" * 129}),
    ("create_bead", {"title": "x", "subsession_id": "s" * 65}),
    ("update_bead", {"bead_id": B}),
    ("update_bead", {"bead_id": B, "updates": "title"}),
    ("update_bead", {"bead_id": B, "updates": {}}),
    ("update_bead", {"bead_id": B, "updates": {"title": None}}),
    ("update_bead", {"bead_id": B, "updates": {"status": "deleted"}}),
    ("update_bead", {"bead_id": B, "updates": {"importance": 99}}),
    ("update_bead", {"bead_id": B, "updates": {"metadata": {"_recall_x": 1}}}),
    ("edit_bead", {"bead_id": B}),
    ("edit_bead", {"bead_id": B, "add_tags": "t"}),
    ("edit_bead", {"bead_id": B, "add_tags": ["bad tag"]}),
    ("edit_bead", {"bead_id": B, "add_tags": ["t"], "remove_tags": ["t"]}),
    ("edit_bead", {"bead_id": B, "add_importance": 11}),
    ("edit_bead", {"bead_id": B, "set_metadata": {"_recall_x": 1}}),
    ("edit_bead", {"bead_id": B, "remove_metadata": ["_recall_x"]}),
    ("edit_bead", {"bead_id": B, "set_metadata": {"k": 1}, "remove_metadata": ["k"]}),
    ("edit_bead", {"bead_id": B, "add_tags": ["t"], "if_version": 0}),
    ("learn", {"key": "k", "value": "v", "if_version": -1}),
    ("ai_state_save", {"if_version": "one"}),
    ("search_beads", {"query": ""}),
    ("search_beads", {"query": 5}),
    ("search_beads", {"query": "x" * 4097}),
    ("search_beads", {"query": "x", "limit": 0}),
    ("search_beads", {"query": "x", "limit": 501}),
    ("search_beads", {"query": "x", "mode": "fuzzy"}),
    ("search_beads", {"query": "x", "filters": "tags"}),
    ("search_beads", {"query": "x", "filters": {"tags": "t"}}),
    ("search_beads", {"query": "x", "filters": {"min_importance": 11}}),
    ("search_beads", {"query": "x", "filters": {"created_after": "yesterday"}}),
    ("search_beads", {"query": "x", "max_tokens": 0}),
    ("find_similar", {"bead_id": B, "threshold": 2}),
    ("find_similar", {"bead_id": B, "limit": 0}),
    ("why", {"query": "x", "hops": 5}),
    ("why", {"query": "x", "seeds": 0}),
    ("why", {"query": "x", "rel_types": ["KNOWS"]}),
    ("context", {"query": "x", "max_tokens": 1}),
    ("get_recent", {"limit": -1}),
    ("get_recent", {"since": "yesterday"}),
    ("get_by_tag", {"tag": "two words"}),
    ("get_by_session", {"session_id": S, "limit": 10_000}),
    ("add_relationship", {"from_id": B, "to_id": B, "rel_type": "RELATED_TO"}),
    ("add_relationship", {"from_id": B, "to_id": new_id("b"), "rel_type": "LIKES"}),
    ("add_relationship", {"from_id": B, "to_id": new_id("b"), "rel_type": "RELATED_TO", "properties": {"strength": 2}}),
    ("add_relationship", {"from_id": B, "to_id": new_id("b"), "rel_type": "RELATED_TO", "properties": []}),
    ("get_relationships", {"bead_id": B, "direction": "sideways"}),
    ("traverse_graph", {"start_id": B, "max_depth": 0}),
    ("traverse_graph", {"start_id": B, "max_depth": 7}),
    ("traverse_graph", {"start_id": B, "rel_types": "RELATED_TO"}),
    ("traverse_graph", {"start_id": B, "limit": 1000}),
    ("deduplicate_beads", {"similarity_threshold": 0}),
    ("deduplicate_beads", {"similarity_threshold": 1.5}),
    ("deduplicate_beads", {"merge": "yes please"}),
    ("rank_by_importance", {"bead_ids": []}),
    ("rank_by_importance", {"bead_ids": B}),
    ("rank_by_importance", {"bead_ids": [new_id("b") for _ in range(501)]}),
    ("decay_old_memories", {"threshold_days": 0}),
    ("decay_old_memories", {"threshold_days": -1}),
    ("decay_old_memories", {"threshold_days": 36501}),
    ("decay_old_memories", {"threshold_days": "ninety"}),
    ("create_group", {"name": ""}),
    ("create_group", {"name": "n" * 201}),
    ("add_member", {"group_id": G, "ai_id": new_ai(), "role": "king"}),
    ("ai_state_save", {"todos": "buy milk"}),
    ("ai_state_save", {"todos": [{"text": ""}]}),
    ("ai_state_save", {"working_notes": 42}),
    ("transfer_ops", {"group_id": G, "from_ops": new_ai(), "to_agent": new_ai()}),
    ("acknowledge_handoff", {"handoff_id": "handoff-1"}),
    ("handoff_brief", {"group_id": G, "max_tokens": 1}),
    ("learn", {"key": "", "value": "v"}),
    ("learn", {"key": " leading space", "value": "v"}),
    ("learn", {"key": "k", "value": 5}),
    ("recall", {"key": "k", "max_length": 0}),
    ("unified_recall", {"query": "x", "limit": 101}),
    ("changes_since", {"scope": "everything"}),
    ("changes_since", {"scope": "global", "limit": 0}),
]


@pytest.mark.parametrize(("op", "payload"), WRONG, ids=[f"{op}-{i}" for i, (op, _) in enumerate(WRONG)])
async def test_wrong_types_and_values_are_invalid(raw: NATS, op: str, payload: dict[str, Any]) -> None:
    assert_error(await ask(raw, new_ai(), op, payload), ErrorCode.INVALID, payload)


# --- bad ids --------------------------------------------------------------------------------------


def bad_ids(kind: str) -> list[Any]:
    """Ways an id of ``kind`` ("b", "g", "s", "a") can be wrong."""
    other = "g" if kind != "g" else "b"
    return [
        "",
        f"{kind}_",
        f"{kind}_abc",
        f"{kind}_" + "a" * 33,
        f"{kind.upper()}_abcd1234",
        f"{kind}_ABCD1234",
        f"{kind}_ab.cd1234",
        f"{kind}_ab*cd1234",
        f"{kind}_ab>cd1234",
        f"{kind}_ab cd1234",
        f"{kind}_abcd1234\n",
        f"{kind}_abcd1234\u0000",
        f"{kind}_ábcd1234",
        f"{kind}-abcd1234",
        f"{other}_abcd1234",
        f"{kind}_abcd1234' OR '1'='1",
        "') MATCH (n) DETACH DELETE n //",
        42,
        [f"{kind}_abcd1234"],
        {"id": f"{kind}_abcd1234"},
    ]


ID_SITES = [
    ("get_bead", "bead_id", "b"),
    ("update_bead", "bead_id", "b"),
    ("delete_bead", "bead_id", "b"),
    ("find_similar", "bead_id", "b"),
    ("get_relationships", "bead_id", "b"),
    ("traverse_graph", "start_id", "b"),
    ("add_relationship", "from_id", "b"),
    ("add_relationship", "to_id", "b"),
    ("rank_by_importance", "bead_ids[0]", "b"),
    ("deduplicate_beads", "bead_id", "b"),
    ("create_bead", "group_id", "g"),
    ("create_bead", "session_id", "s"),
    ("get_by_group", "group_id", "g"),
    ("get_by_session", "session_id", "s"),
    ("add_member", "group_id", "g"),
    ("add_member", "ai_id", "a"),
    ("remove_member", "ai_id", "a"),
    ("list_members", "group_id", "g"),
    ("search_beads", "filters.created_by", "a"),
    ("search_beads", "filters.session_id", "s"),
    ("migrate_session_with_memories", "new_session_id", "s"),
    ("ai_state_transfer", "to_ai_id", "a"),
    ("transfer_ops", "to_agent", "a"),
    ("create_group", "group_id", "g"),
]


@pytest.mark.parametrize(("op", "path", "kind"), ID_SITES, ids=[f"{op}.{path}" for op, path, _ in ID_SITES])
async def test_bad_ids_are_invalid_and_missing_ids_are_not_found(raw: NATS, op: str, path: str, kind: str) -> None:
    caller = new_ai()
    base = valid_payloads(caller)[op]
    values = bad_ids(kind)
    replies = await asyncio.gather(*(ask(raw, caller, op, with_value(base, path, v)) for v in values))
    for value, msg in zip(values, replies, strict=True):
        assert_error(msg, ErrorCode.INVALID, (path, value))
    if op in ("get_bead", "update_bead", "delete_bead", "find_similar", "get_relationships", "traverse_graph"):
        assert_error(await ask(raw, caller, op, with_value(base, path, new_id("b"))), ErrorCode.NOT_FOUND)


# --- the caller token in the subject ---------------------------------------------------------------

BAD_CALLERS = [
    "x_bad",
    "x_abcd1234",
    "a_UPPER123",
    "a_abc",
    "a_" + "a" * 33,
    "b_abcd1234",
    "g_abcd1234",
    "s_abcd1234",
    "a-abcd1234",
    "o_abcd_1234",
    "A_abcd1234",
    "a_abcd%2e1",
    "_INBOX",
]


@pytest.mark.parametrize("caller", BAD_CALLERS)
async def test_a_bad_caller_token_in_the_subject_is_invalid_and_writes_nothing(
    raw: NATS, hub: HubContext, caller: str
) -> None:
    before = await bead_count(hub)
    for op, body in (
        ("create_bead", {"title": f"from {caller}"}),
        ("create_group", {"name": f"from {caller}"}),
        ("get_recent", {}),
        ("learn", {"key": "k", "value": "v"}),
    ):
        msg = await raw.request(f"{REQUEST_ROOT}.{caller}.{op}", encode(body), timeout=TIMEOUT)
        reply = assert_error(msg, ErrorCode.INVALID, (caller, op))
        assert "caller" in reply.error.message
    assert await bead_count(hub) == before
    rows = await hub.graph.ro_query("MATCH (a:AI {ai_id: $c}) RETURN count(a)", {"c": caller})
    assert rows[0][0] == 0
    assert await hub.redis.exists(hub.keys.kv(caller)) == 0


# --- oversize payloads ----------------------------------------------------------------------------


async def test_a_payload_over_the_configured_limit_is_too_large_and_one_at_the_limit_is_served(
    raw: NATS, hub: HubContext
) -> None:
    limit = hub.settings.max_payload_bytes
    assert limit + 1 <= raw.max_payload, "the hub's limit must sit below the bus's, or it is never reached"
    caller = new_ai()
    title = f"big {token()}"

    def padded(body: dict[str, Any], size: int) -> bytes:
        data = json.dumps(body).encode()
        return data + b" " * (size - len(data))  # trailing whitespace keeps the JSON valid

    before = await bead_count(hub)
    for op, body in (
        ("create_bead", {"title": title}),
        ("get_bead", {"bead_id": new_id("b")}),
        ("search_beads", {"query": title}),
        ("learn", {"key": "big", "value": "v"}),
    ):
        over = padded(body, limit + 1)
        assert len(over) == limit + 1
        reply = assert_error(await ask(raw, caller, op, over), ErrorCode.TOO_LARGE, op)
        assert str(limit) in reply.error.message
    # A payload made of mostly content, not padding, is refused too.
    stuffed = json.dumps({"title": title, "content": "x" * (limit + 16)}).encode()
    assert_error(await ask(raw, caller, "create_bead", stuffed), ErrorCode.TOO_LARGE)
    assert await bead_count(hub) == before
    assert await hub.redis.exists(hub.keys.kv(caller)) == 0

    # Exactly at the limit: served.
    at_limit = padded({"title": title}, limit)
    msg = await ask(raw, caller, "create_bead", at_limit)
    assert error_of(msg) is None, msg.data[:300]
    assert json.loads(msg.data)["title"] == title
    assert await bead_count(hub) == before + 1


# --- Cypher- and RediSearch-looking text ----------------------------------------------------------

QUERY_LOOKING = [
    "') MATCH (n) DETACH DELETE n //",
    '"}) MATCH (n) DETACH DELETE n //',
    "'}) WITH 1 AS x CALL db.idx.fulltext.drop('Bead') //",
    "$caller",
    "\\",
    '\\"',
    "`backtick` {props}",
    "*",
    "@title:{x}",
    "@tags:{a|b}",
    '"unclosed',
    "|",
    "-",
    "-negated word",
    "%fuzzy%",
    "~optional",
    "(a|b) -c",
    "word*",
    "::",
    "/* comment */ RETURN 1;",
    "'; DROP GRAPH recall_test; --",
    "FT.DROPINDEX Bead DD",
    "\n}) RETURN 1 //\r\n",
    "\u202e reversed \u2028 line \ufeff bom",
    "emoji 🚀 ünïcödé",
]


@pytest.mark.parametrize("text", QUERY_LOOKING)
async def test_query_looking_text_is_stored_verbatim_and_found_as_plain_words(
    connect: ClientFactory, text: str
) -> None:
    writer = await connect(new_ai())
    word = token()
    tag = f"{word}:x/y-z.w_v"
    bead = await writer.create_bead(
        f"{text} {word}",
        f"{word} {text}",
        metadata={text: text, "nested": [text, {text: text}]},
        subsession_id=text[:64],
        tags=[tag],
    )
    got = await writer.get_bead(bead.bead_id)
    assert got.title == f"{text} {word}"
    assert got.content == f"{word} {text}"
    assert got.metadata == {text: text, "nested": [text, {text: text}]}
    assert got.subsession_id == text[:64]
    assert got.tags == [tag]
    assert [b.bead_id for b in await writer.get_by_tag(tag)] == [bead.bead_id]

    # Found by its plain words, alone or together with the query-looking text.
    for query, mode in ((word, "keyword"), (f"{text} {word}", "hybrid")):
        hits = (await writer.search_beads(query, limit=50, mode=mode)).hits
        assert bead.bead_id in [h.bead.bead_id for h in hits], (query, mode)
    filtered = await writer.search_beads(text + " " + word, filters={"tags": [tag]}, mode="keyword")
    assert [h.bead.bead_id for h in filtered.hits] == [bead.bead_id]
    # The text alone is only words to the keyword index: without a word in it, it finds nothing.
    result = await writer.search_beads(text, limit=50, mode="keyword")
    if not re.search(r"\w", text):
        assert result.hits == []


async def test_storing_query_looking_text_changes_nothing_else(connect: ClientFactory, hub: HubContext) -> None:
    """Every text above, in every free-text field at once; then the rest of the graph is compared."""
    ops = await connect(new_ai("o"))
    writer = await connect(new_ai())
    group = await ops.create_group("query-looking text")
    await ops.add_member(group.group_id, writer.ai_id)
    anchor = await writer.create_bead("anchor for the links", visibility="group", group_id=group.group_id)
    before = await graph_state(hub)
    count_before = await bead_count(hub)

    sessions = [new_id("s") for _ in QUERY_LOOKING]
    beads = await asyncio.gather(
        *(
            writer.create_bead(
                text,
                text,
                metadata={text: text},
                subsession_id=text[:64],
                visibility="group",
                group_id=group.group_id,
                session_id=session,
            )
            for text, session in zip(QUERY_LOOKING, sessions, strict=True)
        )
    )
    for text, bead in zip(QUERY_LOOKING, beads, strict=True):
        await writer.add_relationship(anchor.bead_id, bead.bead_id, "RELATED_TO", metadata={text: text})
        await writer.update_bead(bead.bead_id, title=f"{text} (edited)", content=text + text)
    new_groups = [await writer.create_group(text) for text in QUERY_LOOKING]
    assert [g.name for g in new_groups] == QUERY_LOOKING

    # What existed is unchanged: the graph minus the new beads, groups, sessions and their edges.
    assert await bead_count(hub) == count_before + len(QUERY_LOOKING)
    new_ids = {b.bead_id for b in beads} | {g.group_id for g in new_groups} | set(sessions)
    after = [row for row in await graph_state(hub) if not any(i in row for i in new_ids)]
    assert after == before
    assert (await writer.get_bead(anchor.bead_id)).model_dump(exclude={"accessed_at"}) == anchor.model_dump(
        exclude={"accessed_at"}
    )
    stored = {b.bead_id: b for b in await ops.get_by_group(group.group_id, limit=100)}
    for text, bead in zip(QUERY_LOOKING, beads, strict=True):
        assert (stored[bead.bead_id].title, stored[bead.bead_id].content) == (f"{text} (edited)", text + text)
        assert stored[bead.bead_id].metadata == {text: text}
    links = await writer.get_relationships(anchor.bead_id, direction="out")
    assert {r.to_id: r.properties.metadata for r in links if r.to_id in new_ids} == {
        b.bead_id: {t: t} for t, b in zip(QUERY_LOOKING, beads, strict=True)
    }


@pytest.mark.parametrize("query", QUERY_LOOKING)
async def test_query_looking_searches_are_answered_on_every_search_path(raw: NATS, query: str) -> None:
    caller = new_ai()
    requests = [
        ("search_beads", {"query": query, "mode": "keyword"}),
        ("search_beads", {"query": query, "mode": "vector", "limit": 5}),
        ("why", {"query": query, "hops": 1, "limit": 5}),
        ("context", {"query": query, "max_tokens": 100}),
        ("unified_recall", {"query": query, "limit": 5}),  # hybrid search beside the key-value memory
    ]
    replies = await asyncio.gather(*(ask(raw, caller, op, body) for op, body in requests))
    for (op, _), msg in zip(requests, replies, strict=True):
        assert error_of(msg) is None, (op, msg.data[:300])


QUERY_LOOKING_TAGS = ["') MATCH", "*", "@title:{x}", "a|b", "-lead", "a b", "a'b", 'a"b', "a\nb", "a)", "`a`", ""]


async def test_query_looking_tags_are_invalid(raw: NATS, hub: HubContext) -> None:
    caller = new_ai()
    before = await bead_count(hub)
    for tag in QUERY_LOOKING_TAGS:
        assert_error(await ask(raw, caller, "create_bead", {"title": "t", "tags": [tag]}), ErrorCode.INVALID, tag)
        assert_error(await ask(raw, caller, "get_by_tag", {"tag": tag}), ErrorCode.INVALID, tag)
        search = {"query": "t", "filters": {"tags": [tag]}}
        assert_error(await ask(raw, caller, "search_beads", search), ErrorCode.INVALID, tag)
    assert await bead_count(hub) == before


async def test_query_looking_key_value_memory_is_stored_verbatim(connect: ClientFactory) -> None:
    client = await connect(new_ai())
    keys = []
    for text in QUERY_LOOKING:
        key = f"{token()} {text}".replace("\n", " ")  # a key is one line
        await client.learn(key, text, metadata={text: text})
        entry = await client.recall(key)
        assert (entry.key, entry.value, entry.metadata) == (key, text, {text: text})
        keys.append(key)
    found = await client.unified_recall(keys[0].split()[0])
    assert [e.key for e in found.entries] == [keys[0]]


# --- NUL characters: valid JSON, valid strings, and the graph store's query text ----------------

NUL_FIELDS = ["title", "content", "subsession_id", "metadata"]


@pytest.mark.parametrize(
    "field",
    NUL_FIELDS,
)
async def test_a_nul_character_is_stored_verbatim_or_refused_as_invalid(connect: ClientFactory, field: str) -> None:
    client = await connect(new_ai())
    value = "before\u0000after"
    title, content, fields = "nul", "nul", {}
    if field == "title":
        title = value
    elif field == "content":
        content = value
    elif field == "subsession_id":
        fields["subsession_id"] = value
    else:
        fields["metadata"] = {"k": value}
    try:
        bead = await client.create_bead(title, content, **fields)
    except InvalidRequest:
        return  # refusing it is fine; an internal error is not
    got = await client.get_bead(bead.bead_id)
    assert (got.title, got.content, got.subsession_id, got.metadata) == (
        title,
        content,
        fields.get("subsession_id"),
        fields.get("metadata", {}),
    )


async def test_a_nul_character_in_a_group_name_is_stored_verbatim_or_refused_as_invalid(
    connect: ClientFactory,
) -> None:
    client = await connect(new_ai("o"))
    try:
        group = await client.create_group("team\u0000name")
    except InvalidRequest:
        return
    assert group.name == "team\u0000name"


# --- promoting a key-value memory ----------------------------------------------------------------


async def test_promoting_to_a_group_bead_without_a_group_is_invalid(raw: NATS, hub: HubContext) -> None:
    caller = new_ai()
    assert error_of(await ask(raw, caller, "learn", {"key": "note", "value": "to share"})) is None
    before = await bead_count(hub)
    msg = await ask(raw, caller, "promote_to_bead", {"key": "note", "visibility": "group"})
    assert_error(msg, ErrorCode.INVALID)
    assert await bead_count(hub) == before


# --- a malformed change-feed cursor --------------------------------------------------------------


@pytest.mark.parametrize("cursor", ["not-a-cursor", "-", "+", "1-2-3", "99999999999999999999-0", " "])
async def test_a_malformed_change_feed_cursor_is_invalid(raw: NATS, cursor: str) -> None:
    msg = await ask(raw, new_ai(), "changes_since", {"scope": "global", "cursor": cursor})
    assert_error(msg, ErrorCode.INVALID, cursor)


# --- requests nobody waits for --------------------------------------------------------------------


async def test_requests_without_a_reply_subject_never_wedge_the_hub(
    raw: NATS, hub: HubContext, connect: ClientFactory
) -> None:
    """More fire-and-forget requests than the hub's concurrency slots: each must give its slot back."""
    caller = new_ai()
    bodies: list[bytes] = [b"not json", b"[]", encode({"bead_id": new_id("b")}), b"{" * 10]
    for i in range(hub.settings.max_concurrency + 32):
        await raw.publish(request_subject(caller, "get_bead"), bodies[i % len(bodies)])
    await raw.flush()
    client = await connect(caller, timeout=TIMEOUT, retries=0)
    bead = await client.create_bead(f"still serving {token()}")
    assert (await client.get_bead(bead.bead_id)).title == bead.title


# --- the barrage: all of it at once, then prove nothing changed ----------------------------------


async def test_a_barrage_of_bad_input_changes_no_stored_data(
    raw: NATS, connect: ClientFactory, hub: HubContext
) -> None:
    ops = await connect(new_ai("o"))
    alice = await connect(new_ai())
    bob = await connect(new_ai())
    group = await ops.create_group("barrage")
    await ops.add_member(group.group_id, alice.ai_id)
    session = new_id("s")
    mine = await alice.create_bead("alice private", "alice's own", session_id=session, tags=["barrage"])
    shared = await alice.create_bead("alice group", "for the group", visibility="group", group_id=group.group_id)
    public = await bob.create_bead("bob global", "for everyone", visibility="global", importance=7)
    await alice.add_relationship(mine.bead_id, shared.bead_id, "RELATED_TO", strength=0.5)
    await alice.add_relationship(shared.bead_id, public.bead_id, "FOLLOWS_FROM")
    await alice.learn("alice key", "alice value")
    snapshot = {b.bead_id: b.model_dump(exclude={"accessed_at"}) for b in (mine, shared, public)}
    recent_before = [b.bead_id for b in await alice.get_recent(limit=50, since=mine.created_at)]

    # What follows must be refused. Callers: alice (a member), bob (not), and an unknown AI.
    barrage: list[tuple[str, str, bytes, ErrorCode]] = []

    def add(caller: str, op: str, body: bytes | dict[str, Any], code: ErrorCode) -> None:
        barrage.append((caller, op, encode(body), code))

    for op in OPERATIONS:
        for body in (b"not json", b"[]", b"null", b"\xff\xfe"):
            add(alice.ai_id, op, body, ErrorCode.INVALID)
        payload = valid_payloads(alice.ai_id)[op]
        add(alice.ai_id, op, {**payload, "created_by": bob.ai_id}, ErrorCode.INVALID)
        add(alice.ai_id, op, b" " * (hub.settings.max_payload_bytes + 1), ErrorCode.TOO_LARGE)
    for op, payload in WRONG:
        add(alice.ai_id, op, payload, ErrorCode.INVALID)
    for op, path, kind in ID_SITES:
        for value in bad_ids(kind)[:6] + bad_ids(kind)[-5:]:
            add(bob.ai_id, op, with_value(valid_payloads(bob.ai_id)[op], path, value), ErrorCode.INVALID)
    for text in QUERY_LOOKING:
        add(alice.ai_id, "get_bead", {"bead_id": text}, ErrorCode.INVALID)
        add(alice.ai_id, "create_bead", {"title": text, "visibility": text}, ErrorCode.INVALID)
        add(alice.ai_id, "update_bead", {"bead_id": mine.bead_id, "updates": {"tags": [text]}}, ErrorCode.INVALID)
    # Well-formed but refused: hidden, missing, not yours, not your group or session.
    for target in (mine.bead_id, shared.bead_id, new_id("b")):
        add(bob.ai_id, "update_bead", {"bead_id": target, "updates": {"title": "bob was here"}}, ErrorCode.NOT_FOUND)
        add(bob.ai_id, "delete_bead", {"bead_id": target}, ErrorCode.NOT_FOUND)
        add(
            bob.ai_id,
            "add_relationship",
            {"from_id": public.bead_id, "to_id": target, "rel_type": "UPDATES"},
            ErrorCode.NOT_FOUND,
        )
    add(alice.ai_id, "update_bead", {"bead_id": public.bead_id, "updates": {"importance": 0}}, ErrorCode.FORBIDDEN)
    add(alice.ai_id, "delete_bead", {"bead_id": public.bead_id}, ErrorCode.FORBIDDEN)
    add(
        bob.ai_id, "create_bead", {"title": "t", "visibility": "group", "group_id": group.group_id}, ErrorCode.NOT_FOUND
    )
    add(alice.ai_id, "add_member", {"group_id": group.group_id, "ai_id": bob.ai_id}, ErrorCode.FORBIDDEN)
    add(bob.ai_id, "remove_member", {"group_id": group.group_id, "ai_id": alice.ai_id}, ErrorCode.NOT_FOUND)
    # Invalid changes to a bead the caller owns.
    for updates in (
        {},
        {"title": None},
        {"importance": 11},
        {"visibility": "group"},
        {"metadata": {"_recall_provenance": "forged"}},
        {"created_by": bob.ai_id},
        {"content_hash": "0" * 64},
    ):
        add(alice.ai_id, "update_bead", {"bead_id": mine.bead_id, "updates": updates}, ErrorCode.INVALID)

    graph_before = await graph_state(hub)
    redis_before = await redis_state(hub)
    replies = await asyncio.gather(
        *(raw.request(request_subject(c, op), body, timeout=30) for c, op, body, _ in barrage)
    )
    for (caller, op, body, code), msg in zip(barrage, replies, strict=True):
        assert_error(msg, code, (caller, op, body[:120]))
    # Plus a few callers the subject itself rules out.
    for caller in BAD_CALLERS[:4]:
        msg = await raw.request(f"{REQUEST_ROOT}.{caller}.create_bead", b'{"title": "t"}', timeout=TIMEOUT)
        assert_error(msg, ErrorCode.INVALID, caller)

    assert await graph_state(hub) == graph_before
    assert await redis_state(hub) == redis_before
    for bead_id, before in snapshot.items():
        reader = bob if bead_id == public.bead_id else alice
        assert (await reader.get_bead(bead_id)).model_dump(exclude={"accessed_at"}) == before
    assert [b.bead_id for b in await alice.get_recent(limit=50, since=mine.created_at)] == recent_before
    relationships = await alice.get_relationships(shared.bead_id)
    assert {(r.from_id, r.to_id, r.rel_type.value) for r in relationships} >= {
        (mine.bead_id, shared.bead_id, "RELATED_TO"),
        (shared.bead_id, public.bead_id, "FOLLOWS_FROM"),
    }
    # And the hub still answers a normal request.
    fresh = await alice.create_bead(f"after the barrage {token()}", visibility="group", group_id=group.group_id)
    assert (await ops.get_bead(fresh.bead_id)).title == fresh.title


# --- the client library refuses bad arguments before sending -------------------------------------


async def test_the_client_raises_invalid_request_before_sending(stack: EmbeddedStack) -> None:
    # Never connected: anything that reached the network would raise Unavailable instead.
    client = RecallClient(new_ai(), stack.nats_url)
    b = new_id("b")
    bad_calls = [
        lambda: client.get_bead("not-an-id"),
        lambda: client.get_bead("b_abcd1234\n"),
        lambda: client.create_bead(""),
        lambda: client.create_bead("t", importance=11),
        lambda: client.create_bead("t", tags=["two words"]),
        lambda: client.create_bead("t", visibility="group"),
        lambda: client.create_bead("t", created_by=new_ai()),
        lambda: client.create_bead("t", group_id="g_bad!"),
        lambda: client.update_bead(b, created_by=new_ai()),
        lambda: client.update_bead("nope", title="t"),
        lambda: client.delete_bead(""),
        lambda: client.search_beads(""),
        lambda: client.search_beads("q", limit=0),
        lambda: client.search_beads("q", filters={"caller": new_ai()}),
        lambda: client.search_beads("q", mode="fuzzy"),
        lambda: client.get_by_tag("two words"),
        lambda: client.get_recent(limit=0),
        lambda: client.add_relationship(b, b, "RELATED_TO"),
        lambda: client.add_relationship(b, new_id("b"), "LIKES"),
        lambda: client.traverse_graph(b, max_depth=9),
        lambda: client.rank_by_importance([]),
        lambda: client.decay_old_memories(threshold_days=0),
        lambda: client.create_group(""),
        lambda: client.add_member("g_bad!", new_ai()),
        lambda: client.add_member(new_id("g"), "x_bad"),
        lambda: client.remove_member(new_id("g"), "b_abcd1234"),
        lambda: client.find_similar(b, threshold=2),
        lambda: client.why("q", hops=9),
    ]
    for i, call in enumerate(bad_calls):
        try:
            await call()
        except InvalidRequest:
            continue
        except Exception as exc:
            pytest.fail(f"bad call #{i} raised {exc!r}, not InvalidRequest")
        pytest.fail(f"bad call #{i} was accepted")
    # The control: a valid call does try the network (and finds none).
    with pytest.raises(Unavailable):
        await client.get_bead(b)


@pytest.mark.parametrize("ai_id", ["x_bad", "a_abc", "A_abcd1234", "a_abcd1234.x", "a_abcd*", "a_abcd1234 ", ""])
def test_the_client_refuses_an_identity_that_is_not_an_ai_id(ai_id: str) -> None:
    with pytest.raises(InvalidRequest):
        RecallClient(ai_id)


def test_the_client_refuses_an_ai_id_with_a_trailing_newline() -> None:
    with pytest.raises(InvalidRequest):
        RecallClient("a_abcd1234\n")


async def test_hub_errors_reach_the_client_as_their_typed_exception(connect: ClientFactory) -> None:
    client = await connect(new_ai())
    with pytest.raises(RecallError) as missing:
        await client.get_bead(new_id("b"))
    assert missing.value.code is ErrorCode.NOT_FOUND
    with pytest.raises(InvalidRequest):
        await client.update_bead(new_id("b"))  # empty updates: refused by the hub
