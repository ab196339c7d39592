"""Record batches (docs/protocol.md §5): the test vector, round trips and every corruption check."""

from __future__ import annotations

import struct
import zlib

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupwire.protocol.batches import (
    HEADER_SIZE_V0,
    BatchRecord,
    CorruptBatchError,
    DecodedRecord,
    batch_crc,
    decode_records,
    encode_batch,
    iter_batch_spans,
    iter_batches,
    read_header,
    validate_batch,
    with_base_offset,
)
from groupwire.protocol.errors import ErrorCode, LocalProtocolError

TS = 1732250000000
VECTOR_HEADER = "9295cf0000000000000000d30000019352255a80ce00000002ce85de3b1500"


def vector_batch() -> bytes:
    """§5.1's v0 test vector (the byte positions below are v0's; v1 has its own tests,
    test_batches_v1.py)."""
    return encode_batch([
        BatchRecord(key=b"k1", value=b"v1", timestamp_ms=TS),
        BatchRecord(value=b"v2", headers=[("trace", b"\x01")], timestamp_ms=TS + 5),
    ], version=0)


def with_fixed_crc(data: bytes | bytearray) -> bytes:
    """``data`` with its CRC recomputed, so that only the check under test can fail."""
    buf = bytearray(data)
    struct.pack_into(">I", buf, 26, zlib.crc32(bytes(buf[30:]), zlib.crc32(bytes(buf[11:25]))))
    return bytes(buf)


def patched(data: bytes, pos: int, value: int) -> bytes:
    buf = bytearray(data)
    buf[pos] = value
    return bytes(buf)


def raw_batch(records: object, *, count: int, attributes: int = 0) -> bytes:
    """A batch built by hand around arbitrary ``records`` bytes-level content."""
    body = bytes([attributes]) + msgpack.packb(records, use_bin_type=True)
    head = struct.pack(">BBBQBqBIB", 0x92, 0x95, 0xCF, 0, 0xD3, TS, 0xCE, count, 0xCE)
    return with_fixed_crc(head + b"\0\0\0\0" + body)


# --- the test vector ------------------------------------------------------------------


def test_vector_header_bytes() -> None:
    assert vector_batch()[:HEADER_SIZE_V0].hex() == VECTOR_HEADER


def test_vector_is_one_msgpack_value_with_the_spec_records() -> None:
    header, records = msgpack.unpackb(vector_batch(), raw=False)
    assert header == [0, TS, 2, 0x85DE3B15, 0]
    assert records == [[0, 0, b"k1", b"v1", []], [1, 5, None, b"v2", [["trace", b"\x01"]]]]


def test_vector_validates_and_decodes() -> None:
    data = vector_batch()
    header = validate_batch(data)
    assert (header.base_offset, header.base_timestamp_ms, header.record_count,
            header.crc, header.attributes) == (0, TS, 2, 0x85DE3B15, 0)
    assert header.last_offset == 1
    assert decode_records(data) == [
        DecodedRecord(offset=0, timestamp_ms=TS, key=b"k1", value=b"v1", headers=[]),
        DecodedRecord(offset=1, timestamp_ms=TS + 5, key=None, value=b"v2",
                      headers=[("trace", b"\x01")]),
    ]


# --- round trips ----------------------------------------------------------------------

records_st = st.lists(
    st.builds(
        BatchRecord,
        value=st.none() | st.binary(max_size=40),
        key=st.none() | st.binary(max_size=20),
        headers=st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)),
                         max_size=3),
        timestamp_ms=st.integers(min_value=0, max_value=2**62),
    ),
    min_size=1, max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(records=records_st, base=st.integers(min_value=0, max_value=2**62),
       new_base=st.integers(min_value=0, max_value=2**62))
def test_round_trip(records: list[BatchRecord], base: int, new_base: int) -> None:
    data = encode_batch(records, base_offset=base)
    header = validate_batch(data)
    assert header.base_offset == base and header.record_count == len(records)
    assert header.base_timestamp_ms == records[0].timestamp_ms
    assert read_header(data) == header
    rebased = with_base_offset(data, new_base)
    assert len(rebased) == len(data) and rebased[11:] == data[11:]
    assert validate_batch(rebased).base_offset == new_base
    decoded = decode_records(rebased)
    assert [(d.offset, d.timestamp_ms, d.key, d.value, d.headers) for d in decoded] == [
        (new_base + i, r.timestamp_ms, r.key, r.value, list(r.headers))
        for i, r in enumerate(records)
    ]


@pytest.mark.parametrize("count", [15, 16, 65535, 65536])
def test_records_array_header_widths(count: int) -> None:
    data = encode_batch([BatchRecord(value=None, timestamp_ms=i) for i in range(count)])
    assert validate_batch(data).record_count == count
    assert decode_records(data, min_offset=count - 1)[0].offset == count - 1


def test_encode_refuses_an_empty_batch() -> None:
    with pytest.raises(LocalProtocolError):
        encode_batch([])


def test_encode_packs_records_in_place_of_the_producer_base_offset() -> None:
    data = encode_batch([BatchRecord(value=b"x", timestamp_ms=1)], base_offset=7)
    assert data[3:11] == (7).to_bytes(8, "big")
    assert with_base_offset(data, 0) == encode_batch([BatchRecord(value=b"x", timestamp_ms=1)])


# --- every check of §5.2 --------------------------------------------------------------


def check_fails(data: bytes, words: str) -> CorruptBatchError:
    with pytest.raises(CorruptBatchError) as info:
        validate_batch(data)
    assert words in str(info.value)
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE
    return info.value


def test_too_short() -> None:
    check_fails(vector_batch()[:31], "shorter than 32")
    check_fails(b"", "shorter than 32")


@pytest.mark.parametrize("pos", [0, 1, 2, 11, 20, 25])
def test_marker_bytes(pos: int) -> None:
    data = vector_batch()
    check_fails(patched(data, pos, data[pos] ^ 0x01), "marker")


def test_attributes_must_be_zero() -> None:
    check_fails(with_fixed_crc(patched(vector_batch(), 30, 1)), "attributes 1")
    check_fails(with_fixed_crc(patched(vector_batch(), 30, 0x80)), "not a positive fixint")


def test_record_count_zero() -> None:
    buf = bytearray(vector_batch())
    struct.pack_into(">I", buf, 21, 0)
    check_fails(with_fixed_crc(buf), "record_count is 0")


def test_crc_mismatch() -> None:
    buf = bytearray(vector_batch())
    struct.pack_into(">I", buf, 26, 12345)
    check_fails(bytes(buf), "CRC")


def test_record_count_must_match_the_array() -> None:
    buf = bytearray(vector_batch())
    struct.pack_into(">I", buf, 21, 3)
    check_fails(with_fixed_crc(buf), "holds 2 items, header says 3")


def test_records_must_be_an_array() -> None:
    check_fails(raw_batch({"a": 1}, count=1), "not an array")
    check_fails(raw_batch(b"blob", count=1), "not an array")


def test_trailing_bytes_after_the_records() -> None:
    check_fails(with_fixed_crc(vector_batch() + b"\x00"), "trailing")


def test_malformed_msgpack_inside_the_records() -> None:
    data = raw_batch([1], count=1)
    check_fails(with_fixed_crc(data[:-1] + b"\xc1"), "malformed")


def test_a_truncated_record_is_caught_even_with_a_matching_crc() -> None:
    data = vector_batch()
    for cut in range(32, len(data)):
        with pytest.raises(CorruptBatchError):
            validate_batch(with_fixed_crc(data[:cut]))


def test_every_truncation_is_caught() -> None:
    data = vector_batch()
    for cut in range(len(data)):
        with pytest.raises(CorruptBatchError):
            validate_batch(data[:cut])


def test_crc_covers_bytes_11_to_24_and_30_onwards() -> None:
    data = vector_batch()
    covered = [*range(11, 25), *range(30, len(data))]
    for pos in covered:
        for bit in range(8):
            flipped = patched(data, pos, data[pos] ^ (1 << bit))
            assert batch_crc(flipped, 0, len(flipped)) != batch_crc(data, 0, len(data))
            with pytest.raises(CorruptBatchError) as info:
                validate_batch(flipped)
            if pos not in (11, 20, 30):  # marker and attribute checks come first there
                assert "CRC" in str(info.value) or "record_count is 0" in str(info.value)


def test_base_offset_bytes_are_not_covered_by_the_crc() -> None:
    data = vector_batch()
    for pos in range(3, 11):
        assert validate_batch(patched(data, pos, 0xFF)).base_offset > 0


# --- splitting and decoding concatenations ----------------------------------------------


def three_batches() -> list[bytes]:
    out, offset = [], 0
    for n in (1, 3, 2):
        out.append(encode_batch([BatchRecord(value=b"%d" % (offset + i), timestamp_ms=TS + i)
                                 for i in range(n)], base_offset=offset))
        offset += n
    return out


def test_iter_batches_splits_a_fetch_bin() -> None:
    batches = three_batches()
    got = list(iter_batches(b"".join(batches)))
    assert [b for _, b in got] == batches
    assert [h.base_offset for h, _ in got] == [0, 1, 4]
    assert list(iter_batches(b"")) == []


def test_iter_batches_reports_where_a_torn_batch_starts() -> None:
    batches = three_batches()
    data = b"".join(batches)
    spans = []
    with pytest.raises(CorruptBatchError) as info:
        for span in iter_batch_spans(data[:-1]):
            spans.append(span)
    assert len(spans) == 2
    assert info.value.position == len(batches[0]) + len(batches[1]) == spans[-1][2]


def test_iter_batch_spans_checks_crc_of_each_batch() -> None:
    batches = three_batches()
    bad = bytearray(batches[1])
    bad[-1] ^= 0x01
    with pytest.raises(CorruptBatchError, match="CRC") as info:
        list(iter_batch_spans(batches[0] + bytes(bad) + batches[2]))
    assert info.value.position == len(batches[0])


def test_decode_records_skips_offsets_below_min_offset() -> None:
    data = b"".join(three_batches())
    assert [r.offset for r in decode_records(data, min_offset=2)] == [2, 3, 4, 5]
    assert [r.value for r in decode_records(data)] == [b"%d" % i for i in range(6)]
    assert decode_records(data, min_offset=6) == []


def test_decode_rejects_corrupt_data() -> None:
    data = bytearray(b"".join(three_batches()))
    data[-2] ^= 0x40
    with pytest.raises(CorruptBatchError):
        decode_records(bytes(data))
    with pytest.raises(CorruptBatchError):
        decode_records(raw_batch([[0, 0, "not bin", None, []]], count=1))
    with pytest.raises(CorruptBatchError):
        decode_records(raw_batch([[5, 0, None, None, []]], count=1))
