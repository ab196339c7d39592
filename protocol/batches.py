"""Record batches (docs/protocol.md §5): encode, check, patch and split them without I/O.

A batch is one msgpack value ``[header, records]`` whose 31-byte header has fixed widths,
so the broker can check it and patch its base offset in place with ``struct`` alone. The
broker never builds record objects: :func:`validate_batch` walks the records with a
streaming unpacker's ``skip``, and stored batches are served byte for byte. Only clients
(and the broker's own replay of internal topics) call :func:`decode_records`.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

import msgpack

from groupwire.protocol.errors import ErrorCode, LocalProtocolError, RemoteProtocolError

HEADER_SIZE: Final = 31
"""Bytes before the records array: outer and header array markers plus five fixed fields."""

MIN_BATCH_SIZE: Final = HEADER_SIZE + 1
"""The smallest possible batch: a header and a one-byte (fixarray) records array."""

_HEADER = struct.Struct(">BBBQBqBIBIB")
_OFFSET = struct.Struct(">Q")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_MARKERS: Final = (0x92, 0x95, 0xCF, 0xD3, 0xCE, 0xCE)
_MAX_UINT64: Final = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The fixed-width header of one batch, as read from bytes 0-30."""

    base_offset: int
    base_timestamp_ms: int
    record_count: int
    crc: int
    attributes: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.record_count - 1

    @property
    def next_offset(self) -> int:
        """The offset the batch after this one starts at."""
        return self.base_offset + self.record_count


@dataclass(slots=True)
class BatchRecord:
    """One record as a producer appends it; ``timestamp_ms`` is its CreateTime.

    Not frozen, for the same reason as :class:`DecodedRecord`: one is built per record.
    """

    value: bytes | None
    key: bytes | None = None
    headers: Sequence[tuple[str, bytes | None]] = ()
    timestamp_ms: int = -1


@dataclass(slots=True)
class DecodedRecord:
    """One record read back from a batch, with its absolute offset and timestamp.

    Not frozen: a frozen dataclass's ``__init__`` costs several times a plain one's, and
    consumers build one of these per record.
    """

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


class CorruptBatchError(RemoteProtocolError):
    """Bytes that are not a valid batch; the message says which check failed.

    ``position`` is where the offending batch starts in the buffer that was checked, so a
    log recovering from a torn write knows where its last good batch ends.
    """

    code: ErrorCode = ErrorCode.CORRUPT_MESSAGE

    def __init__(self, message: str, *, position: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.position = position


# --- writing ------------------------------------------------------------------------------


def encode_batch(records: Sequence[BatchRecord], base_offset: int = 0) -> bytes:
    """One batch holding ``records``; the base timestamp is the first record's."""
    if not records:
        raise LocalProtocolError("a batch holds at least one record")
    if not 0 <= base_offset <= _MAX_UINT64:
        raise LocalProtocolError(f"base_offset out of range: {base_offset}")
    base_ts = records[0].timestamp_ms
    rows = [
        [i, r.timestamp_ms - base_ts, r.key, r.value,
         r.headers if isinstance(r.headers, list | tuple) else list(r.headers)]
        for i, r in enumerate(records)
    ]
    try:
        body = b"\x00" + msgpack.packb(rows, use_bin_type=True)
        header = _HEADER.pack(0x92, 0x95, 0xCF, base_offset, 0xD3, base_ts,
                              0xCE, len(records), 0xCE, 0, 0)
    except (TypeError, ValueError, OverflowError, struct.error) as exc:
        raise LocalProtocolError(f"cannot encode batch: {exc}") from exc
    crc = zlib.crc32(body, zlib.crc32(header[11:25]))
    return b"".join((header[:26], _U32.pack(crc), body))


def with_base_offset(data: bytes, base_offset: int) -> bytes:
    """``data`` with bytes 3-10 set to ``base_offset``; the CRC does not cover them."""
    if not 0 <= base_offset <= _MAX_UINT64:
        raise LocalProtocolError(f"base_offset out of range: {base_offset}")
    view = memoryview(data)
    return b"".join((view[:3], _OFFSET.pack(base_offset), view[11:]))


# --- checking -----------------------------------------------------------------------------


def read_header(buf: bytes | memoryview, pos: int = 0) -> BatchHeader:
    """The header at ``pos``, checking only the fixed marker bytes (no CRC, no records)."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptBatchError(
            f"truncated header: {len(buf) - pos} bytes, need {HEADER_SIZE}", position=pos)
    (a2, a5, m_off, base, m_ts, ts, m_cnt, count, m_crc, crc,
     attributes) = _HEADER.unpack_from(buf, pos)
    if (a2, a5, m_off, m_ts, m_cnt, m_crc) != _MARKERS:
        raise CorruptBatchError("bad header marker bytes (not a v0 batch)", position=pos)
    if attributes > 0x7F:
        raise CorruptBatchError(f"attributes byte {attributes:#x} is not a positive fixint",
                                position=pos)
    return BatchHeader(base_offset=base, base_timestamp_ms=ts, record_count=count, crc=crc,
                       attributes=attributes)


def batch_crc(buf: bytes | memoryview, start: int, end: int) -> int:
    """The CRC-32 a batch spanning ``buf[start:end]`` should carry (bytes 11-24, 30-end)."""
    view = memoryview(buf)
    return zlib.crc32(view[start + 30:end], zlib.crc32(view[start + 11:start + 25]))


def validate_batch(data: bytes) -> BatchHeader:
    """Check one produced batch as §5.2 says, without building records."""
    size = len(data)
    if size < MIN_BATCH_SIZE:
        raise CorruptBatchError(f"batch of {size} bytes is shorter than {MIN_BATCH_SIZE}")
    header = read_header(data)
    _check_fields(header, 0)
    if batch_crc(data, 0, size) != header.crc:
        raise CorruptBatchError("CRC mismatch")
    count = _records_count(data, HEADER_SIZE, 0)
    if count != header.record_count:
        raise CorruptBatchError(
            f"records array holds {count} items, header says {header.record_count}")
    unpacker = _unpacker(size)
    unpacker.feed(memoryview(data)[HEADER_SIZE:])
    _skip(unpacker, 0)
    if unpacker.tell() != size - HEADER_SIZE:
        raise CorruptBatchError(
            f"{size - HEADER_SIZE - unpacker.tell()} trailing bytes after the records array")
    return header


def iter_batch_spans(buf: bytes | memoryview, *, check_crc: bool = True,
                     ) -> Iterator[tuple[BatchHeader, int, int]]:
    """``(header, start, end)`` of each batch in a concatenation of whole batches.

    Boundaries come from a streaming unpacker skipping each batch; every batch is checked
    as :func:`validate_batch` does (the CRC only with ``check_crc``). A truncated or bad
    batch raises :class:`CorruptBatchError` whose ``position`` is its start, after every
    good batch before it has been yielded.
    """
    size = len(buf)
    if size == 0:
        return
    unpacker = _unpacker(size)
    unpacker.feed(buf)
    pos = 0
    while pos < size:
        if size - pos < MIN_BATCH_SIZE:
            raise CorruptBatchError(f"truncated batch: {size - pos} bytes left", position=pos)
        header = read_header(buf, pos)
        _check_fields(header, pos)
        count = _records_count(buf, pos + HEADER_SIZE, pos)
        if count != header.record_count:
            raise CorruptBatchError(
                f"records array holds {count} items, header says {header.record_count}",
                position=pos)
        _skip(unpacker, pos)
        end = unpacker.tell()
        if check_crc and batch_crc(buf, pos, end) != header.crc:
            raise CorruptBatchError("CRC mismatch", position=pos)
        yield header, pos, end
        pos = end


def iter_batches(data: bytes) -> Iterator[tuple[BatchHeader, bytes]]:
    """Split a Fetch ``records`` bin into ``(header, batch bytes)`` pairs."""
    view = memoryview(data)
    for header, start, end in iter_batch_spans(data):
        yield header, bytes(view[start:end])


def decode_records(data: bytes, min_offset: int = 0) -> list[DecodedRecord]:
    """Every record of every batch in ``data`` at offset ``min_offset`` or above.

    Batches are CRC-checked; whole batches below ``min_offset`` are skipped undecoded.
    """
    out: list[DecodedRecord] = []
    view = memoryview(data)
    for header, start, end in iter_batch_spans(data):
        if header.last_offset < min_offset:
            continue
        try:
            rows = msgpack.unpackb(view[start + HEADER_SIZE:end], raw=False, use_list=True)
        except (ValueError, UnicodeDecodeError, msgpack.UnpackException) as exc:
            raise CorruptBatchError(f"undecodable records: {exc}", position=start) from exc
        _decode_rows(rows, header, min_offset, start, out)
    return out


# --- internals ----------------------------------------------------------------------------


def _check_fields(header: BatchHeader, pos: int) -> None:
    if header.attributes != 0:
        raise CorruptBatchError(f"attributes {header.attributes} != 0 (unsupported)",
                                position=pos)
    if header.record_count < 1:
        raise CorruptBatchError("record_count is 0", position=pos)


def _records_count(buf: bytes | memoryview, at: int, pos: int) -> int:
    """The length of the msgpack array whose header starts at ``buf[at]``."""
    size = len(buf)
    if at >= size:
        raise CorruptBatchError("missing records array", position=pos)
    tag = buf[at]
    if 0x90 <= tag <= 0x9F:
        return tag & 0x0F
    if tag == 0xDC and at + 3 <= size:
        return int(_U16.unpack_from(buf, at + 1)[0])
    if tag == 0xDD and at + 5 <= size:
        return int(_U32.unpack_from(buf, at + 1)[0])
    raise CorruptBatchError(f"records are not an array (type byte {tag:#x})", position=pos)


def _unpacker(size: int) -> msgpack.Unpacker:
    return msgpack.Unpacker(raw=False, max_buffer_size=max(size, 1))


def _skip(unpacker: msgpack.Unpacker, pos: int) -> None:
    try:
        unpacker.skip()
    except msgpack.OutOfData:
        raise CorruptBatchError("truncated batch", position=pos) from None
    except (ValueError, msgpack.UnpackException) as exc:
        raise CorruptBatchError(f"malformed msgpack in records: {exc!r}",
                                position=pos) from exc


def _decode_rows(rows: object, header: BatchHeader, min_offset: int, pos: int,
                 out: list[DecodedRecord]) -> None:
    if not isinstance(rows, list) or len(rows) != header.record_count:
        raise CorruptBatchError("records array does not match record_count", position=pos)
    base, base_ts = header.base_offset, header.base_timestamp_ms
    for index, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != 5:
            raise CorruptBatchError(f"record {index} is not a 5-item array", position=pos)
        delta, ts_delta, key, value, raw_headers = row
        if delta != index or type(ts_delta) is not int:
            raise CorruptBatchError(f"record {index}: bad offset or timestamp delta",
                                    position=pos)
        if base + index < min_offset:
            continue
        if not (key is None or type(key) is bytes) or not (value is None
                                                           or type(value) is bytes):
            raise CorruptBatchError(f"record {index}: key and value must be bin or nil",
                                    position=pos)
        out.append(DecodedRecord(base + index, base_ts + ts_delta, key, value,
                                 [] if raw_headers == [] else
                                 _decode_headers(raw_headers, index, pos)))


def _decode_headers(raw: object, index: int, pos: int) -> list[tuple[str, bytes | None]]:
    if not isinstance(raw, list):
        raise CorruptBatchError(f"record {index}: headers are not an array", position=pos)
    headers: list[tuple[str, bytes | None]] = []
    for item in raw:
        if (not isinstance(item, list) or len(item) != 2 or type(item[0]) is not str
                or not (item[1] is None or type(item[1]) is bytes)):
            raise CorruptBatchError(f"record {index}: a header is not [str, bin|nil]",
                                    position=pos)
        headers.append((item[0], item[1]))
    return headers
