"""The package layout is the architecture: these rules keep it that way.

- ``recall_schemas`` (the wire contract) imports nothing of ours; ``recall_client`` never imports the hub.
- In the hub, only ``service/`` speaks NATS (``tooling/``, ``bench/`` and ``console/`` are clients of the bus,
  not the hub; ``console/`` imports no store, domain or service code and no store client).
- ``store/`` holds every Cypher query and every Redis key, and depends on no layer above it.
- ``ops/`` and ``retrieval/`` are transport-free: they never import ``service/`` or ``tooling/``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from conftest import repo_root

ROOT = repo_root()
HUB = ROOT / "hub" / "recall_hub"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _files(top: Path) -> list[Path]:
    return sorted(top.rglob("*.py"))


def _layer(path: Path) -> str:
    rel = path.relative_to(HUB)
    return rel.parts[0] if len(rel.parts) > 1 else "root"


def _violations(paths: list[Path], forbidden: re.Pattern[str]) -> list[str]:
    return [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in paths
        for name in sorted(_imports(path))
        if forbidden.match(name)
    ]


def test_schemas_import_nothing_of_ours() -> None:
    paths = _files(ROOT / "schemas" / "recall_schemas")
    assert paths
    assert _violations(paths, re.compile(r"^(recall_client|recall_hub)\b")) == []


def test_clients_never_import_the_hub() -> None:
    paths = _files(ROOT / "clients" / "recall_client")
    assert paths
    assert _violations(paths, re.compile(r"^recall_hub\b")) == []


def test_only_the_service_layer_speaks_nats() -> None:
    serving = [p for p in _files(HUB) if _layer(p) not in ("service", "tooling", "bench", "console")]
    assert _violations(serving, re.compile(r"^(nats|recall_client)\b")) == []


@pytest.mark.parametrize(
    ("layer", "may_not_import"),
    [
        ("store", r"^recall_hub\.(ops|retrieval|service|tooling|bench)\b"),
        ("ops", r"^recall_hub\.(service|tooling|bench)\b"),
        ("retrieval", r"^recall_hub\.(service|tooling|bench)\b"),
        ("embedders", r"^recall_hub\.(store|ops|retrieval|service|tooling|bench)\b"),
        ("service", r"^recall_hub\.(bench\b|tooling\.(?!auth\b))"),  # credentials are shared with the tools
        # the web console is a client of the bus: it never reads the stores or runs the hub's code
        ("console", r"^recall_hub\.(store|ops|retrieval|service|embedders|context)\b|^(redis|falkordb)\b"),
    ],
)
def test_layers_depend_downwards(layer: str, may_not_import: str) -> None:
    paths = [p for p in _files(HUB) if _layer(p) == layer]
    assert paths, f"no modules in {layer}/"
    assert _violations(paths, re.compile(may_not_import)) == []


def test_the_dispatch_table_is_derived_from_the_operation_table() -> None:
    from recall_hub.ops.dispatch import HANDLERS
    from recall_schemas import OPERATIONS

    assert list(HANDLERS) == list(OPERATIONS)
    assert all(handler.__name__ == name for name, handler in HANDLERS.items())


def test_only_the_store_holds_cypher() -> None:
    cypher = re.compile(r"\b(MATCH|MERGE) \(|GRAPH\.(RO_)?QUERY")
    offenders = [
        str(p.relative_to(ROOT)) for p in _files(HUB) if _layer(p) != "store" and cypher.search(p.read_text())
    ]
    assert offenders == []


def test_only_the_key_module_spells_a_redis_key() -> None:
    """Every Redis key is built by ``store/keys.py``, under the graph's namespace (``recall:<graph>:``)."""
    key = re.compile(r"""["']recall:[^"'\s]""")
    offenders = [
        str(p.relative_to(ROOT)) for p in _files(HUB) if p.name != "keys.py" and key.search(p.read_text())
    ]
    assert offenders == []


def test_only_the_store_and_measurements_talk_to_redis() -> None:
    """Domain and service code reach Redis through a store class, never through a client of their own."""
    direct = re.compile(r"\bctx\.redis\.|\bredis\.asyncio\b|from redis")
    allowed = {"store", "bench", "tooling"}
    offenders = [
        str(p.relative_to(ROOT)) for p in _files(HUB)
        if _layer(p) not in allowed and p.name != "context.py" and direct.search(p.read_text())
    ]
    assert offenders == []


OUTSIDE_REFERENCES = re.compile(r"DESIGN\.md|shared/seeds|\(issue \d+\)|\bD(?:[1-9]|1[0-4])\b(?!:)")
"""What points a reader outside the repository: the original design notes, seeds and issue numbers
(and their numbering of design decisions). LoCoMo data under ../shared/data may be a default argument."""


def test_the_repository_stands_on_its_own() -> None:
    docs = [*ROOT.glob("*.md"), *(ROOT / "docs").rglob("*.md"), *(ROOT / "compose").rglob("*.md")]
    texts = [*docs, *ROOT.glob("*/recall_*/**/*.py"), *_files(ROOT / "tests")]
    offenders = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in texts
        if path.name != "test_locomo_eval.py"  # LoCoMo dialogue ids look like "D1:2"
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if OUTSIDE_REFERENCES.search(line) and "OUTSIDE_REFERENCES" not in line
    ]
    assert offenders == []
