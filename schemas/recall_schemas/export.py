"""Export the contract for non-Python clients: one JSON Schema per message and an AsyncAPI document.

python -m recall_schemas.export schemas/     (or: recall export-schemas)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from .errors import ErrorReply
from .ops import OPERATIONS
from .subjects import API_VERSION, REQUEST_ROOT

ASYNCAPI_FILE = "asyncapi.json"
SCHEMA_DIR = "jsonschema"


def message_models() -> dict[str, type[BaseModel]]:
    """Every message of the protocol by name, sorted."""
    models: dict[str, type[BaseModel]] = {"ErrorReply": ErrorReply}
    for op in OPERATIONS.values():
        models[op.request.__name__] = op.request
        models[op.reply.__name__] = op.reply
    return dict(sorted(models.items()))


def asyncapi() -> dict[str, Any]:
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    messages = {
        name: {"name": name, "contentType": "application/json", "payload": {"$ref": f"{SCHEMA_DIR}/{name}.json"}}
        for name in message_models()
    }
    for op in OPERATIONS.values():
        channels[op.name] = {
            "address": f"{REQUEST_ROOT}.{{caller}}.{op.name}",
            "description": op.summary,
            "parameters": {"caller": {"description": "The calling AI id; NATS permissions bind it to the connection"}},
            "messages": {"request": {"$ref": f"#/components/messages/{op.request.__name__}"}},
        }
        channels[f"{op.name}_reply"] = {
            "address": None,
            "description": f"Reply inbox of {op.name} (_INBOX.<caller>.>)",
            "messages": {
                "reply": {"$ref": f"#/components/messages/{op.reply.__name__}"},
                "error": {"$ref": "#/components/messages/ErrorReply"},
            },
        }
        operations[op.name] = {
            "action": "send",
            "channel": {"$ref": f"#/channels/{op.name}"},
            "summary": op.summary,
            "reply": {"channel": {"$ref": f"#/channels/{op.name}_reply"}},
        }
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "Nexus Recall hub",
            "version": API_VERSION,
            "description": "Request/reply API over NATS. Errors carry the Nats-Service-Error-Code header "
            "and an ErrorReply body.",
        },
        "defaultContentType": "application/json",
        "channels": channels,
        "operations": operations,
        "components": {"messages": messages},
    }


def operations_table() -> str:
    """The request/reply operations as a markdown table (embedded in docs/protocol.md)."""
    lines = ["| operation | subject | request | reply | what |", "| --- | --- | --- | --- | --- |"]
    for op in OPERATIONS.values():
        lines.append(
            f"| `{op.name}` | `{REQUEST_ROOT}.<caller>.{op.name}` | `{op.request.__name__}` "
            f"| `{op.reply.__name__}` | {op.summary} |"
        )
    return "\n".join(lines) + "\n"


BEGIN, END = "<!-- operations:begin -->\n", "<!-- operations:end -->"


def sync_protocol_doc(doc: Path) -> bool:
    """Rewrite the operation table between the markers of ``doc``; True if it changed."""
    text = doc.read_text()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    updated = head + BEGIN + operations_table() + END + tail
    if updated != text:
        doc.write_text(updated)
    return updated != text


def render_all() -> dict[str, str]:
    """Relative path -> file text of everything the export writes."""
    files = {
        f"{SCHEMA_DIR}/{name}.json": json.dumps(model.model_json_schema(), indent=2, sort_keys=True) + "\n"
        for name, model in message_models().items()
    }
    files[ASYNCAPI_FILE] = json.dumps(asyncapi(), indent=2, sort_keys=True) + "\n"
    return files


def export(out_dir: Path) -> list[Path]:
    written = []
    for rel, text in render_all().items():
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written


if __name__ == "__main__":
    for path in export(Path(sys.argv[1] if len(sys.argv) > 1 else "schemas")):
        print(path)
