"""Conversions between Kafka batches and msgpack batches: offsets, timestamps, keys,
values and headers survive both ways, read back by each format's own reader (and by
kafka-python for the Kafka side)."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from groupwire.protocol import batches as mp
from groupwire.protocol.batches import BatchRecord, CorruptBatchError
from groupwire.protocol.kafka import records as kr

from .kafka_batch_tools import reframe

CODECS = [kr.COMPRESSION_NONE, kr.COMPRESSION_GZIP, kr.COMPRESSION_SNAPPY,
          kr.COMPRESSION_LZ4, kr.COMPRESSION_ZSTD]
T0 = 1_732_250_000_000


def sample(n: int = 30, shift: int = 0) -> list[BatchRecord]:
    return [BatchRecord(value=None if i == 3 else b"v%d" % (i + shift) * (i % 9),
                        key=None if i % 2 else b"k%d" % i,
                        headers=[("a", b"1"), ("b", None), ("a", b"")] if i % 5 == 0 else [],
                        timestamp_ms=T0 + 10 * i - (50 if i == 7 else 0))
            for i in range(n)]


def as_tuples(records: list[mp.DecodedRecord]) -> list[tuple[Any, ...]]:
    return [(r.offset, r.timestamp_ms, r.key, r.value, r.headers) for r in records]


def oracle_batch(recs: list[BatchRecord], codec: int, base: int) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 30)
    for i, r in enumerate(recs):
        builder.append(i, r.timestamp_ms, r.key, r.value, list(r.headers))
    return kr.stamp_batch(bytes(builder.build()), base, 3)


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_to_msgpack_keeps_every_record(codec: int) -> None:
    kafka = oracle_batch(sample(), codec, 500) + oracle_batch(sample(5, 1), codec, 530)
    converted = kr.to_msgpack(kafka)
    headers = [h for h, _, _ in mp.iter_batch_spans(converted)]
    assert [(h.base_offset, h.record_count, h.leader_epoch, h.version) for h in headers] == [
        (500, 30, 3, mp.BATCH_V1), (530, 5, 3, mp.BATCH_V1)]
    assert as_tuples(mp.decode_records(converted)) == as_tuples(kr.decode_records(kafka))
    assert mp.decode_records(converted)[0].headers == [("a", b"1"), ("b", None), ("a", b"")]


def test_msgpack_to_kafka_keeps_every_record_as_kafka_python_reads_it() -> None:
    data = (mp.encode_batch(sample(), 100, leader_epoch=4)
            + mp.encode_batch(sample(3, 7), 130, version=mp.BATCH_V0))
    converted = kr.from_msgpack(data)
    spans = list(kr.iter_batch_spans(converted))
    assert [(h.base_offset, h.record_count, h.leader_epoch, h.compression, h.producer_id)
            for h, _, _ in spans] == [(100, 30, 4, 0, -1), (130, 3, -1, 0, -1)]
    theirs = []
    for _, start, end in spans:
        batch = DefaultRecordBatch(bytearray(converted[start:end]))
        assert batch.validate_crc() and batch.timestamp_type == 0
        theirs += [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch]
    assert theirs == as_tuples(mp.decode_records(data))


@pytest.mark.parametrize("codec", CODECS)
def test_round_trips_both_ways(codec: int) -> None:
    kafka = oracle_batch(sample(), codec, 0)
    assert as_tuples(kr.decode_records(kr.from_msgpack(kr.to_msgpack(kafka)))) == as_tuples(
        kr.decode_records(kafka))
    msgpack = mp.encode_batch(sample(), 77, leader_epoch=2)
    assert kr.to_msgpack(kr.from_msgpack(msgpack)) == msgpack


def test_offset_gaps_split_into_consecutive_runs() -> None:
    # a compacted batch: offsets 10, 11, 15, 16 (deltas 0, 1, 5, 6), lastOffsetDelta 6
    recs = sample(4)
    full = kr.encode_batch(recs, 10)
    body = bytearray()
    for delta, r in zip((0, 1, 5, 6), recs, strict=True):
        one = kr.encode_batch([r], 0)[kr.HEADER_SIZE:]
        # the single record's offsetDelta byte (0) sits after length, attributes and
        # its timestampDelta (0): rewrite it
        assert one[3] == 0
        one = one[:3] + kr._zz(delta) + one[4:]
        body += one
    gappy = reframe(full, records=bytes(body), last_offset_delta=6)
    assert [r.offset for r in kr.decode_records(gappy)] == [10, 11, 15, 16]
    converted = kr.to_msgpack(gappy)
    spans = [(h.base_offset, h.record_count) for h, _, _ in mp.iter_batch_spans(converted)]
    assert spans == [(10, 2), (15, 2)]
    assert as_tuples(mp.decode_records(converted)) == as_tuples(kr.decode_records(gappy))


def test_control_batches_convert_to_nothing() -> None:
    control = kr.encode_batch([BatchRecord(value=b"\0" * 6, key=b"\0\0\0\0", timestamp_ms=T0)],
                              5, is_control=True)
    data = control + kr.encode_batch(sample(2), 6)
    converted = kr.to_msgpack(data)
    assert [r.offset for r in mp.decode_records(converted)] == [6, 7]
    assert kr.to_msgpack(control) == b""


def test_log_append_time_becomes_each_records_timestamp() -> None:
    batch = kr.encode_batch(sample(3), timestamp_type=1, max_timestamp_ms=T0 + 999)
    assert [r.timestamp_ms for r in mp.decode_records(kr.to_msgpack(batch))] == [T0 + 999] * 3


def test_header_keys_that_are_not_utf8_read_as_kafka_clients_read_them() -> None:
    rec = BatchRecord(value=b"v", headers=[("ok", b"1")], timestamp_ms=T0)
    batch = kr.encode_batch([rec])
    bad = batch.replace(b"\x04ok", b"\x04\xffk")
    bad = reframe(bad)
    assert kr.decode_records(bad)[0].headers == [("\ufffdk", b"1")]
    assert mp.decode_records(kr.to_msgpack(bad))[0].headers == [("\ufffdk", b"1")]


def test_mixed_fetches_convert_only_what_is_foreign() -> None:
    k1 = oracle_batch(sample(4), kr.COMPRESSION_LZ4, 0)
    m1 = mp.encode_batch(sample(3), 4)
    m2 = mp.encode_batch(sample(2), 7, version=mp.BATCH_V0)
    k2 = oracle_batch(sample(5), kr.COMPRESSION_ZSTD, 9)
    mixed = k1 + m1 + m2 + k2
    expected = as_tuples(kr.decode_records(k1)) + as_tuples(mp.decode_records(m1 + m2)) \
        + as_tuples(kr.decode_records(k2))
    all_kafka = kr.msgpack_to_kafka(mixed)
    assert all_kafka.startswith(k1) and all_kafka.endswith(k2)
    assert as_tuples(kr.decode_records(all_kafka)) == expected
    all_msgpack = kr.kafka_to_msgpack(mixed)
    assert m1 + m2 in all_msgpack
    assert as_tuples(mp.decode_records(all_msgpack)) == expected
    assert kr.msgpack_to_kafka(k1 + k2) == k1 + k2
    assert kr.kafka_to_msgpack(m1 + m2) == m1 + m2
    assert kr.msgpack_to_kafka(b"") == b"" == kr.kafka_to_msgpack(b"")


def test_the_wrong_format_is_corrupt() -> None:
    kafka = kr.encode_batch(sample(2))
    msgpack = mp.encode_batch(sample(2))
    with pytest.raises(CorruptBatchError) as info:
        kr.from_msgpack(msgpack + kafka)
    assert info.value.position == len(msgpack)
    with pytest.raises(CorruptBatchError) as info:
        kr.to_msgpack(kafka + msgpack)
    assert info.value.position == len(kafka)
    bad = bytearray(msgpack)
    bad[-1] ^= 1
    with pytest.raises(CorruptBatchError) as info:
        kr.msgpack_to_kafka(kafka + bytes(bad))
    assert info.value.position == len(kafka)
