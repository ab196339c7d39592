"""The Producer's batch API (aiokafka's create_batch / send_batch) over a real broker, and
the per-record path's fast bookkeeping: records land in order with everything they carry,
a full batch says so, errors surface on the caller or the future."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import pytest

from groupwire import BatchBuilder, BatchRecordMetadata, Producer, RecordMetadata
from groupwire.broker.server import Broker
from groupwire.client.accumulator import RECORD_OVERHEAD
from groupwire.client.errors import (
    ClientClosedError,
    IllegalStateError,
    UnknownTopicOrPartitionError,
)
from groupwire.protocol.messages import ProduceRequest, Request, Response

from .test_producer import fetch, fetch_raw

CreateTopic = Callable[..., Awaitable[str]]
TS = 1_700_000_000_000


async def test_a_batch_lands_in_order_with_keys_values_headers_and_timestamps(
        broker: Broker, bootstrap: str, create_topic: CreateTopic) -> None:
    await create_topic("whole", 2)
    async with Producer(bootstrap) as p:
        batch = p.create_batch()
        metas = [batch.append(key=f"k{i}".encode() if i % 2 else None,
                              value=f"v{i}".encode() if i != 3 else None,
                              timestamp=TS + i, headers=[("n", str(i).encode())])
                 for i in range(5)]
        assert [m.offset for m in metas if m] == [0, 1, 2, 3, 4]
        assert [m.timestamp for m in metas if m] == [TS + i for i in range(5)]
        assert batch.record_count() == 5
        assert batch.size() == sum(m.size for m in metas if m)
        future = await p.send_batch(batch, "whole", partition=1)
        meta = await future
    assert meta == RecordMetadata("whole", 1, 0, TS)
    records = await fetch(broker, "whole", 1)
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp_ms) for r in records] == [
        (i, f"k{i}".encode() if i % 2 else None, f"v{i}".encode() if i != 3 else None,
         [("n", str(i).encode())], TS + i) for i in range(5)]
    assert await fetch(broker, "whole", 0) == []


async def test_batches_and_single_records_keep_the_order_they_were_given_in(
        broker: Broker, bootstrap: str, create_topic: CreateTopic) -> None:
    await create_topic("mixed", 1)
    async with Producer(bootstrap, linger_ms=60_000) as p:
        before = [await p.send("mixed", b"a0", partition=0),
                  await p.send("mixed", b"a1", partition=0)]
        first = p.create_batch()
        for v in (b"b0", b"b1", b"b2"):
            first.append(value=v)
        second = p.create_batch()
        second.append(value=b"c0")
        f1 = await p.send_batch(first, "mixed", partition=0)
        after = await p.send("mixed", b"d0", partition=0)
        f2 = await p.send_batch(second, "mixed", partition=0)
        await p.flush()
        assert [f.result().offset for f in before] == [0, 1]
        assert (f1.result().offset, after.result().offset, f2.result().offset) == (2, 5, 6)
    assert [r.value for r in await fetch(broker, "mixed", 0)] == [
        b"a0", b"a1", b"b0", b"b1", b"b2", b"d0", b"c0"]


async def test_a_full_batch_says_so_and_takes_nothing_more(
        broker: Broker, bootstrap: str, create_topic: CreateTopic) -> None:
    await create_topic("full", 1)
    per_record = RECORD_OVERHEAD + 40
    async with Producer(bootstrap, max_batch_bytes=2 * per_record + 30) as p:
        batch = p.create_batch()
        assert batch.append(value=bytes(40), timestamp=TS) == BatchRecordMetadata(
            0, TS, per_record)
        assert batch.append(value=bytes(40), timestamp=TS) == BatchRecordMetadata(
            1, TS, per_record)
        assert batch.record_count() == 2 and batch.size() == 2 * per_record
        assert batch.append(value=bytes(40)) is None   # a third does not fit
        assert batch.append(value=bytes(40)) is None
        assert batch.append(value=b"tiny") is not None  # a smaller one still does
        assert batch.record_count() == 3
        batch.close()
        assert batch.append(value=b"") is None
        # a first record always fits, however big
        big = p.create_batch()
        assert big.append(value=bytes(1000)) is not None
        assert big.append(value=b"") is None
        await (await p.send_batch(batch, "full", partition=0))
        await (await p.send_batch(big, "full", partition=0))
    assert [len(r.value or b"") for r in await fetch(broker, "full", 0)] == [40, 40, 4, 1000]


async def test_the_producer_s_serializers_apply_to_appended_records(
        broker: Broker, bootstrap: str, create_topic: CreateTopic) -> None:
    await create_topic("typed", 1)
    async with Producer(bootstrap, key_serializer=lambda k: k.encode() if k else None,
                        value_serializer=lambda v: json.dumps(v).encode()) as p:
        batch = p.create_batch()
        batch.append(key="id-1", value={"n": 1})
        batch.append(value=[2])
        await (await p.send_batch(batch, "typed", partition=0))
    assert [(r.key, r.value) for r in await fetch(broker, "typed", 0)] == [
        (b"id-1", b'{"n": 1}'), (None, b"[2]")]


async def test_errors_surface_on_the_caller(bootstrap: str, create_topic: CreateTopic) -> None:
    await create_topic("small", 2)
    unstarted = Producer(bootstrap)
    with pytest.raises(IllegalStateError):
        await unstarted.send_batch(unstarted.create_batch(), "small", partition=0)
    async with Producer(bootstrap, request_timeout_ms=300, retry_backoff_ms=20) as p:
        batch = p.create_batch()
        with pytest.raises(TypeError, match="value must be bytes"):
            batch.append(value="text")
        with pytest.raises(TypeError, match="headers"):
            batch.append(value=b"v", headers=[("h", "not bytes")])  # type: ignore[list-item]
        with pytest.raises(TypeError, match="timestamp must be an int"):
            batch.append(value=b"v", timestamp=1.5)  # type: ignore[arg-type]
        assert batch.record_count() == 0
        with pytest.raises(ValueError, match="empty"):
            await p.send_batch(batch, "small", partition=0)
        batch.append(value=b"v")
        with pytest.raises(UnknownTopicOrPartitionError):
            await p.send_batch(batch, "small", partition=2)
        with pytest.raises(UnknownTopicOrPartitionError):
            await p.send_batch(batch, "no-such-topic", partition=0)
        with pytest.raises(TypeError, match="create_batch"):
            await p.send_batch([b"v"], "small", partition=0)  # type: ignore[arg-type]
        # refused sends left the batch as it was: it still goes, once
        assert (await (await p.send_batch(batch, "small", partition=1))).partition == 1
        with pytest.raises(ValueError, match="sent already"):
            await p.send_batch(batch, "small", partition=1)
    late = p.create_batch()
    late.append(value=b"v")
    with pytest.raises(ClientClosedError):
        await p.send_batch(late, "small", partition=0)


async def test_a_broker_error_is_set_on_the_batch_s_future(bootstrap: str) -> None:
    async with Producer(bootstrap) as p:
        batch = p.create_batch()
        batch.append(value=b"v")
        future = await p.send_batch(batch, "__group_events", partition=0)
        with pytest.raises(Exception, match="INVALID_TOPIC_EXCEPTION"):
            await future


async def test_close_flushes_queued_batches(
        broker: Broker, bootstrap: str, create_topic: CreateTopic) -> None:
    await create_topic("closing", 1)
    p = Producer(bootstrap, linger_ms=60_000)
    await p.start()
    batch = p.create_batch()
    for i in range(3):
        batch.append(value=f"r{i}".encode())
    future = await p.send_batch(batch, "closing", partition=0)
    single = await p.send("closing", b"after", partition=0)
    await p.close()
    assert (future.result().offset, single.result().offset) == (0, 3)
    assert [r.value for r in await fetch(broker, "closing", 0)] == [
        b"r0", b"r1", b"r2", b"after"]


async def test_max_buffer_bytes_holds_back_send_batch_until_space_frees(
        bootstrap: str, create_topic: CreateTopic, monkeypatch: pytest.MonkeyPatch) -> None:
    await create_topic("buffered", 1)
    async with Producer(bootstrap, max_batch_bytes=1000, max_buffer_bytes=1000) as p:
        release, seen = asyncio.Event(), asyncio.Event()
        real_send = p.cluster.send_to

        async def held(node: int, request: Request, **kw: object) -> Response:
            if isinstance(request, ProduceRequest):
                seen.set()
                await release.wait()
            return await real_send(node, request, **kw)  # type: ignore[arg-type]

        monkeypatch.setattr(p.cluster, "send_to", held)
        first = p.create_batch()
        first.append(value=bytes(990))
        f1 = await p.send_batch(first, "buffered", partition=0)
        second = p.create_batch()
        second.append(value=b"v")
        waiting = asyncio.ensure_future(p.send_batch(second, "buffered", partition=0))
        await seen.wait()
        for _ in range(5):
            await asyncio.sleep(0)  # turns enough for a send_batch that did not wait
        assert not waiting.done()   # the buffer is full until the first batch is answered
        release.set()
        f2 = await waiting
        assert ((await f1).offset, (await f2).offset) == (0, 1)


async def test_a_loop_of_sends_lets_the_sender_send_full_batches_meanwhile(
        bootstrap: str, create_topic: CreateTopic, monkeypatch: pytest.MonkeyPatch) -> None:
    """A loop that awaits nothing but send() must not queue max_buffer_bytes before the
    first Produce goes."""
    await create_topic("looping", 1)
    async with Producer(bootstrap, linger_ms=60_000, max_batch_bytes=2000) as p:
        produces: list[ProduceRequest] = []
        real_send = p.cluster.send_to

        async def spy(node: int, request: Request, **kw: object) -> Response:
            if isinstance(request, ProduceRequest):
                produces.append(request)
            return await real_send(node, request, **kw)  # type: ignore[arg-type]

        monkeypatch.setattr(p.cluster, "send_to", spy)
        futures = [await p.send("looping", bytes(100), partition=0) for _ in range(3000)]
        sent_meanwhile = len(produces)
        await p.flush()
        assert [f.result().offset for f in futures] == list(range(3000))
    assert sent_meanwhile > 0


async def test_a_batch_is_one_stored_batch(
        broker: Broker, bootstrap: str, create_topic: CreateTopic) -> None:
    from groupwire.protocol.batches import iter_batches

    await create_topic("one", 1)
    async with Producer(bootstrap) as p:
        batch = p.create_batch()
        assert isinstance(batch, BatchBuilder)
        for i in range(100):
            batch.append(value=b"%d" % i, timestamp=TS)
        await (await p.send_batch(batch, "one", partition=0))
    (header, _), = iter_batches(await fetch_raw(broker, "one", 0))
    assert header.record_count == 100 and header.base_timestamp_ms == TS


async def test_send_refuses_a_timestamp_that_is_not_an_int_and_queues_nothing(
        broker: Broker, bootstrap: str, create_topic: CreateTopic) -> None:
    await create_topic("stamped", 1)
    async with Producer(bootstrap) as p:
        with pytest.raises(TypeError, match="timestamp_ms must be an int"):
            await p.send("stamped", b"bad", partition=0, timestamp_ms=1.5)  # type: ignore[arg-type]
        meta = await p.send_and_wait("stamped", b"good", partition=0, timestamp_ms=TS)
    assert (meta.offset, meta.timestamp_ms) == (0, TS)
    assert [r.value for r in await fetch(broker, "stamped", 0)] == [b"good"]


async def test_repeated_keys_keep_their_partition(
        bootstrap: str, create_topic: CreateTopic) -> None:
    """The producer remembers recent keys' hashes: a key seen before lands where Kafka's
    partitioner puts it, as the first time did."""
    from groupwire.protocol.hashing import partition_for_key

    await create_topic("rekeyed", 5)
    keys = [f"user-{i % 7}".encode() for i in range(40)] + [bytes(300)] * 2
    async with Producer(bootstrap) as p:
        metas = await asyncio.gather(*[await p.send("rekeyed", b"v", key=k) for k in keys])
    assert [m.partition for m in metas] == [partition_for_key(k, 5) for k in keys]
