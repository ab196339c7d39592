"""Producer over a real broker: offsets, key partitioning, batching, flush, errors."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from groupwire.broker.server import Broker
from groupwire.client.connection import Connection
from groupwire.client.errors import (
    ClientClosedError,
    IllegalStateError,
    UnknownTopicOrPartitionError,
)
from groupwire.client.producer import Producer
from groupwire.protocol.batches import DecodedRecord, decode_records, iter_batches
from groupwire.protocol.hashing import partition_for_key
from groupwire.protocol.messages import (
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    ProduceRequest,
    Request,
    Response,
)

CreateTopic = Callable[..., Awaitable[str]]


async def fetch_raw(broker: Broker, topic: str, partition: int) -> bytes:
    conn = await Connection.open("127.0.0.1", broker.port, client_id="check")
    try:
        resp = await conn.send(FetchRequest(max_wait_ms=0, topics=[FetchTopic(
            topic=topic, partitions=[FetchPartition(partition=partition, fetch_offset=0,
                                                    partition_max_bytes=8 << 20)])]),
            response_type=FetchResponse)
    finally:
        await conn.close()
    (part,) = resp.responses[0].partitions
    assert part.error_code == 0
    return part.records


async def fetch(broker: Broker, topic: str, partition: int) -> list[DecodedRecord]:
    return decode_records(await fetch_raw(broker, topic, partition))


async def test_send_and_wait_returns_consecutive_offsets_and_round_trips(
        broker: Broker, bootstrap: str, create_topic: CreateTopic) -> None:
    await create_topic("t1", 1)
    async with Producer(bootstrap, linger_ms=0) as p:
        metas = [await p.send_and_wait("t1", f"v{i}".encode(), key=b"k",
                                       headers=[("h", b"x")], timestamp_ms=1_000 + i)
                 for i in range(3)]
    assert [(m.topic, m.partition, m.offset, m.timestamp_ms) for m in metas] == [
        ("t1", 0, 0, 1000), ("t1", 0, 1, 1001), ("t1", 0, 2, 1002)]
    records = await fetch(broker, "t1", 0)
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp_ms) for r in records] == [
        (i, b"k", f"v{i}".encode(), [("h", b"x")], 1000 + i) for i in range(3)]


async def test_keyed_records_land_on_partition_for_key(
        broker: Broker, bootstrap: str, create_topic: CreateTopic) -> None:
    await create_topic("keyed", 4)
    keys = [f"key-{i}".encode() for i in range(40)]
    async with Producer(bootstrap) as p:
        futures = [await p.send("keyed", b"v", key=k) for k in keys]
        metas = await asyncio.gather(*futures)
    expected = {k: partition_for_key(k, 4) for k in keys}
    assert {k: m.partition for k, m in zip(keys, metas, strict=True)} == expected
    assert len(set(expected.values())) > 1
    for partition in range(4):
        stored = [r.key for r in await fetch(broker, "keyed", partition)]
        assert stored == [k for k in keys if expected[k] == partition]


async def test_buffered_records_of_many_partitions_go_in_one_produce_on_flush(
        broker: Broker, bootstrap: str, create_topic: CreateTopic,
        monkeypatch: pytest.MonkeyPatch) -> None:
    await create_topic("multi", 3)
    async with Producer(bootstrap, linger_ms=60_000) as p:
        produces: list[ProduceRequest] = []
        real_send = p.cluster.send_to  # Produce goes to the partition's leader, node 0

        async def spy(node: int, request: Request, **kw: object) -> Response:
            if isinstance(request, ProduceRequest):
                produces.append(request)
            return await real_send(node, request, **kw)  # type: ignore[arg-type]

        monkeypatch.setattr(p.cluster, "send_to", spy)
        futures = [await p.send("multi", f"{i}".encode(), partition=i % 3) for i in range(30)]
        assert not any(f.done() for f in futures)  # lingering, nothing sent yet
        await p.flush()
        assert all(f.done() for f in futures)
    assert len(produces) == 1
    (topic_data,) = produces[0].topic_data
    assert sorted(pd.index for pd in topic_data.partition_data) == [0, 1, 2]
    for partition in range(3):
        batches = list(iter_batches(await fetch_raw(broker, "multi", partition)))
        assert len(batches) == 1 and batches[0][0].record_count == 10


async def test_unkeyed_records_stick_to_a_partition_per_batch(
        broker: Broker, bootstrap: str, create_topic: CreateTopic) -> None:
    await create_topic("sticky", 3)
    # each record costs 24 + 40 bytes: two fit in a 150-byte batch, a third does not
    async with Producer(bootstrap, linger_ms=60_000, max_batch_bytes=150) as p:
        futures = [await p.send("sticky", bytes(40)) for _ in range(6)]
        # full batches leave without waiting for the linger; the last one is still open
        metas = [await f for f in futures[:4]]
        assert not futures[5].done()
        await p.flush()
        metas += [f.result() for f in futures[4:]]
    assert [m.partition for m in metas] == [0, 0, 1, 1, 2, 2]
    assert [m.offset for m in metas] == [0, 1, 0, 1, 0, 1]


async def test_close_flushes_lingering_records(
        broker: Broker, bootstrap: str, create_topic: CreateTopic) -> None:
    await create_topic("lingering", 1)
    p = Producer(bootstrap, linger_ms=60_000)
    await p.start()
    futures = [await p.send("lingering", f"r{i}".encode()) for i in range(5)]
    await p.close()
    assert [f.result().offset for f in futures] == [0, 1, 2, 3, 4]
    assert [r.value for r in await fetch(broker, "lingering", 0)] == [
        f"r{i}".encode() for i in range(5)]
    with pytest.raises(ClientClosedError):
        await p.send("lingering", b"late")


async def test_unknown_topic_and_partition_raise(
        bootstrap: str, create_topic: CreateTopic) -> None:
    await create_topic("small", 2)
    async with Producer(bootstrap, request_timeout_ms=300, retry_backoff_ms=20) as p:
        with pytest.raises(UnknownTopicOrPartitionError):
            await p.send("no-such-topic", b"v")
        with pytest.raises(UnknownTopicOrPartitionError):
            await p.send("small", b"v", partition=2)
        assert (await p.send_and_wait("small", b"v", partition=1)).partition == 1


async def test_send_before_start_and_bad_types_are_refused(bootstrap: str) -> None:
    p = Producer(bootstrap)
    with pytest.raises(IllegalStateError):
        await p.send("t", b"v")
    async with Producer(bootstrap, value_serializer=lambda v: str(v).encode()) as p2:
        with pytest.raises(TypeError):
            await p2.send("t", 1, key="not-bytes")


async def test_internal_topic_produce_fails_the_future(bootstrap: str) -> None:
    async with Producer(bootstrap) as p:
        fut = await p.send("__group_events", b"v", partition=0)
        with pytest.raises(Exception) as info:
            await fut
    assert "INVALID_TOPIC_EXCEPTION" in str(info.value)


async def test_added_partitions_are_seen_once_metadata_ages(
        bootstrap: str, create_topic: CreateTopic) -> None:
    from groupwire.client.admin import Admin

    await create_topic("growing", 1)
    key = next(k for k in (f"k{i}".encode() for i in range(100))
               if partition_for_key(k, 4) != 0)
    async with Producer(bootstrap, metadata_max_age_ms=0) as p:
        assert (await p.send_and_wait("growing", b"v", key=key)).partition == 0
        async with Admin(bootstrap) as admin:
            await admin.create_partitions("growing", 4)
        meta = await p.send_and_wait("growing", b"v", key=key)
        assert meta.partition == partition_for_key(key, 4)
        assert await p.partitions_for("growing") == {0, 1, 2, 3}
