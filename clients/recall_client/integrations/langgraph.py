"""LangGraph memory on the hub: :class:`RecallStore`, a ``langgraph.store.base.BaseStore`` over a RecallClient.

>>> store = RecallStore(client)                      # acts as client.ai_id; the hub decides what it may read
>>> graph = StateGraph(State).compile(store=store)   # nodes get it injected (``store: BaseStore``)
>>> await store.aput(("group", "g_team", "facts"), "deploy", {"text": "Deploys go out on Fridays"})
>>> await store.asearch(("group", "g_team"), query="when do we deploy?")

What maps to what:

* **Namespace → scope.** The first label names the hub scope, so the hub — not the store — decides who reads an
  item: ``("private", ...)`` is private to the client's identity, ``("group", <group_id>, ...)`` is visible to
  that group's current members (the identity must be one to write), ``("global", ...)`` to every identity. Any
  other namespace is an ``InvalidNamespaceError`` (a ``ValueError``): an item is never shared by accident.
* **Item → bead.** One bead per (namespace, key) — in a private namespace, per identity: ``content`` is the
  JSON of the value, ``title`` the key and the text of the value (of the fields ``index`` lists, when it does;
  ``index=False``: the key alone) — the words search reads first —, ``metadata`` ``{"namespace": [...],
  "key": ...}``, ``tags`` the item's tag (``lg-item:`` + a hash of namespace and key, since tags are restricted),
  one ``lg-ns:`` hash tag per namespace prefix and ``langgraph``. ``created_at``/``updated_at`` are the bead's.
* **put** updates the bead of that item (``update_bead``) or creates one; ``value=None`` deletes it. Only the
  bead's creator (or the group's ops) may change a group or global item: anyone else gets ``Forbidden``.
* **search** with ``query`` is the hub's hybrid search within the prefix's tag; without, the items under the
  prefix newest first. ``filter`` (exact match on value fields, ``$eq $ne $gt $gte $lt $lte``) is applied here,
  on what the hub returned. **list_namespaces** reads the namespaces of the items under the literal prefix.
* **TTL** is not supported (``supports_ttl = False``): the hub's ``valid_to`` says when a fact stops holding,
  it neither expires nor deletes a bead, and reads do not extend it.

Limits: a search by meaning looks at the hub's best ``offset + limit`` hits (with a ``filter``, at least 100; at
most 500) before filtering; a search without ``query``, ``list_namespaces`` and each get/put read the beads of a
tag page by page (a put is a read and a write); a namespace has at most 30 labels, a value's JSON at most 256 KiB.

The sync methods run the async ones on the client's event loop (``run_coroutine_threadsafe``), so they work from
any other thread — LangGraph runs sync nodes of ``ainvoke`` in threads; on the loop's own thread they raise, as
LangGraph's own async stores do: use ``aget``/``aput``/``asearch`` there.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping, Sequence
from typing import Any, Literal

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    get_text_at_path,
    tokenize_path,
)
from recall_schemas import MemoryBead, NotFound
from recall_schemas.ids import GROUP_ID_PATTERN
from recall_schemas.requests import MAX_TAGS

from ..client import RecallClient
from ._hub import clip, connected, digest, json_object, placement

log = logging.getLogger(__name__)

__all__ = ["RecallStore", "item_tag", "namespace_tag"]

ROOT_TAG = "langgraph"
"""Every item of every RecallStore carries it: a listing of the whole store."""
MAX_DEPTH = MAX_TAGS - 2
"""Labels a namespace may have: one tag per prefix, plus the item's tag and :data:`ROOT_TAG`."""
MAX_TITLE = 512
MAX_HITS = 500
"""The most hits one hub search returns."""
SCOPES = ("private", "group", "global")


def item_tag(namespace: Sequence[str], key: str) -> str:
    """The tag that finds the item ``key`` of ``namespace``."""
    return "lg-item:" + digest(json.dumps([*namespace, key]), size=40)


def namespace_tag(prefix: Sequence[str]) -> str:
    """The tag every item whose namespace starts with ``prefix`` carries (:data:`ROOT_TAG` for the empty one)."""
    return "lg-ns:" + digest(json.dumps(list(prefix)), size=32) if prefix else ROOT_TAG


def _tags(namespace: Sequence[str], key: str) -> list[str]:
    """An item's tags: its own, the root's, and one per prefix of its namespace (search by prefix)."""
    return [item_tag(namespace, key), ROOT_TAG, *(namespace_tag(namespace[:n]) for n in range(1, len(namespace) + 1))]


def _check_labels(namespace: Sequence[str], *, wildcards: bool = False) -> None:
    for label in namespace:
        if not isinstance(label, str) or not label or "." in label or (label == "*" and not wildcards):
            raise InvalidNamespaceError(f"invalid namespace label {label!r} in {tuple(namespace)}")


def _check_prefix(prefix: Sequence[str]) -> None:
    """A namespace or a prefix of one: its first label is a scope, a group scope's second a group id."""
    _check_labels(prefix)
    if len(prefix) > MAX_DEPTH:
        raise InvalidNamespaceError(f"namespace {tuple(prefix)} is deeper than {MAX_DEPTH} labels")
    if prefix and prefix[0] not in SCOPES:
        raise InvalidNamespaceError(
            f"namespace {tuple(prefix)} names no hub scope: start it with 'private', 'global' or "
            f"('group', <group_id>) — e.g. ('private', 'memories') or ('group', 'g_team', 'memories')"
        )
    if len(prefix) > 1 and prefix[0] == "group" and not re.fullmatch(GROUP_ID_PATTERN, prefix[1]):
        raise InvalidNamespaceError(f"namespace {tuple(prefix)}: {prefix[1]!r} is not a group id (g_…)")


def _check_namespace(namespace: Sequence[str]) -> None:
    """A namespace an item can live in."""
    _check_prefix(namespace)
    if not namespace or (namespace[0] == "group" and len(namespace) < 2):
        raise InvalidNamespaceError(f"namespace {tuple(namespace)} needs a scope ('group' a group id too)")


def _scope_fields(namespace: Sequence[str]) -> dict[str, Any]:
    return placement(namespace[1]) if namespace[0] == "group" else {"visibility": namespace[0]}


def _in_scope(bead: MemoryBead, namespace: Sequence[str], me: str) -> bool:
    """Whether the bead is stored in the scope its namespace names: a bead of another scope claiming the
    namespace in its tags and metadata (anyone may write tags) is not an item of it."""
    if bead.visibility.value != namespace[0]:
        return False
    if namespace[0] == "group":
        return bead.group_id == namespace[1]
    return namespace[0] != "private" or bead.created_by == me


def _text(value: Any) -> list[str]:
    """The words of a JSON value: its strings and numbers, depth first."""
    if isinstance(value, Mapping):
        return [t for v in value.values() for t in _text(v)]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _text(v)]
    if value is None or isinstance(value, bool):
        return []
    return [str(value)]


def _title(key: str, value: Mapping[str, Any], index: Sequence[str] | Literal[False] | None) -> str:
    """The key and the words of the value (of the ``index`` fields; none for ``index=False``), at most 512."""
    if index is False:
        words: list[str] = []
    elif index is None:
        words = _text(value)
    else:
        words = [t for path in index for t in get_text_at_path(dict(value), tokenize_path(path))]
    text = " ".join(" ".join(words).split())
    return clip(f"{key}: {text}" if text else key, MAX_TITLE)


def _matches(value: Any, wanted: Any) -> bool:
    """LangGraph's filter semantics: equal values, nested dicts field by field, ``{"$op": x}`` comparisons."""
    if isinstance(wanted, Mapping):
        if any(str(k).startswith("$") for k in wanted):
            return all(_compare(value, op, x) for op, x in wanted.items())
        return isinstance(value, Mapping) and all(_matches(value.get(k), v) for k, v in wanted.items())
    return bool(value == wanted)


def _compare(value: Any, op: str, x: Any) -> bool:
    if op == "$eq":
        return bool(value == x)
    if op == "$ne":
        return bool(value != x)
    if op not in ("$gt", "$gte", "$lt", "$lte"):
        raise ValueError(f"unsupported filter operator {op!r}")
    try:
        a, b = float(value), float(x)
    except (TypeError, ValueError):
        return False
    return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]


def _does_match(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    part = namespace[: len(path)] if condition.match_type == "prefix" else namespace[len(namespace) - len(path) :]
    return all(p == "*" or p == n for p, n in zip(path, part, strict=True))


class RecallStore(BaseStore):  # type: ignore[misc,unused-ignore]  # BaseStore is Any where LangGraph is missing
    """A LangGraph store whose items are beads on the hub, read and written as ``client``'s identity.

    ``loop``: the event loop ``client`` runs on, for the sync methods; by default the loop running when the
    store is created (or when it is first used asynchronously). The store connects the client on first use if
    it is not connected yet (refused credentials raise ``Unauthorized`` there) and never closes it.
    """

    supports_ttl: bool = False

    def __init__(self, client: RecallClient, *, loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__()
        self.client = client
        if loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
        self._loop = loop
        self._connected = False

    # --- the sync side ------------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`abatch` on the client's event loop, from another thread."""
        loop = self._loop
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None:
            raise RuntimeError(
                "RecallStore does not know its client's event loop: create it inside that loop, pass loop=..., "
                "or use the async methods (aget, aput, asearch, alist_namespaces)"
            )
        if running is loop:
            raise asyncio.InvalidStateError(
                "Synchronous calls to RecallStore on its client's event loop would block the loop they wait for: "
                "use the async methods there, e.g. `await store.aput(...)` instead of `store.put(...)`"
            )
        if loop.is_closed() or not loop.is_running():
            raise RuntimeError("the event loop of RecallStore's client is not running")
        return asyncio.run_coroutine_threadsafe(self.abatch(list(ops)), loop).result()

    # --- the async side -----------------------------------------------------------------------------

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order; consecutive reads run concurrently, each put after what came before it."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        if not self._connected:
            await connected(self.client, "RecallStore")  # refused credentials: Unauthorized, here
            self._connected = True
        ops = list(ops)
        results: list[Result] = [None] * len(ops)
        reads: list[tuple[int, Awaitable[Result]]] = []

        async def flush() -> None:
            done = await asyncio.gather(*(read for _, read in reads))
            for (i, _), result in zip(reads, done, strict=True):
                results[i] = result
            reads.clear()

        for i, op in enumerate(ops):
            if isinstance(op, PutOp):
                await flush()
                await self._put(op)
            elif isinstance(op, GetOp):
                reads.append((i, self._get(op)))
            elif isinstance(op, SearchOp):
                reads.append((i, self._search(op)))
            elif isinstance(op, ListNamespacesOp):
                reads.append((i, self._list_namespaces(op)))
            else:
                for _, read in reads:
                    if asyncio.iscoroutine(read):
                        read.close()
                raise TypeError(f"unknown store operation {type(op).__name__}")
        await flush()
        return results

    # --- operations ---------------------------------------------------------------------------------

    async def _beads_of(self, namespace: tuple[str, ...], key: str) -> list[MemoryBead]:
        """The beads of the item ``key`` of ``namespace`` this identity sees, most recently updated first."""
        found = [
            bead
            async for bead in self._tagged(item_tag(namespace, key))
            if self._item_address(bead) == (namespace, key)
        ]
        return sorted(found, key=lambda b: (b.updated_at, b.bead_id), reverse=True)

    async def _get(self, op: GetOp) -> Item | None:
        namespace = tuple(op.namespace)
        _check_namespace(namespace)
        beads = await self._beads_of(namespace, str(op.key))
        return _item(beads[0]) if beads else None

    async def _put(self, op: PutOp) -> None:
        namespace, key = tuple(op.namespace), str(op.key)
        _check_namespace(namespace)
        if op.ttl is not None:
            raise NotImplementedError("RecallStore does not support TTL (the hub does not expire beads): ttl=None")
        existing = await self._beads_of(namespace, key)
        if op.value is None:
            for bead in existing:
                try:
                    await self.client.delete_bead(bead.bead_id)
                except NotFound:  # deleted meanwhile
                    pass
            return
        value = dict(op.value)
        fields: dict[str, Any] = {
            "title": _title(key, value, op.index),
            "content": json.dumps(value, ensure_ascii=False),
            "metadata": {"namespace": list(namespace), "key": key},
            "tags": _tags(namespace, key),
        }
        if existing:  # this identity's own bead of the item if it has one; another's is the hub's to refuse
            target = next((b for b in existing if b.created_by == self.client.ai_id), existing[0])
            log.debug("put %s/%s: updating %s", namespace, key, target.bead_id)
            await self.client.update_bead(target.bead_id, **fields)
        else:
            title, content = fields.pop("title"), fields.pop("content")
            bead = await self.client.create_bead(title, content, **fields, **_scope_fields(namespace))
            log.debug("put %s/%s: created %s", namespace, key, bead.bead_id)

    async def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        _check_prefix(prefix)
        if op.limit <= 0:
            return []
        wanted = op.offset + op.limit
        found: list[SearchItem] = []
        if op.query:
            fetch = min(MAX_HITS, wanted if not op.filter else max(4 * wanted, 100))
            result = await self.client.search_beads(op.query, limit=fetch, filters={"tags": [namespace_tag(prefix)]})
            for hit in result.hits:
                if self._wanted(hit.bead, prefix, op.filter):
                    found.append(_search_item(hit.bead, hit.score))
        else:
            async for bead in self._tagged(namespace_tag(prefix)):
                if self._wanted(bead, prefix, op.filter):
                    found.append(_search_item(bead, None))
                    if len(found) >= wanted:
                        break
        return found[op.offset : wanted]

    async def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = tuple(op.match_conditions or ())
        literal: tuple[str, ...] = ()
        for condition in conditions:
            _check_labels(condition.path, wildcards=True)
            if condition.match_type == "prefix":
                head = []
                for label in condition.path:
                    if label == "*":
                        break
                    head.append(label)
                literal = max(literal, tuple(head), key=len)
        if literal:
            _check_prefix(literal)
        namespaces: set[tuple[str, ...]] = set()
        async for bead in self._tagged(namespace_tag(literal)):
            address = self._item_address(bead)
            if address is not None and all(_does_match(c, address[0]) for c in conditions):
                namespaces.add(address[0] if op.max_depth is None else address[0][: op.max_depth])
        return sorted(namespaces)[op.offset : op.offset + op.limit]

    # --- helpers ------------------------------------------------------------------------------------

    def _tagged(self, tag: str) -> AsyncIterator[MemoryBead]:
        """The visible beads with ``tag``, newest first, page after page as they are read."""
        return self.client.iter_by_tag(tag)

    def _item_address(self, bead: MemoryBead) -> tuple[tuple[str, ...], str] | None:
        """``(namespace, key)`` of a bead this store wrote, if it is stored in its namespace's scope."""
        namespace, key = bead.metadata.get("namespace"), bead.metadata.get("key")
        if not isinstance(namespace, list) or not isinstance(key, str) or not namespace:
            return None
        if not all(isinstance(label, str) for label in namespace) or item_tag(namespace, key) not in bead.tags:
            return None
        address = tuple(namespace)
        return (address, key) if _in_scope(bead, address, self.client.ai_id) else None

    def _wanted(self, bead: MemoryBead, prefix: tuple[str, ...], value_filter: dict[str, Any] | None) -> bool:
        address = self._item_address(bead)
        if address is None or address[0][: len(prefix)] != prefix:
            return False
        if not value_filter:
            return True
        value = _value(bead)
        return value is not None and all(_matches(value.get(k), v) for k, v in value_filter.items())


def _value(bead: MemoryBead) -> dict[str, Any] | None:
    return json_object(bead, "a store value", log)


def _item(bead: MemoryBead) -> Item:
    """The item a bead holds."""
    return Item(
        namespace=tuple(bead.metadata["namespace"]),
        key=str(bead.metadata["key"]),
        value=_value(bead) or {},
        created_at=bead.created_at,
        updated_at=bead.updated_at,
    )


def _search_item(bead: MemoryBead, score: float | None) -> SearchItem:
    """The item a bead holds, as a search found it (``score``: the hub's, for a search by meaning)."""
    item = _item(bead)
    return SearchItem(item.namespace, item.key, item.value, item.created_at, item.updated_at, score)
