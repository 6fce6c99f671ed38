"""What domain functions need: the stores and settings of one hub process."""

from __future__ import annotations

from dataclasses import dataclass

from .config import HubSettings
from .graph import GraphStore


@dataclass
class HubContext:
    settings: HubSettings
    graph: GraphStore

    @classmethod
    async def connect(cls, settings: HubSettings) -> HubContext:
        graph = GraphStore(settings.falkordb_url, settings.graph_name)
        await graph.ensure_schema()
        return cls(settings=settings, graph=graph)

    async def aclose(self) -> None:
        await self.graph.aclose()
