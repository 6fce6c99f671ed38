"""Replies that fit the bus: a reply over NATS's max payload would never arrive, so its list is cut to the
longest prefix that fits and it says ``truncated`` (:func:`fit_reply`); notifications lose the bead they
carry instead (:func:`fit_notification`). One rule per reply model (:data:`_CUTS`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from recall_schemas import (
    AuditTrail,
    BeadHistory,
    BeadList,
    ContextBlock,
    DecayReport,
    DuplicateReport,
    GroupList,
    PayloadTooLarge,
    RelationshipList,
    SearchResult,
    StaleList,
    Subgraph,
    WhyResult,
)
from recall_schemas.coordination import ChangeBatch, Notification, UnifiedRecallResult
from recall_schemas.rendering import render_bead

from recall_hub.ops.history import cut_history, history_items
from recall_hub.ops.listing import PAGED_OPERATIONS, cursor_after
from recall_hub.ops.trust import cut_stale
from recall_hub.tokens import count_tokens

REPLY_HEADROOM = 1024
"""Bytes of the bus's max payload kept for a reply's headers (NATS counts headers and body together)."""


@dataclass(frozen=True)
class _Cut:
    """How a reply with a list is cut to its first ``n`` items (and marked ``truncated``)."""

    items: Callable[[Any], Sequence[Any]]
    """The items that may be cut, in the order they are kept."""
    cut: Callable[[str, Any, int], BaseModel]
    """``(op, reply, n)``: the reply with its first ``n`` items only, ``truncated`` set."""
    sized: bool = True
    """The items' encoded sizes bound the reply's, so a first guess at ``n`` can be computed."""
    additive: bool = True
    """... and add up to it (but for a few bytes): the guess is the answer, or nearly."""
    slim: Callable[[Any], BaseModel | None] | None = None
    """When not even one item fits: a lighter reply that still makes progress (None: there is none)."""


def _cut_beads(op: str, reply: BeadList, n: int) -> BeadList:
    beads = reply.beads[:n]
    paged = op in PAGED_OPERATIONS and bool(beads)
    return reply.model_copy(
        update={"beads": beads, "truncated": True, "next_cursor": cursor_after(beads[-1]) if paged else None}
    )


def _cut_hits(op: str, reply: SearchResult, n: int) -> SearchResult:
    hits = reply.hits[:n]
    tokens = None if reply.tokens is None else sum(count_tokens(render_bead(h.bead)) + 1 for h in hits)
    return reply.model_copy(update={"hits": hits, "tokens": tokens, "truncated": True})


def _depth_first(graph: Subgraph) -> list[Any]:
    return sorted(graph.nodes, key=lambda node: node.depth)  # stable: the walk's order within a depth


def _cut_graph(graph: Subgraph, n: int) -> Subgraph:
    kept = {node.bead.bead_id for node in _depth_first(graph)[:n]}
    return graph.model_copy(
        update={
            "nodes": [node for node in graph.nodes if node.bead.bead_id in kept],
            "edges": [e for e in graph.edges if e.from_id in kept and e.to_id in kept],
            "truncated": True,
        }
    )


def _cut_why(op: str, reply: WhyResult, n: int) -> WhyResult:
    graph = _cut_graph(reply.graph, n)
    kept = {node.bead.bead_id for node in graph.nodes}
    return reply.model_copy(update={"graph": graph, "seeds": [s for s in reply.seeds if s in kept], "truncated": True})


def _cut_context(op: str, reply: ContextBlock, n: int) -> ContextBlock:
    # The text is the kept beads rendered one after the other, each starting with a header that ends in
    # "| <bead id>] " (recall_schemas.rendering.render_bead), joined by blank lines: cut before bead n's header.
    text = reply.text
    if n < len(reply.bead_ids):
        header = text.find(f" | {reply.bead_ids[n]}] ")
        start = text.rfind("\n\n[", 0, header) if header > 0 else -1
        text = text[:start] if start >= 0 else ""
    kept = reply.bead_ids[:n] if text else []
    return reply.model_copy(
        update={
            "text": text,
            "bead_ids": kept,
            "tokens": count_tokens(text) + len(kept) if text else 0,
            "dropped": reply.dropped + len(reply.bead_ids) - len(kept),
            "truncated": True,
        }
    )


def _interleaved(reply: UnifiedRecallResult) -> list[Any]:
    entries, hits = reply.entries, reply.beads.hits
    out: list[Any] = []
    for i in range(max(len(entries), len(hits))):
        out += ([entries[i]] if i < len(entries) else []) + ([hits[i]] if i < len(hits) else [])
    return out


def _cut_unified(op: str, reply: UnifiedRecallResult, n: int) -> UnifiedRecallResult:
    kept = _interleaved(reply)[:n]
    entries = [item for item in kept if item in reply.entries]
    hits = [item for item in kept if item in reply.beads.hits]
    beads = _cut_hits(op, reply.beads, len(hits)) if len(hits) < len(reply.beads.hits) else reply.beads
    return reply.model_copy(update={"entries": entries, "beads": beads, "truncated": True})


def _cut_changes(op: str, reply: ChangeBatch, n: int) -> ChangeBatch:
    changes = reply.changes[:n]
    return reply.model_copy(
        update={"changes": changes, "cursor": changes[-1].cursor if changes else reply.cursor, "truncated": True}
    )


def _slim_changes(reply: ChangeBatch) -> ChangeBatch | None:
    # A change whose bead alone is too large still moves the feed on: it comes without its bead.
    if not reply.changes:
        return None
    first = reply.changes[0].model_copy(update={"bead": None})
    return reply.model_copy(update={"changes": [first], "cursor": first.cursor, "truncated": True})


def _cut_list(field: str) -> Callable[[str, Any, int], BaseModel]:
    def cut(op: str, reply: Any, n: int) -> BaseModel:
        result: BaseModel = reply.model_copy(update={field: getattr(reply, field)[:n], "truncated": True})
        return result

    return cut


_CUTS: dict[type[BaseModel], _Cut] = {
    BeadList: _Cut(lambda r: r.beads, _cut_beads),
    SearchResult: _Cut(lambda r: r.hits, _cut_hits),
    Subgraph: _Cut(_depth_first, lambda op, r, n: _cut_graph(r, n), additive=False),
    WhyResult: _Cut(lambda r: _depth_first(r.graph), _cut_why, additive=False),
    ContextBlock: _Cut(lambda r: r.bead_ids, _cut_context, sized=False, additive=False),
    UnifiedRecallResult: _Cut(_interleaved, _cut_unified),
    ChangeBatch: _Cut(lambda r: r.changes, _cut_changes, slim=_slim_changes),
    RelationshipList: _Cut(lambda r: r.relationships, _cut_list("relationships")),
    DuplicateReport: _Cut(lambda r: r.clusters, _cut_list("clusters")),
    DecayReport: _Cut(lambda r: r.archived, _cut_list("archived")),
    GroupList: _Cut(lambda r: r.groups, _cut_list("groups")),
    StaleList: _Cut(lambda r: r.items, cut_stale),
    BeadHistory: _Cut(history_items, cut_history),
    AuditTrail: _Cut(lambda r: r.entries, _cut_list("entries")),
}


def _size(item: Any) -> int:
    return len(item.model_dump_json()) if isinstance(item, BaseModel) else len(json.dumps(item))


def fit_reply(op: str, reply: BaseModel, limit: int) -> tuple[BaseModel, bytes]:
    """``reply`` and its encoding, cut to at most ``limit`` bytes if need be.

    A reply over the limit would never arrive (NATS refuses it): its list is cut to the longest prefix
    that fits and it says ``truncated`` (listings also give the ``next_cursor`` after their last bead; a
    change batch's ``cursor`` is its last change). A reply that cannot be cut that far — not even one item
    fits, or it has no list — is :class:`PayloadTooLarge` instead of silence.
    """
    body = reply.model_dump_json().encode()
    if len(body) <= limit:
        return reply, body
    rule = _CUTS.get(type(reply))
    items = rule.items(reply) if rule is not None else []
    best: tuple[BaseModel, bytes] | None = None

    def attempt(n: int) -> bool:
        nonlocal best
        assert rule is not None
        candidate = rule.cut(op, reply, n)
        data = candidate.model_dump_json().encode()
        if len(data) > limit:
            return False
        best = (candidate, data)
        return True

    high = len(items) - 1  # all of them do not fit
    if rule is not None and high >= 1:
        if rule.sized:  # as many items as fit by their own sizes: for additive replies the usual answer
            room = limit - len(rule.cut(op, reply, 0).model_dump_json()) - 256
            guess = 0
            for item in items[:high]:
                room -= _size(item) + 1
                if room < 0:
                    break
                guess += 1
            high = max(1, min(high, guess if rule.additive else guess + 1))
        if rule.additive and attempt(high):
            while high + 1 < len(items) and attempt(high + 1):  # the margin may leave room for a few more
                high += 1
        else:
            low = 1
            while low <= high:
                middle = (low + high) // 2
                if attempt(middle):
                    low = middle + 1
                else:
                    high = middle - 1
    if best is None and rule is not None and rule.slim is not None:
        slim = rule.slim(reply)
        if slim is not None and len(data := slim.model_dump_json().encode()) <= limit:
            best = (slim, data)
    if best is None:
        raise PayloadTooLarge(
            f"the reply to {op} ({len(body)} bytes) cannot be cut to fit the bus's max payload ({limit} bytes)",
            {"reason": "reply_too_large", "reply_bytes": len(body), "max_bytes": limit},
        )
    return best


def fit_notification(body: bytes, limit: int) -> bytes | None:
    """A notification that fits ``limit`` bytes: as is, or without the bead or brief it carries (the
    receiver fetches them); None if even that does not fit."""
    if len(body) <= limit:
        return body
    note = Notification.model_validate_json(body)
    slim = note.model_copy(
        update={"change": note.change.model_copy(update={"bead": None}) if note.change else None, "brief": None}
    )
    data = slim.model_dump_json().encode()
    return data if len(data) <= limit else None
