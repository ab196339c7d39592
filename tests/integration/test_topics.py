"""Topics, produce, fetch (with its long poll) and offsets over loopback TCP."""

from __future__ import annotations

import asyncio

from groupwire.protocol.batches import decode_records
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)

from .rawgroup import create_topic, produce


def _fetch(topic: str, partition: int, offset: int, *, max_wait_ms: int = 0,
           min_bytes: int = 1) -> FetchRequest:
    return FetchRequest(max_wait_ms=max_wait_ms, min_bytes=min_bytes, topics=[FetchTopic(
        topic=topic, partitions=[FetchPartition(partition=partition, fetch_offset=offset)])])


async def test_api_versions_lists_every_api_and_frame_limit(broker, connect) -> None:  # type: ignore[no-untyped-def]
    conn = await connect()
    resp = await conn.send(ApiVersionsRequest(), response_type=ApiVersionsResponse)
    assert resp.error_code == 0
    assert sorted(k.api_key for k in resp.api_keys) == [
        0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 22, 23, 24, 25, 26,
        27, 28, 29, 30, 31, 36, 37, 42, 43, 47, 50, 51, 65, 66]
    assert resp.max_frame_bytes == broker.settings.max_frame_bytes


async def test_produce_then_fetch_returns_records_in_order(connect) -> None:  # type: ignore[no-untyped-def]
    conn = await connect()
    await create_topic(conn, "t", 2)
    first = await produce(conn, "t", 1, [b"a", b"b", b"c"])
    second = await produce(conn, "t", 1, [b"d"])
    offsets = [first.responses[0].partition_responses[0].base_offset,
               second.responses[0].partition_responses[0].base_offset]
    assert offsets == [0, 3]
    resp = await conn.send(_fetch("t", 1, 1), response_type=FetchResponse)
    part = resp.responses[0].partitions[0]
    assert part.error_code == 0 and part.high_watermark == 4 and part.log_start_offset == 0
    records = decode_records(part.records, min_offset=1)
    assert [(r.offset, r.value) for r in records] == [(1, b"b"), (2, b"c"), (3, b"d")]


async def test_fetch_long_poll_is_woken_by_an_append(connect) -> None:  # type: ignore[no-untyped-def]
    consumer, producer = await connect("c"), await connect("p")
    await create_topic(producer, "lp", 1)
    waiting = asyncio.ensure_future(consumer.send(_fetch("lp", 0, 0, max_wait_ms=30_000),
                                                  response_type=FetchResponse))
    # the fetch is parked; a metadata round trip on the same connection overtakes it
    meta = await consumer.send(MetadataRequest(topics=[MetadataRequestTopic(name="lp")]),
                               response_type=MetadataResponse)
    assert meta.topics[0].error_code == 0 and not waiting.done()
    await produce(producer, "lp", 0, [b"wake"])
    resp = await asyncio.wait_for(waiting, 10)
    records = decode_records(resp.responses[0].partitions[0].records)
    assert [r.value for r in records] == [b"wake"]


async def test_fetch_out_of_range_and_unknown_partition(connect) -> None:  # type: ignore[no-untyped-def]
    conn = await connect()
    await create_topic(conn, "r", 1)
    await produce(conn, "r", 0, [b"x"])
    resp = await conn.send(_fetch("r", 0, 5), response_type=FetchResponse)
    assert resp.responses[0].partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    resp = await conn.send(_fetch("r", 3, 0), response_type=FetchResponse)
    assert resp.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_produce_refuses_corrupt_internal_and_unknown(connect) -> None:  # type: ignore[no-untyped-def]
    conn = await connect()
    await create_topic(conn, "v", 1)

    async def send(topic: str, index: int, records: bytes) -> int:
        resp = await conn.send(ProduceRequest(topic_data=[TopicProduceData(
            name=topic, partition_data=[PartitionProduceData(index=index, records=records)])]),
            response_type=ProduceResponse)
        return resp.responses[0].partition_responses[0].error_code

    good = (await produce(conn, "v", 0, [b"ok"])).responses[0].partition_responses[0]
    assert good.error_code == 0
    from groupwire.protocol.batches import BatchRecord, encode_batch

    batch = bytearray(encode_batch([BatchRecord(value=b"payload", timestamp_ms=1)]))
    batch[-1] ^= 0xFF
    assert await send("v", 0, bytes(batch)) == ErrorCode.CORRUPT_MESSAGE
    assert await send("v", 0, b"not a batch at all, just bytes....") == ErrorCode.CORRUPT_MESSAGE
    assert await send("__group_events", 0, bytes(batch)) == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert await send("missing", 0, bytes(batch)) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # nothing corrupt was appended: the log still holds only the good record
    resp = await conn.send(_fetch("v", 0, 0), response_type=FetchResponse)
    assert resp.responses[0].partitions[0].high_watermark == 1


async def test_create_topics_validates_and_partitions_grow(connect) -> None:  # type: ignore[no-untyped-def]
    conn = await connect()
    resp = await conn.send(CreateTopicsRequest(topics=[
        CreatableTopic(name="fine", num_partitions=3),
        CreatableTopic(name="bad name!", num_partitions=1),
        CreatableTopic(name="__reserved", num_partitions=1),
        CreatableTopic(name="zero", num_partitions=0),
        CreatableTopic(name="rf", num_partitions=1, replication_factor=3),
    ]), response_type=CreateTopicsResponse)
    codes = {t.name: t.error_code for t in resp.topics}
    assert codes == {
        "fine": 0, "bad name!": ErrorCode.INVALID_TOPIC_EXCEPTION,
        "__reserved": ErrorCode.INVALID_TOPIC_EXCEPTION, "zero": ErrorCode.INVALID_PARTITIONS,
        "rf": ErrorCode.INVALID_REPLICATION_FACTOR,
    }
    again = await conn.send(CreateTopicsRequest(topics=[CreatableTopic(name="fine")]),
                            response_type=CreateTopicsResponse)
    assert again.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    grow = await conn.send(CreatePartitionsRequest(topics=[
        CreatePartitionsTopic(name="fine", count=5),
        CreatePartitionsTopic(name="fine2", count=5),
        CreatePartitionsTopic(name="__consumer_offsets", count=60)]))
    assert [r.error_code for r in grow.results] == [
        0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_TOPIC_EXCEPTION]
    meta = await conn.send(MetadataRequest(), response_type=MetadataResponse)
    by_name = {t.name: t for t in meta.topics}
    assert len(by_name["fine"].partitions) == 5
    assert by_name["__consumer_offsets"].is_internal
    assert len(by_name["__consumer_offsets"].partitions) == 50
    assert len(by_name["__group_events"].partitions) == 1


async def test_metadata_auto_creates_only_when_enabled(start_broker, connect) -> None:  # type: ignore[no-untyped-def]
    plain = await start_broker()
    auto = await start_broker(auto_create_topics=True, num_partitions=3)
    req = MetadataRequest(topics=[MetadataRequestTopic(name="fresh")])
    off = await (await connect(target=plain)).send(req, response_type=MetadataResponse)
    assert off.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    on = await (await connect(target=auto)).send(req, response_type=MetadataResponse)
    assert on.topics[0].error_code == 0 and len(on.topics[0].partitions) == 3


async def test_list_offsets_earliest_latest_and_by_time(connect) -> None:  # type: ignore[no-untyped-def]
    conn = await connect()
    await create_topic(conn, "lo", 1)
    await produce(conn, "lo", 0, [b"a", b"b"], timestamp_ms=1000)
    await produce(conn, "lo", 0, [b"c"], timestamp_ms=5000)

    async def ask(ts: int) -> tuple[int, int]:
        resp = await conn.send(ListOffsetsRequest(topics=[ListOffsetsTopic(
            name="lo", partitions=[ListOffsetsPartition(partition_index=0, timestamp=ts)])]),
            response_type=ListOffsetsResponse)
        p = resp.topics[0].partitions[0]
        assert p.error_code == 0
        return p.offset, p.timestamp

    assert await ask(-2) == (0, -1)
    assert await ask(-1) == (3, -1)
    assert await ask(1001) == (1, 1001)
    assert await ask(2000) == (2, 5000)
    assert await ask(9999) == (-1, -1)


async def test_find_coordinator_points_at_this_broker(broker, connect) -> None:  # type: ignore[no-untyped-def]
    conn = await connect()
    resp = await conn.send(FindCoordinatorRequest(key="any-group"),
                           response_type=FindCoordinatorResponse)
    assert (resp.error_code, resp.node_id, resp.port) == (0, 0, broker.port)
    bad = await conn.send(FindCoordinatorRequest(key="x", key_type=2),
                          response_type=FindCoordinatorResponse)
    assert bad.error_code == ErrorCode.INVALID_REQUEST
    # a transactional id's coordinator: __transaction_state is made on the first ask
    txn = await conn.send(FindCoordinatorRequest(key="x", key_type=1),
                          response_type=FindCoordinatorResponse)
    assert txn.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    async with asyncio.timeout(10):
        while txn.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE:
            txn = await conn.send(FindCoordinatorRequest(key="x", key_type=1),
                                  response_type=FindCoordinatorResponse)
    assert (txn.error_code, txn.node_id, txn.port) == (0, 0, broker.port)
