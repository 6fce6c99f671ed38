"""``GraphStore.values``: FalkorDB's compact replies read as plain values, the same as the FalkorDB client
reads them, whatever the value's kind and however deep."""

from __future__ import annotations

from typing import Any

import pytest
from recall_hub.context import HubContext
from recall_schemas import InvalidRequest

EVERY_KIND = (
    "RETURN {text: 'a \"quoted\" word, é', count: 7, negative: -3, nothing: null, yes: true, no: false, "
    "ratio: 1.5, items: [1, 'x', null, [2, 3.25], {inner: 'y'}], nested: {deeper: {deepest: [true]}}, "
    "empty_list: [], empty_map: {}}, [{a: 1}, 'loose', null], 42"
)


def plain(value: Any) -> Any:
    """The FalkorDB client's reading with its dict and list types made plain, to compare."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


async def test_values_reads_every_kind_the_way_the_falkordb_client_does(hub: HubContext) -> None:
    compact = await hub.graph.values(EVERY_KIND)
    client = await hub.graph.ro_query(EVERY_KIND)
    assert compact == [plain(row) for row in client]
    (properties, loose, number), = compact
    assert properties["items"][3] == [2, 3.25] and properties["nested"]["deeper"]["deepest"] == [True]
    assert properties["text"] == 'a "quoted" word, é' and properties["nothing"] is None
    assert loose == [{"a": 1}, "loose", None] and number == 42


async def test_parameters_of_every_kind_reach_falkordb_unchanged(hub: HubContext) -> None:
    sent = {
        "text": 'a "quoted" back\\slash, é, `tick` and \'single\'', "empty": "", "count": 7, "negative": -3,
        "ratio": 1.5, "tiny": 1e-07, "yes": True, "no": False, "nothing": None,
        "items": [1, "x", None, [2, 3.25], {"inner": "y"}], "odd keys": {"@type": "t", "a-b-c": [True]},
    }
    (back,), = await hub.graph.values("RETURN $p", {"p": sent})
    assert back == sent


async def test_a_key_the_header_cannot_carry_is_refused_as_bad_input(hub: HubContext) -> None:
    with pytest.raises(InvalidRequest):
        await hub.graph.values("RETURN $p", {"p": {"back`tick": 1}})
