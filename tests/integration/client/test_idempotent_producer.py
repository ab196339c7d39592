"""The Producer's idempotence against the real broker (docs/protocol.md §5.4): batches are
stored in layout v2 with the producer's id and per-partition sequences; a batch resent
after its answer was lost is stored once (without idempotence, twice); idempotence off
sends v1 as before; and it needs acks="all"."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import pytest

from groupwire import Producer
from groupwire.broker.server import Broker
from groupwire.client.admin import Admin
from groupwire.client.connection import Connection
from groupwire.protocol.batches import BATCH_V1, BATCH_V2, BatchHeader, iter_batches
from groupwire.protocol.messages import (
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
)
from tests.kafka.answer_cutter import AnswerCutter

from .test_producer import fetch, fetch_raw

CreateTopic = Callable[..., Awaitable[str]]
BOUND_S = 30


async def headers(broker: Broker, topic: str, partition: int) -> list[BatchHeader]:
    return [h for h, _ in iter_batches(await fetch_raw(broker, topic, partition))]


async def fill(p: Producer, topic: str) -> None:
    """Several batches on each of two partitions: ``send`` (a batch per 20 records, at
    most) on partition 0, ``send_batch`` and ``send`` on partition 1."""
    futures = [await p.send(topic, f"a{i}".encode(), partition=0) for i in range(50)]
    batch = p.create_batch()
    for i in range(7):
        batch.append(value=f"b{i}".encode())
    futures.append(await p.send_batch(batch, topic, partition=1))
    futures += [await p.send(topic, f"c{i}".encode(), partition=1) for i in range(30)]
    await asyncio.gather(*futures)


async def test_an_idempotent_producers_batches_are_stored_v2_numbered_per_partition(
        broker: Broker, bootstrap: str, create_topic: CreateTopic) -> None:
    await create_topic("idem", 2)
    per_record = 24 + 3  # RECORD_OVERHEAD and a short value: 20 records a batch at most
    async with asyncio.timeout(BOUND_S), Producer(bootstrap, linger_ms=1,
                                                  max_batch_bytes=20 * per_record) as p:
        assert p.idempotent
        await fill(p, "idem")
        producer_id = p._sequences.producer_id
    assert producer_id >= 0
    for partition, count in ((0, 50), (1, 37)):
        stored = await headers(broker, "idem", partition)
        assert len(stored) >= 3, "one batch: the numbering is not checked"
        assert {(h.version, h.producer_id, h.producer_epoch) for h in stored} == {
            (BATCH_V2, producer_id, 0)}
        # one producer writes the partition from offset 0: its sequences are the offsets
        assert [h.base_sequence for h in stored] == [h.base_offset for h in stored]
        assert sum(h.record_count for h in stored) == count
    assert [r.value for r in await fetch(broker, "idem", 1)] == [
        *(f"b{i}".encode() for i in range(7)), *(f"c{i}".encode() for i in range(30))]


async def test_without_idempotence_batches_are_v1_as_before(
        broker: Broker, bootstrap: str, create_topic: CreateTopic) -> None:
    await create_topic("plain", 2)
    async with asyncio.timeout(BOUND_S), Producer(bootstrap, linger_ms=1,
                                                  enable_idempotence=False) as p:
        assert not p.enable_idempotence and not p.idempotent
        await fill(p, "plain")
    for partition in (0, 1):
        stored = await headers(broker, "plain", partition)
        assert stored and {(h.version, h.producer_id, h.base_sequence) for h in stored} == {
            (BATCH_V1, -1, -1)}


async def test_acks_1_turns_idempotence_off_unless_it_was_asked_for(
        broker: Broker, bootstrap: str, create_topic: CreateTopic) -> None:
    with pytest.raises(ValueError, match=r"enable_idempotence=True needs acks='all'.*acks=1"):
        Producer(bootstrap, acks=1, enable_idempotence=True)
    assert Producer(bootstrap, acks="all", enable_idempotence=True).enable_idempotence
    assert Producer(bootstrap, acks=-1).enable_idempotence
    assert not Producer(bootstrap, acks=1, enable_idempotence=False).enable_idempotence
    # left unset, idempotence gives way to an explicit acks=1 (Kafka 3.2+)
    await create_topic("leader-only", 1)
    async with asyncio.timeout(BOUND_S), Producer(bootstrap, acks=1) as p:
        assert p.acks == 1 and not p.enable_idempotence
        await p.send_and_wait("leader-only", b"v")
    assert [h.version for h in await headers(broker, "leader-only", 0)] == [BATCH_V1]


@pytest.mark.parametrize("idempotent", [True, False])
async def test_batches_resent_after_their_answers_were_lost(
        start_broker: Callable[..., Awaitable[Broker]], idempotent: bool) -> None:
    """The broker stores batches whose answers a relay drops, then the relay cuts the
    connections and the producer resends them. Idempotent, each resend is recognised as
    a retry of a stored batch, answered with its first offset and stored nowhere: every
    record is stored once, where its RecordMetadata says. Without idempotence, the
    resends are stored again."""
    relay_port = _free_port()
    # clients are told the relay's address; the test reads the log on the broker's own
    broker = await start_broker(advertised_listeners=f"PLAINTEXT://127.0.0.1:{relay_port}")
    cutter = AnswerCutter(broker.port, port=relay_port)
    topic, partitions, total = "resent", 3, 3000
    try:
        async with asyncio.timeout(BOUND_S):
            async with Admin(f"127.0.0.1:{broker.port}") as admin:
                await admin.create_topics([topic], num_partitions=partitions)
            async with Producer(f"127.0.0.1:{relay_port}", linger_ms=1, retry_backoff_ms=10,
                                enable_idempotence=idempotent) as p:
                first = await p.send_and_wait(topic, b"first", partition=0)  # id handed out
                before = await _end_offsets(broker, topic, partitions)
                cutter.losing.set()
                futures = [await p.send(topic, f"r{i}".encode(), partition=i % partitions)
                           for i in range(total)]
                await _appended(broker, topic, before)   # each partition's first batch
                stored_unanswered = _stored(await _end_offsets(broker, topic, partitions),
                                            before)
                assert not any(f.done() for f in futures)
                cutter.cut()
                metas = await asyncio.gather(*futures)
            stored = _stored(await _end_offsets(broker, topic, partitions), before)
            logs = {p: await fetch(broker, topic, p) for p in range(partitions)}
    finally:
        cutter.close()
    assert stored_unanswered > 0, "no batch was stored while its answer was lost"
    assert (first.partition, first.offset) == (0, 0)
    if not idempotent:
        assert stored > total, "no record was stored twice: the test shows nothing"
        return
    assert stored == total, f"{stored - total} records stored twice"
    landed = {(r.partition, r.offset) for r in metas}
    assert len(landed) == total
    for i, meta in enumerate(metas):
        (record,) = [r for r in logs[meta.partition] if r.offset == meta.offset]
        assert record.value == f"r{i}".encode()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _stored(now: list[int], before: list[int]) -> int:
    return sum(n - b for n, b in zip(now, before, strict=True))


async def _end_offsets(broker: Broker, topic: str, partitions: int) -> list[int]:
    """Each partition's log end offset, asked of the broker directly (not through the relay)."""
    conn = await Connection.open("127.0.0.1", broker.port, client_id="peek")
    try:
        resp = await conn.send(ListOffsetsRequest(topics=[ListOffsetsTopic(
            name=topic, partitions=[ListOffsetsPartition(partition_index=p, timestamp=-1)
                                    for p in range(partitions)])]),
            response_type=ListOffsetsResponse)
    finally:
        await conn.close()
    parts = sorted(resp.topics[0].partitions, key=lambda x: x.partition_index)
    assert all(p.error_code == 0 for p in parts)
    return [p.offset for p in parts]


async def _appended(broker: Broker, topic: str, before: list[int]) -> None:
    """Until every partition holds a record past ``before`` (a Fetch from there that the
    broker answers once one is appended)."""
    conn = await Connection.open("127.0.0.1", broker.port, client_id="peek")
    try:
        async def one(partition: int) -> None:
            while True:
                resp = await conn.send(FetchRequest(max_wait_ms=5000, topics=[FetchTopic(
                    topic=topic, partitions=[FetchPartition(
                        partition=partition, fetch_offset=before[partition])])]),
                    response_type=FetchResponse)
                if resp.responses[0].partitions[0].records:
                    return

        await asyncio.gather(*(one(p) for p in range(len(before))))
    finally:
        await conn.close()
