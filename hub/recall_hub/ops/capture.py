"""Capture: facts extracted from a text, or given already split by topic, stored ``PART_OF`` topic hubs.

One request is one atomic store query (:meth:`recall_hub.store.topics.TopicStore.remember`): the hubs it
needs, its facts and their edges are written together or not at all, and their after-commit work is
recorded in the same step. Every bead is idempotent on a key derived from the caller, the scope and the
text, so a rerun stores nothing new; a hub is one per topic name and scope, shared by every caller.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from recall_schemas import (
    BeadType,
    CreateBead,
    InvalidRequest,
    NotFound,
    Provenance,
    RememberedTopics,
    RememberExtracted,
    RememberTopics,
    StoredBead,
    StoredTopic,
    Unavailable,
)
from recall_schemas.capture import Extractor as ExtractorName

from recall_hub.context import HubContext
from recall_hub.extractors import (
    ExtractedTopic,
    ExtractorMalformedError,
    ExtractorUnavailableError,
    topic_key,
)
from recall_hub.extractors.outline import outline
from recall_hub.ops.after_commit import settle_created, settle_quietly
from recall_hub.ops.beads import new_bead_props
from recall_hub.ops.deny_list import refuse_forgotten
from recall_hub.store.topics import ReplayedRow, StoredRow, TopicStore
from recall_hub.store.vectors import scope_name
from recall_hub.timeutil import new_moments

log = logging.getLogger(__name__)

TITLE_CHARS = 200


def _digest(*parts: str, size: int = 32) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:size]


def fact_title(fact: str) -> str:
    """The fact itself when short; else its first words, cut at a word boundary."""
    text = " ".join(fact.split())
    if len(text) <= TITLE_CHARS:
        return text
    cut = text[:TITLE_CHARS].rsplit(" ", 1)[0]
    return (cut or text[:TITLE_CHARS]) + "…"


@dataclass
class _Topic:
    name: str
    facts: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _Plan:
    """What one request stores: its topics in order, each with the facts not already planned."""

    topics: dict[str, _Topic] = field(default_factory=dict)
    keys: set[str] = field(default_factory=set)
    count: int = 0

    def add(self, name: str, key: str, create: CreateBead, upsert: bool) -> None:
        if key in self.keys:  # one bead per key, under the topic it came with first
            return
        self.keys.add(key)
        self.topics.setdefault(topic_key(name), _Topic(name)).facts.append(
            {"i": self.count, "request": create, "upsert": upsert}
        )
        self.count += 1


async def _store(
    ctx: HubContext, caller: str, req: RememberExtracted | RememberTopics, plan: _Plan, hub_metadata: dict[str, Any]
) -> tuple[list[StoredTopic], int, int, int]:
    """Write the plan in one query, settle its after-commit work; the stored topics, the created and updated
    counts, and how many facts were left out because their content was forgotten."""
    store = TopicStore(ctx.graph)
    scope = scope_name(req.visibility, req.group_id, caller)
    start = new_moments(plan.count + 1)
    now = start + plan.count
    topics: list[dict[str, Any]] = []
    for key, topic in plan.topics.items():
        hub_request = CreateBead(
            title=topic.name[:TITLE_CHARS], bead_type=BeadType.TOPIC, visibility=req.visibility, group_id=req.group_id,
            provenance=Provenance.DERIVED, metadata={**hub_metadata, "topic": topic.name},
        )
        hub, _ = new_bead_props(caller, hub_request, start)
        facts = []
        for fact in topic.facts:
            # A millisecond apart, in text order: listings and the session's chain keep it.
            props, idem = new_bead_props(caller, fact["request"], start + 1 + fact["i"])
            facts.append({"i": fact["i"], "idem": idem, "props": props, "upsert": fact["upsert"]})
        topics.append({"name": topic.name, "hub_idem": f"topic:{scope}:{_digest(key)}", "hub": hub, "facts": facts})
    forgotten = await _drop_forgotten(ctx, caller, topics)
    if not topics:
        await _check_scope(ctx, caller, req.group_id)
        return [], 0, 0, forgotten
    rows = await store.remember(caller, group_id=req.group_id, session_id=req.session_id, topics=topics, now=now)
    if rows is None:
        raise NotFound(f"group {req.group_id} not found")
    created = sorted({r.hub_id for r in rows if r.hub_created} | {r.bead_id for r in rows if r.created})
    updated = sorted({r.bead_id for r in rows if r.updated})
    await settle_created(ctx, created)
    for bead_id in updated:
        await settle_quietly(ctx, bead_id)
    return _stored_topics(rows), len(created), len(updated), forgotten


async def _drop_forgotten(ctx: HubContext, caller: str, topics: list[dict[str, Any]]) -> int:
    """Leave out the facts whose content was forgotten in their scope (the deny-list every create path
    keeps), and the topics left without facts; how many facts were left out."""
    facts = [fact for topic in topics for fact in topic["facts"]]
    refusals = iter(await refuse_forgotten(ctx, caller, [fact["props"] for fact in facts]))
    dropped = 0
    for topic in topics:
        kept = []
        for fact in topic["facts"]:
            if next(refusals) is None:
                kept.append(fact)
            else:
                dropped += 1
        topic["facts"] = kept
    topics[:] = [topic for topic in topics if topic["facts"]]
    return dropped


def _stored_topics(rows: list[StoredRow]) -> list[StoredTopic]:
    by_hub: dict[str, StoredTopic] = {}
    for row in sorted(rows, key=lambda r: r.position):
        hub = StoredBead(bead_id=row.hub_id, title=row.hub_title, created=row.hub_created)
        topic = by_hub.setdefault(row.hub_id, StoredTopic(name=row.topic, hub=hub, facts=[]))
        topic.facts.append(StoredBead(bead_id=row.bead_id, title=row.title, created=row.created, updated=row.updated))
    return list(by_hub.values())


def _replayed_topics(rows: list[ReplayedRow], order: list[str]) -> list[StoredTopic]:
    position = {idem: i for i, idem in enumerate(order)}
    by_hub: dict[str, StoredTopic] = {}
    for row in sorted(rows, key=lambda r: position[r.idem]):
        if row.hub_id is None:  # its hub is gone or out of sight: the fact stands alone
            continue
        hub = StoredBead(bead_id=row.hub_id, title=row.hub_title or "", created=False)
        topic = by_hub.setdefault(row.hub_id, StoredTopic(name=row.hub_title or "", hub=hub, facts=[]))
        topic.facts.append(StoredBead(bead_id=row.bead_id, title=row.title, created=False))
    return list(by_hub.values())


def _extracted_by(row: ReplayedRow) -> object:
    try:
        return json.loads(row.metadata or "{}").get("extracted_by")
    except (ValueError, AttributeError):
        return None


async def _check_scope(ctx: HubContext, caller: str, group_id: str | None) -> None:
    if group_id is not None and group_id not in await ctx.beads.my_groups(caller):
        raise NotFound(f"group {group_id} not found")


async def _extract(
    ctx: HubContext, text: str, max_facts: int
) -> tuple[ExtractorName, str | None, list[ExtractedTopic]]:
    """``(extractor, fallback reason, topics)``: the LLM's topics, or the outline's when none is configured or
    its answer is unusable. An LLM that does not answer (timeout, HTTP error) is ``unavailable``."""
    if ctx.extractor is None:
        return "outline", None, outline(text, max_facts)
    try:
        return "llm", None, await ctx.extractor.extract(text, max_facts)
    except ExtractorUnavailableError as exc:
        raise Unavailable(str(exc)) from exc
    except ExtractorMalformedError as exc:
        log.warning("extraction LLM answered unusably (%s); extracting by outline", exc)
        return "outline", f"the LLM's answer was unusable ({exc}); extracted by outline instead", outline(
            text, max_facts
        )


async def remember_extracted(ctx: HubContext, caller: str, req: RememberExtracted) -> RememberedTopics:
    """Extract facts from ``req.text`` and store each ``PART_OF`` its topic's hub.

    The call is keyed by caller, scope, session, ``max_facts`` and text: when its facts are already stored
    (and visible), they are returned as they are and nothing is extracted again.
    """
    scope = scope_name(req.visibility, req.group_id, caller)
    call = _digest(caller, scope, req.session_id or "", str(req.max_facts), req.text)
    keys = [f"extract:{call}:{i}" for i in range(req.max_facts)]
    idems = [f"{caller}:{key}" for key in keys]
    earlier = await TopicStore(ctx.graph).replayed(caller, idems)
    if earlier:
        return RememberedTopics(
            extractor="outline" if _extracted_by(earlier[0]) == "outline" else "llm",
            replayed=True, created=0, topics=_replayed_topics(earlier, idems),
        )
    extractor, reason, extracted = await _extract(ctx, req.text, req.max_facts)
    provenance = Provenance.DERIVED if extractor == "llm" else Provenance.RECORDED
    plan = _Plan()
    for topic in extracted:
        for fact in topic.facts:
            if plan.count >= req.max_facts:
                break
            create = CreateBead(
                title=fact_title(fact), content=fact, importance=req.importance, tags=req.tags,
                session_id=req.session_id, group_id=req.group_id, visibility=req.visibility, provenance=provenance,
                metadata={"topic": topic.name, "extracted_by": extractor}, idempotency_key=keys[plan.count],
            )
            plan.add(topic.name, " ".join(fact.split()).casefold(), create, upsert=False)
    if not plan.count:
        await _check_scope(ctx, caller, req.group_id)
        return RememberedTopics(extractor=extractor, fallback_reason=reason, created=0, topics=[])
    stored, created, _, forgotten = await _store(ctx, caller, req, plan, {"extracted_by": extractor})
    return RememberedTopics(
        extractor=extractor, fallback_reason=reason, created=created, forgotten=forgotten, topics=stored
    )


async def remember_topics(ctx: HubContext, caller: str, req: RememberTopics) -> RememberedTopics:
    """Store given facts ``PART_OF`` their topics' hubs. A fact with a key is the bead stored under that key
    (its text replaced when it changed); a fact without one is keyed by its topic and text."""
    scope = scope_name(req.visibility, req.group_id, caller)
    plan = _Plan()
    for topic in req.topics:
        if not topic_key(topic.name):
            raise InvalidRequest(f"topic name {topic.name!r} has no letters or digits")
        for fact in topic.facts:
            identity = fact.key or _digest(topic_key(topic.name), fact.title, fact.content)
            create = CreateBead(
                title=fact.title, content=fact.content, bead_type=req.bead_type, importance=req.importance,
                tags=req.tags, session_id=req.session_id, group_id=req.group_id, visibility=req.visibility,
                provenance=req.provenance, metadata={**fact.metadata, "topic": topic.name},
                idempotency_key=f"topic-fact:{_digest(scope, identity, size=40)}",
            )
            plan.add(topic.name, create.idempotency_key or "", create, upsert=fact.key is not None)
    stored, created, updated, forgotten = await _store(ctx, caller, req, plan, req.hub_metadata)
    return RememberedTopics(
        extractor="given", created=created, updated=updated, forgotten=forgotten, topics=stored
    )
