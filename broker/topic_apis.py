"""Answers for the topic APIs: ApiVersions, Metadata, CreateTopics, DeleteTopics,
CreatePartitions, Produce, ListOffsets, OffsetsForLeaderEpoch and FindCoordinator. Group
APIs go to the coordinator, Fetch to :mod:`broker.fetch`.

In single-broker mode this broker is node 0, the controller, and the leader, only replica
and whole ISR of every partition, in leader epoch 0 (docs/protocol.md §4).

Creating partitions (CreateTopics, CreatePartitions, Metadata's auto-creation) makes
directories and files and fsyncs them: thousands of system calls for a large topic, so
it runs on a worker thread and those requests are answered by coroutines. The name and
the partitions are reserved on the loop thread when the request arrives (a second
creation of the name gets TOPIC_ALREADY_EXISTS, the partition cap counts them); the
topic becomes visible, and the request is answered, once ``meta.json`` names it.

Deleting is split the same way: the topics are hidden on the loop thread at once, the
new ``meta.json`` is written and fsynced on a worker thread before the answer, and their
directories (like the segments retention drops) are removed afterwards by :meth:`purge`,
also off the loop. Every request is first checked by :mod:`broker.topics.rules`, as the
cluster's controller checks it (``broker.clustering.controller_apis``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from groupwire.broker.cluster.epochs import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
)
from groupwire.broker.config import BrokerSettings
from groupwire.broker.logs import get_logger
from groupwire.broker.partition_roles import (
    SINGLE_BROKER_LEADER_EPOCH,
    Leadership,
    SingleBroker,
)
from groupwire.broker.storage import TopicStore
from groupwire.broker.storage.errors import StorageError
from groupwire.broker.storage.metadata import EVENTS_TOPIC, INTERNAL_TOPICS
from groupwire.broker.storage.producer_log import ProducerRefused, producer_batch
from groupwire.broker.storage.topic_store import Creation, Deletion
from groupwire.broker.topics.rules import (
    Limits,
    Refusal,
    Topics,
    check_creates,
    check_deletes,
    check_growths,
)
from groupwire.protocol.batches import (
    CorruptBatchError,
    MalformedRecordError,
    check_batch_steps,
)
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.kafka import records as kafka_records
from groupwire.protocol.messages import (
    SUPPORTED_VERSIONS,
    ApiVersion,
    ApiVersionsResponse,
    BatchIndexAndErrorMessage,
    CreatableTopicResult,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    EpochEndOffset,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
    MetadataBroker,
    MetadataPartition,
    MetadataRequest,
    MetadataResponse,
    MetadataTopic,
    OffsetForLeaderTopicResult,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
    PartitionElectionResult,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    ReplicaElectionResult,
    TopicProduceResponse,
)
from groupwire.protocol.steps import Steps, run_steps
from groupwire.protocol.stored_batches import AnyHeader, is_kafka_batch

log = get_logger("groupwire.topics")

NODE_ID = 0
VALID_ACKS = (-1, 1)
"""Produce's ``acks``: all (-1) or the leader (1); both mean "stored here" on one broker."""
LATEST = -1
EARLIEST = -2
CLOSE_STEP = 250
"""Logs of a deleted topic closed in one step (~1 ms)."""
METADATA_STEP = 1000
"""Partitions of one topic described in one step of a Metadata answer (~1 ms)."""
BATCH_OVERHEAD = 65536
"""Room kept in a frame for the envelope around a batch (docs/protocol.md §1)."""


class TopicApis:
    def __init__(self, settings: BrokerSettings, store: TopicStore, *, port: Callable[[], int],
                 on_append: Callable[[str, int], None],
                 on_created: Callable[[], None] = lambda: None,
                 leadership: Leadership | None = None,
                 address: Callable[[str], tuple[str, int]] | None = None) -> None:
        """``on_created`` runs on the loop once a creation's partitions exist;
        ``leadership`` says which partitions this broker serves (all, alone);
        ``address``: the host and port advertised for a listener, by name (without
        it, ``--advertised-host`` and ``port``)."""
        self._settings = settings
        self._address = address
        self._leadership: Leadership = (SingleBroker(store.partition_count)
                                        if leadership is None else leadership)
        self._store = store
        self._port = port
        self._on_append = on_append
        self._on_created = on_created
        self._settled: dict[str, asyncio.Event] = {}
        """Set when the creation in flight for a topic has finished (either way)."""

    # --- creations off the loop ---------------------------------------------------------

    def creating(self, names: list[str]) -> bool:
        """Whether a creation of any of ``names`` is in flight."""
        return any(name in self._settled for name in names)

    async def settled(self, names: list[str]) -> None:
        """Return once no creation of any of ``names`` is in flight."""
        for name in names:
            event = self._settled.get(name)
            while event is not None:
                await event.wait()
                event = self._settled.get(name)

    async def drain(self) -> None:
        """Return once no creation is in flight (the broker is closing its storage)."""
        while self._settled:
            await next(iter(self._settled.values())).wait()

    def _begin(self, creation: Creation) -> asyncio.Event:
        event = asyncio.Event()
        self._settled[creation.name] = event
        return event

    async def _build(self, creation: Creation) -> StorageError | None:
        """Build ``creation`` on a worker thread, then finish it here; never cancelled
        halfway (the thread would go on without the loop knowing)."""
        event = self._begin(creation)
        error: StorageError | None = None
        try:
            await _off_loop(self._store.build, creation)
        except StorageError as exc:
            error = exc
        finally:
            self._store.finish(creation)
            if self._settled.get(creation.name) is event:
                del self._settled[creation.name]
            event.set()
        if error is None:
            self._on_created()
        return error

    # --- the rules' view of this broker ------------------------------------------------

    def _limits(self) -> Limits:
        return Limits(max_partitions=self._store.config.max_partitions,
                      default_partitions=self._settings.num_partitions,
                      default_replication_factor=1)

    def _topics_view(self) -> Topics:
        store = self._store
        taken = store.taken
        return Topics(partitions=store.topics(), internal=INTERNAL_TOPICS,
                      hosted=store.partition_total, reserved=store.partitions_reserved,
                      brokers=1, taken=taken,
                      growing={n for n in taken if store.creation_in_flight(n) is not None
                               and store.partition_count(n) is not None})

    async def ensure_local(self, name: str, partitions: int) -> StorageError | None:
        """This broker's replicas of a cluster topic: created, or grown, to ``partitions``
        (the replica manager's path; the cluster decided, so no request is answered)."""
        store = self._store
        try:
            if store.partition_count(name) is None:
                creation = (store.begin_create_internal(name, partitions)
                            if store.is_internal(name)  # __transaction_state, made on need
                            else store.begin_create_topic(name, partitions))
            else:
                creation = self._store.begin_create_partitions(name, partitions)
        except StorageError as exc:
            return exc
        return await self._build(creation)

    def api_versions(self) -> ApiVersionsResponse:
        return ApiVersionsResponse(
            api_keys=[ApiVersion(api_key=int(k), min_version=lo, max_version=hi)
                      for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())],
            max_frame_bytes=self._settings.max_frame_bytes,
        )

    def advertised(self, listener: str | None) -> tuple[str, int]:
        """Kafka's rule: a client is told the address of the listener it came in on."""
        if listener is not None and self._address is not None:
            return self._address(listener)
        return self._settings.advertised, self._port()

    def find_coordinator(self, request: FindCoordinatorRequest,
                         listener: str | None = None) -> FindCoordinatorResponse:
        if request.key_type != 0:
            return FindCoordinatorResponse(
                error_code=ErrorCode.INVALID_REQUEST,
                error_message=f"key_type: 0 (group) or 1 (transactional id), "
                              f"got {request.key_type}",
            )
        host, port = self.advertised(listener)
        return FindCoordinatorResponse(node_id=NODE_ID, host=host, port=port)

    def auto_creates(self, request: MetadataRequest) -> bool:
        """Whether ``request`` names a topic Metadata would create (then answer it with
        :meth:`metadata_creating`, else with :meth:`metadata`)."""
        if (request.topics is None or not request.allow_auto_topic_creation
                or not self._settings.auto_create_topics):
            return False
        store = self._store
        return any(store.partition_count(t.name) is None
                   and store.creation_in_flight(t.name) is None for t in request.topics)

    async def metadata_creating(self, request: MetadataRequest,
                                listener: str | None = None) -> MetadataResponse:
        """Metadata that first creates the unknown topics it names (auto-creation)."""
        failed: dict[str, Refusal] = {}
        created: list[Creation] = []
        store = self._store
        unknown = [name for name in dict.fromkeys(t.name for t in request.topics or [])
                   if store.partition_count(name) is None
                   and store.creation_in_flight(name) is None]
        answers = check_creates([(name, -1, -1) for name in unknown], self._topics_view(),
                                self._limits())
        for name, answer in zip(unknown, answers, strict=True):
            if isinstance(answer, Refusal):
                failed[name] = answer
                continue
            try:
                created.append(store.begin_create_topic(name, answer.partitions))
            except StorageError as exc:
                failed[name] = Refusal(exc.code, str(exc))
        for creation in created:
            error = await self._build(creation)
            if error is not None:
                log.error("topic_not_created", topic=creation.name, error=str(error))
                failed[creation.name] = Refusal(error.code, str(error))
            else:
                log.info("topic_auto_created", topic=creation.name,
                         partitions=creation.total)
        return self.metadata(request, failed, listener)

    def metadata(self, request: MetadataRequest,
                 failed: dict[str, Refusal] | None = None,
                 listener: str | None = None) -> MetadataResponse:
        return run_steps(self.metadata_steps(request, failed, listener))

    def metadata_steps(self, request: MetadataRequest,
                       failed: dict[str, Refusal] | None = None,
                       listener: str | None = None) -> Steps[MetadataResponse]:
        """A step per topic, or per ``METADATA_STEP`` partitions of a large one."""
        store = self._store
        if request.topics is None:
            names = sorted(store.topics())
        else:
            names = [t.name for t in request.topics]
        topics = []
        for name in names:
            count = store.partition_count(name)
            exc = failed.get(name) if failed else None
            if exc is not None:
                topics.append(MetadataTopic(error_code=exc.code, error_message=exc.message,
                                            name=name))
                continue
            if count is None and store.creation_in_flight(name) is not None:
                topics.append(MetadataTopic(  # Kafka's answer for a topic not ready yet
                    error_code=ErrorCode.LEADER_NOT_AVAILABLE,
                    error_message=f"topic {name!r} is being created", name=name))
                continue
            if count is None:
                topics.append(MetadataTopic(
                    error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    error_message=f"unknown topic {name!r}", name=name))
                continue
            partitions: list[MetadataPartition] = []
            for start in range(0, count, METADATA_STEP):  # a 10 000-partition topic: ~10 ms
                partitions.extend(
                    MetadataPartition(partition_index=p, leader_id=NODE_ID,
                                      leader_epoch=SINGLE_BROKER_LEADER_EPOCH,
                                      replica_nodes=[NODE_ID], isr_nodes=[NODE_ID])
                    for p in range(start, min(start + METADATA_STEP, count)))
                yield
            topics.append(MetadataTopic(name=name, is_internal=store.is_internal(name),
                                        partitions=partitions))
        host, port = self.advertised(listener)
        return MetadataResponse(
            brokers=[MetadataBroker(node_id=NODE_ID, host=host, port=port)],
            cluster_id=store.cluster_id, controller_id=NODE_ID, topics=topics,
        )

    async def create_topics(self, request: CreateTopicsRequest) -> CreateTopicsResponse:
        """Every entry is checked (:mod:`broker.topics.rules`) and reserved at once, in
        order; the partitions are then built one topic at a time off the loop."""
        answers = check_creates(
            [(t.name, t.num_partitions, t.replication_factor) for t in request.topics],
            self._topics_view(), self._limits())
        results: list[CreatableTopicResult] = []
        building: list[tuple[int, Creation]] = []
        for topic, answer in zip(request.topics, answers, strict=True):
            name = topic.name
            if isinstance(answer, Refusal):
                results.append(CreatableTopicResult(name=name, error_code=answer.code,
                                                    error_message=answer.message))
                continue
            try:
                creation = self._store.begin_create_topic(name, answer.partitions)
            except StorageError as exc:
                results.append(CreatableTopicResult(name=name, error_code=exc.code,
                                                    error_message=str(exc)))
                continue
            building.append((len(results), creation))
            results.append(CreatableTopicResult(name=name, num_partitions=answer.partitions,
                                                replication_factor=answer.replication_factor))
        for i, creation in building:
            error = await self._build(creation)
            if error is not None:
                log.error("topic_not_created", topic=creation.name, error=str(error))
                results[i] = CreatableTopicResult(name=creation.name, error_code=error.code,
                                                  error_message=str(error))
                continue
            log.info("topic_created", topic=creation.name, partitions=creation.total)
        return CreateTopicsResponse(topics=results)

    # --- deletion -----------------------------------------------------------------------

    async def delete_topics(self, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
        return (await self.delete_topics_counted(request))[0]

    async def delete_topics_counted(self, request: DeleteTopicsRequest,
                                    ) -> tuple[DeleteTopicsResponse, dict[str, int]]:
        """Delete each named topic; returns the response and the partition count of each
        topic deleted (the shell wakes their fetches and drops their committed offsets).
        The topics are hidden at once; the answer comes once ``meta.json`` without them
        is durable, written off the loop. Their files go later: :meth:`purge`."""
        results, deletions = self._begin_deletes(request.topic_names)
        deleted = await self._end_deletes(results, deletions)
        return DeleteTopicsResponse(responses=results), deleted

    def delete_local(self, names: Sequence[str],
                     ) -> tuple[dict[str, int], Coroutine[Any, Any, None]]:
        """Cluster mode: drop this broker's replicas of topics gone from etcd. They are
        gone from lookups when this returns (their partition counts); the returned
        coroutine makes that durable and removes the files, off the loop. One that fails
        puts the topic back (the replica manager's next pass tries again)."""
        results, deletions = self._begin_deletes(list(names))

        async def finish() -> None:
            await self._end_deletes(results, deletions)
            await self.purge()
        return {d.name: d.count for d in deletions}, finish()

    def _begin_deletes(self, names: list[str],
                       ) -> tuple[list[DeletableTopicResult], list[Deletion]]:
        answers = check_deletes(names, self._topics_view())
        results: list[DeletableTopicResult] = []
        deletions: list[Deletion] = []
        for name, answer in zip(names, answers, strict=True):
            if isinstance(answer, Refusal):
                results.append(DeletableTopicResult(name=name, error_code=answer.code,
                                                    error_message=answer.message))
                continue
            try:
                deletions.append(self._store.begin_delete_topic(name))
            except StorageError as exc:
                results.append(DeletableTopicResult(name=name, error_code=exc.code,
                                                    error_message=str(exc)))
                continue
            results.append(DeletableTopicResult(name=name))
        return results, deletions

    async def _end_deletes(self, results: list[DeletableTopicResult],
                           deletions: list[Deletion]) -> dict[str, int]:
        """Commit ``deletions`` in one ``meta.json`` write off the loop, then finish them
        here whatever happened; a failure is written into ``results``."""
        if not deletions:
            return {}
        error: StorageError | None = None
        try:
            await _off_loop(self._store.commit_deletes, deletions)
        except StorageError as exc:
            error = exc
        finally:
            for deletion in deletions:
                self._store.finish_delete(deletion, close=False)
        if error is None:
            try:
                for deletion in deletions:  # a slice at a time: other requests go between
                    while self._store.close_deleted(deletion, CLOSE_STEP):
                        await asyncio.sleep(0)
            finally:  # cancelled (the broker closing): the rest at once
                for deletion in deletions:
                    while self._store.close_deleted(deletion, len(deletion.logs)):
                        pass
        else:
            failed = {d.name for d in deletions}
            log.error("topics_not_deleted", topics=sorted(failed), error=str(error))
            results[:] = [DeletableTopicResult(name=r.name, error_code=error.code,
                                               error_message=str(error))
                          if r.name in failed else r for r in results]
            return {}
        for deletion in deletions:
            log.info("topic_deleted", topic=deletion.name, partitions=deletion.count)
        return {d.name: d.count for d in deletions}

    async def purge(self) -> None:
        """Remove deleted topics' directories and the segments retention dropped, on a
        worker thread; what fails is logged and tried again by the next purge."""
        store = self._store
        purge = store.take_purge()
        if purge.empty:
            return
        try:
            await _off_loop(store.run_purge, purge)
        finally:
            store.end_purge(purge)

    async def create_partitions(self, request: CreatePartitionsRequest,
                                ) -> CreatePartitionsResponse:
        answers = check_growths([(t.name, t.count) for t in request.topics],
                                self._topics_view(), self._limits())
        results: list[CreatePartitionsTopicResult] = []
        building: list[tuple[int, Creation]] = []
        for topic, answer in zip(request.topics, answers, strict=True):
            if isinstance(answer, Refusal):
                results.append(CreatePartitionsTopicResult(
                    name=topic.name, error_code=answer.code, error_message=answer.message))
                continue
            try:
                creation = self._store.begin_create_partitions(topic.name, topic.count)
            except StorageError as exc:
                results.append(CreatePartitionsTopicResult(
                    name=topic.name, error_code=exc.code, error_message=str(exc)))
                continue
            building.append((len(results), creation))
            results.append(CreatePartitionsTopicResult(name=topic.name))
        for i, creation in building:
            error = await self._build(creation)
            if error is not None:
                log.error("partitions_not_created", topic=creation.name, error=str(error))
                results[i] = CreatePartitionsTopicResult(
                    name=creation.name, error_code=error.code, error_message=str(error))
                continue
            log.info("partitions_created", topic=creation.name, total=creation.total)
        return CreatePartitionsResponse(results=results)

    def produce(self, request: ProduceRequest) -> tuple[ProduceResponse, bool]:
        return run_steps(self.produce_steps(request))

    def produce_steps(self, request: ProduceRequest,
                      ) -> Steps[tuple[ProduceResponse, bool]]:
        """Append every batch, a step per partition; returns the response and whether
        anything was written. A big batch takes several steps to check and to write."""
        limit = self._settings.max_frame_bytes - BATCH_OVERHEAD
        store = self._store
        wrote = False
        topics = []
        if request.acks not in VALID_ACKS:
            # Kafka answers every partition so; acks=0 would want no answer at all
            return ProduceResponse(responses=[TopicProduceResponse(
                name=topic.name, partition_responses=[PartitionProduceResponse(
                    index=part.index, error_code=ErrorCode.INVALID_REQUIRED_ACKS,
                    error_message=f"acks: -1 or 1, got {request.acks}")
                    for part in topic.partition_data])
                for topic in request.topic_data]), False
        for topic in request.topic_data:
            answers = []
            internal = store.is_internal(topic.name)
            for part in topic.partition_data:
                answer = yield from self._append_one(
                    topic.name, part.index, part.records,
                    internal and not self._forwarded_events(request, topic.name),
                    limit, request.acks,
                    transactional_id=request.transactional_id is not None)
                wrote = wrote or answer.error_code == ErrorCode.NONE
                answers.append(answer)
                yield
            topics.append(TopicProduceResponse(name=topic.name, partition_responses=answers))
        return ProduceResponse(responses=topics), wrote

    def _forwarded_events(self, request: ProduceRequest, topic: str) -> bool:
        """Cluster mode: group events another coordinator forwards to this leader."""
        return request.internal and self._settings.clustered and topic == EVENTS_TOPIC

    def _append_one(self, topic: str, partition: int, batch: bytes, internal: bool,
                    limit: int, acks: int = -1, *, transactional_id: bool = False,
                    ) -> Steps[PartitionProduceResponse]:
        """Check one batch, yielding inside a big one's check, then append it, yielding
        between the pieces of a big one's write; it counts (is readable, has offsets)
        only once written whole (docs/protocol.md §5.2). A transactional batch needs the
        request's ``transactional_id`` (``transactional_id``: it has one), as Kafka's."""
        def fail(code: ErrorCode, message: str) -> PartitionProduceResponse:
            return PartitionProduceResponse(index=partition, error_code=code,
                                            error_message=message)

        def unknown() -> PartitionProduceResponse | None:
            count = self._store.partition_count(topic)
            if count is None or not 0 <= partition < count:
                return fail(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            f"unknown topic or partition {topic}-{partition}")
            return None

        if internal:
            return fail(ErrorCode.INVALID_TOPIC_EXCEPTION,
                        f"{topic} is internal: produce is refused")
        if (refusal := self._leadership.check(topic, partition)) is not None:
            return fail(refusal.code, refusal.message)
        if acks == -1 and (refusal := self._leadership.acks_all(topic, partition)) is not None:
            return fail(refusal.code, refusal.message)
        if len(batch) > limit:
            return fail(ErrorCode.MESSAGE_TOO_LARGE,
                        f"batch of {len(batch)} bytes is over the {limit}-byte limit")
        try:
            if batch and is_kafka_batch(batch):  # docs/protocol.md §13.4: stored as sent
                # each record's length walked, its fields not parsed (§13.4: a Python
                # walk of every field was 60% of the broker's time under librdkafka),
                # in the batches --kafka-produce-validation names
                header: AnyHeader = yield from kafka_records.check_batch_steps(
                    batch, check_fields=False,
                    validation=self._settings.kafka_produce_validation)
            else:
                header = yield from check_batch_steps(batch)
        except kafka_records.UnsupportedMessageFormatError as exc:
            return fail(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, str(exc))
        except kafka_records.DecompressionLimitError as exc:
            return fail(ErrorCode.MESSAGE_TOO_LARGE, str(exc))
        except MalformedRecordError as exc:  # §5.2: nothing of the batch is stored
            return PartitionProduceResponse(
                index=partition, error_code=ErrorCode.INVALID_RECORD, error_message=str(exc),
                record_errors=[BatchIndexAndErrorMessage(
                    batch_index=e.batch_index, batch_index_error_message=e.message)
                    for e in exc.record_errors])
        except CorruptBatchError as exc:
            return fail(ErrorCode.CORRUPT_MESSAGE, str(exc))
        producer = producer_batch(header)
        if producer is not None and producer.transactional and not transactional_id:
            return fail(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                        "a transactional batch needs the request's transactional_id")
        # Other requests ran between the check's steps: a DeleteTopics may have removed
        # the topic (or a partition of it) since it was looked up.
        if (gone := unknown()) is not None:
            return gone
        plog = self._store.log(topic, partition)
        try:
            base = yield from plog.append_steps(batch, header, producer)
        except ProducerRefused as exc:
            return fail(exc.code, exc.message)
        except StorageError as exc:
            # A big batch is written a piece a step: a DeleteTopics may come in between
            # (the name may even be created again meanwhile: a new log).
            if (gone := unknown()) is not None:
                return gone
            if self._store.log(topic, partition) is not plog:
                return fail(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            f"unknown topic or partition {topic}-{partition}")
            log.error("append_failed", topic=topic, partition=partition, error=str(exc))
            return fail(ErrorCode(exc.code), str(exc))
        self._on_append(topic, partition)
        return PartitionProduceResponse(index=partition, base_offset=base)

    def list_offsets(self, request: ListOffsetsRequest) -> ListOffsetsResponse:
        return run_steps(self.list_offsets_steps(request))

    def list_offsets_steps(self, request: ListOffsetsRequest) -> Steps[ListOffsetsResponse]:
        """A step per partition: a timestamp lookup reads the partition's index and log."""
        topics = []
        for topic in request.topics:
            answers = []
            for part in topic.partitions:
                answers.append(self._list_one(topic.name, part.partition_index, part.timestamp))
                yield
            topics.append(ListOffsetsTopicResponse(name=topic.name, partitions=answers))
        return ListOffsetsResponse(topics=topics)

    def _list_one(self, topic: str, partition: int, timestamp: int,
                  ) -> ListOffsetsPartitionResponse:
        if (refusal := self._leadership.check(topic, partition)) is not None:
            return ListOffsetsPartitionResponse(partition_index=partition,
                                                error_code=refusal.code,
                                                error_message=refusal.message)
        plog = self._store.log(topic, partition)
        if timestamp == LATEST:
            return ListOffsetsPartitionResponse(partition_index=partition,
                                                offset=plog.high_watermark)
        if timestamp == EARLIEST:
            return ListOffsetsPartitionResponse(partition_index=partition,
                                                offset=plog.log_start_offset)
        if timestamp < 0:
            return ListOffsetsPartitionResponse(
                partition_index=partition, error_code=ErrorCode.INVALID_REQUEST,
                error_message=f"timestamp: -1, -2 or >= 0, got {timestamp}")
        found = plog.offset_for_timestamp(timestamp)
        if found is None:
            return ListOffsetsPartitionResponse(partition_index=partition)
        offset, ts = found
        return ListOffsetsPartitionResponse(partition_index=partition, offset=offset,
                                            timestamp=ts)

    def offsets_for_leader_epoch(self, request: OffsetsForLeaderEpochRequest,
                                 ) -> OffsetsForLeaderEpochResponse:
        return run_steps(self.offsets_for_leader_epoch_steps(request))

    def offsets_for_leader_epoch_steps(self, request: OffsetsForLeaderEpochRequest,
                                       ) -> Steps[OffsetsForLeaderEpochResponse]:
        """A step per partition. Followers ask this; without a cluster there are none, but
        consumers may (KIP-320), so only ``replica_id >= 0`` is refused."""
        if request.replica_id >= 0 and not self._settings.clustered:
            return OffsetsForLeaderEpochResponse(
                error_code=ErrorCode.INVALID_REQUEST,
                error_message="replica_id: replica requests need cluster mode")
        topics = []
        for topic in request.topics:
            answers = []
            for part in topic.partitions:
                answers.append(self._epoch_end(topic.topic, part.partition,
                                               part.current_leader_epoch, part.leader_epoch))
                yield
            topics.append(OffsetForLeaderTopicResult(topic=topic.topic, partitions=answers))
        return OffsetsForLeaderEpochResponse(topics=topics)

    def _epoch_end(self, topic: str, partition: int, current_epoch: int,
                   epoch: int) -> EpochEndOffset:
        if (refusal := self._leadership.check(topic, partition, current_epoch)) is not None:
            return EpochEndOffset(partition=partition, error_code=refusal.code,
                                  error_message=refusal.message)
        if epoch < 0:  # no epoch: Kafka's UNDEFINED answer
            return EpochEndOffset(partition=partition, leader_epoch=UNDEFINED_EPOCH,
                                  end_offset=UNDEFINED_EPOCH_OFFSET)
        answer_epoch, end = self._store.log(topic, partition).end_offset_for_epoch(epoch)
        return EpochEndOffset(partition=partition, leader_epoch=answer_epoch, end_offset=end)

    def elect_leaders(self, request: ElectLeadersRequest) -> ElectLeadersResponse:
        """Node 0 is every partition's only replica and already leads it: each partition
        named (nil: every one stored) answers ELECTION_NOT_NEEDED, as Kafka's does for
        a partition its preferred replica leads."""
        if request.election_type != 0:
            return ElectLeadersResponse(
                error_code=ErrorCode.INVALID_REQUEST,
                error_message=f"election_type: only 0 (preferred) is supported, got "
                              f"{request.election_type}: leaders are never elected "
                              f"outside the ISR")
        store = self._store
        named = ([(name, list(range(count))) for name, count in sorted(store.topics().items())]
                 if request.topic_partitions is None
                 else [(t.topic, t.partitions) for t in request.topic_partitions])
        results = []
        for topic, partitions in named:
            count = store.partition_count(topic)
            answers = []
            for p in partitions:
                if count is None or not 0 <= p < count:
                    answers.append(PartitionElectionResult(
                        partition_id=p, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        error_message=f"unknown topic or partition {topic}-{p}"))
                else:
                    answers.append(PartitionElectionResult(
                        partition_id=p, error_code=ErrorCode.ELECTION_NOT_NEEDED,
                        error_message=f"{topic}-{p} is already led by its preferred "
                                      f"replica {NODE_ID}"))
            results.append(ReplicaElectionResult(topic=topic, partition_result=answers))
        return ElectLeadersResponse(replica_election_results=results)


async def _off_loop(work: Callable[..., None], *args: Any) -> None:
    """``work(*args)`` on a worker thread, never cancelled halfway (the thread would go
    on without the loop knowing): a cancellation waits for it, then is raised."""
    task = asyncio.ensure_future(asyncio.to_thread(work, *args))
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await task
        raise
