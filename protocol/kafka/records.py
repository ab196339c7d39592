"""Kafka's record batches (magic 2, KIP-98), sans I/O: check, stamp, read, build, convert.

A Kafka producer's batch is stored as sent and served byte for byte to Kafka consumers;
only where the two doors mix is a batch converted (:func:`to_msgpack`,
:func:`from_msgpack`, and for a fetched mix of both formats :func:`kafka_to_msgpack`,
:func:`msgpack_to_kafka`). The first byte tells the formats apart: a msgpack batch
starts with ``0x92``, a Kafka one with its int64 base offset, whose first byte is never
``0x92`` (that would be a negative offset).

The header (61 bytes) is read with ``struct`` alone; the CRC-32C covers the attributes
and everything after, never the base offset nor the partition leader epoch, which the
broker writes (:func:`stamp_batch`). Records may be compressed as one blob; decompressing
is always bounded (``max_decompressed``), so a small blob claiming gigabytes is refused
before it is held in memory. Codecs come from ``cramjam``: gzip streams, raw snappy
(librdkafka) or xerial-framed snappy (the Java client, kafka-python), LZ4 frames
(independent blocks, as Kafka's Java client requires) and zstd frames.

Checking a produced batch (:func:`check_batch_steps`) walks every record's framing (each
length, offset delta, key, value and header) without building anything: Python is slow
per record, so the walk is split into steps of :data:`WALK_RECORDS` records, and the CRC
into :data:`CRC_PIECE` bytes, so that a big batch does not hold the broker's loop.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

import cramjam
import google_crc32c
import msgpack

from groupwire.protocol.batches import (
    BATCH_V1,
    BATCH_V2,
    MIN_BATCH_SIZE,
    NO_SEQUENCE,
    BatchHeader,
    BatchRecord,
    CorruptBatchError,
    DecodedRecord,
    MalformedRecordError,
    RecordError,
    batch_crc,
    check_header_fields,
    control_record_key,
    header_size,
    marker_value,
    parse_control_record,
)
from groupwire.protocol.batches import decode_records as decode_msgpack_records
from groupwire.protocol.batches import encode_batch as encode_msgpack_batch
from groupwire.protocol.batches import read_header as read_msgpack_header
from groupwire.protocol.errors import ErrorCode, LocalProtocolError
from groupwire.protocol.framing import DEFAULT_MAX_FRAME_BYTES
from groupwire.protocol.steps import Steps, run_steps

__all__ = [
    "COMPRESSION_GZIP",
    "COMPRESSION_LZ4",
    "COMPRESSION_NONE",
    "COMPRESSION_SNAPPY",
    "COMPRESSION_ZSTD",
    "HEADER_SIZE",
    "MAGIC",
    "MAX_DECOMPRESSED_BYTES",
    "DecompressionLimitError",
    "KafkaBatchHeader",
    "RecordLike",
    "UnsupportedMessageFormatError",
    "batch_crc32c",
    "check_batch_steps",
    "control_marker",
    "decode_records",
    "decompress_records",
    "encode_batch",
    "encode_control_batch",
    "from_msgpack",
    "iter_batch_spans",
    "iter_mixed_spans",
    "kafka_to_msgpack",
    "msgpack_to_kafka",
    "read_header",
    "stamp_batch",
    "to_msgpack",
    "validate_batch",
]

MAGIC: Final = 2
HEADER_SIZE: Final = 61
"""Bytes before the records: from baseOffset to the records count, inclusive."""
LOG_OVERHEAD: Final = 12
"""baseOffset and batchLength: what ``batchLength`` does not count."""
_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
_STAMP: Final = struct.Struct(">q")
_EPOCH: Final = struct.Struct(">i")
_CRC_AT: Final = 17
_ATTRIBUTES_AT: Final = 21
"""The CRC covers ``batch[21:]``."""
_MAGIC_AT: Final = 16
_U32: Final = struct.Struct(">I")
_I32: Final = struct.Struct(">i")
_U16: Final = struct.Struct(">H")

COMPRESSION_NONE: Final = 0
COMPRESSION_GZIP: Final = 1
COMPRESSION_SNAPPY: Final = 2
COMPRESSION_LZ4: Final = 3
COMPRESSION_ZSTD: Final = 4
_CODEC_NAMES: Final = ("none", "gzip", "snappy", "lz4", "zstd")
_COMPRESSION_MASK: Final = 0x07

STRICT: Final = "strict"
RELAXED: Final = "relaxed"
CRC: Final = "crc"
VALIDATIONS: Final = (STRICT, RELAXED, CRC)
"""How much of a produced batch :func:`check_batch_steps` checks: its records walked in
every batch, in uncompressed ones only, or in none (header and CRC alone)."""
_TIMESTAMP_TYPE: Final = 0x08
_TRANSACTIONAL: Final = 0x10
_CONTROL: Final = 0x20
_DELETE_HORIZON: Final = 0x40

MAX_DECOMPRESSED_BYTES: Final = 4 * DEFAULT_MAX_FRAME_BYTES
"""Default bound on one batch's records once decompressed (64 MiB): four times the
largest frame a client may send, far above what a producer's batch of 1 MiB holds."""

CRC_PIECE: Final = 1 << 20
"""Bytes :func:`check_batch_steps` checksums in one step (~0.1 ms with the C CRC)."""
WALK_RECORDS: Final = 1024
"""Records whose framing :func:`check_batch_steps` walks in one step (~1 ms)."""

_MIN_RECORD_BODY: Final = 6
"""attributes, timestampDelta, offsetDelta, keyLength, valueLength, header count: a
byte each at least."""
_MIN_INT32: Final = -(1 << 31)
_MAX_INT32: Final = (1 << 31) - 1
_MAX_INT64: Final = (1 << 63) - 1
_MAX_INT16: Final = (1 << 15) - 1
_SEQUENCES: Final = 1 << 31


# --- errors -------------------------------------------------------------------------------


class UnsupportedMessageFormatError(CorruptBatchError):
    """A legacy message set (magic 0 or 1): Kafka's own brokers of 4.0 refuse them too."""

    code: ErrorCode = ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT


class DecompressionLimitError(CorruptBatchError):
    """Records that decompress to more than the bound the caller set (or claim to)."""

    code: ErrorCode = ErrorCode.MESSAGE_TOO_LARGE


# --- the header ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KafkaBatchHeader:
    """The 61-byte header of one RecordBatch (magic 2), field for field."""

    base_offset: int
    batch_length: int
    """Bytes after this field: the batch spans ``batch_length + 12`` bytes."""
    leader_epoch: int
    """Kafka's partitionLeaderEpoch: the broker's to set, like the base offset."""
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp_ms: int
    max_timestamp_ms: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes of the whole batch."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """The offset the batch after this one starts at."""
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        """0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return self.attributes & _COMPRESSION_MASK

    @property
    def log_append_time(self) -> bool:
        """timestampType is LogAppendTime: every record's timestamp is ``max_timestamp_ms``."""
        return bool(self.attributes & _TIMESTAMP_TYPE)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL)

    @property
    def has_delete_horizon(self) -> bool:
        """Compaction set ``base_timestamp_ms`` to when tombstones may go (KIP-534)."""
        return bool(self.attributes & _DELETE_HORIZON)

    @property
    def is_control(self) -> bool:
        """A transaction marker: its records are not the application's."""
        return bool(self.attributes & _CONTROL)


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> KafkaBatchHeader:
    """The header at ``pos``; checks only that it is all there and says magic 2."""
    avail = len(buf) - pos
    if avail > _MAGIC_AT:
        magic = buf[pos + _MAGIC_AT]
        if magic != MAGIC:
            _bad_magic(magic, pos)
    if avail < HEADER_SIZE:
        raise CorruptBatchError(f"truncated header: {avail} bytes, need {HEADER_SIZE}",
                                position=pos)
    (base, length, epoch, magic, crc, attributes, last_delta, base_ts, max_ts, pid,
     pepoch, base_seq, count) = _HEADER.unpack_from(buf, pos)
    return KafkaBatchHeader(base, length, epoch, magic, crc, attributes, last_delta,
                            base_ts, max_ts, pid, pepoch, base_seq, count)


def _bad_magic(magic: int, pos: int) -> None:
    if magic in (0, 1):
        raise UnsupportedMessageFormatError(
            f"message format v{magic} (magic {magic}) is not supported: send RecordBatch "
            "v2 (magic 2)", position=pos)
    raise CorruptBatchError(f"unknown magic byte {magic}", position=pos)


def batch_crc32c(buf: bytes | bytearray | memoryview, start: int, end: int) -> int:
    """The CRC-32C a batch spanning ``buf[start:end]`` should carry."""
    return int(google_crc32c.value(bytes(buf[start + _ATTRIBUTES_AT:end])))


def _check_header(header: KafkaBatchHeader, pos: int, size: int) -> int:
    """The end of the batch at ``pos`` in a buffer of ``size`` bytes, after the checks
    every stored batch passes (no CRC, no records)."""
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptBatchError(f"batchLength {header.batch_length} is shorter than a header",
                                position=pos)
    end = pos + header.batch_length + LOG_OVERHEAD
    if end > size:
        raise CorruptBatchError(
            f"truncated batch: batchLength says {header.batch_length + LOG_OVERHEAD} bytes,"
            f" {size - pos} left", position=pos)
    if header.compression > COMPRESSION_ZSTD:
        raise CorruptBatchError(f"unknown compression codec {header.compression}",
                                position=pos)
    if header.base_offset < 0:
        raise CorruptBatchError(f"negative base offset {header.base_offset}", position=pos)
    if not 0 <= header.record_count <= header.last_offset_delta + 1:
        raise CorruptBatchError(
            f"records count {header.record_count} does not fit lastOffsetDelta "
            f"{header.last_offset_delta}", position=pos)
    return end


def iter_batch_spans(buf: bytes | bytearray | memoryview, *, check_crc: bool = True,
                     ) -> Iterator[tuple[KafkaBatchHeader, int, int]]:
    """``(header, start, end)`` of each batch in a concatenation of whole Kafka batches.

    Each is checked as stored batches are (header, length, CRC with ``check_crc``), not
    decompressed. A truncated or bad batch raises :class:`CorruptBatchError` whose
    ``position`` is its start, after every good batch before it has been yielded.
    """
    size = len(buf)
    pos = 0
    while pos < size:
        header = read_header(buf, pos)
        end = _check_header(header, pos, size)
        if check_crc and batch_crc32c(buf, pos, end) != header.crc:
            raise CorruptBatchError("CRC mismatch", position=pos)
        yield header, pos, end
        pos = end


def stamp_batch(data: bytes | bytearray | memoryview, base_offset: int,
                leader_epoch: int) -> bytes:
    """``data`` (a batch, or its first piece of at least 17 bytes) with its base offset
    and partition leader epoch set: what a broker does at append. Neither is under the
    CRC."""
    view = memoryview(data)
    if len(view) <= _MAGIC_AT or view[_MAGIC_AT] != MAGIC:
        raise LocalProtocolError("not a Kafka batch (magic 2)")
    if not 0 <= base_offset <= _MAX_INT64:
        raise LocalProtocolError(f"base_offset out of range: {base_offset}")
    if not _MIN_INT32 <= leader_epoch <= _MAX_INT32:
        raise LocalProtocolError(f"leader_epoch out of range: {leader_epoch}")
    return b"".join((_STAMP.pack(base_offset), view[8:12], _EPOCH.pack(leader_epoch),
                     view[16:]))


# --- decompression ------------------------------------------------------------------------


_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = 16
"""Magic, then int32 version and int32 compatible version."""
_LZ4_MAGIC: Final = 0x184D2204
_ZSTD_MAGIC: Final = 0xFD2FB528
_LZ4_BLOCK_MAX: Final = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}
_FIRST_GUESS: Final = 64 << 10
_OUT_OF_ROOM: Final = "whole buffer"
"""In cramjam's error when the output buffer is too small ("failed to write whole
buffer"); any other error means corrupt input. A test pins the wording."""


def decompress_records(header: KafkaBatchHeader, data: bytes | bytearray | memoryview,
                       pos: int = 0, *, max_decompressed: int = MAX_DECOMPRESSED_BYTES,
                       ) -> bytes | bytearray | memoryview:
    """The records section of the batch at ``data[pos:]``, decompressed if it is.

    An uncompressed batch's records are returned as they lie (a slice). Raises
    :class:`DecompressionLimitError` past ``max_decompressed`` bytes (nothing bigger is
    ever allocated) and :class:`CorruptBatchError` if the blob does not decompress.
    """
    start, end = pos + HEADER_SIZE, pos + header.size
    codec = header.compression
    if codec == COMPRESSION_NONE:
        return data[start:end]
    blob = memoryview(data)[start:end]
    try:
        if codec == COMPRESSION_SNAPPY:
            return _snappy(blob, max_decompressed, pos)
        if codec == COMPRESSION_GZIP:
            return _grow(cramjam.gzip.decompress_into, blob, _gzip_hint(blob),
                         max_decompressed, pos)
        if codec == COMPRESSION_LZ4:
            hint, exact = _lz4_hint(blob)
            return _grow(cramjam.lz4.decompress_into, blob, hint, max_decompressed, pos,
                         exact=exact)
        if codec == COMPRESSION_ZSTD:
            hint = _zstd_hint(blob)
            return _grow(cramjam.zstd.decompress_into, blob, hint, max_decompressed, pos,
                         exact=hint > 0)
    except (ValueError, TypeError, cramjam.DecompressionError) as exc:
        raise CorruptBatchError(f"{_CODEC_NAMES[codec]} records do not decompress: {exc}",
                                position=pos) from exc
    raise CorruptBatchError(f"unknown compression codec {codec}", position=pos)


def _grow(into: Callable[[memoryview, memoryview], int], blob: memoryview, hint: int,
          limit: int, pos: int, *, exact: bool = False) -> memoryview:
    """Decompress ``blob`` into a buffer of ``hint`` bytes, four times bigger on each
    failure up to ``limit``: cramjam refuses to write past a buffer's end, so nothing
    larger than ``limit`` is ever allocated, and a guess too small costs a retry. An
    ``exact`` hint (a size the frame states and its decoder checks) over ``limit`` is
    refused before anything is allocated."""
    if exact:
        _check_limit(hint, limit, pos)
    size = min(limit, hint if exact else max(hint, _FIRST_GUESS, 4 * len(blob)))
    while True:
        out = bytearray(size)
        try:
            n = into(blob, memoryview(out))
        except cramjam.DecompressionError as exc:
            if _OUT_OF_ROOM not in str(exc):
                raise   # corrupt: the caller says so
            if size >= limit:
                raise DecompressionLimitError(
                    f"records decompress to more than the limit of {limit} bytes",
                    position=pos) from None
            size = min(limit, max(size * 4, _FIRST_GUESS))
            continue
        return memoryview(out)[:n]


def _snappy(blob: memoryview, limit: int, pos: int) -> memoryview:
    """Raw snappy (librdkafka), or xerial's framing of raw blocks (the Java client):
    each raw block states its length first, so the output is sized exactly."""
    if bytes(blob[:8]) != _XERIAL_MAGIC:
        n = cramjam.snappy.decompress_raw_len(blob)
        _check_limit(n, limit, pos)
        out = bytearray(n)
        cramjam.snappy.decompress_raw_into(blob, memoryview(out))
        return memoryview(out)
    chunks: list[memoryview] = []
    total = 0
    at = _XERIAL_HEADER
    while at < len(blob):
        if at + 4 > len(blob):
            raise CorruptBatchError("truncated xerial snappy block length", position=pos)
        n = _I32.unpack_from(blob, at)[0]
        if n < 0 or at + 4 + n > len(blob):
            raise CorruptBatchError("xerial snappy block overruns the records", position=pos)
        chunk = blob[at + 4:at + 4 + n]
        total += cramjam.snappy.decompress_raw_len(chunk)
        _check_limit(total, limit, pos)
        chunks.append(chunk)
        at += 4 + n
    out = bytearray(total)
    view = memoryview(out)
    done = 0
    for chunk in chunks:
        n = cramjam.snappy.decompress_raw_len(chunk)
        cramjam.snappy.decompress_raw_into(chunk, view[done:done + n])
        done += n
    return view


def _check_limit(n: int, limit: int, pos: int) -> None:
    if n > limit:
        raise DecompressionLimitError(
            f"records claim {n} bytes decompressed, over the limit of {limit}", position=pos)


def _gzip_hint(blob: memoryview) -> int:
    """ISIZE, the gzip trailer's length mod 2**32: right for one member under 4 GiB,
    believed up to deflate's best ratio (1032:1); 0 for what is no gzip stream."""
    if len(blob) < 18 or blob[0] != 0x1F or blob[1] != 0x8B:
        return 0
    return min(int.from_bytes(blob[-4:], "little"), 1032 * len(blob))


def _lz4_hint(blob: memoryview) -> tuple[int, bool]:
    """The frame's content size if it states one (exact: True), else its blocks' count
    times their maximum size: a bound the output of one frame cannot exceed."""
    if len(blob) < 7 or int.from_bytes(blob[:4], "little") != _LZ4_MAGIC:
        return 0, False
    flg, bd = blob[4], blob[5]
    at = 6
    if flg & 0x08:
        if len(blob) < 14:
            return 0, False
        return int.from_bytes(blob[6:14], "little"), True
    if flg & 0x01:
        at += 4   # dictionary id
    at += 1   # header checksum
    block_max = _LZ4_BLOCK_MAX.get((bd >> 4) & 0x07, 0)
    checksum = 4 if flg & 0x10 else 0
    blocks = 0
    size = len(blob)
    while at + 4 <= size:
        n = int.from_bytes(blob[at:at + 4], "little")
        if n == 0:
            break
        blocks += 1
        at += 4 + (n & 0x7FFFFFFF) + checksum
    return blocks * block_max, False


def _zstd_hint(blob: memoryview) -> int:
    """The first frame's content size if its header states it."""
    if len(blob) < 6 or int.from_bytes(blob[:4], "little") != _ZSTD_MAGIC:
        return 0
    fhd = blob[4]
    single = (fhd >> 5) & 1
    at = 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3]
    width = (1 if single else 0, 2, 4, 8)[fhd >> 6]
    if not width or at + width > len(blob):
        return 0
    n = int.from_bytes(blob[at:at + width], "little")
    return n + 256 if width == 2 else n


def _compress(codec: int, data: bytes) -> bytes:
    if codec == COMPRESSION_GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == COMPRESSION_SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == COMPRESSION_LZ4:
        compressor = cramjam.lz4.Compressor(block_linked=False)
        compressor.compress(data)
        return bytes(compressor.finish())
    if codec == COMPRESSION_ZSTD:
        return bytes(cramjam.zstd.compress(data, level=3))
    raise LocalProtocolError(f"unknown compression codec {codec}")


# --- varints ------------------------------------------------------------------------------


class _Bad(Exception):
    """A record's framing is wrong; the message says how (turned into a RecordError)."""


def _uvarint(buf: bytes, pos: int, limit: int) -> tuple[int, int]:
    """The unsigned varint at ``pos`` (``limit`` bytes at most: 5 for an int32, 10 for
    an int64) and where it ends, still zigzagged."""
    result = shift = 0
    for at in range(pos, pos + limit):
        b = buf[at]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, at + 1
        shift += 7
    raise _Bad(f"varint longer than {limit} bytes")


def _varint(buf: bytes, pos: int, limit: int) -> tuple[int, int]:
    """The zigzag varint at ``pos``, decoded, and where it ends."""
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    n, pos = _uvarint(buf, pos, limit)
    return (n >> 1) ^ -(n & 1), pos


def _uvarint_bytes(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL: Final = tuple(_uvarint_bytes(z) for z in range(1 << 12))
"""Encoded zigzag values below 4096: numbers from -2048 to 2047."""


def _zz(n: int) -> bytes:
    """``n`` as a zigzag varint."""
    z = (n << 1) if n >= 0 else ((-n) << 1) - 1
    return _SMALL[z] if z < 4096 else _uvarint_bytes(z)


# --- walking and reading records ----------------------------------------------------------


def _walk(buf: bytes, pos: int, first: int, stop: int) -> int:
    """Check the framing of records ``first``..``stop - 1`` starting at ``pos``; returns
    where they end. Each record's length must cover exactly its fields, its offset delta
    must be its index, key, value and header lengths -1 (null) or more. Raises
    :class:`_Bad` with the failing record's index in ``args[1]``.

    About 0.9 µs a record: one- and two-byte varints (nearly all of them) are read
    inline, the rest by :func:`_uvarint`. Varints stay zigzagged where only their sign
    matters (odd is negative: 1 is -1, null; 3 or more odd is an error).
    """
    i = first
    try:
        for i in range(first, stop):
            b = buf[pos]   # length
            if b < 0x80:
                n = b
                pos += 1
            elif buf[pos + 1] < 0x80:
                n = (b & 0x7F) | (buf[pos + 1] << 7)
                pos += 2
            else:
                n, pos = _uvarint(buf, pos, 5)
            if n & 1 or n < 2 * _MIN_RECORD_BODY:
                raise _Bad(f"record length {(n >> 1) ^ -(n & 1)}")
            start = pos
            end = pos + (n >> 1)
            b = buf[pos + 1]   # timestampDelta, after the attributes
            if b < 0x80:
                pos += 2
            elif buf[pos + 2] < 0x80:
                pos += 3
            else:
                pos = _uvarint(buf, pos + 1, 10)[1]
            z = i << 1   # offsetDelta: the index
            if z < 0x80:
                if buf[pos] != z:
                    raise _Bad(f"offsetDelta where {i} was expected")
                pos += 1
            elif z < 0x4000 and buf[pos] == (z & 0x7F) | 0x80 and buf[pos + 1] == z >> 7:
                pos += 2
            else:
                n, pos = _uvarint(buf, pos, 5)
                if n != z:
                    raise _Bad(f"offsetDelta {(n >> 1) ^ -(n & 1)} where {i} was expected")
            b = buf[pos]   # key
            if b == 1:
                pos += 1
            elif b < 0x80:
                if b & 1:
                    raise _Bad(f"key length {(b >> 1) ^ -1}")
                pos += 1 + (b >> 1)
            else:
                n, pos = _uvarint(buf, pos, 5)
                if n & 1:
                    raise _Bad(f"key length {(n >> 1) ^ -1}")
                pos += n >> 1
            b = buf[pos]   # value
            if b < 0x80:
                n = b
                pos += 1
            elif buf[pos + 1] < 0x80:
                n = (b & 0x7F) | (buf[pos + 1] << 7)
                pos += 2
            else:
                n, pos = _uvarint(buf, pos, 5)
            if n & 1:
                if n != 1:
                    raise _Bad(f"value length {(n >> 1) ^ -1}")
            else:
                pos += n >> 1
            if buf[pos] == 0:   # no headers
                pos += 1
            else:
                pos = _walk_headers(buf, pos, end)
            if pos != end:
                raise _Bad(f"record length says {end - start} bytes, its fields take "
                           f"{pos - start}")
    except IndexError:
        raise _Bad("truncated record", i) from None
    except _Bad as exc:
        raise _Bad(exc.args[0], i) from None
    return pos


def _walk_lengths(buf: bytes, pos: int, first: int, stop: int) -> int:
    """:func:`_walk` reading only each record's length (about 0.25 µs a record)."""
    i = first
    try:
        for i in range(first, stop):  # noqa: B007 (the handlers name it)
            b = buf[pos]
            if b < 0x80:
                n = b
                pos += 1
            elif buf[pos + 1] < 0x80:
                n = (b & 0x7F) | (buf[pos + 1] << 7)
                pos += 2
            else:
                n, pos = _uvarint(buf, pos, 5)
            if n & 1 or n < 2 * _MIN_RECORD_BODY:
                raise _Bad(f"record length {(n >> 1) ^ -(n & 1)}")
            pos += n >> 1
    except _Bad as exc:
        raise _Bad(exc.args[0], i) from None
    except IndexError:
        raise _Bad("truncated record", i) from None
    return pos


def _walk_headers(buf: bytes, pos: int, end: int) -> int:
    count, pos = _varint(buf, pos, 5)
    if count < 0 or 2 * count > end - pos:
        raise _Bad(f"header count {count}")
    for _ in range(count):
        n, pos = _varint(buf, pos, 5)
        if n < 0:
            raise _Bad(f"header key length {n}")
        n, pos = _varint(buf, pos + n, 5)
        if n > 0:
            pos += n
        elif n < -1:
            raise _Bad(f"header value length {n}")
        if pos > end:
            break
    return pos


_Row = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]
"""offsetDelta, timestamp, key, value, headers."""


def _read(buf: bytes, pos: int, count: int, end: int, base_ts: int,
          fixed_ts: int | None) -> list[_Row]:
    """Every record of a records section: ``buf[pos:end]`` holding ``count`` of them,
    with absolute timestamps (``fixed_ts`` for all if given: LogAppendTime). Inline
    fast paths as in :func:`_walk`."""
    rows: list[_Row] = []
    append = rows.append
    uvarint = _uvarint
    try:
        for _ in range(count):
            b = buf[pos]   # length
            if b < 0x80:
                n = b
                pos += 1
            elif buf[pos + 1] < 0x80:
                n = (b & 0x7F) | (buf[pos + 1] << 7)
                pos += 2
            else:
                n, pos = uvarint(buf, pos, 5)
            start, stop = pos, pos + (n >> 1)
            if n & 1 or n < 2 * _MIN_RECORD_BODY or stop > end:
                raise _Bad(f"record length {(n >> 1) ^ -(n & 1)}")
            b = buf[pos + 1]   # timestampDelta, after the attributes
            if b < 0x80:
                ts = b
                pos += 2
            elif buf[pos + 2] < 0x80:
                ts = (b & 0x7F) | (buf[pos + 2] << 7)
                pos += 3
            else:
                ts, pos = uvarint(buf, pos + 1, 10)
            b = buf[pos]   # offsetDelta
            if b < 0x80:
                delta = b
                pos += 1
            elif buf[pos + 1] < 0x80:
                delta = (b & 0x7F) | (buf[pos + 1] << 7)
                pos += 2
            else:
                delta, pos = uvarint(buf, pos, 5)
            b = buf[pos]   # key
            if b == 1:
                key: bytes | None = None
                pos += 1
            else:
                if b < 0x80:
                    n = b
                    pos += 1
                else:
                    n, pos = uvarint(buf, pos, 5)
                if n & 1:
                    raise _Bad(f"key length {(n >> 1) ^ -1}")
                key = buf[pos:pos + (n >> 1)]
                pos += n >> 1
            b = buf[pos]   # value
            if b == 1:
                value: bytes | None = None
                pos += 1
            else:
                if b < 0x80:
                    n = b
                    pos += 1
                elif buf[pos + 1] < 0x80:
                    n = (b & 0x7F) | (buf[pos + 1] << 7)
                    pos += 2
                else:
                    n, pos = uvarint(buf, pos, 5)
                if n & 1:
                    raise _Bad(f"value length {(n >> 1) ^ -1}")
                value = buf[pos:pos + (n >> 1)]
                pos += n >> 1
            if buf[pos] == 0:
                headers: list[tuple[str, bytes | None]] = []
                pos += 1
            else:
                headers, pos = _read_headers(buf, pos, stop)
            if pos != stop:
                raise _Bad(f"record length says {stop - start} bytes, its fields take "
                           f"{pos - start}")
            append(((delta >> 1) ^ -(delta & 1),
                    base_ts + ((ts >> 1) ^ -(ts & 1)) if fixed_ts is None else fixed_ts,
                    key, value, headers))
    except IndexError:
        raise _Bad("truncated record", len(rows)) from None
    except _Bad as exc:
        raise _Bad(exc.args[0], len(rows)) from None
    if pos != end:
        raise _Bad(f"{end - pos} bytes after the last record", count)
    return rows


def _read_headers(buf: bytes, pos: int, stop: int) -> tuple[list[tuple[str, bytes | None]], int]:
    count, pos = _varint(buf, pos, 5)
    if count < 0 or 2 * count > stop - pos:
        raise _Bad(f"header count {count}")
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        n, pos = _varint(buf, pos, 5)
        if n < 0 or pos + n > stop:
            raise _Bad(f"header key length {n}")
        # Kafka's clients decode a key that is not UTF-8 with replacement characters
        name = buf[pos:pos + n].decode("utf-8", "replace")
        n, pos = _varint(buf, pos + n, 5)
        if n >= 0:
            if pos + n > stop:
                raise _Bad(f"header value length {n}")
            headers.append((name, buf[pos:pos + n]))
            pos += n
        elif n == -1:
            headers.append((name, None))
        else:
            raise _Bad(f"header value length {n}")
    return headers, pos


def _record_error(exc: _Bad, header: KafkaBatchHeader, pos: int) -> MalformedRecordError:
    index = exc.args[1] if len(exc.args) > 1 else 0
    message = str(exc.args[0])
    return MalformedRecordError(
        f"record {index}: {message}", position=pos, offset=header.base_offset + index,
        record_errors=[RecordError(index, message)])


# --- checking a produced batch ------------------------------------------------------------


def validate_batch(data: bytes, *, max_decompressed: int = MAX_DECOMPRESSED_BYTES,
                   check_fields: bool = True, validation: str = STRICT) -> KafkaBatchHeader:
    """:func:`check_batch_steps` all at once."""
    return run_steps(check_batch_steps(data, max_decompressed=max_decompressed,
                                       check_fields=check_fields, validation=validation))


def check_batch_steps(data: bytes, *, max_decompressed: int = MAX_DECOMPRESSED_BYTES,
                      check_fields: bool = True,
                      validation: str = STRICT) -> Steps[KafkaBatchHeader]:
    """Check one produced batch (a Produce's ``records`` for one partition), as steps.

    Magic 2 (0 and 1 raise :class:`UnsupportedMessageFormatError`); ``batchLength``
    spans exactly ``data``; the CRC-32C; a known codec; no control batch (brokers write
    those) and, as Kafka's broker checks, a base sequence >= 0 with a producer id (a
    transactional batch needs one), all INVALID_RECORD; ``count >= 1`` and
    ``lastOffsetDelta == count - 1``; then the records,
    decompressed within ``max_decompressed`` bytes, are walked: each record's length
    covers exactly its fields, its offset delta is its index, and nothing follows the
    last. Batch-level faults raise :class:`CorruptBatchError` (CORRUPT_MESSAGE), a bad
    record :class:`MalformedRecordError` (INVALID_RECORD) naming it.

    Walking every field costs about 0.9 µs a record in Python (9 ms for a batch of
    10 000), reading only each record's length about 0.25 µs: ``check_fields=False``
    does that, so the records' lengths must still add up to the records section and
    their count to ``count``, but a record whose fields disagree with its length is
    stored (Kafka's consumers then fail on it). ``validation`` (:data:`VALIDATIONS`) says
    which batches' records are walked at all: every one (``strict``), uncompressed ones
    (``relaxed``), none (``crc``); a batch not walked passes on its header and CRC, so
    one whose records do not add up to its count passes too. A step costs about a
    millisecond:
    :data:`CRC_PIECE` bytes of CRC, :data:`WALK_RECORDS` records, or the one
    decompression (about 1 ms per MiB of output for lz4, snappy and zstd, several for
    gzip).
    """
    size = len(data)
    header = read_header(data)
    if header.size != size:
        raise CorruptBatchError(
            f"batchLength says {header.size} bytes, the batch has {size}"
            + (" (one batch per partition)" if header.size < size else ""))
    _check_header(header, 0, size)
    crc = 0
    for at in range(_ATTRIBUTES_AT, size, CRC_PIECE):
        if at > _ATTRIBUTES_AT:
            yield
        crc = int(google_crc32c.extend(crc, data[at:at + CRC_PIECE]))
    if crc != header.crc:
        raise CorruptBatchError("CRC mismatch")
    if header.is_control:
        raise MalformedRecordError("clients may not write control batches")
    if header.producer_id >= 0 and header.base_sequence < 0:   # Kafka's LogValidator
        raise MalformedRecordError(f"invalid sequence number {header.base_sequence} in a "
                                   f"batch of producer {header.producer_id}")
    if header.is_transactional and header.producer_id < 0:
        raise MalformedRecordError("a transactional batch needs a producer id")
    count = header.record_count
    if count < 1:
        raise CorruptBatchError("records count is 0")
    if header.last_offset_delta != count - 1:
        raise CorruptBatchError(
            f"lastOffsetDelta {header.last_offset_delta} with {count} records")
    if validation == CRC or (validation == RELAXED and header.compression):
        return header
    if header.compression:
        if size > CRC_PIECE:
            yield
        records = bytes(decompress_records(header, data, max_decompressed=max_decompressed))
        pos, end = 0, len(records)
    else:
        records, pos, end = data, HEADER_SIZE, size
    walker = _walk if check_fields else _walk_lengths
    piece = WALK_RECORDS if check_fields else 4 * WALK_RECORDS
    for first in range(0, count, piece):
        if first:
            yield
        try:
            pos = walker(records, pos, first, min(first + piece, count))
        except _Bad as exc:
            raise _record_error(exc, header, 0) from None
    if pos != end:
        raise MalformedRecordError(f"{end - pos} bytes after the last record",
                                   offset=header.last_offset,
                                   record_errors=[RecordError(count - 1, "trailing bytes")])
    return header


# --- reading ------------------------------------------------------------------------------


def decode_records(data: bytes | bytearray | memoryview, min_offset: int = 0, *,
                   max_decompressed: int = MAX_DECOMPRESSED_BYTES) -> list[DecodedRecord]:
    """Every record at ``min_offset`` or above of a concatenation of Kafka batches.

    Batches are CRC-checked and decompressed; control batches hold no application
    records and yield none, batches wholly below ``min_offset`` are skipped undecoded.
    A LogAppendTime batch's records carry its ``maxTimestamp``, as Kafka's clients read
    them. Raises :class:`CorruptBatchError` at the first bad batch or record.
    """
    out: list[DecodedRecord] = []
    for header, start, _ in iter_batch_spans(data):
        if header.last_offset < min_offset or header.is_control:
            continue
        base = header.base_offset
        for delta, ts, key, value, headers in _rows(header, data, start, max_decompressed):
            if base + delta >= min_offset:
                out.append(DecodedRecord(base + delta, ts, key, value, headers))
    return out


def _rows(header: KafkaBatchHeader, data: bytes | bytearray | memoryview, start: int,
          max_decompressed: int) -> list[_Row]:
    """The records of the (checked) batch at ``data[start:]``, with absolute timestamps."""
    records = decompress_records(header, data, start, max_decompressed=max_decompressed)
    buf = records if type(records) is bytes else bytes(records)
    fixed = header.max_timestamp_ms if header.log_append_time else None
    try:
        return _read(buf, 0, header.record_count, len(buf), header.base_timestamp_ms, fixed)
    except _Bad as exc:
        raise _record_error(exc, header, start) from None


# --- building -----------------------------------------------------------------------------


class RecordLike(Protocol):
    """What a batch is built from: :class:`~groupwire.protocol.batches.BatchRecord` and
    :class:`~groupwire.protocol.batches.DecodedRecord` both are."""

    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes | None]]: ...
    @property
    def timestamp_ms(self) -> int: ...


def encode_batch(records: Sequence[RecordLike], base_offset: int = 0, *,
                       compression: int = COMPRESSION_NONE, leader_epoch: int = -1,
                       producer_id: int = -1, producer_epoch: int = -1,
                       base_sequence: int = -1, timestamp_type: int = 0,
                       max_timestamp_ms: int | None = None, is_transactional: bool = False,
                       is_control: bool = False) -> bytes:
    """One Kafka batch (magic 2) holding ``records`` at offsets ``base_offset``, +1, ...

    The base timestamp is the first record's, the max timestamp the largest unless
    given (a LogAppendTime batch, ``timestamp_type=1``, carries the append time
    there). Compressed as ``compression`` says, LZ4 in independent blocks.
    """
    if not records:
        raise LocalProtocolError("a batch holds at least one record")
    if not 0 <= compression <= COMPRESSION_ZSTD:
        raise LocalProtocolError(f"unknown compression codec {compression}")
    base_ts = records[0].timestamp_ms
    body: list[bytes] = []
    add = body.append
    try:
        for i, r in enumerate(records):
            parts = [b"\x00", _zz(r.timestamp_ms - base_ts), _zz(i)]
            for field in (r.key, r.value):
                if field is None:
                    parts.append(b"\x01")
                else:
                    parts += (_zz(len(field)), field)
            headers = r.headers
            parts.append(_zz(len(headers)))
            for name, value in headers:
                raw = name.encode("utf-8")
                parts += (_zz(len(raw)), raw)
                if value is None:
                    parts.append(b"\x01")
                else:
                    parts += (_zz(len(value)), value)
            record = b"".join(parts)
            add(_zz(len(record)))
            add(record)
    except (AttributeError, TypeError, UnicodeError) as exc:
        raise LocalProtocolError(f"cannot encode batch: {exc}") from exc
    payload = b"".join(body)
    if compression:
        payload = _compress(compression, payload)
    if max_timestamp_ms is None:
        max_timestamp_ms = max(r.timestamp_ms for r in records)
    attributes = compression | (_TIMESTAMP_TYPE if timestamp_type else 0) \
        | (_TRANSACTIONAL if is_transactional else 0) | (_CONTROL if is_control else 0)
    count = len(records)
    try:
        head = _HEADER.pack(base_offset, HEADER_SIZE - LOG_OVERHEAD + len(payload),
                            leader_epoch, MAGIC, 0, attributes, count - 1, base_ts,
                            max_timestamp_ms, producer_id, producer_epoch, base_sequence,
                            count)
    except struct.error as exc:
        raise LocalProtocolError(f"cannot encode batch: {exc}") from exc
    crc = int(google_crc32c.extend(int(google_crc32c.value(head[_ATTRIBUTES_AT:])), payload))
    return b"".join((head[:_CRC_AT], _U32.pack(crc), head[_ATTRIBUTES_AT:], payload))


# --- converting ---------------------------------------------------------------------------


def to_msgpack(kafka_batches: bytes | bytearray | memoryview, *,
               max_decompressed: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """msgpack batches holding what ``kafka_batches`` hold, offset for offset.

    Each Kafka batch becomes one msgpack batch at its base offset with its partition
    leader epoch; keys, values, timestamps (as Kafka's consumers read them) and headers
    (in order; values bytes or null) are kept. A batch with a producer id becomes
    layout v2 with its producer id, epoch and base sequence and its transactional and
    control bits, so a control batch stays a transaction marker at the same offset and a
    transaction's records keep their producer; one without becomes layout v1. What
    msgpack batches cannot carry is dropped: compression and the timestamp type. A batch
    whose offsets have gaps (compaction, never a producer) becomes one msgpack batch per
    run of consecutive offsets (each run's base sequence its first record's); a control
    batch without a producer id (no broker writes one), none.
    """
    out: list[bytes] = []
    for header, start, _ in iter_batch_spans(kafka_batches):
        out += _to_msgpack(header, kafka_batches, start, max_decompressed)
    return b"".join(out)


def _v2_fields(header: KafkaBatchHeader) -> tuple[int, int, int] | None:
    """The producer fields a msgpack v2 batch carries for ``header``'s batch (a control
    batch's base sequence -1), or None when it has none a v2 batch can hold."""
    pid, epoch, seq = header.producer_id, header.producer_epoch, header.base_sequence
    if pid < 0 or not 0 <= epoch <= _MAX_INT16:
        return None
    if header.is_control:
        return pid, epoch, NO_SEQUENCE
    if not 0 <= seq < _SEQUENCES:
        return None
    return pid, epoch, seq


def _to_msgpack(header: KafkaBatchHeader, data: bytes | bytearray | memoryview, start: int,
                max_decompressed: int) -> list[bytes]:
    producer = _v2_fields(header)
    if header.is_control and producer is None:
        return []

    def build(run: list[BatchRecord], delta: int) -> bytes:
        base = header.base_offset + delta
        if producer is None:
            return encode_msgpack_batch(run, base, version=BATCH_V1,
                                        leader_epoch=header.leader_epoch)
        pid, epoch, seq = producer
        return encode_msgpack_batch(
            run, base, version=BATCH_V2, leader_epoch=header.leader_epoch,
            producer_id=pid, producer_epoch=epoch,
            base_sequence=seq if seq == NO_SEQUENCE else (seq + delta) % _SEQUENCES,
            transactional=header.is_transactional, control=header.is_control)

    rows = _rows(header, data, start, max_decompressed)
    out: list[bytes] = []
    run: list[BatchRecord] = []
    run_base = expected = -1
    for delta, ts, key, value, headers in rows:
        if delta != expected and run:
            out.append(build(run, run_base))
            run = []
        if not run:
            run_base = delta
        run.append(BatchRecord(value, key, headers, ts))
        expected = delta + 1
    if run:
        out.append(build(run, run_base))
    return out


def from_msgpack(msgpack_batches: bytes | bytearray | memoryview) -> bytes:
    """Uncompressed Kafka batches holding what ``msgpack_batches`` hold, one per batch:
    same base offset, leader epoch (-1 from a v0 batch), keys, values, CreateTime
    timestamps and headers (names UTF-8 encoded). A v2 batch keeps its producer id,
    epoch and base sequence and its transactional and control bits (a control batch
    stays a transaction marker, its record Kafka's control record byte for byte); v0
    and v1 batches get -1, as from a producer that is not idempotent."""
    view = memoryview(msgpack_batches)
    out: list[bytes] = []
    pos = 0
    for header, start, end in _msgpack_spans(view, 0, True):
        out.append(_from_msgpack(header, view, start, end))
        pos = end
    if pos < len(view):
        raise CorruptBatchError("not a msgpack batch (first byte is not 0x92)", position=pos)
    return b"".join(out)


def _from_msgpack(header: BatchHeader, data: bytes | bytearray | memoryview, start: int,
                  end: int) -> bytes:
    try:
        records = decode_msgpack_records(bytes(data[start:end]), control=True)
    except CorruptBatchError as exc:
        exc.position += start
        raise
    return encode_batch(records, header.base_offset, leader_epoch=header.leader_epoch,
                        producer_id=header.producer_id,
                        producer_epoch=header.producer_epoch,
                        base_sequence=header.base_sequence,
                        is_transactional=header.is_transactional,
                        is_control=header.is_control)


def encode_control_batch(producer_id: int, producer_epoch: int, commit: bool,
                         coordinator_epoch: int, timestamp_ms: int, base_offset: int = 0,
                         *, leader_epoch: int = -1) -> bytes:
    """A transaction marker as Kafka's brokers write it: attributes transactional and
    control, base sequence -1, one record (key: int16 version 0, int16 type 1 commit / 0
    abort; value: int16 version 0, int32 coordinator epoch) at ``timestamp_ms``."""
    if producer_id < 0 or not 0 <= producer_epoch <= _MAX_INT16:
        raise LocalProtocolError(f"a marker needs a producer id and epoch, not "
                                 f"{producer_id}, {producer_epoch}")
    record = BatchRecord(marker_value(coordinator_epoch), control_record_key(commit), (),
                         timestamp_ms)
    return encode_batch([record], base_offset, leader_epoch=leader_epoch,
                        producer_id=producer_id, producer_epoch=producer_epoch,
                        base_sequence=NO_SEQUENCE, is_transactional=True, is_control=True)


def control_marker(data: bytes | bytearray | memoryview, pos: int = 0, *,
                   max_decompressed: int = MAX_DECOMPRESSED_BYTES) -> tuple[bool, int]:
    """``(commit, coordinator_epoch)`` of the control batch at ``pos`` (CRC-checked);
    :class:`CorruptBatchError` if it is not one holding a marker."""
    header = read_header(data, pos)
    if not header.is_control:
        raise CorruptBatchError("not a control batch", position=pos)
    end = _check_header(header, pos, len(data))
    if batch_crc32c(data, pos, end) != header.crc:
        raise CorruptBatchError("CRC mismatch", position=pos)
    rows = _rows(header, data, pos, max_decompressed)
    if not rows:
        raise CorruptBatchError("a control batch holds no record", position=pos)
    _, _, key, value, _ = rows[0]
    try:
        return parse_control_record(key, value)
    except CorruptBatchError as exc:
        exc.position = pos
        raise


def msgpack_to_kafka(data: bytes | bytearray | memoryview) -> bytes:
    """A fetched mix of batches as Kafka batches: Kafka's as they are, msgpack ones
    converted (:func:`from_msgpack`)."""
    return _convert(data, kafka=True, max_decompressed=MAX_DECOMPRESSED_BYTES)


def kafka_to_msgpack(data: bytes | bytearray | memoryview, *,
                     max_decompressed: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """A fetched mix of batches as msgpack batches: msgpack ones as they are, Kafka's
    converted (:func:`to_msgpack`)."""
    return _convert(data, kafka=False, max_decompressed=max_decompressed)


def _convert(data: bytes | bytearray | memoryview, *, kafka: bool,
             max_decompressed: int) -> bytes:
    view = memoryview(data)
    out: list[bytes | memoryview] = []
    keep_from = -1   # start of a run of batches already in the target format
    pos = 0
    for header, start, end in iter_mixed_spans(view):
        pos = end
        if isinstance(header, KafkaBatchHeader) == kafka:
            if keep_from < 0:
                keep_from = start
            continue
        if keep_from >= 0:
            out.append(view[keep_from:start])
            keep_from = -1
        if isinstance(header, KafkaBatchHeader):
            out += _to_msgpack(header, view, start, max_decompressed)
        else:
            out.append(_from_msgpack(header, view, start, end))
    if keep_from == 0 and pos == len(view):
        return bytes(data)
    if keep_from >= 0:
        out.append(view[keep_from:pos])
    return b"".join(out)


# --- a mix of both formats ----------------------------------------------------------------


def iter_mixed_spans(buf: bytes | bytearray | memoryview, *, check_crc: bool = True,
                     ) -> Iterator[tuple[BatchHeader | KafkaBatchHeader, int, int]]:
    """``(header, start, end)`` of each batch in a concatenation of msgpack and Kafka
    batches in any order, by the first byte of each; checked as each format's
    ``iter_batch_spans`` checks, with the same errors (``position`` is the bad batch's
    start, raised after every good batch before it was yielded)."""
    view = memoryview(buf)
    size = len(view)
    pos = 0
    while pos < size:
        if view[pos] == 0x92:
            for header, start, end in _msgpack_spans(view, pos, check_crc):
                yield header, start, end
                pos = end
            continue
        header_k = read_header(view, pos)
        end = _check_header(header_k, pos, size)
        if check_crc and batch_crc32c(view, pos, end) != header_k.crc:
            raise CorruptBatchError("CRC mismatch", position=pos)
        yield header_k, pos, end
        pos = end


_FIRST_PIECE: Final = 4096
_MAX_PIECE: Final = 1 << 20


def _msgpack_spans(view: memoryview, pos: int, check_crc: bool,
                   ) -> Iterator[tuple[BatchHeader, int, int]]:
    """The msgpack batches from ``pos`` on, up to the end or the first batch that does
    not start with ``0x92``.

    One streaming unpacker finds their ends (a msgpack batch has no length field), fed
    a piece at a time, each twice the last: it never holds much more than the batches it
    skipped, however many Kafka batches follow them.
    """
    size = len(view)
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=max(size - pos, 1))
    origin = fed = at = pos
    piece = _FIRST_PIECE
    while at < size and view[at] == 0x92:
        if size - at < MIN_BATCH_SIZE:
            raise CorruptBatchError(f"truncated batch: {size - at} bytes left", position=at)
        header = read_msgpack_header(view, at)
        check_header_fields(header, at)
        count = _array_length(view, at + header_size(header.version), at)
        if count != header.record_count:
            raise CorruptBatchError(
                f"records array holds {count} items, header says {header.record_count}",
                position=at)
        while True:
            try:
                unpacker.skip()
                break
            except msgpack.OutOfData:
                if fed >= size:
                    raise CorruptBatchError("truncated batch", position=at) from None
                more = min(size, fed + piece)
                unpacker.feed(view[fed:more])
                fed = more
                piece = min(piece * 2, _MAX_PIECE)
            except (ValueError, msgpack.UnpackException) as exc:
                raise CorruptBatchError(f"malformed msgpack in records: {exc!r}",
                                        position=at) from exc
        end = origin + unpacker.tell()
        if check_crc and batch_crc(view, at, end) != header.crc:
            raise CorruptBatchError("CRC mismatch", position=at)
        yield header, at, end
        at = end


def _array_length(view: memoryview, at: int, pos: int) -> int:
    """The length of the msgpack array whose header starts at ``view[at]``."""
    size = len(view)
    if at >= size:
        raise CorruptBatchError("missing records array", position=pos)
    tag = view[at]
    if 0x90 <= tag <= 0x9F:
        return tag & 0x0F
    if tag == 0xDC and at + 3 <= size:
        return int(_U16.unpack_from(view, at + 1)[0])
    if tag == 0xDD and at + 5 <= size:
        return int(_U32.unpack_from(view, at + 1)[0])
    raise CorruptBatchError(f"records are not an array (type byte {tag:#x})", position=pos)
