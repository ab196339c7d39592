"""Transactional batches and transaction markers in both formats (docs/protocol.md §5.1,
§5.2, §5.5): msgpack layout v2's attributes carry Kafka's bits 0x10 and 0x20, a control
batch's one record is Kafka's control-record key and marker value, conversions keep the
producer fields and the bits both ways, and Produce refuses a client's control batch in
either format while taking its transactional batches."""

from __future__ import annotations

import struct
import zlib

import pytest
from kafka.record.default_records import DefaultRecordBatch

from groupwire.broker.storage.producer_log import producer_batch
from groupwire.protocol import batches as mp
from groupwire.protocol.batches import (
    BatchRecord,
    BatchWriter,
    CorruptBatchError,
    MalformedRecordError,
)
from groupwire.protocol.errors import ErrorCode, LocalProtocolError
from groupwire.protocol.kafka import records as kr
from groupwire.protocol.steps import run_steps
from groupwire.protocol.stored_batches import (
    as_stored,
    encode_marker,
    iter_any_batch_spans,
    read_any_header,
    read_control_marker,
    stamp_any_batch,
)

TS = 1_732_250_000_000
PID, EPOCH = 4000, 3
CONTROL_V2 = ("9299cf0000000000000000d2ffffffffd30000000000000fa0d10003d2ffffffff"
              "d30000019352255a80ce00000001ce7f44311430"
              "91950000c40400000001c40600000000000090")
"""§5.1's control batch vector: producer 4000, epoch 3, commit, coordinator epoch 0."""
RECORDS = [BatchRecord(b"v1", b"k1", (), TS), BatchRecord(b"v2", None, [("h", b"x")], TS + 5)]


def txn_batch(seq: int = 0, *, pid: int = PID, epoch: int = EPOCH) -> bytes:
    return mp.encode_batch(RECORDS, producer_id=pid, producer_epoch=epoch,
                           base_sequence=seq, transactional=True)


def test_the_control_batch_vector_is_built_and_read_back() -> None:
    data = mp.encode_control_batch(PID, EPOCH, True, 0, TS)
    assert data.hex() == CONTROL_V2
    header = mp.read_header(data)
    assert (header.attributes, header.is_transactional, header.is_control) == (0x30, True, True)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (PID, EPOCH, -1)
    assert header.crc == zlib.crc32(data[52:], zlib.crc32(data[16:47]))
    assert mp.control_marker(data) == (True, 0)
    assert mp.control_marker(mp.encode_control_batch(PID, EPOCH, False, 7, TS)) == (False, 7)
    # the record is Kafka's control record: key (version 0, type), value (version 0, epoch)
    row = mp.decode_records(data, control=True)[0]
    assert (row.key, row.value) == (struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 0))


def test_a_control_batch_is_a_stored_batch_but_no_record_of_it_is_handed_out() -> None:
    marker = mp.encode_control_batch(PID, EPOCH, False, 2, TS, 5)
    data = mp.encode_batch(RECORDS, 3) + marker + mp.encode_batch(RECORDS, 6)
    assert [h.base_offset for h, _, _ in mp.iter_batch_spans(data)] == [3, 5, 6]
    assert [r.offset for r in mp.decode_records(data)] == [3, 4, 6, 7]
    assert [r.offset for r in mp.decode_records(data, control=True)] == [3, 4, 5, 6, 7]
    good, bad = mp.decode_records_partial(data, 4)
    assert bad is None and [r.offset for r in good] == [4, 6, 7]
    stored = [as_stored(h) for h, _, _ in iter_any_batch_spans(data)]
    assert [(h.transactional, h.control) for h in stored] == [
        (False, False), (True, True), (False, False)]


def test_transactional_bits_are_layout_v2s_alone() -> None:
    data = txn_batch(17)
    header = mp.validate_batch(data)
    assert header.is_transactional and not header.is_control and header.attributes == 0x10
    mp.check_records(data, header)
    assert data[mp.HEADER_SIZE_V2 - 1] == 0x10
    with pytest.raises(LocalProtocolError, match="producer_id"):
        mp.encode_batch(RECORDS, transactional=True)
    with pytest.raises(LocalProtocolError, match="base_sequence is -1"):
        mp.encode_batch(RECORDS, producer_id=PID, producer_epoch=0, base_sequence=0,
                        control=True)
    # a v1 batch (or v0) whose attributes say transactional: CORRUPT_MESSAGE, as today
    v1 = bytearray(mp.encode_batch(RECORDS))
    v1[35] = 0x10
    v1[30:35] = b"\xce" + struct.pack(">I", mp.batch_crc(v1, 0, len(v1)))
    with pytest.raises(CorruptBatchError, match="attributes 16") as info:
        mp.validate_batch(bytes(v1))
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE
    # a v2 batch with another bit
    other = bytearray(data)
    other[52] = 0x40
    other[47:52] = b"\xce" + struct.pack(">I", mp.batch_crc(other, 0, len(other)))
    with pytest.raises(CorruptBatchError, match="attributes 64"):
        mp.validate_batch(bytes(other))
    with pytest.raises(CorruptBatchError, match="attributes 64"):
        list(iter_any_batch_spans(bytes(other)))


def test_batch_writer_builds_a_transactional_batch() -> None:
    writer = BatchWriter(transactional=True)
    for r in RECORDS:
        writer.append(r.key, r.value, r.timestamp_ms, r.headers)
    built = writer.build(producer_id=PID, producer_epoch=EPOCH, base_sequence=0)
    assert built == txn_batch(0)
    bare = BatchWriter(transactional=True)
    bare.append(None, b"x", TS)
    with pytest.raises(LocalProtocolError, match="producer_id"):
        bare.build()


def test_produce_refuses_a_clients_control_batch_in_either_format() -> None:
    """INVALID_RECORD, as Kafka's broker answers one (LogValidator); checked after the
    CRC, so a corrupt one is still CORRUPT_MESSAGE."""
    marker = mp.encode_control_batch(PID, EPOCH, True, 0, TS)
    with pytest.raises(MalformedRecordError, match="control") as info:
        run_steps(mp.check_batch_steps(marker))
    assert info.value.code == ErrorCode.INVALID_RECORD
    bad = bytearray(marker)
    bad[-1] ^= 1
    with pytest.raises(CorruptBatchError, match="CRC") as corrupt:
        mp.validate_batch(bytes(bad))
    assert corrupt.value.code == ErrorCode.CORRUPT_MESSAGE
    kafka_marker = kr.encode_control_batch(PID, EPOCH, True, 0, TS)
    for validation in kr.VALIDATIONS:
        with pytest.raises(MalformedRecordError, match="control") as info:
            kr.validate_batch(kafka_marker, validation=validation)
        assert info.value.code == ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("validation", kr.VALIDATIONS)
@pytest.mark.parametrize("codec", [kr.COMPRESSION_NONE, kr.COMPRESSION_LZ4])
def test_the_kafka_door_takes_transactional_batches(validation: str, codec: int) -> None:
    data = kr.encode_batch(RECORDS, compression=codec, producer_id=PID, producer_epoch=EPOCH,
                           base_sequence=9, is_transactional=True)
    header = kr.validate_batch(data, validation=validation)
    assert header.is_transactional
    batch = producer_batch(header)
    assert batch is not None and batch.transactional and not batch.control
    assert (batch.producer_id, batch.epoch, batch.first_seq) == (PID, EPOCH, 9)


def test_the_kafka_door_refuses_what_kafkas_validator_refuses() -> None:
    no_pid = kr.encode_batch(RECORDS, is_transactional=True)
    with pytest.raises(MalformedRecordError, match="producer id"):
        kr.validate_batch(no_pid)
    no_seq = kr.encode_batch(RECORDS, producer_id=PID, producer_epoch=0, base_sequence=-1)
    with pytest.raises(MalformedRecordError, match="sequence"):
        kr.validate_batch(no_seq, validation=kr.CRC)


def test_the_kafka_marker_is_kafkas_as_kafka_python_reads_it() -> None:
    data = kr.stamp_batch(kr.encode_control_batch(PID, EPOCH, False, 11, TS), 40, 6)
    theirs = DefaultRecordBatch(bytearray(data))
    assert theirs.validate_crc() and theirs.is_control_batch and theirs.is_transactional
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (
        PID, EPOCH, -1)
    [record] = list(theirs)
    assert record.abort and record.version == 0 and record.offset == 40
    assert record.timestamp == TS and record.value == struct.pack(">hi", 0, 11)
    assert kr.control_marker(data) == (False, 11)
    assert kr.decode_records(data) == []


def test_one_marker_in_both_formats_says_the_same() -> None:
    for commit in (True, False):
        ours = encode_marker(kafka_format=False, producer_id=PID, producer_epoch=EPOCH,
                             commit=commit, coordinator_epoch=5, timestamp_ms=TS)
        theirs = encode_marker(kafka_format=True, producer_id=PID, producer_epoch=EPOCH,
                               commit=commit, coordinator_epoch=5, timestamp_ms=TS)
        assert read_control_marker(ours) == read_control_marker(theirs) == (commit, 5)
        assert kr.from_msgpack(ours) == theirs
        assert kr.to_msgpack(theirs) == ours
        for data in (ours, theirs):
            header = read_any_header(data)
            assert header.control and header.transactional and header.record_count == 1
            batch = producer_batch(mp.read_header(data) if data[0] == 0x92
                                   else kr.read_header(data))
            assert batch is not None and batch.control and batch.first_seq == -1
    with pytest.raises(CorruptBatchError, match="not a control batch"):
        read_control_marker(txn_batch())
    with pytest.raises(CorruptBatchError, match="not a control batch"):
        read_control_marker(kr.encode_batch(RECORDS))


def test_conversions_keep_producer_fields_and_bits_at_the_same_offsets() -> None:
    """A msgpack log's transaction read through the Kafka door and a Kafka log's read
    through this one: the data batch keeps its producer, epoch, sequence and
    transactional bit, the marker stays a marker at its offset, the rest as before."""
    plain = stamp_any_batch(mp.encode_batch(RECORDS), 0, 1)
    txn = stamp_any_batch(txn_batch(17), 2, 1)
    marker = stamp_any_batch(mp.encode_control_batch(PID, EPOCH, False, 0, TS + 9), 4, 1)
    log = plain + txn + marker
    kafka = kr.msgpack_to_kafka(log)
    spans = list(kr.iter_batch_spans(kafka))
    assert [(h.base_offset, h.producer_id, h.producer_epoch, h.base_sequence,
             h.is_transactional, h.is_control, h.leader_epoch) for h, _, _ in spans] == [
        (0, -1, -1, -1, False, False, 1), (2, PID, EPOCH, 17, True, False, 1),
        (4, PID, EPOCH, -1, True, True, 1)]
    assert kr.control_marker(kafka, spans[2][1]) == (False, 0)
    assert [r.offset for r in kr.decode_records(kafka)] == [0, 1, 2, 3]
    assert kr.kafka_to_msgpack(kafka) == log   # and back, byte for byte

    theirs = (kr.encode_batch(RECORDS, 10, compression=kr.COMPRESSION_ZSTD, producer_id=PID,
                              producer_epoch=EPOCH, base_sequence=2**31 - 1,
                              is_transactional=True)
              + kr.encode_control_batch(PID, EPOCH, True, 3, TS, 12))
    converted = kr.kafka_to_msgpack(theirs)
    headers = [h for h, _, _ in mp.iter_batch_spans(converted)]
    assert [(h.base_offset, h.version, h.producer_id, h.base_sequence, h.attributes)
            for h in headers] == [(10, mp.BATCH_V2, PID, 2**31 - 1, 0x10),
                                  (12, mp.BATCH_V2, PID, -1, 0x30)]
    assert mp.control_marker(converted, len(converted) - len(
        mp.encode_control_batch(PID, EPOCH, True, 3, TS))) == (True, 3)
    assert [r.value for r in mp.decode_records(converted)] == [b"v1", b"v2"]


def test_a_gappy_transactional_batch_numbers_each_run_from_its_first_record() -> None:
    """Compaction leaves gaps; each run becomes a v2 batch whose base sequence is its
    first record's (wrapping past 2**31 - 1)."""
    from .kafka.kafka_batch_tools import reframe

    recs = [BatchRecord(b"%d" % i, None, (), TS + i) for i in range(4)]
    full = kr.encode_batch(recs, 20, producer_id=PID, producer_epoch=1,
                           base_sequence=2**31 - 2, is_transactional=True)
    body = bytearray()
    for delta, r in zip((0, 1, 5, 6), recs, strict=True):
        one = kr.encode_batch([r], 0)[kr.HEADER_SIZE:]
        body += one[:3] + kr._zz(delta) + one[4:]
    gappy = reframe(full, records=bytes(body), last_offset_delta=6)
    headers = [h for h, _, _ in mp.iter_batch_spans(kr.to_msgpack(gappy))]
    assert [(h.base_offset, h.record_count, h.base_sequence, h.is_transactional)
            for h in headers] == [(20, 2, 2**31 - 2, True), (25, 2, 3, True)]


def test_a_control_batch_without_a_producer_converts_to_nothing() -> None:
    control = kr.encode_batch([BatchRecord(value=b"\0" * 6, key=b"\0\0\0\0", timestamp_ms=TS)],
                              5, is_control=True)
    assert kr.to_msgpack(control) == b""
    assert kr.control_marker(control) == (False, 0)


@pytest.mark.parametrize(("key", "value", "match"), [
    (b"\0\0\0", b"\0" * 6, "key"),
    (b"\0\0\0\x05", b"\0" * 6, "type 5"),
    (b"\xff\xff\0\x01", b"\0" * 6, "version -1"),
    (b"\0\0\0\x01", b"\0\0\0", "value"),
    (b"\0\0\0\x01", None, "value"),
])
def test_a_control_record_that_is_no_marker_is_corrupt(key: bytes, value: bytes | None,
                                                       match: str) -> None:
    data = kr.encode_batch([BatchRecord(value, key, (), TS)], producer_id=PID,
                           producer_epoch=0, is_control=True, is_transactional=True)
    with pytest.raises(CorruptBatchError, match=match):
        read_control_marker(data)
    with pytest.raises(CorruptBatchError, match=match):
        mp.parse_control_record(key, value)
    # a later version's longer key and value are read as Kafka reads them
    assert mp.parse_control_record(b"\0\x01\0\x01++", b"\0\x01\0\0\0\x09++") == (True, 9)
