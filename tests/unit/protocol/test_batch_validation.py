"""Record rows (docs/protocol.md §5.1): the produce-time check and the reader that stops at a
bad record. A poison batch is one whose framing and CRC are sound but whose rows are not
records; the broker must refuse it, and a reader of one stored earlier must hand out every
record before the bad one and say at which offset it stopped."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupwire.protocol.batches import (
    MAX_RECORD_ERRORS,
    RECORD_CHUNK,
    BatchRecord,
    CorruptBatchError,
    MalformedRecordError,
    check_records,
    decode_records,
    decode_records_partial,
    encode_batch,
    validate_batch,
)
from groupwire.protocol.errors import ErrorCode

TS = 1_700_000_000_000
BAD_UTF8_STR = b"\xd9\x02\xff\xfe"   # str8 of two bytes that are not UTF-8


def pack(value: object) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def good_row(index: int, value: bytes = b"v") -> bytes:
    return pack([index, index, None, value, []])


def batch_of_rows(rows: list[bytes], base_offset: int = 0) -> bytes:
    """A batch whose records array holds the already-packed ``rows``, with a correct CRC."""
    n = len(rows)
    array = (bytes([0x90 | n]) if n < 16 else b"\xdc" + struct.pack(">H", n) if n < 1 << 16
             else b"\xdd" + struct.pack(">I", n))
    body = b"\x00" + array + b"".join(rows)
    head = struct.pack(">BBBQBqBIB", 0x92, 0x95, 0xCF, base_offset, 0xD3, TS, 0xCE, n, 0xCE)
    crc = zlib.crc32(body, zlib.crc32(head[11:25]))
    return head + struct.pack(">I", crc) + body


def refused(data: bytes) -> MalformedRecordError:
    header = validate_batch(data)   # the framing is sound: only the rows are wrong
    with pytest.raises(MalformedRecordError) as info:
        check_records(data, header)
    return info.value


# --- what the broker accepts --------------------------------------------------------------


@pytest.mark.parametrize("records", [
    [BatchRecord(value=b"v")],
    [BatchRecord(value=None, key=None)],
    [BatchRecord(key=b"k1", value=b"v1", timestamp_ms=TS),
     BatchRecord(value=b"v2", headers=[("trace", b"\x01"), ("n", None)], timestamp_ms=TS - 5)],
    [BatchRecord(value=bytes([i % 256]) * (i % 7), timestamp_ms=TS + i) for i in range(300)],
    [BatchRecord(value=b"x", headers=[("h", b"1")] if i % 3 else (), timestamp_ms=TS)
     for i in range(2 * RECORD_CHUNK + 5)],
], ids=["one", "nils", "vector-like", "300", "three-chunks"])
def test_batches_the_encoder_builds_pass(records: list[BatchRecord]) -> None:
    data = encode_batch(records)
    check_records(data, validate_batch(data))


# --- what it refuses ----------------------------------------------------------------------

BAD_ROWS: dict[str, bytes] = {
    "short-row": pack([1]),
    "six-items": pack([1, 0, None, b"v", [], 0]),
    "not-an-array": pack(b"\x01\x00\xc0\xc4\x00"),
    "a-map": pack({"a": 1, "b": 2, "c": 3, "d": 4, "e": 5}),
    "a-str": pack("abcde"),
    "nil": pack(None),
    "wrong-offset-delta": pack([7, 0, None, b"v", []]),
    "float-offset-delta": pack([1.0, 0, None, b"v", []]),
    "bool-offset-delta": pack([True, 0, None, b"v", []]),
    "float-timestamp": pack([1, 0.5, None, b"v", []]),
    "bool-timestamp": pack([1, False, None, b"v", []]),
    "str-key": pack([1, 0, "k", b"v", []]),
    "int-value": pack([1, 0, None, 5, []]),
    "list-value": pack([1, 0, None, [], []]),
    "nil-headers": pack([1, 0, None, b"v", None]),
    "map-headers": pack([1, 0, None, b"v", {"h": b"1"}]),
    "header-not-a-pair": pack([1, 0, None, b"v", [["h"]]]),
    "header-bin-name": pack([1, 0, None, b"v", [[b"h", b"1"]]]),
    "header-str-value": pack([1, 0, None, b"v", [["h", "1"]]]),
    "ext-row": pack(msgpack.ExtType(5, b"abcde")),
    "ext-value": pack([1, 0, None, msgpack.ExtType(1, b"x"), []]),
    "bad-utf8-header": b"\x95\x01\x00\xc0\xc4\x01v\x91\x92" + BAD_UTF8_STR + b"\xc0",
    "int-map-key": b"\x95\x01\x00\xc0\xc4\x01v\x81\x01\x02",
    "deep-nesting": b"\x95\x01\x00\xc0\xc4\x01v" + b"\x91" * 500 + b"\xc0",
}


@pytest.mark.parametrize("name", sorted(BAD_ROWS))
def test_a_bad_row_is_refused_and_named(name: str) -> None:
    err = refused(batch_of_rows([good_row(0), BAD_ROWS[name], good_row(2)], base_offset=40))
    assert err.code == ErrorCode.INVALID_RECORD
    assert [e.batch_index for e in err.record_errors] == [1]
    assert str(err).startswith("record 1: ")
    assert err.offset == 41
    assert isinstance(err, CorruptBatchError)   # a reader that catches the old error still does


@pytest.mark.parametrize("name", sorted(BAD_ROWS))
def test_every_row_the_broker_refuses_a_reader_also_refuses(name: str) -> None:
    data = batch_of_rows([good_row(0), BAD_ROWS[name], good_row(2)])
    if name in ("bool-offset-delta", "float-offset-delta"):
        # readers take the index for the offset: a delta equal to it does them no harm,
        # so they stay lenient with what an old broker may have stored
        assert [r.offset for r in decode_records(data)] == [0, 1, 2]
        return
    with pytest.raises(CorruptBatchError):
        decode_records(data)


def test_messages_never_quote_a_value() -> None:
    big = b"\x95\x01\x00\xc0" + pack("x" * 100_000) + b"\x90"
    err = refused(batch_of_rows([good_row(0), big]))
    assert err.record_errors[0].message == "value is a str, not bin or nil"
    assert len(str(err)) < 200


def test_several_bad_rows_are_named_in_order_up_to_the_limit() -> None:
    rows = [BAD_ROWS["short-row"] if i % 2 else good_row(i) for i in range(40)]
    rows[1] = BAD_ROWS["bad-utf8-header"]
    err = refused(batch_of_rows(rows))
    assert [e.batch_index for e in err.record_errors] == list(range(1, 2 * MAX_RECORD_ERRORS, 2))
    assert err.record_errors[0].message.startswith("does not unpack")
    assert err.record_errors[1].message == "not a 5-item array (an array of 1)"
    assert f"({MAX_RECORD_ERRORS} or more bad records)" in str(err)


def test_bad_rows_in_later_chunks_are_found_past_an_undecodable_one() -> None:
    """Past the first chunk the rows are read in chunks; a chunk that does not unpack is
    walked by its bytes, and the walk resumes with the chunk after it."""
    n = 2 * RECORD_CHUNK + 10
    rows = [good_row(i) for i in range(n)]
    undecodable, wrong, last = 5, RECORD_CHUNK + 3, n - 1
    rows[undecodable] = (b"\x95" + pack(undecodable) + b"\x00\xc0\xc4\x01v\x91\x92"
                         + BAD_UTF8_STR + b"\xc0")
    rows[wrong] = pack([wrong, "late", None, b"v", []])
    rows[last] = pack([last, 0, None, b"v"])
    err = refused(batch_of_rows(rows))
    assert [e.batch_index for e in err.record_errors] == [undecodable, wrong, last]


# --- readers: everything before the bad record, then where they stopped --------------------


def test_a_reader_returns_the_records_before_a_bad_one_and_its_offset() -> None:
    first = encode_batch([BatchRecord(value=b"a"), BatchRecord(value=b"b")])
    poison = batch_of_rows([good_row(0, b"c"), pack([1]), good_row(2, b"e")], base_offset=2)
    out, err = decode_records_partial(first + poison)
    assert [r.value for r in out] == [b"a", b"b", b"c"]
    assert err is not None and err.offset == 3 and "record 1" in err.message
    with pytest.raises(CorruptBatchError):
        decode_records(first + poison)


@pytest.mark.parametrize("name", ["short-row", "bad-utf8-header", "deep-nesting", "str-key"])
def test_reading_from_the_offset_after_a_bad_record_gets_past_it(name: str) -> None:
    data = batch_of_rows([good_row(0, b"a"), BAD_ROWS[name], good_row(2, b"c")], base_offset=10)
    out, err = decode_records_partial(data, 10)
    assert [r.value for r in out] == [b"a"] and err is not None and err.offset == 11
    out, err = decode_records_partial(data, 12)
    assert [(r.offset, r.value) for r in out] == [(12, b"c")] and err is None


def test_a_bad_batch_stops_a_reader_at_its_base_offset() -> None:
    first = encode_batch([BatchRecord(value=b"a"), BatchRecord(value=b"b")], base_offset=5)
    second = bytearray(encode_batch([BatchRecord(value=b"c")], base_offset=7))
    second[-1] ^= 0xFF   # CRC mismatch
    out, err = decode_records_partial(first + bytes(second), 6)
    assert [r.offset for r in out] == [6]
    assert err is not None and err.offset == 7 and err.message == "CRC mismatch"


def test_unreadable_bytes_stop_a_reader_where_it_was() -> None:
    first = encode_batch([BatchRecord(value=b"a")], base_offset=5)
    out, err = decode_records_partial(first + b"\x00" * 40, 5)
    assert [r.offset for r in out] == [5] and err is not None and err.offset == 6
    out, err = decode_records_partial(b"\x00" * 40, 9)
    assert out == [] and err is not None and err.offset == 9


# --- the broker's check and the readers agree ---------------------------------------------

_any_value = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False)
    | st.binary(max_size=4) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner,
                                                                 max_size=2),
    max_leaves=6)


@st.composite
def _rows(draw: st.DrawFn) -> list[Any]:
    """Rows that are mostly records, with any field replaced by any value now and then."""
    rows: list[Any] = []
    for index in range(draw(st.integers(1, 6))):
        row: list[Any] = [index, draw(st.integers(-1000, 1000)),
                          draw(st.none() | st.binary(max_size=3)),
                          draw(st.none() | st.binary(max_size=3)),
                          draw(st.lists(st.tuples(st.text(max_size=2),
                                                  st.none() | st.binary(max_size=2)).map(list),
                                        max_size=2))]
        if draw(st.integers(0, 3)) == 0:
            row[draw(st.integers(0, 4))] = draw(_any_value)
        if draw(st.integers(0, 9)) == 0:
            rows.append(draw(_any_value))
            continue
        rows.append(row)
    return rows


@settings(max_examples=300, deadline=None)
@given(rows=_rows())
def test_the_broker_refuses_exactly_what_a_reader_cannot_read(rows: list[Any]) -> None:
    data = batch_of_rows([pack(r) for r in rows])
    header = validate_batch(data)
    try:
        decode_records(data)
        readable = True
    except CorruptBatchError:
        readable = False
    lenient = any(type(r) is list and len(r) == 5 and type(r[0]) in (bool, float)
                  for r in rows)   # an offset_delta equal to the index: readers take it
    try:
        check_records(data, header)
    except MalformedRecordError as err:
        assert not readable or lenient
        assert err.record_errors
    else:
        assert readable
