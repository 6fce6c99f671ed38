"""The package layout is the architecture (docs/architecture.md, "Layers and the rules between them"): these
rules keep it that way.

Every file is read as a syntax tree, never as text: imports come from its ``import`` statements (absolute or
relative, aliased or not), Cypher and Redis keys from its string literals (f-strings' literal parts and
concatenations joined; docstrings are documentation and are skipped), Redis client use from its attribute
accesses. :data:`RULES` has one row for every package and every root module of the hub, saying what it may
import and hold; a new package or root module fails :func:`test_every_part_of_the_hub_has_a_rule` until it
gets its row.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import repo_root

ROOT = repo_root()
HUB = ROOT / "hub" / "recall_hub"

# --- reading a module ----------------------------------------------------------------------------------


def imported(tree: ast.Module, package: str) -> set[str]:
    """The dotted names a module imports: ``import a.b as c`` gives ``a.b``, ``from a import b`` gives
    ``a.b``; relative imports are resolved against ``package``, the package the module is in."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[: len(parts) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.update(module if alias.name == "*" else f"{module}.{alias.name}" for alias in node.names)
    return found


HOLE = "{}"
"""Stands for what a string's non-literal parts (f-string fields, names in a concatenation) add at run time."""


def _docstrings(tree: ast.Module) -> set[int]:
    """Ids of the string statements (docstrings of modules, classes, functions and attributes)."""
    return {
        id(node.value) for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    }


def _text(node: ast.expr) -> str | None:
    """The literal text of a string expression, its non-literal parts as :data:`HOLE`; None if it is none."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else HOLE for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left), _text(node.right)
        if left is None and right is None:
            return None
        return (left if left is not None else HOLE) + (right if right is not None else HOLE)
    return None


def strings(tree: ast.Module) -> list[str]:
    """Every string literal of a module that is not a docstring, and every concatenation of literals joined."""
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if id(node) in skip or not isinstance(node, ast.expr):
            continue
        text = _text(node)
        if text is not None:
            found.append(text)
    return found


_NODE = r"\(\s*\w*\s*[:{)]"  # (  (b)  (b:Bead  (:AI  ({...  — a node pattern, not "(or update)"
CYPHER = re.compile(
    "|".join((
        rf"\b(?:OPTIONAL\s+)?MATCH\s*{_NODE}",
        rf"\bMERGE\s*{_NODE}",
        rf"\bCREATE\s*{_NODE}",
        r"\bCREATE\s+(?:\w+\s+)?INDEX\s+(?:FOR|ON)\b",
        r"\bUNWIND\s+\S+\s+AS\s+\w+",
        r"\bRETURN\s+(?:DISTINCT\s+)?[\w$]+(?:\s*\.\s*\w+|\s*\(|\s*,|\s+AS\s)",
        r"\bSET\s+\w+(?:\.\w+)?\s*\+?=\s*\S",
        r"\b(?:DETACH\s+)?DELETE\s+\w+\s*(?:$|,|\)|\bRETURN\b|\bWITH\b)",
        r"\bCALL\s+\w+(?:\.\w+)+\s*\(",
        r"\bFOREACH\s*\(\s*\w+\s+IN\b",
        r"\)\s*<?-\s*\[|\]\s*->?\s*\(",  # )-[r:TYPE]->(   (a)<-[...]-(b)
        r"\bGRAPH\.(?:RO_)?QUERY\b",
    )),
    re.IGNORECASE,
)
"""A Cypher clause in the shape Cypher writes it, so prose ("create (or update) the session", "return it")
is not taken for a query."""

REDIS_KEY = re.compile(r"^recall:\S")
"""A Redis key: every key the hub uses lies under ``recall:<graph>:``."""


def cypher_in(tree: ast.Module) -> list[str]:
    return [text for text in strings(tree) if CYPHER.search(text)]


def redis_keys_in(tree: ast.Module) -> list[str]:
    return [text for text in strings(tree) if REDIS_KEY.match(text)]


def redis_client_use(tree: ast.Module) -> list[str]:
    """Calls on a Redis client held as ``redis`` or ``<anything>.redis`` (``ctx.redis.get(...)``); handing
    the client on (``KVStore(ctx.redis)``) is not using it."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            held = node.func.value
            if (isinstance(held, ast.Name) and held.id == "redis") or (
                isinstance(held, ast.Attribute) and held.attr == "redis"
            ):
                found.append(ast.unparse(node.func))
    return found


# --- the hub's parts and their rules ------------------------------------------------------------------

BUS = ("nats", "recall_client")
"""What speaks NATS."""
STORE_CLIENTS = ("redis", "falkordb")
"""What talks to Redis and FalkorDB."""


@dataclass(frozen=True)
class Rule:
    """What one part of the hub may import and hold."""

    imports: frozenset[str]
    """Other parts of the hub it may import (``tooling.auth``: that module only); ``*``: any."""
    bus: bool = False
    """May import NATS and the client (:data:`BUS`)."""
    store_clients: tuple[str, ...] = ()
    """Which of the store clients' modules (:data:`STORE_CLIENTS`) it may import and use."""
    cypher: bool = False
    """May hold Cypher."""


def _may(*parts: str) -> frozenset[str]:
    return frozenset(parts)


HELPERS = ("timeutil", "tokens")
"""Root modules that import nothing of the hub: anything may use them."""
ANY = _may("*")

RULES: dict[str, Rule] = {
    # packages
    "service": Rule(  # the only hub code that speaks NATS; credentials are shared with the tools
        _may("ops", "retrieval", "store", "context", "config", "background", "logs", "outages", "tooling.auth",
             *HELPERS),
        bus=True,
    ),
    "ops": Rule(  # the operations: transport-free
        _may("retrieval", "store", "embedders", "extractors", "context", "config", "background", "outages", *HELPERS),
    ),
    "retrieval": Rule(  # below the operations: never calls one
        _may("store", "embedders", "rerankers", "context", "config", "background", "outages", *HELPERS),
    ),
    "store": Rule(  # every Cypher query, Redis key and store client; depends on no layer above it
        _may("outages", *HELPERS), store_clients=STORE_CLIENTS, cypher=True,
    ),
    "embedders": Rule(_may(*HELPERS)),  # pluggable models: know nothing of the hub
    "extractors": Rule(_may(*HELPERS)),  # pluggable LLMs: know nothing of the hub
    "rerankers": Rule(_may(*HELPERS)),  # pluggable cross-encoders: know nothing of the hub
    "console": Rule(_may("logs", *HELPERS), bus=True),  # a client of the bus: never the stores or the hub's code
    "tooling": Rule(ANY, bus=True, store_clients=STORE_CLIENTS),  # clients of the bus and of the store
    "bench": Rule(ANY, bus=True, store_clients=STORE_CLIENTS),  # likewise
    # root modules
    "__init__": Rule(_may("config", "context", "service", "tooling")),  # the package's public names
    "background": Rule(_may()),
    "config": Rule(_may("embedders", "extractors", "rerankers")),  # settings, with those of the pluggable parts
    "context": Rule(  # wires the stores together: creates the clients and hands them over
        _may("store", "embedders", "extractors", "rerankers", "config", "background", *HELPERS),
        store_clients=("redis",),
    ),
    "logs": Rule(_may()),
    "outages": Rule(_may(), store_clients=("redis.exceptions",)),  # tells an outage from a bug
    "timeutil": Rule(_may()),
    "tokens": Rule(_may()),
}


@dataclass(frozen=True)
class Module:
    path: Path
    part: str
    """The package (first directory under the hub) or root module it belongs to."""
    package: str
    """The dotted package it is in, to resolve relative imports against."""
    tree: ast.Module

    @property
    def name(self) -> str:
        return str(self.path.relative_to(ROOT))


def hub_modules() -> Iterator[Module]:
    for path in sorted(HUB.rglob("*.py")):
        rel = path.relative_to(HUB)
        part = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        package = ".".join(["recall_hub", *rel.parts[:-1]])
        yield Module(path, part, package, ast.parse(path.read_text(), filename=str(path)))


def parts_of_the_hub() -> set[str]:
    return {p.name for p in HUB.iterdir() if p.is_dir() and (p / "__init__.py").exists()} | {
        p.stem for p in HUB.glob("*.py")
    }


def _under(name: str, prefixes: tuple[str, ...] | frozenset[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def import_violations(module: Module, rule: Rule, parts: set[str]) -> list[str]:
    """The imports ``rule`` does not allow ``module``."""
    found = []
    for name in sorted(imported(module.tree, module.package)):
        top, _, rest = name.partition(".")
        if top == "recall_hub":
            target = rest.split(".")[0] if rest.split(".")[0] in parts else "__init__"
            allowed = "*" in rule.imports or target == module.part or _under(rest, rule.imports)
        elif top in BUS:
            allowed = rule.bus
        elif top in STORE_CLIENTS:
            allowed = _under(name, rule.store_clients)
        else:
            continue
        if not allowed:
            found.append(f"{module.name} ({module.part}) imports {name}")
    return found


# --- the detectors, on small sources ---------------------------------------------------------------------


def _tree(source: str) -> ast.Module:
    return ast.parse(source)


@pytest.mark.parametrize(
    "source",
    [
        'q = "CREATE (b:Bead) SET b = $props"',
        'q = "create(b)"',
        'q = "UNWIND $x AS y MATCH(b:Bead {bead_id: y})"',
        'q = "unwind $ids as i match (b) where b.id = i"',
        'q = "OPTIONAL MATCH (:AI {ai_id: $caller})"',
        'q = "merge (s:Session {session_id: $s})"',
        'q = "MATCH (a)-[r:MEMBER_OF]->(g) RETURN g"',
        'q = "WITH b RETURN b.bead_id"',
        'q = "RETURN count(g)"',
        'q = "SET b.version = 2"',
        'q = "DETACH DELETE b"',
        'q = "CALL db.idx.fulltext.queryNodes($q)"',
        'q = "CREATE INDEX FOR (b:Bead) ON (b.bead_id)"',
        'q = "FOREACH (x IN beads | SET x.a = 1)"',
        'q = f"MATCH ({var}:Bead) WHERE {visible(var)}"',
        'q = f"MATCH (b:Bead {{bead_id: $id}})"',
        'q = PREFIX + "MATCH" + " (b)"',
        'q = ("MATCH " "(b)")',
        'client.execute_command("GRAPH.QUERY", name, q)',
    ],
)
def test_the_cypher_detector_finds_queries(source: str) -> None:
    assert cypher_in(_tree(source)), source


@pytest.mark.parametrize(
    "source",
    [
        'message = "Create (or update) the session; return it to the caller"',
        'message = "set the limit, then delete it first"',
        'message = "match the words (in any order)"',
        'message = f"return {value} as is"',
        'def f():\n    """MATCH (b:Bead) RETURN b: documentation, not a query."""',
    ],
)
def test_the_cypher_detector_leaves_prose_and_docstrings_alone(source: str) -> None:
    assert cypher_in(_tree(source)) == [], source


@pytest.mark.parametrize(
    ("source", "package", "names"),
    [
        ("import redis", "recall_hub.ops", {"redis"}),
        ("import redis.asyncio as r", "recall_hub.ops", {"redis.asyncio"}),
        ("from redis import Redis", "recall_hub.ops", {"redis.Redis"}),
        ("from redis.asyncio import Redis as R", "recall_hub.ops", {"redis.asyncio.Redis"}),
        ("import nats, os.path", "recall_hub.ops", {"nats", "os.path"}),
        ("from .keys import Keys", "recall_hub.store", {"recall_hub.store.keys.Keys"}),
        ("from . import keys", "recall_hub.store", {"recall_hub.store.keys"}),
        ("from ..service import endpoints", "recall_hub.ops", {"recall_hub.service.endpoints"}),
        ("from .. import context", "recall_hub.ops", {"recall_hub.context"}),
        ("def f():\n    from recall_hub.ops import beads", "recall_hub.store", {"recall_hub.ops.beads"}),
    ],
)
def test_imports_are_read_from_the_syntax_tree(source: str, package: str, names: set[str]) -> None:
    assert imported(_tree(source), package) == names


def test_import_rules_catch_store_clients_the_bus_and_upward_imports() -> None:
    parts = parts_of_the_hub()

    def violations(source: str, part: str, package: str) -> list[str]:
        module = Module(HUB / "x.py", part, package, _tree(source))
        return import_violations(module, RULES[part], parts)

    for source in ("import redis", "import redis.asyncio as r", "from redis import Redis", "import falkordb"):
        assert violations(source, "ops", "recall_hub.ops"), source
        assert violations(source, "store", "recall_hub.store") == [], source
    assert violations("from redis.exceptions import ConnectionError", "outages", "recall_hub") == []
    assert violations("import redis", "outages", "recall_hub")  # exceptions only: no client
    assert violations("import nats", "ops", "recall_hub.ops")
    assert violations("from ..ops import beads", "retrieval", "recall_hub.retrieval")
    assert violations("from recall_hub.ops.indexing import bead_text", "retrieval", "recall_hub.retrieval")
    assert violations("from ..service import endpoints", "ops", "recall_hub.ops")
    assert violations("from .. import context", "store", "recall_hub.store")
    assert violations("from recall_hub import HubSettings", "ops", "recall_hub.ops")  # the package root
    assert violations("from .beads import create_bead", "ops", "recall_hub.ops") == []
    assert violations("from recall_hub.tooling import auth", "service", "recall_hub.service") == []
    assert violations("from recall_hub.tooling import stack", "service", "recall_hub.service")


def test_the_redis_detectors_find_keys_and_client_calls() -> None:
    assert redis_keys_in(_tree('k = "recall:g:kv:a_1"'))
    assert redis_keys_in(_tree('k = f"recall:{graph}:changes:{scope}"'))
    assert redis_keys_in(_tree('k = "recall:" + graph'))
    assert redis_keys_in(_tree('print(f"recall: {exc}"); s = "recall.v1.req.a.b"')) == []
    assert redis_client_use(_tree("await ctx.redis.get(key)")) == ["ctx.redis.get"]
    assert redis_client_use(_tree("await redis.xadd(key, fields)")) == ["redis.xadd"]
    assert redis_client_use(_tree("pipe = self.ctx.redis.pipeline(transaction=True)")) == ["self.ctx.redis.pipeline"]
    assert redis_client_use(_tree("store = KVStore(ctx.redis, keys)")) == []
    assert redis_client_use(_tree("down = (redis.exceptions.ConnectionError,)")) == []


# --- the rules, on the repository -------------------------------------------------------------------------


def _python_files(top: Path) -> list[Path]:
    return sorted(top.rglob("*.py"))


def _foreign_imports(top: Path, package: str, forbidden: tuple[str, ...]) -> list[str]:
    found = []
    for path in _python_files(top):
        rel = path.relative_to(top)
        within = ".".join([package, *rel.parts[:-1]])
        tree = ast.parse(path.read_text(), filename=str(path))
        names = sorted(imported(tree, within))
        found += [f"{path.relative_to(ROOT)} imports {name}" for name in names if _under(name, forbidden)]
    return found


def test_schemas_import_nothing_of_ours() -> None:
    top = ROOT / "schemas" / "recall_schemas"
    assert _python_files(top)
    assert _foreign_imports(top, "recall_schemas", ("recall_client", "recall_hub")) == []


def test_clients_never_import_the_hub() -> None:
    top = ROOT / "clients" / "recall_client"
    assert _python_files(top)
    assert _foreign_imports(top, "recall_client", ("recall_hub",)) == []


def test_every_part_of_the_hub_has_a_rule() -> None:
    """A new package or root module needs a row in :data:`RULES` (and a row that names nothing goes)."""
    assert parts_of_the_hub() == set(RULES)
    named = {part.split(".")[0] for rule in RULES.values() for part in rule.imports} - {"*"}
    assert named <= set(RULES)


def test_each_part_imports_only_what_its_rule_allows() -> None:
    parts = parts_of_the_hub()
    offenders = [v for module in hub_modules() for v in import_violations(module, RULES[module.part], parts)]
    assert offenders == []


def test_only_the_store_holds_cypher() -> None:
    offenders = [
        f"{module.name}: {text[:80]!r}"
        for module in hub_modules()
        if not RULES[module.part].cypher
        for text in cypher_in(module.tree)
    ]
    assert offenders == []


def test_only_the_key_module_spells_a_redis_key() -> None:
    """Every Redis key is built by ``store/keys.py``, under the graph's namespace (``recall:<graph>:``)."""
    offenders = [
        f"{module.name}: {text[:80]!r}"
        for module in hub_modules()
        if module.path != HUB / "store" / "keys.py"
        for text in redis_keys_in(module.tree)
    ]
    assert offenders == []


def test_only_the_store_and_what_may_import_a_client_talk_to_redis() -> None:
    """Domain and service code reach Redis through a store class, never through a client of their own."""
    offenders = [
        f"{module.name}: {use}"
        for module in hub_modules()
        if not _under("redis", RULES[module.part].store_clients)
        for use in redis_client_use(module.tree)
    ]
    assert offenders == []


def test_the_dispatch_table_is_derived_from_the_operation_table() -> None:
    from recall_hub.ops.dispatch import HANDLERS
    from recall_schemas import OPERATIONS

    assert list(HANDLERS) == list(OPERATIONS)
    assert all(handler.__name__ == name for name, handler in HANDLERS.items())


OUTSIDE_REFERENCES = re.compile(r"DESIGN\.md|shared/seeds|\(issue \d+\)|\bD(?:[1-9]|1[0-4])\b(?!:)")
"""What points a reader outside the repository: the original design notes, seeds and issue numbers
(and their numbering of design decisions). LoCoMo data under ../shared/data may be a default argument."""


def test_the_repository_stands_on_its_own() -> None:
    docs = [*ROOT.glob("*.md"), *(ROOT / "docs").rglob("*.md"), *(ROOT / "compose").rglob("*.md")]
    texts = [*docs, *ROOT.glob("*/recall_*/**/*.py"), *_python_files(ROOT / "tests")]
    offenders = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in texts
        if path.name != "test_locomo_eval.py"  # LoCoMo dialogue ids look like "D1:2"
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if OUTSIDE_REFERENCES.search(line) and "OUTSIDE_REFERENCES" not in line
    ]
    assert offenders == []


def _map_rows() -> dict[str, str]:
    """docs/architecture.md's map: part -> its "may import" cell."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## The map", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            rows[cells[0].strip("`").rstrip("/")] = cells[2]
    return rows


def _described(rule: Rule) -> tuple[set[str], set[str]]:
    """What the map should say of a part: the parts of the hub it may import, and what else it may reach."""
    parts = set(rule.imports) - set(HELPERS)
    hub = {"anything"} if "*" in parts else parts or {"nothing of the hub"}
    reach = ({"bus"} if rule.bus else set()) | ({"Cypher"} if rule.cypher else set())
    reach |= {"stores"} if rule.store_clients == STORE_CLIENTS else set(rule.store_clients)
    return hub, reach


def _cell(cell: str) -> tuple[set[str], set[str]]:
    hub, _, reach = cell.partition(";")
    return {p.strip() for p in hub.split(",")}, {p.strip() for p in reach.split(",") if p.strip()}


def test_the_map_in_the_architecture_doc_says_what_the_rules_enforce() -> None:
    rows = _map_rows()
    assert set(rows) == set(RULES), "docs/architecture.md's map and RULES name different parts"
    for part, rule in RULES.items():
        assert _cell(rows[part]) == _described(rule), part
