"""A poison batch: framing and CRC sound, a row that is not a record (docs/protocol.md §5.1).

Produce refuses it with INVALID_RECORD and stores nothing. One an older broker stored
(written here straight into the partition log, as today's Produce refuses it) no longer
stops a partition dead: the consumer, ``groupwire consume`` and the Spark reader hand out
every record before it and name the partition and offset; the consumer seeks past it."""

from __future__ import annotations

import asyncio
import struct
import zlib
from collections.abc import Awaitable, Callable

import msgpack
import pytest

from groupwire.broker.server import Broker
from groupwire.cli.main import main
from groupwire.client.connection import Connection
from groupwire.client.consumer import Consumer
from groupwire.client.errors import CorruptRecordError
from groupwire.client.types import TopicPartition
from groupwire.protocol.batches import BatchRecord, encode_batch, validate_batch
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    BatchIndexAndErrorMessage,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
    PartitionProduceData,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)

from ..rawgroup import create_topic, produce

Connect = Callable[..., Awaitable[Connection]]


def rows_batch(rows: list[bytes]) -> bytes:
    """A batch of already-packed ``rows`` with a correct CRC (base offset 0)."""
    body = b"\x00" + bytes([0x90 | len(rows)]) + b"".join(rows)
    head = struct.pack(">BBBQBqBIB", 0x92, 0x95, 0xCF, 0, 0xD3, 1_700_000_000_000,
                       0xCE, len(rows), 0xCE)
    return head + struct.pack(">I", zlib.crc32(body, zlib.crc32(head[11:25]))) + body


def row(index: int, value: bytes) -> bytes:
    return msgpack.packb([index, 0, None, value, []], use_bin_type=True)


POISONS = {
    # c, a row that is not a record, e: offsets 2, 3, 4 once appended after a, b
    "short-row": rows_batch([row(0, b"c"), msgpack.packb([1]), row(2, b"e")]),
    # the bad row does not even unpack: a header name that is not UTF-8
    "bad-utf8": rows_batch([row(0, b"c"), b"\x95\x01\x00\xc0\xc4\x01d\x91\x92\xd9\x02\xff\xfe"
                            b"\xc0", row(2, b"e")]),
}


async def fill(broker: Broker, connect: Connect, topic: str, poison: bytes) -> TopicPartition:
    """``a b | c <bad> e | f`` in partition 0: the middle batch written into storage as an
    old broker would have stored it."""
    conn = await connect()
    await create_topic(conn, topic, 1)
    resp = await produce(conn, topic, 0, [b"a", b"b"])
    assert resp.responses[0].partition_responses[0].base_offset == 0
    assert broker.store is not None
    broker.store.log(topic, 0).append(poison, validate_batch(poison))
    resp = await produce(conn, topic, 0, [b"f"])
    assert resp.responses[0].partition_responses[0].base_offset == 5
    return TopicPartition(topic, 0)


async def log_end(conn: Connection, topic: str, partition: int) -> int:
    resp = await conn.send(ListOffsetsRequest(topics=[ListOffsetsTopic(name=topic, partitions=[
        ListOffsetsPartition(partition_index=partition, timestamp=-1)])]),
        response_type=ListOffsetsResponse)
    return int(resp.topics[0].partitions[0].offset)


async def send(conn: Connection, topic: str, *batches: bytes,
               ) -> list[PartitionProduceResponse]:
    """One Produce of ``batches`` to partitions 0, 1, ...; the partition answers."""
    resp = await conn.send(ProduceRequest(topic_data=[TopicProduceData(
        name=topic, partition_data=[PartitionProduceData(index=i, records=b)
                                    for i, b in enumerate(batches)])]),
        response_type=ProduceResponse)
    return list(resp.responses[0].partition_responses)


# --- the broker -----------------------------------------------------------------------------


async def test_produce_refuses_a_poison_batch_naming_the_record_and_stores_nothing(
        connect: Connect) -> None:
    conn = await connect()
    await create_topic(conn, "orders", 2)
    good = encode_batch([BatchRecord(b"ok")])
    refused, accepted = await send(conn, "orders", POISONS["short-row"], good)
    assert (refused.index, refused.error_code, refused.base_offset) == (
        0, ErrorCode.INVALID_RECORD, -1)
    assert refused.error_message == "record 1: not a 5-item array (an array of 1)"
    assert refused.record_errors == [BatchIndexAndErrorMessage(
        batch_index=1, batch_index_error_message="not a 5-item array (an array of 1)")]
    assert (accepted.error_code, accepted.base_offset, accepted.record_errors) == (0, 0, [])
    assert await log_end(conn, "orders", 0) == 0   # nothing of the refused batch

    (refused,) = await send(conn, "orders", POISONS["bad-utf8"])
    assert refused.error_code == ErrorCode.INVALID_RECORD
    assert [e.batch_index for e in refused.record_errors] == [1]
    assert refused.record_errors[0].batch_index_error_message.startswith("does not unpack")

    broken = bytearray(good)
    broken[-1] ^= 1   # a bad CRC is the framing's fault: CORRUPT_MESSAGE, no record named
    (refused,) = await send(conn, "orders", bytes(broken))
    assert (refused.error_code, refused.record_errors) == (ErrorCode.CORRUPT_MESSAGE, [])
    assert (await produce(conn, "orders", 0, [b"next"])).responses[0] \
        .partition_responses[0].base_offset == 0


# --- readers of a poison batch stored before -------------------------------------------------


@pytest.mark.parametrize("poison", sorted(POISONS))
async def test_the_consumer_returns_the_records_before_a_bad_one_then_names_it(
        broker: Broker, connect: Connect, bootstrap: str, poison: str) -> None:
    tp = await fill(broker, connect, "feed", POISONS[poison])
    async with Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=50,
                        request_timeout_ms=5000) as consumer:
        consumer.assign([tp])
        values: list[bytes | None] = []
        for _ in range(20):   # a bound for a bug, not a wait: each poll returns or raises
            try:
                got = await consumer.getmany(timeout_ms=5000)
            except CorruptRecordError as exc:
                err = exc
                break
            values += [r.value for r in got.get(tp, [])]
        else:
            raise AssertionError(f"no error after {values}")
        assert values == [b"a", b"b", b"c"]   # the records before it came first
        assert (err.topic_partition, err.offset) == (tp, 3)
        assert await consumer.position(tp) == 3
        with pytest.raises(CorruptRecordError):   # every poll, until the application moves on
            await consumer.getmany(timeout_ms=0)

        consumer.seek(err.topic_partition, err.offset + 1)
        after: list[tuple[int, bytes | None]] = []
        while len(after) < 2:
            got = await consumer.getmany(timeout_ms=5000)
            after += [(r.offset, r.value) for r in got.get(tp, [])]
        assert after == [(4, b"e"), (5, b"f")]


async def test_groupwire_consume_prints_the_records_before_a_bad_one_then_one_line(
        broker: Broker, connect: Connect, bootstrap: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    await fill(broker, connect, "feed", POISONS["short-row"])
    capsys.readouterr()
    code = await asyncio.to_thread(main, [
        "consume", "--topic", "feed", "--from-beginning", "--idle-timeout-ms", "3000",
        "--bootstrap", bootstrap])
    out, err = capsys.readouterr()
    assert code == 1 and "Traceback" not in err
    assert [line for line in out.splitlines() if len(line) == 1] == ["a", "b", "c"]
    lines = [line for line in err.splitlines() if "cannot read" in line]
    assert len(lines) == 1 and "feed[0] at offset 3" in lines[0], err
    assert "consumed 3 record(s) from feed" in err


@pytest.mark.parametrize("poison", sorted(POISONS))
async def test_the_spark_reader_names_the_partition_and_offset(
        broker: Broker, connect: Connect, bootstrap: str, poison: str) -> None:
    pytest.importorskip("pyarrow")
    from groupwire.pipeline.offsets import OffsetRange
    from groupwire.pipeline.reading import ReadError, ReadTask, read_range

    await fill(broker, connect, "feed", POISONS[poison])

    def read(start: int, end: int) -> list[bytes]:
        task = ReadTask(bootstrap=bootstrap, range=OffsetRange("feed", 0, start, end),
                        fail_on_data_loss=True, fetch_max_bytes=1 << 20,
                        request_timeout_ms=5000)
        return [v for b in read_range(task) for v in b.column("value").to_pylist()]

    with pytest.raises(ReadError, match=r"cannot read feed\[0\] at offset 3: "):
        await asyncio.to_thread(read, 0, 6)
    assert await asyncio.to_thread(read, 0, 3) == [b"a", b"b", b"c"]
    assert await asyncio.to_thread(read, 4, 6) == [b"e", b"f"]
