"""BatchWriter: a batch packed a record at a time is :func:`encode_batch`'s batch, byte for
byte (docs/protocol.md §5.1's vector included), and a record it refuses leaves the
records before it intact."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupwire.protocol.batches import (
    BATCH_V0,
    BATCH_V1,
    BatchRecord,
    BatchWriter,
    decode_records,
    encode_batch,
    validate_batch,
)
from groupwire.protocol.errors import LocalProtocolError

TS = 1732250000000
V1_VECTOR = ("9296cf0000000000000000d2ffffffffd30000019352255a80ce00000002ce85de3b1500"
             "92950000c4026b31c402763190950105c0c40276329192a57472616365c40101")


def written(records: list[BatchRecord], version: int = BATCH_V1) -> bytes:
    writer = BatchWriter(version=version)
    for r in records:
        writer.append(r.key, r.value, r.timestamp_ms, r.headers)
    return writer.build()


def test_the_spec_vector() -> None:
    writer = BatchWriter()
    writer.append(b"k1", b"v1", TS)
    writer.append(None, b"v2", TS + 5, [("trace", b"\x01")])
    assert len(writer) == 2 and writer.base_timestamp_ms == TS
    assert writer.build().hex() == V1_VECTOR


records_st = st.lists(
    st.builds(
        BatchRecord,
        value=st.none() | st.binary(max_size=40),
        key=st.none() | st.binary(max_size=20),
        headers=st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)),
                         max_size=3),
        timestamp_ms=st.integers(min_value=-(2**62), max_value=2**62),
    ),
    min_size=1, max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(records=records_st, version=st.sampled_from([BATCH_V0, BATCH_V1]))
def test_the_same_bytes_as_encode_batch(records: list[BatchRecord], version: int) -> None:
    """Rows with headers are packed on their own, the others into one buffer: any mix
    comes out as encode_batch packs the whole list."""
    assert written(records, version) == encode_batch(records, version=version)


@pytest.mark.parametrize("count", [15, 16, 65536])
def test_records_array_header_widths(count: int) -> None:
    records = [BatchRecord(value=None, timestamp_ms=i) for i in range(count)]
    assert written(records) == encode_batch(records)


def test_a_refused_record_leaves_the_earlier_ones_as_they_were() -> None:
    """A msgpack Packer that fails empties its buffer: every refusal comes first."""
    writer = BatchWriter()
    writer.append(b"k", b"v0", TS)
    with pytest.raises(TypeError, match="bytes or None"):
        writer.append("text", b"v", TS)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="bytes or None"):
        writer.append(None, 12, TS)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="timestamp_ms must be an int"):
        writer.append(None, b"v", 1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="too far"):
        writer.append(None, b"v", TS - 2**64)
    with pytest.raises(TypeError, match="headers"):
        writer.append(None, b"v", TS, [("h", 1)])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="headers"):
        writer.append(None, b"v", TS, [("\ud800", None)])  # not UTF-8 encodable
    writer.append(None, b"v1", TS + 1, [("h", b"x")])
    data = writer.build()
    assert validate_batch(data).record_count == 2
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp_ms)
            for r in decode_records(data)] == [
        (0, b"k", b"v0", [], TS), (1, None, b"v1", [("h", b"x")], TS + 1)]


def test_a_first_timestamp_must_fit_the_header() -> None:
    with pytest.raises(ValueError, match="out of range"):
        BatchWriter().append(None, b"v", 2**63)


def test_built_once_then_closed() -> None:
    writer = BatchWriter()
    with pytest.raises(LocalProtocolError, match="at least one record"):
        writer.build()
    writer.append(None, b"v", TS)
    first = writer.build()
    assert writer.build() is first
    with pytest.raises(LocalProtocolError, match="built"):
        writer.append(None, b"w", TS)
    assert decode_records(first)[0].value == b"v"


def test_unknown_versions_are_refused() -> None:
    with pytest.raises(LocalProtocolError):
        BatchWriter(version=2)
