"""Batch layout v1 (docs/protocol.md §5.1): the partition leader epoch after the base
offset, outside the CRC; v0 still read everywhere, and turned into v1 without a new CRC."""

from __future__ import annotations

import struct
import zlib

import msgpack
import pytest

from groupwire.protocol.batches import (
    BATCH_V0,
    BATCH_V1,
    HEADER_SIZE_V0,
    HEADER_SIZE_V1,
    NO_PARTITION_LEADER_EPOCH,
    BatchHeader,
    BatchRecord,
    CorruptBatchError,
    DecodedRecord,
    batch_crc,
    check_batch_steps,
    decode_records,
    decode_records_partial,
    encode_batch,
    encode_kv_batch_steps,
    header_size,
    iter_batch_spans,
    iter_batches,
    read_header,
    stamp_batch,
    upconvert_v0,
    upconverted_header,
    validate_batch,
    with_base_offset,
)
from groupwire.protocol.errors import LocalProtocolError
from groupwire.protocol.steps import run_steps

TS = 1732250000000
V0_HEADER = "9295cf0000000000000000d30000019352255a80ce00000002ce85de3b1500"
V1_HEADER = "9296cf0000000000000000d2ffffffffd30000019352255a80ce00000002ce85de3b1500"
V1_VECTOR = (V1_HEADER + "92950000c4026b31c402763190950105c0c40276329192a57472616365c40101")
RECORDS = [
    BatchRecord(key=b"k1", value=b"v1", timestamp_ms=TS),
    BatchRecord(value=b"v2", headers=[("trace", b"\x01")], timestamp_ms=TS + 5),
]


def test_v1_is_the_default_and_matches_the_spec_vector() -> None:
    data = encode_batch(RECORDS)
    assert data.hex() == V1_VECTOR
    assert data[:HEADER_SIZE_V1].hex() == V1_HEADER
    assert encode_batch(RECORDS, version=BATCH_V0)[:HEADER_SIZE_V0].hex() == V0_HEADER


def test_v1_is_one_msgpack_value_with_a_six_field_header() -> None:
    header, records = msgpack.unpackb(encode_batch(RECORDS, leader_epoch=7), raw=False)
    assert header == [0, 7, TS, 2, 0x85DE3B15, 0]
    assert records == [[0, 0, b"k1", b"v1", []], [1, 5, None, b"v2", [["trace", b"\x01"]]]]


def test_v1_reads_validates_and_decodes() -> None:
    data = encode_batch(RECORDS, base_offset=4, leader_epoch=3)
    header = validate_batch(data)
    assert header == BatchHeader(base_offset=4, base_timestamp_ms=TS, record_count=2,
                                 crc=0x85DE3B15, attributes=0, leader_epoch=3,
                                 version=BATCH_V1)
    assert read_header(data) == header == run_steps(check_batch_steps(data))
    assert header.header_size == header_size(BATCH_V1) == HEADER_SIZE_V1
    assert [(r.offset, r.key, r.value) for r in decode_records(data)] == [
        (4, b"k1", b"v1"), (5, None, b"v2")]


def test_v0_headers_say_no_epoch() -> None:
    header = validate_batch(encode_batch(RECORDS, version=BATCH_V0))
    assert (header.version, header.leader_epoch, header.header_size) == (
        BATCH_V0, NO_PARTITION_LEADER_EPOCH, HEADER_SIZE_V0)


def test_upconvert_keeps_the_crc_and_gives_the_v1_encoding() -> None:
    v0 = encode_batch(RECORDS, base_offset=9, version=BATCH_V0)
    v1 = upconvert_v0(v0)
    assert v1 == encode_batch(RECORDS, base_offset=9)
    assert len(v1) == len(v0) + 5
    header = validate_batch(v1)
    assert header == upconverted_header(validate_batch(v0))
    assert header.crc == validate_batch(v0).crc == batch_crc(v1, 0, len(v1))
    with pytest.raises(LocalProtocolError):
        upconvert_v0(v1)


def test_upconvert_of_a_first_piece_is_the_first_piece_of_the_upconverted_batch() -> None:
    v0 = encode_batch([BatchRecord(value=b"x" * 500, timestamp_ms=1)], version=BATCH_V0)
    assert upconvert_v0(v0[:100]) == upconvert_v0(v0)[:105]


def test_stamp_sets_offset_and_epoch_outside_the_crc() -> None:
    data = encode_batch(RECORDS)
    stamped = stamp_batch(data, 1234, 42)
    header = validate_batch(stamped)
    assert (header.base_offset, header.leader_epoch, header.crc) == (1234, 42, 0x85DE3B15)
    assert stamped[16:] == data[16:] and len(stamped) == len(data)
    assert stamp_batch(data[:50], 1234, 42) == stamped[:50]   # a stepped append's piece
    assert with_base_offset(data, 77)[3:11] == struct.pack(">Q", 77)
    assert validate_batch(with_base_offset(data, 77)).leader_epoch == -1
    with pytest.raises(LocalProtocolError):
        stamp_batch(encode_batch(RECORDS, version=BATCH_V0), 0, 1)
    with pytest.raises(LocalProtocolError):
        stamp_batch(data, 0, 1 << 31)


@pytest.mark.parametrize("pos", [0, 1, 2, 11, 16, 25, 30])
def test_v1_marker_bytes_are_checked(pos: int) -> None:
    data = bytearray(encode_batch(RECORDS))
    data[pos] ^= 0x01 if pos != 1 else 0x03   # 0x96 -> 0x95 would read as v0
    with pytest.raises(CorruptBatchError):
        validate_batch(bytes(data))


def assert_crc_covers(data: bytes, head_end: int, body_start: int) -> None:
    """The CRC covers bytes 16..``head_end``-1 and ``body_start`` on, never the base
    offset (3-10) nor the epoch (12-15): flipping those leaves the batch valid."""
    for pos in range(2, len(data)):   # bytes 0-1 say which layout it is
        flipped = bytearray(data)
        flipped[pos] ^= 0x40
        changed = batch_crc(flipped, 0, len(flipped)) != batch_crc(data, 0, len(data))
        assert changed == (16 <= pos < head_end or pos >= body_start), pos
    for pos in (*range(3, 11), *range(12, 16)):
        flipped = bytearray(data)
        flipped[pos] ^= 0x40
        validate_batch(bytes(flipped))


def test_v1_crc_covers_16_to_29_and_35_on_but_not_offset_or_epoch() -> None:
    assert_crc_covers(encode_batch(RECORDS), 30, 35)


def test_every_v1_truncation_is_caught() -> None:
    data = encode_batch(RECORDS)
    for cut in range(len(data)):
        with pytest.raises(CorruptBatchError):
            validate_batch(data[:cut])
        if cut:
            with pytest.raises(CorruptBatchError):
                list(iter_batch_spans(data + data[:cut]))


def _mixed() -> bytes:
    """Offsets 0-1 in v0, 2-3 in v1 (epoch 5), 4 in v0, 5-6 in v1 (epoch 6)."""
    return b"".join((
        encode_batch(RECORDS, 0, version=BATCH_V0),
        encode_batch(RECORDS, 2, leader_epoch=5),
        encode_batch([BatchRecord(value=b"z", timestamp_ms=TS + 9)], 4, version=BATCH_V0),
        encode_batch(RECORDS, 5, leader_epoch=6),
    ))


def test_mixed_v0_and_v1_chunks_split_and_decode() -> None:
    data = _mixed()
    spans = list(iter_batch_spans(data))
    assert [(h.version, h.base_offset, h.leader_epoch) for h, _, _ in spans] == [
        (0, 0, -1), (1, 2, 5), (0, 4, -1), (1, 5, 6)]
    assert [h.base_offset for h, _ in iter_batches(data)] == [0, 2, 4, 5]
    assert [r.offset for r in decode_records(data)] == list(range(7))
    assert [r.value for r in decode_records(data, min_offset=3)] == [
        b"v2", b"z", b"v1", b"v2"]


def test_mixed_chunk_with_a_bad_v1_row_reports_its_offset() -> None:
    good = encode_batch(RECORDS, 0, version=BATCH_V0)
    head = encode_batch(RECORDS, 2, leader_epoch=1)[:31]   # up to the CRC; count is 2
    body = b"\x00" + msgpack.packb([[0, 0, None, b"a", []], [1, 0, None, "not bin", []]])
    bad = head + struct.pack(">I", zlib.crc32(body, zlib.crc32(head[16:30]))) + body
    assert validate_batch(bad).leader_epoch == 1
    records, error = decode_records_partial(good + bad)
    assert [r.offset for r in records] == [0, 1, 2]
    assert records[-1] == DecodedRecord(2, TS, None, b"a", [])
    assert error is not None and error.offset == 3


def test_kv_steps_make_v1_by_default_and_v0_when_asked() -> None:
    items = [(b"k%d" % i, b"v", TS + i) for i in range(5)]
    rows = [BatchRecord(value=v, key=k, timestamp_ms=ts) for k, v, ts in items]
    assert run_steps(encode_kv_batch_steps(items, 3, rows_per_step=2)) == encode_batch(rows, 3)
    assert run_steps(encode_kv_batch_steps(items, 3, version=BATCH_V0)) == encode_batch(
        rows, 3, version=BATCH_V0)


def test_encode_refuses_unknown_versions_and_epochs_out_of_range() -> None:
    with pytest.raises(LocalProtocolError):
        encode_batch(RECORDS, version=2)
    with pytest.raises(LocalProtocolError):
        encode_batch(RECORDS, leader_epoch=-(1 << 31) - 1)
