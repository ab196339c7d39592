"""The fetcher on a partition holding a record it cannot read (a poison batch an old broker
stored): the records before it first, then an error naming the partition and offset until
a seek moves on. Without a broker."""

from __future__ import annotations

import asyncio
import struct
import zlib
from typing import Any

import msgpack

from groupwire.client.errors import (
    CorruptBatchError,
    CorruptRecordError,
    GroupwireError,
    InvalidRecordError,
    error_for,
)
from groupwire.client.fetcher import Fetcher
from groupwire.client.subscription import SubscriptionState
from groupwire.client.types import TopicPartition
from groupwire.protocol.batches import BatchRecord, encode_batch
from groupwire.protocol.messages import (
    FetchPartitionData,
    FetchRequest,
    FetchResponse,
    FetchTopicResponse,
)

TP = TopicPartition("t", 0)


def poison(base_offset: int) -> bytes:
    """Rows ``c``, ``[1]``, ``e`` with a correct CRC: what an old broker accepted."""
    rows = [msgpack.packb([0, 0, None, b"c", []]), msgpack.packb([1]),
            msgpack.packb([2, 0, None, b"e", []])]
    body = b"\x00\x93" + b"".join(rows)
    head = struct.pack(">BBBQBqBIB", 0x92, 0x95, 0xCF, base_offset, 0xD3, 7, 0xCE, 3, 0xCE)
    return head + struct.pack(">I", zlib.crc32(body, zlib.crc32(head[11:25]))) + body


BATCHES = [(0, encode_batch([BatchRecord(b"a", timestamp_ms=7),
                             BatchRecord(b"b", timestamp_ms=7)])),
           (2, poison(2)),
           (5, encode_batch([BatchRecord(b"f", timestamp_ms=7)], base_offset=5))]
"""(base offset, bytes) of a partition's log: a, b | c, [1], e | f."""


class Broker:
    """Answers each Fetch with the log from the batch holding its fetch offset."""

    def __init__(self) -> None:
        self.fetched_at: list[int] = []

    async def send(self, request: Any) -> Any:
        assert isinstance(request, FetchRequest)
        offset = request.topics[0].partitions[0].fetch_offset
        self.fetched_at.append(offset)
        first = max(i for i, (base, _) in enumerate(BATCHES) if base <= offset)
        records = b"".join(data for _, data in BATCHES[first:])
        return FetchResponse(responses=[FetchTopicResponse(topic="t", partitions=[
            FetchPartitionData(partition_index=0, high_watermark=6, records=records)])])


async def fetch_once(fetcher: Fetcher) -> None:
    done = asyncio.Event()
    fetcher.on_done = done.set
    fetcher.maybe_fetch(None)
    await done.wait()


async def test_records_before_a_bad_one_first_then_an_error_until_a_seek() -> None:
    subs = SubscriptionState()
    subs.set_assignment([TP])
    subs.partitions[TP].seek(0)
    broker = Broker()
    fetcher = Fetcher(subs, broker.send, auto_offset_reset="earliest", fetch_max_wait_ms=10)
    await fetch_once(fetcher)
    assert fetcher.record_error(set()) is None   # not instead of the records before it
    assert [r.value for r in fetcher.drain(2)[TP]] == [b"a", b"b"]
    assert fetcher.record_error(set()) is None
    assert [r.value for r in fetcher.drain(10)[TP]] == [b"c"]

    err = fetcher.record_error(set())
    assert isinstance(err, CorruptRecordError)
    assert (err.topic_partition, err.offset) == (TP, 3)
    assert isinstance(err, CorruptBatchError) and isinstance(err, GroupwireError)
    assert "t[0] offset 3" in str(err) and "not a 5-item array" in err.message
    assert fetcher.record_error({TopicPartition("t", 1)}) is None   # getmany(other)
    fetcher.maybe_fetch(None)   # a stopped partition is not fetched again ...
    assert not fetcher.in_flight and broker.fetched_at == [0]
    assert fetcher.record_error(set()) is err   # ... and every poll says so again

    subs.partitions[TP].seek(err.offset + 1)
    assert fetcher.record_error(set()) is None
    await fetch_once(fetcher)
    assert broker.fetched_at == [0, 4]
    assert [(r.offset, r.value) for r in fetcher.drain(10)[TP]] == [(4, b"e"), (5, b"f")]
    assert fetcher.record_error(set()) is None


async def test_a_reassigned_partition_is_not_held_by_an_old_stop() -> None:
    subs = SubscriptionState()
    subs.set_assignment([TP])
    subs.partitions[TP].seek(3)
    broker = Broker()
    fetcher = Fetcher(subs, broker.send, auto_offset_reset="earliest", fetch_max_wait_ms=10)
    await fetch_once(fetcher)
    assert fetcher.record_error(set()) is not None
    subs.set_assignment([])
    subs.set_assignment([TP])   # a new assignment: a fresh state, fetched anew
    subs.partitions[TP].seek(3)
    assert fetcher.record_error(set()) is None
    await fetch_once(fetcher)
    assert broker.fetched_at == [3, 3]


def test_invalid_record_has_its_own_class() -> None:
    err = error_for(87, "t[0]: record 1: not a 5-item array")
    assert type(err) is InvalidRecordError and not err.retriable
    assert str(err) == "INVALID_RECORD: t[0]: record 1: not a 5-item array"
