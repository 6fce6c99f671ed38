"""What domain functions need: the stores, the embedder and the settings of one hub process."""

from __future__ import annotations

from dataclasses import dataclass

from .config import HubSettings
from .embedders import Embedder, make_embedder
from .graph import GraphStore
from .vectors import VectorStore


@dataclass
class HubContext:
    settings: HubSettings
    graph: GraphStore
    embedder: Embedder
    vectors: VectorStore

    @classmethod
    async def connect(cls, settings: HubSettings, embedder: Embedder | None = None) -> HubContext:
        graph = GraphStore(settings.falkordb_url, settings.graph_name)
        await graph.ensure_schema()
        if embedder is None:
            embedder = make_embedder(settings.embedder)
            await embedder.warmup()  # type: ignore[attr-defined]
        vectors = VectorStore(
            settings.redis_url,
            f"{settings.graph_name}/{embedder.model_id}",
            quantization=settings.vector_quantization,
        )
        return cls(settings=settings, graph=graph, embedder=embedder, vectors=vectors)

    async def aclose(self) -> None:
        await self.graph.aclose()
        await self.vectors.aclose()
        await self.embedder.aclose()
