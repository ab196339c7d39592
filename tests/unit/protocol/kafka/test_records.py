"""Kafka record batches against an oracle nobody here wrote: kafka-python 3.0.12's
DefaultRecordBatchBuilder / DefaultRecordBatch (with lz4, python-snappy and zstandard for
its codecs). Batches it builds, with every codec, read back here field for field; batches
built here read back there, CRC included."""

from __future__ import annotations

import struct
from typing import Any

import google_crc32c
import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from groupwire.protocol.batches import BatchRecord, CorruptBatchError
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.kafka import records as kr

CODECS = [kr.COMPRESSION_NONE, kr.COMPRESSION_GZIP, kr.COMPRESSION_SNAPPY,
          kr.COMPRESSION_LZ4, kr.COMPRESSION_ZSTD]
T0 = 1_732_250_000_000

Row = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]


def rows(n: int = 150) -> list[Row]:
    """Keys, values and headers of every shape: null and empty, short and long (two-
    and three-byte varint lengths), timestamps before and after the first."""
    out: list[Row] = []
    for i in range(n):
        key = None if i % 3 == 0 else b"" if i % 7 == 0 else b"key-%d" % i
        value = None if i % 11 == 5 else (b"value %d " % i) * (1 + i % 40)
        headers: list[tuple[str, bytes | None]] = (
            [] if i % 4 else [("trace", b"\x01\x02"), ("empty", b""), ("none", None),
                              ("ünï", b"x" * (i % 200))])
        out.append((key, value, headers, T0 + (i * 37) % 5000 - 100))
    return out


def oracle_batch(data: list[Row], codec: int, *, producer: tuple[int, int, int] = (-1, -1, -1),
                 transactional: bool = False) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=transactional,
        producer_id=producer[0], producer_epoch=producer[1], base_sequence=producer[2],
        batch_size=1 << 30)
    for i, (key, value, headers, ts) in enumerate(data):
        assert builder.append(i, ts, key, value, headers) is not None
    return bytes(builder.build())


def oracle_read(data: bytes) -> tuple[DefaultRecordBatch, list[tuple[Any, ...]]]:
    batch = DefaultRecordBatch(bytearray(data))
    assert batch.validate_crc()
    return batch, [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch]


def ours_read(data: bytes) -> list[tuple[Any, ...]]:
    return [(r.offset, r.timestamp_ms, r.key, r.value, r.headers)
            for r in kr.decode_records(data)]


@pytest.mark.parametrize("codec", CODECS)
def test_oracle_batches_read_back_field_for_field(codec: int) -> None:
    data = rows()
    batch = oracle_batch(data, codec, producer=(4242, 3, 17))
    header = kr.validate_batch(batch)
    assert header.compression == codec, "kafka-python sent it uncompressed"
    theirs = DefaultRecordBatch(bytearray(batch))
    assert (header.base_offset, header.leader_epoch, header.crc, header.record_count,
            header.last_offset_delta, header.base_timestamp_ms, header.max_timestamp_ms,
            header.producer_id, header.producer_epoch, header.base_sequence) == (
        theirs.base_offset, theirs.leader_epoch, theirs.crc, theirs.records_count,
        theirs.last_offset_delta, theirs.first_timestamp, theirs.max_timestamp,
        theirs.producer_id, theirs.producer_epoch, theirs.base_sequence)
    assert header.size == len(batch) and header.next_offset == len(data)
    assert not header.is_transactional and not header.is_control
    assert ours_read(batch) == oracle_read(batch)[1]
    assert [(r[2], r[3], r[4], r[1]) for r in ours_read(batch)] == data


@pytest.mark.parametrize("codec", CODECS)
def test_our_batches_read_back_there_with_the_same_crc(codec: int) -> None:
    data = rows()
    recs = [BatchRecord(value=v, key=k, headers=h, timestamp_ms=ts) for k, v, h, ts in data]
    batch = kr.encode_batch(recs, 1000, compression=codec, leader_epoch=5, producer_id=77,
                            producer_epoch=2, base_sequence=40, is_transactional=True)
    theirs, read = oracle_read(batch)
    assert (theirs.base_offset, theirs.leader_epoch, theirs.compression_type,
            theirs.producer_id, theirs.producer_epoch, theirs.base_sequence,
            theirs.is_transactional, theirs.records_count) == (
        1000, 5, codec, 77, 2, 40, True, len(data))
    assert theirs.crc == kr.read_header(batch).crc == kr.batch_crc32c(batch, 0, len(batch))
    assert [(k, v, h, ts) for _, ts, k, v, h in read] == data
    assert [o for o, *_ in read] == list(range(1000, 1000 + len(data)))
    assert kr.validate_batch(batch).record_count == len(data)


def test_uncompressed_batches_match_the_oracle_byte_for_byte() -> None:
    data = rows(40)
    recs = [BatchRecord(value=v, key=k, headers=h, timestamp_ms=ts) for k, v, h, ts in data]
    ours = kr.encode_batch(recs)
    theirs = bytearray(oracle_batch(data, kr.COMPRESSION_NONE))
    theirs[12:16] = struct.pack(">i", -1)   # kafka-python leaves the epoch at 0, we at -1
    assert ours == bytes(theirs)


def test_snappy_is_written_raw_and_read_raw_or_xerial() -> None:
    data = rows(60)
    xerial = oracle_batch(data, kr.COMPRESSION_SNAPPY)
    assert xerial[kr.HEADER_SIZE:kr.HEADER_SIZE + 8] == b"\x82SNAPPY\x00"
    recs = [BatchRecord(value=v, key=k, headers=h, timestamp_ms=ts) for k, v, h, ts in data]
    raw = kr.encode_batch(recs, compression=kr.COMPRESSION_SNAPPY)
    assert raw[kr.HEADER_SIZE:kr.HEADER_SIZE + 8] != b"\x82SNAPPY\x00"
    assert ours_read(raw) == ours_read(xerial) == oracle_read(raw)[1]


def test_lz4_frames_use_independent_blocks_as_java_requires() -> None:
    recs = [BatchRecord(value=b"v" * 100, timestamp_ms=T0)] * 50
    batch = kr.encode_batch(recs, compression=kr.COMPRESSION_LZ4)
    frame = batch[kr.HEADER_SIZE:]
    assert frame[:4] == b"\x04\x22\x4d\x18"
    assert frame[4] & 0x20, "FLG's block independence bit is not set"


def test_header_properties() -> None:
    recs = [BatchRecord(value=b"v", timestamp_ms=T0 + i) for i in range(3)]
    batch = kr.encode_batch(recs, 10, timestamp_type=1, max_timestamp_ms=T0 + 99)
    header = kr.read_header(batch)
    assert header.log_append_time and header.max_timestamp_ms == T0 + 99
    assert (header.last_offset, header.next_offset) == (12, 13)
    assert not header.has_delete_horizon
    assert kr.read_header(b"\x00" * 5 + batch, 5) == header


def test_log_append_time_records_carry_the_max_timestamp() -> None:
    recs = [BatchRecord(value=b"v%d" % i, timestamp_ms=T0 + i) for i in range(3)]
    batch = kr.encode_batch(recs, timestamp_type=1, max_timestamp_ms=T0 + 500)
    assert [r.timestamp_ms for r in kr.decode_records(batch)] == [T0 + 500] * 3
    created = kr.encode_batch(recs)
    assert [r.timestamp_ms for r in kr.decode_records(created)] == [T0, T0 + 1, T0 + 2]


def test_stamping_sets_offset_and_epoch_and_keeps_the_crc() -> None:
    batch = oracle_batch(rows(20), kr.COMPRESSION_LZ4)
    stamped = kr.stamp_batch(batch, 1 << 40, 9)
    header = kr.validate_batch(stamped)
    assert (header.base_offset, header.leader_epoch) == (1 << 40, 9)
    assert stamped[16:] == batch[16:]
    theirs, read = oracle_read(stamped)
    assert theirs.base_offset == 1 << 40 and theirs.leader_epoch == 9
    assert read[0][0] == 1 << 40
    assert kr.stamp_batch(memoryview(stamped)[:30], 5, 1) == stamped[:30].replace(
        stamped[:16], struct.pack(">qii", 5, len(stamped) - 12, 1), 1)


def test_iter_batch_spans_and_decode_records_over_a_concatenation() -> None:
    parts = [kr.stamp_batch(oracle_batch(rows(5 + i), codec), 100 * i, 0)
             for i, codec in enumerate(CODECS)]
    data = b"".join(parts)
    spans = list(kr.iter_batch_spans(data))
    assert [(h.base_offset, h.record_count) for h, _, _ in spans] == [
        (100 * i, 5 + i) for i in range(len(CODECS))]
    ends = [sum(map(len, parts[:i + 1])) for i in range(len(parts))]
    assert [end for _, _, end in spans] == ends
    decoded = kr.decode_records(data, min_offset=203)
    assert [r.offset for r in decoded] == [*range(203, 207), *range(300, 308), *range(400, 409)]


def test_control_batches_hold_no_records_and_clients_may_not_write_them() -> None:
    control = kr.encode_batch([BatchRecord(value=b"\x00\x00\x00\x00\x00\x00",
                                           key=b"\x00\x00\x00\x01", timestamp_ms=T0)],
                              7, is_control=True, is_transactional=True, producer_id=1,
                              producer_epoch=0)
    data = control + kr.encode_batch([BatchRecord(value=b"x", timestamp_ms=T0)], 8)
    assert [r.offset for r in kr.decode_records(data)] == [8]
    header = next(kr.iter_batch_spans(data))[0]
    assert header.is_control and header.is_transactional
    with pytest.raises(CorruptBatchError) as info:
        kr.validate_batch(control)
    assert info.value.code == ErrorCode.INVALID_RECORD


def test_legacy_message_sets_are_unsupported_for_message_format() -> None:
    for magic in (0, 1):
        legacy = struct.pack(">qiIbb", 0, 14 + 8 * magic, 0, magic, 0) + b"\x00" * 30
        with pytest.raises(kr.UnsupportedMessageFormatError) as info:
            kr.validate_batch(legacy)
        assert info.value.code == ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT == 43
    assert issubclass(kr.UnsupportedMessageFormatError, CorruptBatchError)


def test_checking_takes_several_steps_for_a_big_batch() -> None:
    recs = [BatchRecord(value=b"%d" % i, timestamp_ms=T0) for i in range(3 * kr.WALK_RECORDS)]
    batch = kr.encode_batch(recs, compression=kr.COMPRESSION_ZSTD)
    steps = kr.check_batch_steps(batch)
    yields = 0
    while True:
        try:
            next(steps)
        except StopIteration as done:
            assert done.value.record_count == len(recs)
            break
        yields += 1
    assert yields >= 2
    assert kr.validate_batch(batch, check_fields=False).record_count == len(recs)


def test_crc32c_is_the_c_implementation() -> None:
    # the pure-Python fallback google-crc32c takes without a wheel is ~100x slower
    assert google_crc32c.implementation == "c"
