"""Batch layout v2 (docs/protocol.md §5.1): v1 plus an idempotent producer's fields
(producer id, producer epoch, base sequence) under the CRC, between the leader epoch and
the base timestamp. Built when a producer id is given; read, checked, stamped, split,
stored and converted wherever v0 and v1 are."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupwire.broker.storage import FsyncPolicy, PartitionLog, StorageConfig
from groupwire.broker.storage.partition_log import WRITE_PIECE
from groupwire.protocol.batches import (
    BATCH_V0,
    BATCH_V1,
    BATCH_V2,
    HEADER_SIZE_V2,
    NO_PARTITION_LEADER_EPOCH,
    BatchHeader,
    BatchRecord,
    BatchWriter,
    CorruptBatchError,
    check_batch_steps,
    decode_records,
    encode_batch,
    header_size,
    iter_batch_spans,
    read_header,
    stamp_batch,
    upconvert_v0,
    validate_batch,
    with_base_offset,
)
from groupwire.protocol.errors import ErrorCode, LocalProtocolError
from groupwire.protocol.kafka import records as kr
from groupwire.protocol.steps import run_steps
from groupwire.protocol.stored_batches import (
    as_stored,
    decode_any_records,
    iter_any_batch_spans,
    read_any_header,
    stamp_any_batch,
    stamp_stored,
    stamped_header,
    validate_any_batch,
)
from tests.unit.protocol.test_batch_writer import records_st
from tests.unit.protocol.test_batches_v1 import assert_crc_covers

TS = 1732250000000
PRODUCER = {"producer_id": 4000, "producer_epoch": 3, "base_sequence": 17}
V2_HEADER = ("9299cf0000000000000000d2ffffffffd30000000000000fa0d10003d200000011"
             "d30000019352255a80ce00000002ceefdef0b000")
RECORDS_HEX = "92950000c4026b31c402763190950105c0c40276329192a57472616365c40101"
V2_VECTOR = V2_HEADER + RECORDS_HEX
RECORDS = [
    BatchRecord(key=b"k1", value=b"v1", timestamp_ms=TS),
    BatchRecord(value=b"v2", headers=[("trace", b"\x01")], timestamp_ms=TS + 5),
]


def v2(records: list[BatchRecord] = RECORDS, base_offset: int = 0, **fields: int) -> bytes:
    return encode_batch(records, base_offset, **{**PRODUCER, **fields})


def written(records: list[BatchRecord], **kwargs: int) -> bytes:
    writer = BatchWriter(**kwargs)
    for r in records:
        writer.append(r.key, r.value, r.timestamp_ms, r.headers)
    return writer.build()


# --- the layout ---------------------------------------------------------------------------


def test_the_spec_vector_byte_by_byte() -> None:
    data = v2()
    assert data.hex() == V2_VECTOR
    assert data[:HEADER_SIZE_V2].hex() == V2_HEADER
    # the table of §5.1, field by field, from the expected bytes (not the encoder's)
    b = bytes.fromhex(V2_VECTOR)
    assert b[0:2] == b"\x92\x99"
    assert b[2] == 0xCF and struct.unpack(">Q", b[3:11]) == (0,)
    assert b[11] == 0xD2 and struct.unpack(">i", b[12:16]) == (-1,)
    assert b[16] == 0xD3 and struct.unpack(">q", b[17:25]) == (4000,)
    assert b[25] == 0xD1 and struct.unpack(">h", b[26:28]) == (3,)
    assert b[28] == 0xD2 and struct.unpack(">i", b[29:33]) == (17,)
    assert b[33] == 0xD3 and struct.unpack(">q", b[34:42]) == (TS,)
    assert b[42] == 0xCE and struct.unpack(">I", b[43:47]) == (2,)
    assert b[47] == 0xCE and b[52] == 0
    # the CRC, recomputed from the byte ranges the spec names
    (crc,) = struct.unpack(">I", b[48:52])
    assert crc == zlib.crc32(b[52:], zlib.crc32(b[16:47])) == 0xEFDEF0B0
    assert b[53:].hex() == RECORDS_HEX   # the records are v1's bytes


def test_v2_is_one_msgpack_value_with_a_nine_field_header() -> None:
    header, records = msgpack.unpackb(v2(leader_epoch=7), raw=False)
    assert header == [0, 7, 4000, 3, 17, TS, 2, 0xEFDEF0B0, 0]
    assert records == [[0, 0, b"k1", b"v1", []], [1, 5, None, b"v2", [["trace", b"\x01"]]]]


def test_v2_reads_validates_and_decodes() -> None:
    data = v2(base_offset=4, leader_epoch=3)
    header = validate_batch(data)
    assert header == BatchHeader(base_offset=4, base_timestamp_ms=TS, record_count=2,
                                 crc=0xEFDEF0B0, attributes=0, leader_epoch=3,
                                 version=BATCH_V2, producer_id=4000, producer_epoch=3,
                                 base_sequence=17)
    assert read_header(data) == header == run_steps(check_batch_steps(data))
    assert header.header_size == header_size(BATCH_V2) == HEADER_SIZE_V2 == 53
    assert decode_records(data) == decode_records(encode_batch(RECORDS, 4))


def test_v0_and_v1_headers_have_no_producer() -> None:
    for version in (BATCH_V0, BATCH_V1):
        header = validate_batch(encode_batch(RECORDS, version=version))
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (
            -1, -1, -1)


def test_a_producer_id_makes_v2_and_nothing_else_changes_without_one() -> None:
    assert encode_batch(RECORDS, version=BATCH_V2, **PRODUCER) == v2()
    assert encode_batch(RECORDS, version=BATCH_V1, **PRODUCER) == v2()   # the default
    assert encode_batch(RECORDS).hex().startswith("9296")
    assert read_header(v2(producer_id=0, producer_epoch=0, base_sequence=0)).version == 2


@pytest.mark.parametrize("fields", [
    {"producer_id": -2},
    {"producer_id": 1 << 63},
    {"producer_epoch": -1},
    {"producer_epoch": 1 << 15},
    {"base_sequence": -1},
    {"base_sequence": 1 << 31},
    {"producer_id": True},
])
def test_producer_fields_out_of_range_are_refused(fields: dict[str, int]) -> None:
    with pytest.raises(LocalProtocolError, match="out of range"):
        v2(**fields)
    with pytest.raises(LocalProtocolError, match="out of range"):
        BatchWriter(**{**PRODUCER, **fields})


def test_the_largest_producer_fields_fit() -> None:
    data = v2(producer_id=(1 << 63) - 1, producer_epoch=(1 << 15) - 1,
              base_sequence=(1 << 31) - 1)
    header = validate_batch(data)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (
        (1 << 63) - 1, (1 << 15) - 1, (1 << 31) - 1)


@pytest.mark.parametrize("kwargs", [
    {"version": BATCH_V0, **PRODUCER},   # v0 has no room for them
    {"version": BATCH_V2},               # v2 without a producer id
    {"producer_epoch": 3},               # an epoch without a producer id
    {"base_sequence": 17},               # a sequence without one
    {"version": 3, **PRODUCER},
])
def test_conflicting_layouts_are_refused(kwargs: dict[str, int]) -> None:
    with pytest.raises(LocalProtocolError):
        encode_batch(RECORDS, **kwargs)
    with pytest.raises(LocalProtocolError):
        BatchWriter(**kwargs)


# --- BatchWriter --------------------------------------------------------------------------


def test_the_writer_builds_the_spec_vector() -> None:
    writer = BatchWriter(**PRODUCER)
    assert writer.version == BATCH_V2
    writer.append(b"k1", b"v1", TS)
    writer.append(None, b"v2", TS + 5, [("trace", b"\x01")])
    assert writer.build().hex() == V2_VECTOR


@settings(max_examples=100, deadline=None)
@given(records=records_st, producer_id=st.integers(0, (1 << 63) - 1),
       producer_epoch=st.integers(0, (1 << 15) - 1),
       base_sequence=st.integers(0, (1 << 31) - 1))
def test_the_writer_makes_encode_batchs_bytes(records: list[BatchRecord], producer_id: int,
                                              producer_epoch: int,
                                              base_sequence: int) -> None:
    fields = {"producer_id": producer_id, "producer_epoch": producer_epoch,
              "base_sequence": base_sequence}
    data = written(records, **fields)
    assert data == encode_batch(records, **fields)
    header = validate_batch(data)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (
        producer_id, producer_epoch, base_sequence)


# --- checking -----------------------------------------------------------------------------


@pytest.mark.parametrize("pos", [*range(17, 25), 26, 27, *range(29, 33)])
def test_a_flipped_producer_byte_fails_the_crc(pos: int) -> None:
    data = bytearray(v2())
    data[pos] ^= 0x01   # a producer field's value byte (the markers: the next test)
    with pytest.raises(CorruptBatchError, match="CRC") as info:
        validate_batch(bytes(data))
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(CorruptBatchError, match="CRC"):
        list(iter_batch_spans(bytes(data)))


def test_the_crc_covers_16_to_46_and_52_on_but_not_offset_or_epoch() -> None:
    assert_crc_covers(v2(), 47, 52)


@pytest.mark.parametrize("pos", [0, 1, 2, 11, 16, 25, 28, 33, 42, 47])
def test_v2_marker_bytes_are_checked(pos: int) -> None:
    data = bytearray(v2())
    data[pos] ^= 0x01 if pos != 1 else 0x03   # 0x99 -> 0x9a
    with pytest.raises(CorruptBatchError) as info:
        validate_batch(bytes(data))
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(CorruptBatchError):
        read_header(bytes(data))


def test_every_v2_truncation_is_caught() -> None:
    data = v2()
    for cut in range(len(data)):
        with pytest.raises(CorruptBatchError):
            validate_batch(data[:cut])
        if cut:
            with pytest.raises(CorruptBatchError):
                list(iter_batch_spans(data + data[:cut]))
    with pytest.raises(CorruptBatchError, match="truncated header: 52 bytes, need 53"):
        read_header(data[:52])


@pytest.mark.parametrize(("at", "value"), [(17, b"\xff" * 8), (26, b"\xff\xff"),
                                           (29, b"\xff" * 4)])
def test_negative_producer_fields_are_corrupt(at: int, value: bytes) -> None:
    """§5.1 says each is >= 0: a batch with a negative one (CRC right) is refused."""
    head = bytearray(v2()[:48])
    head[at:at + len(value)] = value
    body = v2()[52:]
    data = bytes(head) + struct.pack(">I", zlib.crc32(body, zlib.crc32(head[16:47]))) + body
    assert read_header(data).version == BATCH_V2
    with pytest.raises(CorruptBatchError, match="producer fields") as info:
        validate_batch(data)
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(CorruptBatchError, match="producer fields"):
        list(iter_batch_spans(data))


# --- patching and splitting ---------------------------------------------------------------


def test_stamp_sets_offset_and_epoch_outside_the_crc() -> None:
    data = v2()
    stamped = stamp_batch(data, 1234, 42)
    header = validate_batch(stamped)
    assert (header.base_offset, header.leader_epoch, header.crc, header.version) == (
        1234, 42, 0xEFDEF0B0, BATCH_V2)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4000, 3, 17)
    assert stamped[16:] == data[16:] and len(stamped) == len(data)
    assert stamped[3:11] == struct.pack(">Q", 1234) and stamped[12:16] == struct.pack(">i", 42)
    assert stamp_batch(data[:60], 1234, 42) == stamped[:60]   # a stepped append's piece
    based = with_base_offset(data, 77)
    assert validate_batch(based).base_offset == 77
    assert validate_batch(based).leader_epoch == NO_PARTITION_LEADER_EPOCH
    assert based[11:] == data[11:]
    with pytest.raises(LocalProtocolError):
        stamp_batch(data, 0, 1 << 31)
    with pytest.raises(LocalProtocolError):
        upconvert_v0(data)


def _mixed() -> bytes:
    """Offsets 0-1 in v0, 2-3 in v2 (epoch 5), 4 in v1, 5-6 in v2 (epoch 6), 7 in v0."""
    return b"".join((
        encode_batch(RECORDS, 0, version=BATCH_V0),
        v2(base_offset=2, leader_epoch=5),
        encode_batch([BatchRecord(value=b"z", timestamp_ms=TS + 9)], 4),
        v2(base_offset=5, leader_epoch=6, base_sequence=19),
        encode_batch([BatchRecord(value=b"y", timestamp_ms=TS + 9)], 7, version=BATCH_V0),
    ))


def test_a_mix_of_v0_v1_and_v2_splits_and_decodes() -> None:
    data = _mixed()
    spans = list(iter_batch_spans(data))
    assert [(h.version, h.base_offset, h.leader_epoch, h.base_sequence)
            for h, _, _ in spans] == [
        (0, 0, -1, -1), (2, 2, 5, 17), (1, 4, -1, -1), (2, 5, 6, 19), (0, 7, -1, -1)]
    assert spans[-1][2] == len(data)
    assert [r.offset for r in decode_records(data)] == list(range(8))
    assert [r.value for r in decode_records(data, min_offset=3)] == [
        b"v2", b"z", b"v1", b"v2", b"y"]


def test_decoded_v2_records_are_the_records() -> None:
    out = decode_records(v2(base_offset=10))
    assert [(r.offset, r.timestamp_ms, r.key, r.value, r.headers) for r in out] == [
        (10, TS, b"k1", b"v1", []), (11, TS + 5, None, b"v2", [("trace", b"\x01")])]


# --- storage ------------------------------------------------------------------------------


def test_stored_headers_of_v2() -> None:
    data = v2(base_offset=6, leader_epoch=2)
    stored = read_any_header(data)
    assert (stored.kafka, stored.version, stored.header_size) == (False, BATCH_V2, 53)
    assert (stored.base_offset, stored.leader_epoch, stored.record_count) == (6, 2, 2)
    assert stored == as_stored(validate_batch(data)) == validate_any_batch(data)
    assert [h for h, _, _ in iter_any_batch_spans(data + data)] == [stored, stored]
    # stamped as v1 is: layout and size kept, offset and epoch written in
    again = stamped_header(stored, 40, 9, keep_v0=True)
    assert (again.version, again.header_size, again.base_offset, again.leader_epoch) == (
        BATCH_V2, 53, 40, 9)
    assert stamped_header(stored, 40, 9) == again
    assert stamp_stored(data, again) == stamp_batch(data, 40, 9) == stamp_any_batch(data, 40, 9)
    assert decode_any_records(stamp_stored(data, again)) == decode_records(
        stamp_batch(data, 40, 9))


def _log(directory: Path) -> PartitionLog:
    config = StorageConfig(fsync=FsyncPolicy.NEVER, segment_bytes=1 << 20)
    return PartitionLog(directory, config, topic="t", partition=0)


def _read_all(log: PartitionLog) -> bytes:
    return log.read(log.log_start_offset, 1 << 24, True, to_log_end=True)


def test_a_partition_log_stores_v2_among_v0_and_v1(tmp_path: Path) -> None:
    log = _log(tmp_path / "t-0")
    sent: list[tuple[bytes, int]] = []
    for batch in (encode_batch(RECORDS, version=BATCH_V0), v2(), encode_batch(RECORDS),
                  v2(base_sequence=19)):
        sent.append((batch, log.append(batch, validate_batch(batch))))
    assert [base for _, base in sent] == [0, 2, 4, 6]
    data = _read_all(log)
    spans = list(iter_any_batch_spans(data))
    assert [(h.version, h.header_size) for h, _, _ in spans] == [
        (0, 31), (2, 53), (1, 36), (2, 53)]
    for (batch, base), (header, start, end) in zip(sent, spans, strict=True):
        assert header.base_offset == base
        if header.version == BATCH_V2:   # stamped, nothing else changed
            assert data[start:end] == stamp_batch(batch, base, log.leader_epoch)
            assert read_header(data, start).base_sequence in (17, 19)
    assert [r.value for r in decode_any_records(data)] == [b"v1", b"v2"] * 4
    assert [r.offset for r in decode_records(data)] == list(range(8))
    log.close()
    again = _log(tmp_path / "t-0")   # recovered from its segment as it was
    assert again.log_end_offset == 8 and _read_all(again) == data
    again.close()


def test_a_big_v2_batch_is_written_in_steps_and_replicated(tmp_path: Path) -> None:
    leader = _log(tmp_path / "leader")
    leader.become_leader(4)
    leader.append(encode_batch(RECORDS), validate_batch(encode_batch(RECORDS)))
    recs = [BatchRecord(value=bytes([i % 251]) * 1000, timestamp_ms=TS) for i in range(2500)]
    big = v2(recs, base_sequence=1000)
    assert len(big) > 2 * WRITE_PIECE
    assert run_steps(leader.append_steps(big, validate_batch(big))) == 2
    stored = leader.read(2, 1, True, to_log_end=True)   # replicated: past the watermark
    assert stored == stamp_batch(big, 2, 4)
    assert validate_batch(stored).base_sequence == 1000
    first = leader.read(0, 1 << 24, True, to_log_end=True)   # a read stops at a segment's end
    follower = _log(tmp_path / "follower")
    assert follower.append_replica(first) == 2
    assert follower.append_replica(stored) == leader.log_end_offset == 2502
    assert follower.read(2, 1, True, to_log_end=True) == stored
    assert follower.epoch_cache.entries == leader.epoch_cache.entries
    leader.close()
    follower.close()


# --- the Kafka door -----------------------------------------------------------------------


def test_a_v2_batch_converts_to_kafka_keeping_its_producer_fields() -> None:
    """The Kafka batch is v1's with the producer id, epoch and base sequence in its
    header (§5.5: an aborted transaction's records are known by their producer on either
    door), and it converts back to the same bytes."""
    data = stamp_batch(v2(base_offset=3), 3, 2)
    as_v1 = stamp_batch(encode_batch(RECORDS, 3), 3, 2)
    converted = kr.from_msgpack(data)
    assert converted == kr.encode_batch(RECORDS, 3, leader_epoch=2, **PRODUCER)
    assert converted != kr.from_msgpack(as_v1)
    assert kr.msgpack_to_kafka(data) == converted
    assert kr.to_msgpack(converted) == data
    kafka_batch = kr.encode_batch(RECORDS, 10)
    mix = data + kafka_batch
    assert [h.base_offset for h, _, _ in kr.iter_mixed_spans(mix)] == [3, 10]
    assert kr.kafka_to_msgpack(mix)[:len(data)] == data   # msgpack batches kept as stored
    assert [r.offset for r in decode_records(kr.kafka_to_msgpack(mix))] == [3, 4, 10, 11]

