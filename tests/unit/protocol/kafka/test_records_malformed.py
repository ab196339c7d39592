"""Malformed Kafka batches: truncated at every byte, bad CRCs, wrong counts and lengths,
broken record framing, decompression bombs. Every one raises a
:class:`CorruptBatchError` (or a subclass), never another exception."""

from __future__ import annotations

import contextlib
import struct
import tracemalloc

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupwire.protocol.batches import BatchRecord, CorruptBatchError, MalformedRecordError
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.kafka import records as kr

from .kafka_batch_tools import record, reframe

CODECS = [kr.COMPRESSION_NONE, kr.COMPRESSION_GZIP, kr.COMPRESSION_SNAPPY,
          kr.COMPRESSION_LZ4, kr.COMPRESSION_ZSTD]
T0 = 1_732_250_000_000


def small_batch(codec: int = kr.COMPRESSION_NONE, n: int = 4) -> bytes:
    recs = [BatchRecord(value=b"value-%d" % i * 3, key=None if i % 2 else b"k%d" % i,
                        headers=[("h", b"x")] if i == 1 else [], timestamp_ms=T0 + i)
            for i in range(n)]
    return kr.encode_batch(recs, compression=codec)


@pytest.mark.parametrize("codec", CODECS)
def test_truncation_at_every_byte(codec: int) -> None:
    batch = small_batch(codec)
    for n in range(len(batch)):
        cut = batch[:n]
        with pytest.raises(CorruptBatchError):
            kr.validate_batch(cut)
        if not n:
            assert list(kr.iter_batch_spans(cut)) == [] == kr.decode_records(cut)
            continue
        with pytest.raises(CorruptBatchError) as info:
            list(kr.iter_batch_spans(cut))
        assert info.value.position == 0
        with pytest.raises(CorruptBatchError):
            kr.decode_records(cut)
    assert kr.validate_batch(batch).record_count == 4


def test_a_bad_crc_is_corrupt_message() -> None:
    batch = bytearray(small_batch(kr.COMPRESSION_LZ4))
    batch[-3] ^= 0x40
    for check in (kr.validate_batch, kr.decode_records, lambda b: list(kr.iter_batch_spans(b))):
        with pytest.raises(CorruptBatchError, match="CRC") as info:
            check(bytes(batch))
        assert info.value.code == ErrorCode.CORRUPT_MESSAGE
    assert len(list(kr.iter_batch_spans(bytes(batch), check_crc=False))) == 1


def test_good_batches_before_a_bad_one_are_yielded_first() -> None:
    good = small_batch()
    bad = bytearray(small_batch(kr.COMPRESSION_GZIP))
    bad[-1] ^= 1
    spans = kr.iter_batch_spans(good + good + bytes(bad) + good)
    assert next(spans)[2] == len(good)
    assert next(spans)[1] == len(good)
    with pytest.raises(CorruptBatchError) as info:
        next(spans)
    assert info.value.position == 2 * len(good)


@pytest.mark.parametrize(("fields", "match"), [
    ({"record_count": 5}, "count"),
    ({"record_count": 3}, "lastOffsetDelta"),
    ({"record_count": 0}, "count"),
    ({"last_offset_delta": 4}, "lastOffsetDelta"),
    ({"last_offset_delta": -1}, "count"),
    ({"attributes": 5}, "compression"),
    ({"attributes": 0x20}, "control"),
    ({"magic": 3}, "magic"),
    ({"base_offset": -5}, "negative"),
])
def test_wrong_header_fields(fields: dict[str, int], match: str) -> None:
    with pytest.raises(CorruptBatchError, match=match):
        kr.validate_batch(reframe(small_batch(), **fields))


def test_batch_length_must_span_the_data_exactly() -> None:
    batch = small_batch()
    with pytest.raises(CorruptBatchError, match="one batch per partition"):
        kr.validate_batch(batch + batch)
    longer = bytearray(batch)
    longer[8:12] = struct.pack(">i", len(batch))   # 12 bytes past the end
    with pytest.raises(CorruptBatchError, match="batchLength"):
        kr.validate_batch(bytes(longer))
    with pytest.raises(CorruptBatchError, match="truncated"):
        list(kr.iter_batch_spans(bytes(longer)))
    shorter = bytearray(batch)
    shorter[8:12] = struct.pack(">i", 20)
    with pytest.raises(CorruptBatchError, match="shorter than a header"):
        list(kr.iter_batch_spans(bytes(shorter)))


@pytest.mark.parametrize(("records", "index", "match"), [
    (record(0) + record(1, length_fix=1), 1, "truncated|length"),
    (record(0, length_fix=-1) + record(1), 0, "length"),
    (record(0) + record(1, value=None)[:-2] + b"\x05\x00", 1, "value length -3"),
    (record(0, headers=b"\x02\x02h\x03") + record(1), 0, "header value length"),
    (record(0, headers=b"\x02\x01\x00") + record(1), 0, "header key length"),
    (record(0, headers=b"\xff\xff\xff\xff\x0f") + record(1), 0, "header count"),
    (record(0) + record(1) + b"\x00", 1, "after the last record"),
    (record(0) + b"\x80\x80\x80\x80\x80\x80" + record(1), 1, "varint|truncated"),
])
def test_broken_record_framing_is_invalid_record(records: bytes, index: int,
                                                 match: str) -> None:
    batch = reframe(small_batch(n=2), records=records)
    with pytest.raises(MalformedRecordError, match=match) as info:
        kr.validate_batch(batch)
    assert info.value.code == ErrorCode.INVALID_RECORD
    assert info.value.record_errors[0].batch_index == index
    with pytest.raises(CorruptBatchError):
        kr.decode_records(batch)


@pytest.mark.parametrize(("deltas", "index"), [((0, 2), 1), ((1, 1), 0), ((0, 200), 1)])
def test_offset_deltas_must_count_from_zero(deltas: tuple[int, int], index: int) -> None:
    records = record(deltas[0]) + record(deltas[1])
    batch = reframe(small_batch(n=2), records=records)
    with pytest.raises(MalformedRecordError, match="offsetDelta") as info:
        kr.validate_batch(batch)
    assert info.value.record_errors[0].batch_index == index
    # readers take the deltas as they are (a compacted batch has gaps)
    assert [r.offset for r in kr.decode_records(batch)] == list(deltas)


def test_a_key_length_below_minus_one_is_refused() -> None:
    body = record(0)
    bad = body[:4] + b"\x03" + body[5:]   # key length -2 where -1 (null) was
    assert body[4] == 1
    with pytest.raises(MalformedRecordError, match="key length -2"):
        kr.validate_batch(reframe(small_batch(n=1), records=bad))


def test_the_length_only_walk_misses_what_only_fields_show() -> None:
    batch = reframe(small_batch(n=2), records=record(0) + record(5))
    assert kr.validate_batch(batch, check_fields=False).record_count == 2
    with pytest.raises(MalformedRecordError):
        kr.validate_batch(batch)
    uneven = reframe(small_batch(n=2), records=record(0) + record(1) + b"\x00")
    with pytest.raises(MalformedRecordError):
        kr.validate_batch(uneven, check_fields=False)


@pytest.mark.parametrize("codec", CODECS)
def test_what_each_validation_walks_and_what_it_always_checks(codec: int) -> None:
    batch = small_batch(codec, n=2)
    short = reframe(small_batch(n=2), records=record(0))  # 1 record where 2 are counted
    garbage = reframe(batch, records=b"\x00\x01garbage" * 5)
    unwalkable = [short, garbage] if codec else [short]
    for bad in unwalkable:
        with pytest.raises((MalformedRecordError, CorruptBatchError)):
            kr.validate_batch(bad, validation=kr.STRICT)
        assert kr.validate_batch(bad, validation=kr.CRC).record_count == 2
    # relaxed walks uncompressed batches only
    with pytest.raises(MalformedRecordError):
        kr.validate_batch(short, validation=kr.RELAXED)
    if codec:
        assert kr.validate_batch(garbage, validation=kr.RELAXED).record_count == 2
    for validation in kr.VALIDATIONS:
        flipped = bytearray(batch)
        flipped[-1] ^= 0xFF
        with pytest.raises(CorruptBatchError, match="CRC"):
            kr.validate_batch(bytes(flipped), validation=validation)
        with pytest.raises(CorruptBatchError, match="lastOffsetDelta"):
            kr.validate_batch(reframe(batch, last_offset_delta=5), validation=validation)
        with pytest.raises(CorruptBatchError, match="count is 0"):
            kr.validate_batch(reframe(batch, record_count=0, last_offset_delta=-1),
                              validation=validation)


@pytest.mark.parametrize("codec", CODECS[1:])
def test_records_that_do_not_decompress_are_corrupt(codec: int) -> None:
    batch = small_batch(codec)
    garbage = reframe(batch, records=b"\x00\x01garbage" * 5)
    with pytest.raises(CorruptBatchError) as info:
        kr.validate_batch(garbage)
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


def bomb(codec: int, size: int) -> bytes:
    """A batch of four records whose zero-filled values add up to ``size`` bytes."""
    value = bytes(size // 4)
    recs = [BatchRecord(value=value, timestamp_ms=T0)] * 4
    return kr.encode_batch(recs, compression=codec)


@pytest.mark.parametrize("codec", CODECS[1:])
def test_decompression_is_bounded(codec: int) -> None:
    batch = bomb(codec, 4 << 20)
    assert len(batch) < 1 << 20
    with pytest.raises(kr.DecompressionLimitError) as info:
        kr.validate_batch(batch, max_decompressed=1 << 20)
    assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE
    assert isinstance(info.value, CorruptBatchError)
    with pytest.raises(kr.DecompressionLimitError):
        kr.decode_records(batch, max_decompressed=1 << 20)
    assert kr.validate_batch(batch, max_decompressed=5 << 20).record_count == 4


def test_a_stated_size_over_the_limit_is_refused_before_allocating() -> None:
    claims = {
        # zstd frame header: single segment, 8-byte content size of 1 TiB
        kr.COMPRESSION_ZSTD: b"\x28\xb5\x2f\xfd\xe0" + (1 << 40).to_bytes(8, "little") + b"\0" * 8,
        # raw snappy: a preamble claiming 2 GiB
        kr.COMPRESSION_SNAPPY: b"\x80\x80\x80\x80\x08" + b"\x00" * 16,
        # lz4 frame with a content size of 1 TiB
        kr.COMPRESSION_LZ4: b"\x04\x22\x4d\x18\x68\x40" + (1 << 40).to_bytes(8, "little")
        + b"\x00" * 12,
    }
    for codec, blob in claims.items():
        batch = reframe(small_batch(), records=blob, attributes=codec)
        tracemalloc.start()
        try:
            with pytest.raises(kr.DecompressionLimitError):
                kr.validate_batch(batch)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 1 << 20, (codec, peak)


def test_cramjam_names_a_full_output_buffer_as_records_expects() -> None:
    data = bytes(1000)
    for codec, module in ((kr.COMPRESSION_GZIP, cramjam.gzip), (kr.COMPRESSION_LZ4, cramjam.lz4),
                          (kr.COMPRESSION_ZSTD, cramjam.zstd)):
        blob = kr._compress(codec, data)
        with pytest.raises(cramjam.DecompressionError, match=kr._OUT_OF_ROOM):
            module.decompress_into(blob, bytearray(10))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(CODECS), st.data())
def test_mutated_records_raise_only_corrupt_batch_errors(codec: int, data: st.DataObject) -> None:
    """Any change to the records section, CRC fixed up, so the decompression and the
    walk see it: either the batch is still good and decodes, or CorruptBatchError."""
    batch = small_batch(codec, n=6)
    body = bytearray(batch[kr.HEADER_SIZE:])
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(body) - 1))
        body[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, 3))
    mutated = reframe(batch, records=bytes(body[:len(body) - cut]))
    try:
        kr.validate_batch(mutated)
    except CorruptBatchError:
        return
    assert len(kr.decode_records(mutated)) == 6


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=120))
def test_garbage_raises_only_corrupt_batch_errors(data: bytes) -> None:
    for check in (kr.validate_batch, kr.decode_records, lambda b: list(kr.iter_batch_spans(b)),
                  kr.to_msgpack):
        with contextlib.suppress(CorruptBatchError):
            check(data)
