"""``GraphStore.values``: FalkorDB's compact replies read as plain values, the same as the FalkorDB client
reads them, whatever the value's kind and however deep."""

from __future__ import annotations

from typing import Any

from recall_hub.context import HubContext

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
