"""The committed JSON Schema and AsyncAPI files are exactly what the models export."""

from __future__ import annotations

from pathlib import Path

from recall_schemas import OPERATIONS
from recall_schemas.export import render_all

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"


def test_committed_schema_files_match_the_models() -> None:
    drifted = [rel for rel, text in render_all().items() if not (SCHEMAS / rel).exists()
               or (SCHEMAS / rel).read_text() != text]
    assert drifted == [], f"run `recall export-schemas` and commit: {drifted}"


def test_no_stale_schema_files() -> None:
    expected = set(render_all())
    on_disk = {str(p.relative_to(SCHEMAS)) for p in (SCHEMAS / "jsonschema").glob("*.json")}
    assert on_disk <= expected, f"stale files: {sorted(on_disk - expected)}"


def test_every_operation_has_a_request_and_reply_schema() -> None:
    files = render_all()
    for op in OPERATIONS.values():
        assert f"jsonschema/{op.request.__name__}.json" in files
        assert f"jsonschema/{op.reply.__name__}.json" in files


def test_protocol_doc_lists_every_operation() -> None:
    from recall_schemas.export import operations_table

    doc = (SCHEMAS.parent / "docs" / "protocol.md").read_text()
    section = doc.split("<!-- operations:begin -->\n", 1)[1].split("<!-- operations:end -->", 1)[0]
    assert section == operations_table(), "run `recall export-schemas` to regenerate docs/protocol.md's table"
