"""The handlers of the APIs that are not the group coordinator's: produce, fetch, topic
admin and metadata, alone or in a cluster (where topics come from etcd's metadata).

They register into the typed registry (``broker.dispatch.Handlers``); what a topic
deletion means for parked fetches and committed offsets is here too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from groupwire.broker.clustering.acks import reply_when_replicated
from groupwire.broker.clustering.controller_apis import ClusterApis
from groupwire.broker.clustering.node import ClusterNode
from groupwire.broker.config import BrokerSettings
from groupwire.broker.coordinator import Coordinator, Result
from groupwire.broker.dispatch import Handlers, RequestRunner
from groupwire.broker.durability import Durability
from groupwire.broker.fetch import FetchManager
from groupwire.broker.heap import HeapSettler
from groupwire.broker.host import Peer
from groupwire.broker.storage.errors import StorageError
from groupwire.broker.topic_apis import TopicApis
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    ApiVersionsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    ElectLeadersRequest,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    ListOffsetsRequest,
    MetadataRequest,
    OffsetsForLeaderEpochRequest,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceResponse,
)


class TopicHandlers:
    """Non-group APIs by request type; everything else goes to the coordinator."""

    def __init__(self, settings: BrokerSettings, topics: TopicApis, *,
                 durability: Durability, fetches: FetchManager, cluster: ClusterNode | None,
                 runner: RequestRunner, coordinator: Coordinator,
                 execute: Callable[[Result], None], heap: HeapSettler) -> None:
        """``execute``: carries out a coordinator result (``GroupRuntime.execute``)."""
        self._settings = settings
        self._topics = topics
        self._durability = durability
        self._fetches = fetches
        self._cluster = cluster
        self._runner = runner
        self._coordinator = coordinator
        self._execute = execute
        self._heap = heap

    def register(self, handlers: Handlers) -> None:
        """Add this broker's topic APIs (a cluster's where it is one) to ``handlers``."""
        topics, runner, fetches, durability = (self._topics, self._runner, self._fetches,
                                               self._durability)
        cluster = self._cluster

        def produce(conn: Peer, cid: int, request: ProduceRequest) -> None:
            def produced(result: tuple[ProduceResponse, bool]) -> None:
                response, wrote = result
                if not wrote:
                    conn.reply(cid, response)
                    return
                durability.after_write(lambda err: written(response, err))

            def written(response: ProduceResponse, err: StorageError | None) -> None:
                if err is not None:
                    conn.reply(cid, _storage_failed_produce(response, err))
                elif cluster is not None and request.acks == -1:
                    # Answered once the ISR has it; later requests go on meanwhile.
                    runner.spawn(reply_when_replicated(cluster.leaders, conn, cid, request,
                                                       response))
                else:
                    conn.reply(cid, response)
            runner.sliced(conn, cid, request, topics.produce_steps(request), produced)

        def fetch(conn: Peer, cid: int, request: FetchRequest) -> None:
            fetches.handle(conn.conn_id, request, functools.partial(_reply_fetch, conn, cid),
                           lambda work: runner.defer_long(conn, cid, request, work),
                           principal=conn.principal, kafka=conn.kafka)

        def list_offsets(conn: Peer, cid: int, request: ListOffsetsRequest) -> None:
            runner.answer_sliced(conn, cid, request, topics.list_offsets_steps(request))

        def offsets_for_leader_epoch(conn: Peer, cid: int,
                                     request: OffsetsForLeaderEpochRequest) -> None:
            runner.answer_sliced(conn, cid, request,
                                 topics.offsets_for_leader_epoch_steps(request))

        handlers.add(ProduceRequest, produce)
        handlers.add(FetchRequest, fetch)
        handlers.add(ApiVersionsRequest,
                     lambda conn, cid, request: conn.reply(cid, topics.api_versions()))
        handlers.add(ListOffsetsRequest, list_offsets)
        handlers.add(OffsetsForLeaderEpochRequest, offsets_for_leader_epoch)
        if cluster is not None:
            self._register_cluster(handlers, ClusterApis(self._settings, cluster))
        else:
            self._register_local(handlers)

    def _register_local(self, handlers: Handlers) -> None:
        """A single broker: its own topics, itself the coordinator of every group."""
        topics, runner, durability = self._topics, self._runner, self._durability

        def delete_topics(conn: Peer, cid: int, request: DeleteTopicsRequest) -> None:
            async def deleting() -> None:
                # A topic being created is deleted once it exists: as if queued after it.
                await topics.settled(request.topic_names)
                await delete_now(conn, cid, request)
            runner.defer(conn, cid, request, deleting())

        async def delete_now(conn: Peer, cid: int, request: DeleteTopicsRequest) -> None:
            # meta.json is written off the loop; the directories go after the answer
            response, deleted = await topics.delete_topics_counted(request)
            if not deleted:
                conn.reply(cid, response)
                return
            self.topics_deleted(deleted)

            async def purged() -> None:  # the directories go before the answer, off the loop
                try:
                    await topics.purge()
                finally:
                    conn.reply(cid, response)
            durability.after_write(lambda _err: runner.spawn(purged()))

        handlers.add(MetadataRequest, _metadata_handler(runner, topics))
        handlers.add(FindCoordinatorRequest, lambda conn, cid, request: conn.reply(
            cid, topics.find_coordinator(request, conn.listener.name)))
        handlers.add(CreateTopicsRequest, runner.answer_later(topics.create_topics))
        handlers.add(DeleteTopicsRequest, delete_topics)
        handlers.add(CreatePartitionsRequest, runner.answer_later(topics.create_partitions))
        handlers.add(ElectLeadersRequest, lambda conn, cid, request: conn.reply(
            cid, topics.elect_leaders(request)))

    def _register_cluster(self, handlers: Handlers, apis: ClusterApis) -> None:
        """Cluster mode: topics, brokers and coordinators come from etcd's metadata."""
        runner = self._runner

        later = runner.answer_later
        handlers.add(MetadataRequest, _metadata_handler(runner, apis))
        handlers.add(FindCoordinatorRequest, lambda conn, cid, request: conn.reply(
            cid, apis.find_coordinator(request, conn.listener.name)))
        handlers.add(CreateTopicsRequest, later(apis.create_topics))
        handlers.add(CreatePartitionsRequest, later(apis.create_partitions))
        handlers.add(DeleteTopicsRequest, later(apis.delete_topics))
        handlers.add(ElectLeadersRequest, later(apis.elect_leaders))

    def topics_deleted(self, deleted: dict[str, int]) -> None:
        """After topics left the store: their parked fetches answer
        UNKNOWN_TOPIC_OR_PARTITION, their committed offsets are tombstoned."""
        fetches = self._fetches
        for name, count in deleted.items():
            for p in range(count):
                fetches.appended(name, p)
        fetches.wake()
        self._heap.after_shrink()
        # The topics are gone once meta.json is written; offsets whose tombstones do
        # not make it to disk are dropped again at the next start, so the answer does
        # not depend on them (it waits for them only to be durable when it can).
        self._execute(self._coordinator.delete_topic_offsets(list(deleted)))

    def delete_local(self, names: list[str]) -> None:
        """A cluster topic is gone from etcd: drop this broker's replicas of it (the
        committed offsets go in ``cluster_topics_removed``, on every broker)."""
        fetches = self._fetches
        deleted, finishing = self._topics.delete_local(names)  # durable, removed off the loop
        self._runner.spawn(finishing)
        for name, count in deleted.items():
            for p in range(count):
                fetches.appended(name, p)
        fetches.wake()
        self._heap.after_shrink()

    def cluster_topics_removed(self, names: list[str]) -> None:
        """Every broker tombstones its coordinated groups' offsets of deleted topics,
        whether or not it held a replica of them."""
        self._execute(self._coordinator.delete_topic_offsets(names))


def _storage_failed_produce(response: ProduceResponse, error: Exception) -> ProduceResponse:
    """Appended but not made durable: the client must not count these as written."""
    return ProduceResponse(responses=[
        TopicProduceResponse(name=t.name, partition_responses=[
            p if p.error_code != ErrorCode.NONE else PartitionProduceResponse(
                index=p.index, error_code=ErrorCode.KAFKA_STORAGE_ERROR,
                error_message=f"not durable: {error}")
            for p in t.partition_responses])
        for t in response.responses])


def _reply_fetch(conn: Peer, cid: int, response: FetchResponse, *, long: bool = False) -> None:
    if long:
        conn.answer_is_long(cid)
    conn.reply(cid, response)


def _metadata_handler(runner: RequestRunner, source: TopicApis | ClusterApis,
                      ) -> Callable[[Peer, int, MetadataRequest], None]:
    """Metadata in either mode: auto-creation deferred, else answered in slices; the
    addresses answered are those advertised for the listener the request came in on."""

    def metadata(conn: Peer, cid: int, request: MetadataRequest) -> None:
        listener = conn.listener.name
        if source.auto_creates(request):
            runner.defer(conn, cid, request, source.metadata_creating(request, listener),
                         reply=True)
        else:
            runner.answer_sliced(conn, cid, request,
                                 source.metadata_steps(request, listener=listener))

    return metadata
