"""Lean JSON Schemas for the tool list an agent pays for on every turn.

pydantic's schemas are exact but verbose: a ``title`` on every property, ``anyOf [X, null]`` with
``default: null`` for each optional field, enums behind ``$ref``. :func:`compact` rewrites a schema
into the same constraints with less text; ``structure_only=True`` keeps only the shape (types,
properties, required, enums), for output schemas: the hub's replies are valid by construction and a
model needs none of their descriptions or limits to call a tool. The input schema of
every tool also says ``additionalProperties: false``: the hub refuses unknown fields, so a model
must not be told it may send them.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

_BEYOND_STRUCTURE = frozenset(
    {
        "description",
        "default",
        "examples",
        "pattern",
        "format",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minItems",
        "maxItems",
        "additionalProperties",
    }
)
_NEVER = frozenset({"title"})


def compact(schema: dict[str, Any], *, structure_only: bool = False) -> dict[str, Any]:
    """``schema`` with local ``$ref`` inlined (but a model used twice or by itself), ``anyOf [X, null]``
    collapsed to ``X`` and titles dropped; with ``structure_only`` also everything but the shape."""
    defs = schema.get("$defs", {})
    uses = Counter(re.findall(r'"#/\$defs/([^"]+)"', json.dumps(schema)))
    # A model used in several places stays one definition; enums and once-used models are inlined.
    shared = {name for name, n in uses.items() if n > 1 and "properties" in defs.get(name, {})}
    kept_defs: dict[str, Any] = {}

    def walk(node: Any, inlining: frozenset[str]) -> Any:
        if isinstance(node, list):
            return [walk(item, inlining) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            name = ref.removeprefix("#/$defs/")
            if name in inlining or name in shared:  # recursive or shared: keep the reference
                if name not in kept_defs:
                    kept_defs[name] = {}  # a placeholder stops the recursion
                    kept_defs[name] = walk(defs[name], inlining | {name})
                return {k: walk(v, inlining) for k, v in node.items() if k not in _NEVER}
            siblings = {k: v for k, v in node.items() if k != "$ref"}
            return walk({**defs[name], **siblings}, inlining | {name})
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _NEVER or key == "$defs" or (structure_only and key in _BEYOND_STRUCTURE):
                continue
            if key == "default" and value is None:
                continue
            if key == "properties" and isinstance(value, dict):
                out[key] = {name: walk(prop, inlining) for name, prop in value.items()}
            else:
                out[key] = walk(value, inlining)
        options = out.get("anyOf")
        if isinstance(options, list) and len(options) == 2 and {"type": "null"} in options:
            (other,) = [o for o in options if o != {"type": "null"}]
            if not structure_only:  # an argument left out is the same as null: say only what to send
                del out["anyOf"]
                out = {**other, **out}
            elif isinstance(other.get("type"), str):  # a reply does carry the nulls
                del out["anyOf"]
                out = {**other, "type": [other["type"], "null"], **out}
        return out

    result: dict[str, Any] = walk(schema, frozenset())
    if kept_defs:
        result["$defs"] = kept_defs
    return result


def strict_input(schema: dict[str, Any]) -> dict[str, Any]:
    """A tool's input schema: compact, and closed to arguments it does not name."""
    lean = compact(schema)
    lean["additionalProperties"] = False
    return lean
