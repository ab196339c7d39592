"""Batches as a partition log holds them: msgpack (docs/protocol.md §5) and Kafka's
(magic 2) side by side, told apart by their first byte.

A msgpack batch starts with ``0x92``; a Kafka batch with its int64 base offset, whose
first byte is never ``0x92`` (that would be a negative offset). Storage needs the same
few facts of either (where a batch ends, its offsets, its leader epoch, a timestamp for
retention, whether its CRC holds, whether it is transactional or a transaction marker),
and patches the same two fields in either (base offset and partition leader epoch, under
neither CRC). :class:`StoredHeader` carries those facts; the functions here read, split,
check and stamp a mix of both formats, so a log may hold both, in any order, and recover
them after a crash. A transaction marker (a control batch) is built and read the same
way in either format (:func:`encode_marker`, :func:`read_control_marker`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from groupwire.protocol.batches import (
    BATCH_V0,
    BATCH_V1,
    BatchHeader,
    CorruptBatchError,
    DecodedRecord,
    batch_crc,
    control_marker,
    encode_control_batch,
    header_size,
    stamp_batch,
    upconvert_v0,
    with_base_offset,
)
from groupwire.protocol.batches import decode_records as decode_msgpack_records
from groupwire.protocol.batches import read_header as read_msgpack_header
from groupwire.protocol.kafka import records as kafka

__all__ = [
    "KAFKA_VERSION",
    "MSGPACK_MARKER",
    "AnyHeader",
    "StoredHeader",
    "as_stored",
    "crc_matches",
    "decode_any_records",
    "encode_marker",
    "is_kafka_batch",
    "iter_any_batch_spans",
    "read_any_header",
    "read_control_marker",
    "stamp_any_batch",
    "stamp_stored",
    "stamped_header",
    "validate_any_batch",
]

MSGPACK_MARKER: Final = 0x92
"""The first byte of every msgpack batch (an array of 2), and of no Kafka batch."""
KAFKA_VERSION: Final = kafka.MAGIC
""":attr:`StoredHeader.version` of a Kafka batch: its magic, 2. msgpack layouts are 0,
1 and 2 (a v2 batch's version is 2 too): tell the formats apart by
:attr:`StoredHeader.kafka`, never by the version."""


@dataclass(frozen=True, slots=True)
class StoredHeader:
    """What storage needs of one batch, whichever its format."""

    kafka: bool
    version: int
    """msgpack layout (0, 1 or 2), or :data:`KAFKA_VERSION` (with ``kafka``)."""
    base_offset: int
    offset_count: int
    """Offsets the batch spans: its record count (a Kafka batch's lastOffsetDelta + 1;
    the same for every batch a producer writes)."""
    record_count: int
    leader_epoch: int
    timestamp_ms: int
    """The timestamp the segment index keeps, and retention goes by: a msgpack batch's
    base timestamp (its header has no other), a Kafka batch's maxTimestamp."""
    crc: int
    header_size: int
    """Bytes before the records: where the first piece of a stepped write may grow."""
    transactional: bool = False
    """Written by a transactional producer (attributes bit 0x10, §5.5): its records
    count for consumers once its transaction commits."""
    control: bool = False
    """A transaction marker (attributes bit 0x20): a broker's, never a producer's."""

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.offset_count - 1

    @property
    def next_offset(self) -> int:
        """The offset the batch after this one starts at."""
        return self.base_offset + self.offset_count


AnyHeader = BatchHeader | kafka.KafkaBatchHeader | StoredHeader
"""What :func:`as_stored` takes: either format's own header, or a stored one."""


def as_stored(header: AnyHeader) -> StoredHeader:
    """``header`` as storage sees it."""
    if isinstance(header, StoredHeader):
        return header
    if isinstance(header, kafka.KafkaBatchHeader):
        return StoredHeader(kafka=True, version=KAFKA_VERSION, base_offset=header.base_offset,
                            offset_count=header.last_offset_delta + 1,
                            record_count=header.record_count, leader_epoch=header.leader_epoch,
                            timestamp_ms=header.max_timestamp_ms, crc=header.crc,
                            header_size=kafka.HEADER_SIZE,
                            transactional=header.is_transactional,
                            control=header.is_control)
    return StoredHeader(kafka=False, version=header.version, base_offset=header.base_offset,
                        offset_count=header.record_count, record_count=header.record_count,
                        leader_epoch=header.leader_epoch,
                        timestamp_ms=header.base_timestamp_ms, crc=header.crc,
                        header_size=header.header_size,
                        transactional=header.is_transactional, control=header.is_control)


def is_kafka_batch(buf: bytes | memoryview, pos: int = 0) -> bool:
    """Whether the batch at ``pos`` is Kafka's (by its first byte)."""
    return buf[pos] != MSGPACK_MARKER


def read_any_header(buf: bytes | memoryview, pos: int = 0) -> StoredHeader:
    """The header at ``pos`` of either format, read with ``struct`` alone (no CRC, no
    records); raises :class:`CorruptBatchError` if it is not one."""
    if pos >= len(buf):
        raise CorruptBatchError("no batch: the buffer ends", position=pos)
    if buf[pos] == MSGPACK_MARKER:
        return as_stored(read_msgpack_header(buf, pos))
    return as_stored(kafka.read_header(buf, pos))


def iter_any_batch_spans(buf: bytes | memoryview, *, check_crc: bool = True,
                         ) -> Iterator[tuple[StoredHeader, int, int]]:
    """``(header, start, end)`` of each batch in a concatenation of both formats.

    The contract of ``protocol.batches.iter_batch_spans``: each batch is checked as its
    format's stored batches are (the CRC only with ``check_crc``); a truncated or bad
    batch raises :class:`CorruptBatchError` whose ``position`` is its start, after every
    good batch before it has been yielded.
    """
    for header, start, end in kafka.iter_mixed_spans(buf, check_crc=check_crc):
        yield as_stored(header), start, end


def crc_matches(buf: bytes | memoryview, start: int, end: int,
                header: StoredHeader) -> bool:
    """Whether the batch spanning ``buf[start:end]`` carries the CRC its bytes give."""
    if header.kafka:
        return kafka.batch_crc32c(buf, start, end) == header.crc
    return batch_crc(buf, start, end) == header.crc


def validate_any_batch(data: bytes | memoryview) -> StoredHeader:
    """``data`` is exactly one stored batch of either format, whole and CRC-checked
    (not its records: a log's own batches were checked when produced)."""
    spans = iter_any_batch_spans(data)
    try:
        header, _, end = next(spans)
    except StopIteration:
        raise CorruptBatchError("no batch: the buffer is empty") from None
    if end != len(data):
        raise CorruptBatchError(f"{len(data) - end} bytes after the batch", position=end)
    return header


def stamped_header(header: StoredHeader, base_offset: int, leader_epoch: int, *,
                   keep_v0: bool = False) -> StoredHeader:
    """``header`` as :func:`stamp_stored` leaves its batch: at ``base_offset`` with
    ``leader_epoch``, a msgpack v0 batch upconverted to v1 unless ``keep_v0`` (then
    only its base offset is set: v0 has no epoch). A v1 or v2 batch keeps its layout."""
    if header.kafka:
        return dataclasses.replace(header, base_offset=base_offset, leader_epoch=leader_epoch)
    if header.version == BATCH_V0:
        if keep_v0:
            return dataclasses.replace(header, base_offset=base_offset)
        return dataclasses.replace(header, base_offset=base_offset, version=BATCH_V1,
                                   leader_epoch=leader_epoch,
                                   header_size=header_size(BATCH_V1))
    return dataclasses.replace(header, base_offset=base_offset, leader_epoch=leader_epoch)


def stamp_stored(data: bytes | memoryview, stored: StoredHeader) -> bytes:
    """A batch (or its first piece) as ``stored`` says it is stored: base offset and,
    but in msgpack v0, leader epoch written in; a msgpack v0 batch whose stored header
    is v1 is upconverted first (v1 and v2 batches are stamped as they are)."""
    if stored.kafka:
        return kafka.stamp_batch(data, stored.base_offset, stored.leader_epoch)
    if stored.version == BATCH_V0:
        return with_base_offset(data, stored.base_offset)
    if data[1] == 0x95:
        data = upconvert_v0(data)
    return stamp_batch(data, stored.base_offset, stored.leader_epoch)


def stamp_any_batch(data: bytes | memoryview, base_offset: int,
                    leader_epoch: int) -> bytes:
    """A batch of either format (or its first piece) with its base offset and partition
    leader epoch set; a msgpack v0 batch becomes v1 to carry the epoch (v1 and v2
    carry one already)."""
    if data[0] != MSGPACK_MARKER:
        return kafka.stamp_batch(data, base_offset, leader_epoch)
    if data[1] == 0x95:
        data = upconvert_v0(data)
    return stamp_batch(data, base_offset, leader_epoch)


def decode_any_records(data: bytes | memoryview, min_offset: int = 0,
                       ) -> list[DecodedRecord]:
    """Every record at ``min_offset`` or above of a concatenation of both formats, as
    each format's ``decode_records`` reads it (Kafka control batches hold none).
    Raises :class:`CorruptBatchError` at the first bad batch or record."""
    view = memoryview(data)
    runs: list[tuple[bool, int, int]] = []   # (kafka, start, end) of same-format runs
    for header, start, end in iter_any_batch_spans(view):
        if header.next_offset <= min_offset:
            continue
        if runs and runs[-1][0] == header.kafka and runs[-1][2] == start:
            runs[-1] = (header.kafka, runs[-1][1], end)
        else:
            runs.append((header.kafka, start, end))
    out: list[DecodedRecord] = []
    for is_kafka, start, end in runs:
        try:
            if is_kafka:
                out += kafka.decode_records(view[start:end], min_offset)
            else:
                out += decode_msgpack_records(bytes(view[start:end]), min_offset)
        except CorruptBatchError as exc:
            exc.position += start
            raise
    return out


def encode_marker(*, kafka_format: bool, producer_id: int, producer_epoch: int,
                  commit: bool, coordinator_epoch: int, timestamp_ms: int) -> bytes:
    """A transaction marker (a control batch), as a producer's batch is before the broker
    stamps it (base offset 0, leader epoch -1): Kafka's if ``kafka_format``, else msgpack
    layout v2 (§5.1). Both hold the same control-record key and marker value."""
    if kafka_format:
        return kafka.encode_control_batch(producer_id, producer_epoch, commit,
                                          coordinator_epoch, timestamp_ms)
    return encode_control_batch(producer_id, producer_epoch, commit, coordinator_epoch,
                                timestamp_ms)


def read_control_marker(data: bytes | memoryview, pos: int = 0) -> tuple[bool, int]:
    """``(commit, coordinator_epoch)`` of the control batch at ``pos`` of either format
    (its CRC checked); :class:`CorruptBatchError` if it is not a transaction marker."""
    if pos >= len(data):
        raise CorruptBatchError("no batch: the buffer ends", position=pos)
    if data[pos] == MSGPACK_MARKER:
        return control_marker(data, pos)
    return kafka.control_marker(data, pos)
