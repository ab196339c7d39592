"""§5.1/§5.2: batches are checked without decoding records, patched in place, stored as sent."""

from __future__ import annotations

import struct
from collections.abc import Callable

import msgpack
import pytest

from .conftest import Connect, StartBroker
from .wire import (
    Api,
    Err,
    Rec,
    WireConn,
    assemble,
    base_offset_of,
    batch,
    batch_v1,
    create_topic,
    decode_batch,
    fetch_one,
    fix_crc,
    pack,
    produce,
    records_region,
    split_batches,
    values_batch,
    with_offset,
    with_offset_and_epoch,
)

TS = 1_732_250_000_000
VECTOR_RECORDS = [Rec(b"k1", b"v1"), Rec(None, b"v2", ts_delta=5, headers=(("trace", b"\x01"),))]
VECTOR_HEADER = "9295cf0000000000000000d30000019352255a80ce00000002ce85de3b1500"
V1_VECTOR_HEADER = "9296cf0000000000000000d2ffffffffd30000019352255a80ce00000002ce85de3b1500"


def test_own_batch_builder_matches_the_spec_test_vector() -> None:
    """Guards the suite itself: the hand-built header equals §5.1's vector."""
    assert batch(VECTOR_RECORDS, TS)[:31].hex() == VECTOR_HEADER


def test_own_v1_batch_builder_matches_the_spec_v1_test_vector() -> None:
    """§5.1's v1 vector, and its rule that a v0 batch becomes v1 by inserting the epoch
    after the base offset, the CRC unchanged."""
    v0, v1 = batch(VECTOR_RECORDS, TS), batch_v1(VECTOR_RECORDS, TS)
    assert v1[:36].hex() == V1_VECTOR_HEADER
    assert v1 == b"\x92\x96" + v0[2:11] + b"\xd2\xff\xff\xff\xff" + v0[11:]
    header, records = msgpack.unpackb(v1, raw=False)
    assert header == [0, -1, TS, 2, 0x85DE3B15, 0]
    assert records == msgpack.unpackb(v0, raw=False)[1]


async def test_v1_stored_with_offset_and_epoch_stamped_next_to_v0_as_sent(conn: WireConn
                                                                          ) -> None:
    """A single broker leads every partition in epoch 0 (§4): it stamps that into a v1
    batch; a v0 batch is stored as sent; one fetch may hold both."""
    await create_topic(conn, "layouts")
    first, second = batch_v1(VECTOR_RECORDS, TS), batch(VECTOR_RECORDS, TS + 1000)
    assert (await produce(conn, "layouts", 0, first))["base_offset"] == 0
    assert (await produce(conn, "layouts", 0, second))["base_offset"] == 2
    part = await fetch_one(conn, "layouts", 0, 0)
    assert part["records"] == with_offset_and_epoch(first, 0, 0) + with_offset(second, 2)
    records = [r for b in split_batches(part["records"]) for r in decode_batch(b)]
    assert [(r.offset, r.timestamp, r.value) for r in records] == [
        (0, TS, b"v1"), (1, TS + 5, b"v2"), (2, TS + 1000, b"v1"), (3, TS + 1005, b"v2")]


async def test_stored_byte_identical_with_base_offset_patched(conn: WireConn) -> None:
    await create_topic(conn, "identity")
    first = batch(VECTOR_RECORDS, TS)
    # Records in deliberately non-canonical msgpack (array16, int64 for small ints,
    # str8 for a short header name): the broker must neither decode nor re-encode them.
    odd_region = (b"\xdc\x00\x02"
                  + b"\x95\xd3" + struct.pack(">q", 0) + b"\xd2" + struct.pack(">i", 0)
                  + b"\xc4\x01k\xc5\x00\x02v1\x90"
                  + b"\x95\x01\xcd\x00\x07\xc0\xc6\x00\x00\x00\x01w"
                  + b"\x91\x92\xd9\x01h\xc0")
    second = assemble(odd_region, count=2, base_ts=TS + 1000)
    third = batch([Rec(b"solo", None)], TS + 2000)
    offsets = [(await produce(conn, "identity", 0, b))["base_offset"]
               for b in (first, second, third)]
    assert offsets == [0, 2, 4]
    part = await fetch_one(conn, "identity", 0, 0)
    assert part["high_watermark"] == 5
    expected = with_offset(first, 0) + with_offset(second, 2) + with_offset(third, 4)
    assert part["records"] == expected
    assert [base_offset_of(b) for b in split_batches(part["records"])] == [0, 2, 4]
    records = [r for b in split_batches(part["records"]) for r in decode_batch(b)]
    assert [(r.offset, r.timestamp, r.key, r.value) for r in records] == [
        (0, TS, b"k1", b"v1"), (1, TS + 5, None, b"v2"),
        (2, TS + 1000, b"k", b"v1"), (3, TS + 1007, None, b"w"),
        (4, TS + 2000, b"solo", None)]
    assert records[1].headers == [["trace", b"\x01"]]


async def test_producer_base_offset_is_overwritten(conn: WireConn) -> None:
    await create_topic(conn, "overwrite")
    await produce(conn, "overwrite", 0, values_batch(b"a"))
    sent = assemble(records_region([Rec(None, b"b")]), count=1, base_ts=TS, base_offset=999)
    assert (await produce(conn, "overwrite", 0, sent))["base_offset"] == 1
    part = await fetch_one(conn, "overwrite", 0, 1)
    assert part["records"] == with_offset(sent, 1)


def _good() -> bytes:
    return batch([Rec(b"k", b"v"), Rec(None, b"w", ts_delta=1)], TS)


def _set(index: int, value: int, recrc: bool) -> Callable[[], bytes]:
    def make() -> bytes:
        b = bytearray(_good())
        b[index] = value
        return fix_crc(b) if recrc else bytes(b)
    return make


def _region(region: bytes, count: int, attributes: int = 0) -> Callable[[], bytes]:
    return lambda: assemble(region, count=count, base_ts=TS, attributes=attributes)


TWO = records_region([Rec(b"k", b"v"), Rec(None, b"w", ts_delta=1)])

CORRUPT: dict[str, Callable[[], bytes]] = {
    "shorter than 32 bytes": lambda: _good()[:31],
    "empty": lambda: b"",
    "byte 0 not 0x92": _set(0, 0x93, recrc=False),
    "byte 1 not 0x95": _set(1, 0x94, recrc=False),
    "byte 2 not 0xcf": _set(2, 0xd3, recrc=False),
    "byte 11 not 0xd3": _set(11, 0xcf, recrc=True),
    "byte 20 not 0xce": _set(20, 0xd2, recrc=True),
    "byte 25 not 0xce": _set(25, 0xd2, recrc=False),
    "attributes 1": _region(TWO, 2, attributes=1),
    "attributes 4 (compression bits)": _region(TWO, 2, attributes=4),
    "record_count 0, no records": _region(pack([]), 0),
    "record_count 0, records present": _region(TWO, 0),
    "bad crc": lambda: _good()[:26] + bytes([_good()[26] ^ 0x01]) + _good()[27:],
    "crc of a different batch": lambda: assemble(TWO, count=2, base_ts=TS,
                                                 crc=int.from_bytes(_good()[26:30]) ^ 1),
    "trailing byte after records": _region(TWO + b"\xc0", 2),
    "second array after records": _region(TWO + pack([]), 2),
    "record_count 3 for 2 records": _region(TWO, 3),
    "record_count 1 for 2 records": _region(TWO, 1),
    "records truncated": _region(TWO[:-1], 2),
    "records not an array": _region(pack({"0": [0, 0, None, b"v", []]}), 1),
    "records missing": _region(b"", 1),
    "two batches in one entry": lambda: _good() + _good(),
}


@pytest.mark.parametrize("make", CORRUPT.values(), ids=CORRUPT.keys())
async def test_each_batch_check_gives_corrupt_message(conn: WireConn, make: Callable[[], bytes]
                                                      ) -> None:
    await create_topic(conn, "corrupt", 2)
    body = await conn.call(Api.PRODUCE, {"topic_data": [{"name": "corrupt", "partition_data": [
        {"index": 0, "records": make()}, {"index": 1, "records": _good()}]}]})
    assert body["error_code"] == Err.NONE
    entries = {e["index"]: e for e in body["responses"][0]["partition_responses"]}
    assert entries[0]["error_code"] == Err.CORRUPT_MESSAGE, entries[0]
    assert entries[1]["error_code"] == Err.NONE and entries[1]["base_offset"] == 0
    part = await fetch_one(conn, "corrupt", 0, 0)
    assert (part["high_watermark"], part["records"]) == (0, b"")


def test_corrupt_cases_differ_from_a_good_batch_only_where_named() -> None:
    """Guards the suite: cases that re-sign the CRC really do carry a valid CRC."""
    for name in ("byte 11 not 0xd3", "attributes 1", "record_count 3 for 2 records",
                 "trailing byte after records"):
        b = CORRUPT[name]()
        assert fix_crc(b) == b, name
    header, records = msgpack.unpackb(_good(), raw=False)
    assert header[2] == len(records) == 2


def _sized_batch(size: int) -> bytes:
    """A valid one-record batch of exactly ``size`` bytes."""
    pad = size - len(batch([Rec(None, b"")], TS))
    for _ in range(4):
        b = batch([Rec(None, b"x" * pad)], TS)
        pad -= len(b) - size
    b = batch([Rec(None, b"x" * pad)], TS)
    assert len(b) == size
    return b


async def test_message_too_large_over_frame_limit_minus_64k(start_broker: StartBroker,
                                                            connect: Connect) -> None:
    frame_limit = 131_072
    broker = await start_broker(max_frame_bytes=frame_limit)
    conn = await connect(target=broker)
    await create_topic(conn, "big")
    limit = frame_limit - 65_536
    body = await conn.call(Api.PRODUCE, {"topic_data": [{"name": "big", "partition_data": [
        {"index": 0, "records": _sized_batch(limit + 1)}]}]})
    entry = body["responses"][0]["partition_responses"][0]
    assert entry["error_code"] == Err.MESSAGE_TOO_LARGE
    at_limit = _sized_batch(limit)
    assert (await produce(conn, "big", 0, at_limit))["error_code"] == Err.NONE
    part = await fetch_one(conn, "big", 0, 0)
    assert part["records"] == with_offset(at_limit, 0)


async def test_produce_to_unknown_topic_or_partition(conn: WireConn) -> None:
    await create_topic(conn, "known", 1)
    body = await conn.call(Api.PRODUCE, {"topic_data": [
        {"name": "known", "partition_data": [{"index": 1, "records": _good()},
                                             {"index": 0, "records": _good()}]},
        {"name": "unknown", "partition_data": [{"index": 0, "records": _good()}]}]})
    by_name = {t["name"]: {p["index"]: p["error_code"] for p in t["partition_responses"]}
               for t in body["responses"]}
    assert by_name == {"known": {1: Err.UNKNOWN_TOPIC_OR_PARTITION, 0: Err.NONE},
                       "unknown": {0: Err.UNKNOWN_TOPIC_OR_PARTITION}}


async def test_fsync_always_still_answers(start_broker: StartBroker, connect: Connect) -> None:
    """§4: answers wait for the write under the fsync policy, then data is fetchable."""
    broker = await start_broker(fsync="always")
    conn = await connect(target=broker)
    await create_topic(conn, "durable")
    data = _good()
    assert (await produce(conn, "durable", 0, data))["base_offset"] == 0
    assert (await fetch_one(conn, "durable", 0, 0))["records"] == with_offset(data, 0)
    body = await conn.call(Api.OFFSET_COMMIT, {"group_id": "durable-g", "topics": [
        {"name": "durable", "partitions": [{"partition_index": 0, "committed_offset": 1}]}]})
    assert body["topics"][0]["partitions"][0]["error_code"] == Err.NONE
