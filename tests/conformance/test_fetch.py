"""§5.3 Fetch semantics and ListOffsets: whole stored batches, limits, ranges, long polls."""

from __future__ import annotations

from typing import Any

from .conftest import Connect, StartBroker
from .wire import (
    Api,
    Err,
    Rec,
    WireConn,
    answer,
    batch,
    create_topic,
    fetch_one,
    produce,
    split_batches,
    values_batch,
    with_offset,
)

TS = 1_700_000_000_000


async def _fill(conn: WireConn, topic: str, partition: int, batches: list[bytes]
                ) -> list[bytes]:
    """Produce ``batches``; returns them as the broker must store them."""
    stored = []
    for b in batches:
        entry = await produce(conn, topic, partition, b)
        assert entry["error_code"] == Err.NONE
        stored.append(with_offset(b, entry["base_offset"]))
    return stored


def _kb_batches(n: int, tag: bytes) -> list[bytes]:
    """``n`` one-record batches of roughly 1000 bytes each."""
    return [values_batch(tag + bytes([i]) * 960, base_ts=TS + i) for i in range(n)]


async def test_data_starts_at_the_batch_containing_fetch_offset(conn: WireConn) -> None:
    await create_topic(conn, "starts")
    stored = await _fill(conn, "starts", 0, [values_batch(b"0", b"1", b"2"),
                                             values_batch(b"3", b"4")])
    cases = {0: stored[0] + stored[1], 1: stored[0] + stored[1], 2: stored[0] + stored[1],
             3: stored[1], 4: stored[1], 5: b""}
    for offset, expected in cases.items():
        part = await fetch_one(conn, "starts", 0, offset)
        assert part["error_code"] == Err.NONE, (offset, part)
        assert part["records"] == expected, offset
        assert (part["high_watermark"], part["log_start_offset"]) == (5, 0)


async def test_offset_out_of_range_outside_log_start_to_high_watermark(conn: WireConn
                                                                       ) -> None:
    await create_topic(conn, "range")
    await _fill(conn, "range", 0, [values_batch(b"a", b"b")])
    for offset in (3, 100, -1):
        part = await answer(conn.send(Api.FETCH, {
            "max_wait_ms": 60_000, "min_bytes": 1, "topics": [{"topic": "range", "partitions": [
                {"partition": 0, "fetch_offset": offset}]}]}))
        entry = part["responses"][0]["partitions"][0]
        assert entry["error_code"] == Err.OFFSET_OUT_OF_RANGE, (offset, entry)
    assert (await fetch_one(conn, "range", 0, 2))["error_code"] == Err.NONE


async def test_partition_max_bytes_whole_batches_and_kip74(conn: WireConn) -> None:
    await create_topic(conn, "pmax", 2)
    p0 = await _fill(conn, "pmax", 0, _kb_batches(3, b"a"))
    p1 = await _fill(conn, "pmax", 1, _kb_batches(3, b"b"))
    size = len(p0[0])

    part = await fetch_one(conn, "pmax", 0, 0, partition_max_bytes=2 * size + size // 2)
    assert part["records"] == p0[0] + p0[1]

    part = await fetch_one(conn, "pmax", 0, 0, partition_max_bytes=2 * size)
    assert part["records"] == p0[0] + p0[1]

    # The first batch of the first non-empty partition goes regardless of the limit ...
    body = await conn.call(Api.FETCH, {"max_wait_ms": 0, "topics": [{"topic": "pmax",
                                                                      "partitions": [
        {"partition": 0, "fetch_offset": 3, "partition_max_bytes": 10},
        {"partition": 1, "fetch_offset": 0, "partition_max_bytes": 10},
        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 10}]}]})
    parts = body["responses"][0]["partitions"]
    assert [p["partition_index"] for p in parts] == [0, 1, 0]
    # ... partition 0 at its end is empty, so partition 1 is the first non-empty one;
    # the later partition gets nothing: no batch fits in 10 bytes.
    assert [p["records"] for p in parts] == [b"", p1[0], b""]


async def test_max_bytes_spans_partitions_in_request_order(conn: WireConn) -> None:
    await create_topic(conn, "fmax", 2)
    p0 = await _fill(conn, "fmax", 0, _kb_batches(3, b"a"))
    p1 = await _fill(conn, "fmax", 1, _kb_batches(3, b"b"))
    size = len(p0[0])

    def req(max_bytes: int, order: tuple[int, int]) -> dict[str, Any]:
        return {"max_wait_ms": 0, "max_bytes": max_bytes, "topics": [{"topic": "fmax",
                                                                       "partitions": [
            {"partition": p, "fetch_offset": 0} for p in order]}]}

    body = await conn.call(Api.FETCH, req(4 * size + size // 2, (1, 0)))
    parts = body["responses"][0]["partitions"]
    assert [p["partition_index"] for p in parts] == [1, 0]
    assert [p["records"] for p in parts] == [p1[0] + p1[1] + p1[2], p0[0]]

    body = await conn.call(Api.FETCH, req(10, (0, 1)))
    parts = body["responses"][0]["partitions"]
    assert [p["records"] for p in parts] == [p0[0], b""]
    for p in parts:
        assert p["error_code"] == Err.NONE and p["high_watermark"] == 3


async def test_max_bytes_is_capped_below_the_frame_limit(start_broker: StartBroker,
                                                         connect: Connect) -> None:
    broker = await start_broker(max_frame_bytes=131_072)
    conn = await connect(target=broker)
    await create_topic(conn, "cap")
    big = [values_batch(bytes([i]) * 40_000, base_ts=TS) for i in range(3)]
    stored = await _fill(conn, "cap", 0, big)
    body = await conn.call(Api.FETCH, {"max_wait_ms": 0, "max_bytes": 52_428_800, "topics": [
        {"topic": "cap", "partitions": [{"partition": 0, "fetch_offset": 0,
                                         "partition_max_bytes": 10_000_000}]}]})
    # 131072 - 65536 leaves room for one 40 kB batch, not two.
    assert body["responses"][0]["partitions"][0]["records"] == stored[0]


async def test_long_poll_waits_for_min_bytes_until_max_wait(conn: WireConn) -> None:
    await create_topic(conn, "minbytes")
    stored = await _fill(conn, "minbytes", 0, [values_batch(b"small")])
    part = await fetch_one(conn, "minbytes", 0, 0, min_bytes=10_000_000, max_wait_ms=100)
    assert part["records"] == stored[0]
    part = await fetch_one(conn, "minbytes", 0, 1, min_bytes=1, max_wait_ms=50)
    assert (part["error_code"], part["records"]) == (Err.NONE, b"")


async def test_long_poll_is_woken_when_enough_bytes_arrive(conn: WireConn,
                                                           connect: Connect) -> None:
    await create_topic(conn, "wake")
    producer = await connect("producer")
    parked = conn.send(Api.FETCH, {"max_wait_ms": 60_000, "min_bytes": 1500, "topics": [
        {"topic": "wake", "partitions": [{"partition": 0, "fetch_offset": 0}]}]})
    first = await _fill(producer, "wake", 0, [values_batch(b"x" * 900)])
    # A fetch answered now (below min_bytes, long before max_wait_ms) would hold only
    # the first batch and fail the comparison below.
    second = await _fill(producer, "wake", 0, [values_batch(b"y" * 900)])
    body = await answer(parked)
    assert body["responses"][0]["partitions"][0]["records"] == first[0] + second[0]


async def test_partition_error_answers_without_waiting(conn: WireConn) -> None:
    await create_topic(conn, "haswait")
    body = await answer(conn.send(Api.FETCH, {"max_wait_ms": 60_000, "min_bytes": 1,
                                              "topics": [
        {"topic": "haswait", "partitions": [{"partition": 0, "fetch_offset": 0}]},
        {"topic": "missing", "partitions": [{"partition": 0, "fetch_offset": 0}]}]}))
    codes = [(t["topic"], t["partitions"][0]["error_code"]) for t in body["responses"]]
    assert codes == [("haswait", Err.NONE), ("missing", Err.UNKNOWN_TOPIC_OR_PARTITION)]


async def test_fetch_unknown_partition(conn: WireConn) -> None:
    await create_topic(conn, "onepart")
    part = await fetch_one(conn, "onepart", 3, 0)
    assert part["error_code"] == Err.UNKNOWN_TOPIC_OR_PARTITION


async def test_list_offsets_latest_earliest_and_by_timestamp(conn: WireConn) -> None:
    await create_topic(conn, "times")
    await _fill(conn, "times", 0, [
        batch([Rec(None, b"a"), Rec(None, b"b", ts_delta=10), Rec(None, b"c", ts_delta=20)],
              1000),
        batch([Rec(None, b"d"), Rec(None, b"e", ts_delta=5)], 2000)])

    async def lookup(ts: int) -> tuple[int, int, int]:
        body = await conn.call(Api.LIST_OFFSETS, {"topics": [{"name": "times", "partitions": [
            {"partition_index": 0, "timestamp": ts}]}]})
        p = body["topics"][0]["partitions"][0]
        return p["error_code"], p["offset"], p["timestamp"]

    assert await lookup(-1) == (Err.NONE, 5, -1)
    assert await lookup(-2) == (Err.NONE, 0, -1)
    assert await lookup(0) == (Err.NONE, 0, 1000)
    assert await lookup(1005) == (Err.NONE, 1, 1010)
    assert await lookup(1010) == (Err.NONE, 1, 1010)
    assert await lookup(1021) == (Err.NONE, 3, 2000)
    assert await lookup(2001) == (Err.NONE, 4, 2005)
    assert await lookup(2006) == (Err.NONE, -1, -1)


async def test_list_offsets_unknown_topic(conn: WireConn) -> None:
    body = await conn.call(Api.LIST_OFFSETS, {"topics": [{"name": "ghost", "partitions": [
        {"partition_index": 0, "timestamp": -1}]}]})
    assert body["topics"][0]["partitions"][0]["error_code"] == Err.UNKNOWN_TOPIC_OR_PARTITION


async def test_fetched_bin_splits_with_a_streaming_unpacker(conn: WireConn) -> None:
    await create_topic(conn, "split")
    stored = await _fill(conn, "split", 0, [values_batch(b"1"), values_batch(b"2", b"3")])
    part = await fetch_one(conn, "split", 0, 0)
    assert split_batches(part["records"]) == stored


async def test_reading_across_segments_returns_every_batch_once(start_broker: StartBroker,
                                                                connect: Connect) -> None:
    broker = await start_broker(segment_bytes=1024)
    conn = await connect(target=broker)
    await create_topic(conn, "segments")
    stored = await _fill(conn, "segments", 0,
                         [values_batch(bytes([i]) * 300, base_ts=TS) for i in range(10)])
    read = b""
    offset = 0
    for _ in range(20):  # a response may stop at a segment end; keep reading
        part = await fetch_one(conn, "segments", 0, offset)
        assert part["error_code"] == Err.NONE and part["high_watermark"] == 10
        if not part["records"]:
            break
        batches = split_batches(part["records"])
        assert all(b in stored for b in batches)
        read += part["records"]
        offset = stored.index(batches[-1]) + 1
    assert read == b"".join(stored)


async def test_log_start_moves_with_retention(start_broker: StartBroker,
                                              connect: Connect) -> None:
    broker = await start_broker(segment_bytes=1024, log_retention_bytes=1024,
                                log_retention_check_interval_ms=20)
    conn = await connect(target=broker)
    await create_topic(conn, "retained")
    stored = await _fill(conn, "retained", 0,
                         [values_batch(bytes([i]) * 300, base_ts=TS) for i in range(12)])

    async def earliest() -> int:
        body = await conn.call(Api.LIST_OFFSETS, {"topics": [{"name": "retained",
                                                              "partitions": [
            {"partition_index": 0, "timestamp": -2}]}]})
        return int(body["topics"][0]["partitions"][0]["offset"])

    loop_deadline = 200
    start = await earliest()
    while start == 0 and loop_deadline:  # round trips until retention has run
        await fetch_one(conn, "retained", 0, 12, min_bytes=1, max_wait_ms=20)
        loop_deadline -= 1
        start = await earliest()
    assert start > 0, "retention never advanced the log start"
    below = await fetch_one(conn, "retained", 0, start - 1)
    assert below["error_code"] == Err.OFFSET_OUT_OF_RANGE
    part = await fetch_one(conn, "retained", 0, start)
    assert part["error_code"] == Err.NONE
    assert part["log_start_offset"] == start
    assert split_batches(part["records"])[0] == stored[start]
