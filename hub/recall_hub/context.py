"""What domain functions need: the stores, the embedder and the settings of one hub process."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from redis.asyncio import Redis

from recall_hub.background import BackgroundWork
from recall_hub.config import HubSettings
from recall_hub.embedders import Embedder, make_embedder
from recall_hub.embedders.batching import BatchingEmbedder
from recall_hub.embedders.early import EarlyVectors
from recall_hub.embedders.query_cache import QueryVectors
from recall_hub.extractors import Extractor, make_extractor
from recall_hub.rerankers import Reranker, make_reranker
from recall_hub.store.access import AccessLog
from recall_hub.store.agents import AgentStore
from recall_hub.store.applied import AppliedEvents
from recall_hub.store.audit import AuditLog
from recall_hub.store.beads import BeadStore
from recall_hub.store.connections import client
from recall_hub.store.feed import ChangeFeed
from recall_hub.store.forget import CheckFirst
from recall_hub.store.graph import GraphStore
from recall_hub.store.groups import GroupStore
from recall_hub.store.handoffs import HandoffStore
from recall_hub.store.index_log import IndexLog
from recall_hub.store.keys import Keys
from recall_hub.store.keyword_index import KeywordIndex
from recall_hub.store.kv import KVStore
from recall_hub.store.memberships import MembershipCache
from recall_hub.store.outbox import OutboxStore
from recall_hub.store.presence import client_name, names_allowed, new_hub_id
from recall_hub.store.relationships import RelationshipStore
from recall_hub.store.replica import ReplicaRoute, replica_routes
from recall_hub.store.sessions import SessionStore
from recall_hub.store.vectors import BeadVectors, VectorStore

CLOSE_WAIT_S = 10.0
"""How long closing a context waits for work handed off after replies (``create_settle = background``)."""


@dataclass
class HubContext:
    settings: HubSettings
    graph: GraphStore
    redis: Redis
    embedder: Embedder
    vectors: VectorStore
    feed: ChangeFeed
    audit: AuditLog
    kv: KVStore
    keys: Keys
    beads: BeadStore
    outbox: OutboxStore
    relationships: RelationshipStore
    groups: GroupStore
    sessions: SessionStore
    agents: AgentStore
    handoffs: HandoffStore
    applied_events: AppliedEvents
    index_log: IndexLog
    keywords: KeywordIndex
    query_vectors: QueryVectors
    background: BackgroundWork
    accessed: AccessLog
    memberships: MembershipCache
    replicas: tuple[ReplicaRoute, ...] = field(default=())
    """Read replicas, each watched by a task of its own (store/replica.py); empty: every read on the primary."""
    extractor: Extractor | None = None
    """The LLM remember_extracted asks (RECALL_EXTRACTOR__URL); None: a deterministic outline of the text."""
    reranker: Reranker | None = None
    """The cross-encoder that reorders a search's best candidates (RECALL_RERANKER__URL); None: the fused order."""
    early_vectors: EarlyVectors[BeadVectors] = field(default_factory=EarlyVectors)
    """Embeddings of beads being created, started before their write commits (embedders/early.py)."""
    check_first: CheckFirst = field(default_factory=CheckFirst)
    """Scopes whose creates check the deny-list before their write (:func:`recall_hub.ops.beads.create_bead`)."""
    hub_id: str = ""
    """This hub (this context): what its Redis connections, hand-off marks and locks are named after, so
    that another hub can tell when it is gone (store/presence.py)."""
    left_by_gone_hubs: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when a read finds the work of a create handed off by a hub that is gone: this hub takes it over
    (:func:`recall_hub.ops.after_commit.take_over_forever`)."""
    forgotten: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when this hub forgets beads: their erasure from the servers' logs and files is due
    (:func:`recall_hub.ops.erasure.erase_forever`)."""

    @classmethod
    async def connect(cls, settings: HubSettings, embedder: Embedder | None = None) -> HubContext:
        graph_replica, vector_replica = replica_routes(
            falkordb=(settings.falkordb_url, settings.falkordb_replica_url),
            redis=(settings.redis_url, settings.redis_replica_url),
            barrier_key=Keys(settings.graph_name).replica_barrier(),
            check_s=settings.replica_check_s,
            ack_timeout_ms=settings.replica_ack_timeout_ms,
        )
        replicas = tuple(dict.fromkeys(r for r in (graph_replica, vector_replica) if r is not None))
        graph = GraphStore(settings.falkordb_url, settings.graph_name, replica=graph_replica)
        await graph.ensure_schema()
        hub_id = new_hub_id()
        redis = client(settings.redis_url, max_connections=128, client_name=client_name(hub_id))
        if not await names_allowed(redis):
            await redis.aclose()
            redis, hub_id = client(settings.redis_url, max_connections=128), ""
        if embedder is None:
            embedder = BatchingEmbedder(make_embedder(settings.embedder))
            await embedder.warmup()
        keys = Keys(settings.graph_name)
        vectors = VectorStore(
            redis, keys, embedder.model_id, quantization=settings.vector_quantization, replica=vector_replica,
            signs_cache_size=settings.signs_cache_size,
        )
        beads = BeadStore(graph, settings.bead_cache_size)
        index_log = IndexLog(redis, keys, settings.index_log_max)
        ctx = cls(
            settings=settings,
            graph=graph,
            redis=redis,
            embedder=embedder,
            vectors=vectors,
            feed=ChangeFeed(redis, graph, keys),
            audit=AuditLog(
                redis, keys, settings.audit_maxlen, graph=graph,
                bead_maxlen=settings.audit_bead_maxlen, bead_ttl_s=settings.audit_bead_ttl_s,
            ),
            kv=KVStore(redis, keys),
            keys=keys,
            beads=beads,
            outbox=OutboxStore(graph, redis, keys, hub_id),
            relationships=RelationshipStore(graph),
            groups=GroupStore(graph),
            sessions=SessionStore(graph),
            agents=AgentStore(graph),
            handoffs=HandoffStore(graph),
            applied_events=AppliedEvents(redis, keys),
            index_log=index_log,
            keywords=KeywordIndex(beads, index_log, settings.keyword_context_weight),
            query_vectors=QueryVectors(embedder),
            background=BackgroundWork(),
            accessed=AccessLog(graph),
            memberships=MembershipCache(beads, redis, keys),
            replicas=replicas,
            extractor=make_extractor(settings.extractor),
            reranker=make_reranker(settings.reranker),
            hub_id=hub_id,
        )
        for replica in replicas:
            replica.start()
        return ctx

    async def finish_handed_off(self) -> None:
        """Let the work handed off after replies finish, within :data:`CLOSE_WAIT_S` (a crash would leave it to
        the sweep; a clean stop need not): before the connections it uses close."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLOSE_WAIT_S):
                await self.background.close()

    async def aclose(self) -> None:
        await self.finish_handed_off()
        await self.audit.settled()
        for replica in self.replicas:
            await replica.aclose()
        await self.graph.aclose()
        await self.redis.aclose()
        await self.embedder.aclose()
        if self.extractor is not None:
            await self.extractor.aclose()
        if self.reranker is not None:
            await self.reranker.aclose()
