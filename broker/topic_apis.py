"""Answers for the topic APIs: ApiVersions, Metadata, CreateTopics, DeleteTopics,
CreatePartitions, Produce, ListOffsets and FindCoordinator. Group APIs go to the
coordinator, Fetch to :mod:`broker.fetch`.
"""

from __future__ import annotations

from collections.abc import Callable

from groupwire.broker.config import BrokerSettings
from groupwire.broker.logs import get_logger
from groupwire.broker.storage import TopicStore
from groupwire.broker.storage.errors import StorageError
from groupwire.protocol.batches import (
    CorruptBatchError,
    MalformedRecordError,
    check_records,
    validate_batch,
)
from groupwire.protocol.errors import ErrorCode
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
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceResponse,
)

log = get_logger("groupwire.topics")

NODE_ID = 0
LATEST = -1
EARLIEST = -2
BATCH_OVERHEAD = 65536
"""Room kept in a frame for the envelope around a batch (docs/protocol.md §1)."""


class TopicApis:
    def __init__(self, settings: BrokerSettings, store: TopicStore, *, port: Callable[[], int],
                 on_append: Callable[[str, int], None]) -> None:
        self._settings = settings
        self._store = store
        self._port = port
        self._on_append = on_append

    def api_versions(self) -> ApiVersionsResponse:
        return ApiVersionsResponse(
            api_keys=[ApiVersion(api_key=int(k), min_version=lo, max_version=hi)
                      for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())],
            max_frame_bytes=self._settings.max_frame_bytes,
        )

    def find_coordinator(self, request: FindCoordinatorRequest) -> FindCoordinatorResponse:
        if request.key_type != 0:
            return FindCoordinatorResponse(
                error_code=ErrorCode.INVALID_REQUEST,
                error_message=f"key_type: only 0 (group) is supported, got {request.key_type}",
            )
        return FindCoordinatorResponse(node_id=NODE_ID, host=self._settings.advertised,
                                       port=self._port())

    def metadata(self, request: MetadataRequest) -> MetadataResponse:
        store = self._store
        if request.topics is None:
            names = sorted(store.topics())
        else:
            names = [t.name for t in request.topics]
        topics = []
        for name in names:
            count = store.partition_count(name)
            if (count is None and request.allow_auto_topic_creation
                    and self._settings.auto_create_topics):
                try:
                    store.create_topic(name, self._settings.num_partitions)
                    log.info("topic_auto_created", topic=name,
                             partitions=self._settings.num_partitions)
                    count = store.partition_count(name)
                except StorageError as exc:
                    topics.append(MetadataTopic(error_code=exc.code, error_message=str(exc),
                                                name=name))
                    continue
            if count is None:
                topics.append(MetadataTopic(
                    error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    error_message=f"unknown topic {name!r}", name=name))
                continue
            topics.append(MetadataTopic(
                name=name, is_internal=store.is_internal(name),
                partitions=[MetadataPartition(partition_index=p, leader_id=NODE_ID)
                            for p in range(count)],
            ))
        return MetadataResponse(
            brokers=[MetadataBroker(node_id=NODE_ID, host=self._settings.advertised,
                                    port=self._port())],
            cluster_id=store.cluster_id, topics=topics,
        )

    def create_topics(self, request: CreateTopicsRequest) -> CreateTopicsResponse:
        seen: dict[str, int] = {}
        for topic in request.topics:
            seen[topic.name] = seen.get(topic.name, 0) + 1
        results = []
        for topic in request.topics:
            name = topic.name
            if seen[name] > 1:
                results.append(CreatableTopicResult(
                    name=name, error_code=ErrorCode.INVALID_REQUEST,
                    error_message=f"topic {name!r} named more than once"))
                continue
            if topic.replication_factor not in (-1, 1):
                results.append(CreatableTopicResult(
                    name=name, error_code=ErrorCode.INVALID_REPLICATION_FACTOR,
                    error_message="replication factor must be 1 (one broker)"))
                continue
            partitions = (self._settings.num_partitions if topic.num_partitions == -1
                          else topic.num_partitions)
            try:
                self._store.create_topic(name, partitions)
            except StorageError as exc:
                results.append(CreatableTopicResult(name=name, error_code=exc.code,
                                                    error_message=str(exc)))
                continue
            log.info("topic_created", topic=name, partitions=partitions)
            results.append(CreatableTopicResult(name=name, num_partitions=partitions,
                                                replication_factor=1))
        return CreateTopicsResponse(topics=results)

    def delete_topics(self, request: DeleteTopicsRequest,
                      ) -> tuple[DeleteTopicsResponse, dict[str, int]]:
        """Delete each named topic; returns the response and the partition count of each
        topic deleted (the shell wakes their fetches and drops their committed offsets)."""
        seen: dict[str, int] = {}
        for name in request.topic_names:
            seen[name] = seen.get(name, 0) + 1
        results = []
        deleted: dict[str, int] = {}
        for name in request.topic_names:
            if seen[name] > 1:
                results.append(DeletableTopicResult(
                    name=name, error_code=ErrorCode.INVALID_REQUEST,
                    error_message=f"topic {name!r} named more than once"))
                continue
            try:
                deleted[name] = self._store.delete_topic(name)
            except StorageError as exc:
                results.append(DeletableTopicResult(name=name, error_code=exc.code,
                                                    error_message=str(exc)))
                continue
            log.info("topic_deleted", topic=name, partitions=deleted[name])
            results.append(DeletableTopicResult(name=name))
        return DeleteTopicsResponse(responses=results), deleted

    def create_partitions(self, request: CreatePartitionsRequest) -> CreatePartitionsResponse:
        results = []
        for topic in request.topics:
            try:
                self._store.create_partitions(topic.name, topic.count)
            except StorageError as exc:
                results.append(CreatePartitionsTopicResult(
                    name=topic.name, error_code=exc.code, error_message=str(exc)))
                continue
            log.info("partitions_created", topic=topic.name, total=topic.count)
            results.append(CreatePartitionsTopicResult(name=topic.name))
        return CreatePartitionsResponse(results=results)

    def produce(self, request: ProduceRequest) -> tuple[ProduceResponse, bool]:
        """Append every batch; returns the response and whether anything was written."""
        limit = self._settings.max_frame_bytes - BATCH_OVERHEAD
        store = self._store
        wrote = False
        topics = []
        for topic in request.topic_data:
            answers = []
            internal = store.is_internal(topic.name)
            for part in topic.partition_data:
                answer = self._append_one(topic.name, part.index, part.records, internal, limit)
                wrote = wrote or answer.error_code == ErrorCode.NONE
                answers.append(answer)
            topics.append(TopicProduceResponse(name=topic.name, partition_responses=answers))
        return ProduceResponse(responses=topics), wrote

    def _append_one(self, topic: str, partition: int, batch: bytes, internal: bool,
                    limit: int) -> PartitionProduceResponse:
        def fail(code: ErrorCode, message: str) -> PartitionProduceResponse:
            return PartitionProduceResponse(index=partition, error_code=code,
                                            error_message=message)

        if internal:
            return fail(ErrorCode.INVALID_TOPIC_EXCEPTION,
                        f"{topic} is internal: produce is refused")
        count = self._store.partition_count(topic)
        if count is None or not 0 <= partition < count:
            return fail(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        f"unknown topic or partition {topic}-{partition}")
        if len(batch) > limit:
            return fail(ErrorCode.MESSAGE_TOO_LARGE,
                        f"batch of {len(batch)} bytes is over the {limit}-byte limit")
        try:
            header = validate_batch(batch)
            check_records(batch, header)
        except MalformedRecordError as exc:  # §5.2: nothing of the batch is stored
            return PartitionProduceResponse(
                index=partition, error_code=ErrorCode.INVALID_RECORD, error_message=str(exc),
                record_errors=[BatchIndexAndErrorMessage(
                    batch_index=e.batch_index, batch_index_error_message=e.message)
                    for e in exc.record_errors])
        except CorruptBatchError as exc:
            return fail(ErrorCode.CORRUPT_MESSAGE, str(exc))
        try:
            base = self._store.log(topic, partition).append(batch, header)
        except StorageError as exc:
            log.error("append_failed", topic=topic, partition=partition, error=str(exc))
            return fail(ErrorCode(exc.code), str(exc))
        self._on_append(topic, partition)
        return PartitionProduceResponse(index=partition, base_offset=base)

    def list_offsets(self, request: ListOffsetsRequest) -> ListOffsetsResponse:
        topics = []
        for topic in request.topics:
            answers = []
            for part in topic.partitions:
                answers.append(self._list_one(topic.name, part.partition_index, part.timestamp))
            topics.append(ListOffsetsTopicResponse(name=topic.name, partitions=answers))
        return ListOffsetsResponse(topics=topics)

    def _list_one(self, topic: str, partition: int, timestamp: int,
                  ) -> ListOffsetsPartitionResponse:
        count = self._store.partition_count(topic)
        if count is None or not 0 <= partition < count:
            return ListOffsetsPartitionResponse(
                partition_index=partition, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                error_message=f"unknown topic or partition {topic}-{partition}")
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
