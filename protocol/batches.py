"""Record batches (docs/protocol.md §5): encode, check, patch and split them without I/O.

A batch is one msgpack value ``[header, records]`` whose header has fixed widths, so the
broker can check it and patch its base offset (and, in layouts v1 and v2, its partition
leader epoch) in place with ``struct`` alone. Layout v0 has a 31-byte header, v1 a 36-byte
one; both carry the same CRC over the same logical bytes, so a v0 batch becomes v1 by
inserting the epoch (:func:`upconvert_v0`) without touching its CRC. Layout v2, 53 bytes,
is v1 with an idempotent producer's fields (producer id, producer epoch, base sequence)
between the epoch and the base timestamp, under the CRC; the broker stamps it where it
stamps v1.
:func:`validate_batch` checks the framing (walking the records with a streaming unpacker's
``skip``); :func:`check_records` then checks that every row is a record, so that no batch
a consumer cannot read is ever stored. Stored batches are served byte for byte. Only
clients (and the broker's own replay of internal topics) build records, with
:func:`decode_records` or, to keep what precedes a bad record, :func:`decode_records_partial`
(:func:`decode_batches_partial` batch by batch, headers and markers included).

Layout v2's ``attributes`` byte may carry Kafka's transaction bits (:data:`TRANSACTIONAL`,
:data:`CONTROL`): a *control batch* is a transaction marker, written by brokers only, whose
one record holds Kafka's control-record key and marker value (:func:`encode_control_batch`,
:func:`control_marker`), so the two formats say the same thing byte for byte; readers
(:func:`decode_records`) hand out no record of it.

The broker runs both checks as :func:`check_batch_steps` (``protocol.steps``): a batch
near the frame limit takes a third of a second to check, so the CRC, the walk and the
rows are done in pieces of bounded cost, with a step between pieces.
"""

from __future__ import annotations

import dataclasses
import gc
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, islice
from typing import Final, NoReturn, TypeVar

import msgpack

from groupwire.protocol.errors import ErrorCode, LocalProtocolError, RemoteProtocolError
from groupwire.protocol.steps import Steps, run_steps

BATCH_V0: Final = 0
BATCH_V1: Final = 1
BATCH_V2: Final = 2
"""v1 with an idempotent producer's fields: what a batch given a producer id is built in."""
CURRENT_BATCH_VERSION: Final = BATCH_V1
"""What :func:`encode_batch` builds unless told otherwise (or given a producer id)."""
NO_PRODUCER_ID: Final = -1
"""The producer id, epoch and base sequence of a batch not from an idempotent producer
(every v0 and v1 batch)."""
NO_SEQUENCE: Final = -1
"""The base sequence of a control batch (a broker writes it; it numbers no record), as
in Kafka's."""
TRANSACTIONAL: Final = 0x10
"""``attributes`` bit (layout v2 only, Kafka's): the batch belongs to a transaction."""
CONTROL: Final = 0x20
"""``attributes`` bit (layout v2 only, Kafka's): a transaction marker, not records."""
_V2_ATTRIBUTES: Final = TRANSACTIONAL | CONTROL
"""The bits a v2 batch's attributes may have; v0 and v1 have none."""
CONTROL_ABORT: Final = 0
CONTROL_COMMIT: Final = 1
"""Kafka's control record types, in a control record's key."""
_CONTROL_KEY = struct.Struct(">hh")
"""Kafka's control record key: int16 version (0), int16 type (0 abort, 1 commit)."""
_MARKER_VALUE = struct.Struct(">hi")
"""Kafka's end-transaction marker value: int16 version (0), int32 coordinator epoch."""
NO_PARTITION_LEADER_EPOCH: Final = -1
"""The leader epoch of a v0 batch, and of a v1 batch no broker has stamped yet."""

HEADER_SIZE_V0: Final = 31
"""v0: outer and header array markers plus five fixed fields."""
HEADER_SIZE_V1: Final = 36
"""v1: v0's header with the partition leader epoch (``0xd2`` + int32) after the offset."""
HEADER_SIZE_V2: Final = 53
"""v2: v1's header with the producer id (``0xd3`` + int64), producer epoch (``0xd1`` +
int16) and base sequence (``0xd2`` + int32) after the epoch."""

MIN_BATCH_SIZE: Final = HEADER_SIZE_V0 + 1
"""The smallest possible batch of any layout: a v0 header and a one-byte records array."""

_HEADER_V0 = struct.Struct(">BBBQBqBIBIB")
_HEADER_V1 = struct.Struct(">BBBQBiBqBIBIB")
_HEADER_V2 = struct.Struct(">BBBQBiBqBhBiBqBIBIB")
_OFFSET = struct.Struct(">Q")
_EPOCH = struct.Struct(">i")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_MARKERS_V0: Final = (0x92, 0x95, 0xCF, 0xD3, 0xCE, 0xCE)
_MARKERS_V1: Final = (0x92, 0x96, 0xCF, 0xD2, 0xD3, 0xCE, 0xCE)
_MARKERS_V2: Final = (0x92, 0x99, 0xCF, 0xD2, 0xD3, 0xD1, 0xD2, 0xD3, 0xCE, 0xCE)
_HEADER_MARKER: Final = (0x95, 0x96, 0x99)
"""Byte 1 (the header array's marker) by version: an array of 5, 6 or 9."""
_VERSION_OF_MARKER: Final = {marker: version for version, marker in enumerate(_HEADER_MARKER)}
"""The layout byte 1 names (any other byte is read as v0, whose check then fails)."""
_HEADER_SIZES: Final = (HEADER_SIZE_V0, HEADER_SIZE_V1, HEADER_SIZE_V2)
_CRC_HEAD: Final = ((11, 25), (16, 30), (16, 47))
"""Where, by version, the header bytes the CRC starts with lie (``[start, end)``): the
timestamp and count (14 bytes) in v0 and v1; the producer fields, timestamp and count
(31 bytes) in v2. The CRC is taken over them, then from the attributes byte on."""
_BODY_AT: Final = (HEADER_SIZE_V0 - 1, HEADER_SIZE_V1 - 1, HEADER_SIZE_V2 - 1)
"""Where, by version, the attributes byte is: the CRC covers it and everything after;
the CRC itself is the 4 bytes before it."""
_MAX_INT16: Final = (1 << 15) - 1
_MIN_INT32: Final = -(1 << 31)
_MAX_INT32: Final = (1 << 31) - 1
_MIN_INT64: Final = -(1 << 63)
_MAX_INT64: Final = (1 << 63) - 1
_MAX_UINT64: Final = (1 << 64) - 1

RECORD_CHUNK: Final = 4096
MAX_RECORD_ARRAY: Final = 10_000
"""Most items of any array or map inside one produced record (its headers, in practice):
checking a record is then a few milliseconds at most. Over it the record does not unpack
(INVALID_RECORD); Kafka's clients send a handful of headers."""
_ROW_LIMITS: Final = {"max_array_len": MAX_RECORD_ARRAY, "max_map_len": MAX_RECORD_ARRAY}
"""Rows :func:`check_records` decodes at a time: bounds the objects alive for one batch."""

CRC_PIECE: Final = 1 << 20
"""Bytes :func:`check_batch_steps` runs the CRC over in one step (~0.3 ms)."""

SKIP_PIECE: Final = 1 << 18
"""Bytes of the records array fed to the framing walk in one step: skipping costs at
most a few ns a byte (one-byte values), so a step stays well under a millisecond."""

ROW_PIECE: Final = 1 << 15
"""Bytes fed to the row unpacker in one step: building objects costs up to ~25 ns a
byte (one-byte values), so this bounds a step to ~1 ms whatever the rows hold."""

WALK_ROWS: Final = 256
"""Rows a walk (a chunk that does not unpack, checked row by row) checks in one step."""

WRITER_BUFFER: Final = 4096
"""The first buffer of a :class:`BatchWriter` (it doubles as records come)."""

ENCODE_ROWS: Final = 2048
"""Rows :func:`encode_kv_batch_steps` packs in one step (~0.7 ms of offset records)."""

MAX_RECORD_ERRORS: Final = 10
"""Bad rows one :class:`MalformedRecordError` names at most (the rest are not looked for)."""

T = TypeVar("T")

_UNPACK_ERRORS: Final = (ValueError, TypeError, msgpack.UnpackException)
"""What unpacking well-formed msgpack can still raise: bad UTF-8, a non-str map key, a
bad timestamp ext, nesting too deep."""
_INDEXES: Final = tuple(range(RECORD_CHUNK))
_TUPLE: Final = frozenset({tuple})
_INT: Final = frozenset({int})
_STR: Final = frozenset({str})
_BIN_OR_NIL: Final = frozenset({bytes, type(None)})


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The fixed-width header of one batch (bytes 0-30 in v0, 0-35 in v1, 0-52 in v2)."""

    base_offset: int
    base_timestamp_ms: int
    record_count: int
    crc: int
    attributes: int
    leader_epoch: int = NO_PARTITION_LEADER_EPOCH
    """The partition leader epoch the broker stamped (v1, v2); v0 has none."""
    version: int = BATCH_V0
    producer_id: int = NO_PRODUCER_ID
    """The idempotent producer's id (v2); -1 in v0 and v1."""
    producer_epoch: int = NO_PRODUCER_ID
    """The producer's epoch (v2); -1 in v0 and v1."""
    base_sequence: int = NO_PRODUCER_ID
    """The first record's sequence number (v2; record ``i``'s is ``(base_sequence + i)
    mod 2**31``); -1 in v0 and v1."""

    @property
    def header_size(self) -> int:
        """Bytes before the records array: where the records start."""
        return header_size(self.version)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        """A transaction marker (:func:`control_marker`): no record of it is the
        application's."""
        return bool(self.attributes & CONTROL)

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
    log recovering from a torn write knows where its last good batch ends. ``offset`` is
    the first offset that could not be read, when known (-1 otherwise): a reader that
    skips it (or the batch) can carry on.
    """

    code: ErrorCode = ErrorCode.CORRUPT_MESSAGE

    def __init__(self, message: str, *, position: int = 0, offset: int = -1) -> None:
        super().__init__(message)
        self.message = message
        self.position = position
        self.offset = offset


@dataclass(frozen=True, slots=True)
class RecordError:
    """One row of a batch that is not a record: its index in the batch, and why."""

    batch_index: int
    message: str


class MalformedRecordError(CorruptBatchError):
    """A well-framed batch (CRC and all) holding rows that are not records (§5.1).

    ``record_errors`` names the first :data:`MAX_RECORD_ERRORS` of them, in row order.
    """

    code: ErrorCode = ErrorCode.INVALID_RECORD

    def __init__(self, message: str, *, position: int = 0, offset: int = -1,
                 record_errors: Sequence[RecordError] = ()) -> None:
        super().__init__(message, position=position, offset=offset)
        self.record_errors = list(record_errors)


# --- writing ------------------------------------------------------------------------------


def header_size(version: int) -> int:
    """Bytes before the records array of a batch of layout ``version`` (0, 1 or 2)."""
    return HEADER_SIZE_V1 if version == BATCH_V1 else \
        HEADER_SIZE_V2 if version == BATCH_V2 else HEADER_SIZE_V0


_NO_PRODUCER: Final = (NO_PRODUCER_ID, NO_PRODUCER_ID, NO_PRODUCER_ID)


def _layout(version: int, producer_id: int, producer_epoch: int, base_sequence: int,
            attributes: int = 0) -> tuple[int, tuple[int, int, int]]:
    """The layout a batch is built in, and its producer fields, checked.

    A producer id (>= 0) makes it v2: ``version`` may then say 1 (the default) or 2, not
    0 (v0 has no room for them). Without one, v2 is refused (its fields are not
    optional), and so are an epoch or a sequence (they mean nothing without an id), and
    the transaction bits in ``attributes`` (v2's alone). A control batch's base sequence
    is :data:`NO_SEQUENCE`, as in Kafka.
    """
    if version not in (BATCH_V0, BATCH_V1, BATCH_V2):
        raise LocalProtocolError(f"unknown batch layout version {version}")
    if attributes & ~_V2_ATTRIBUTES:
        raise LocalProtocolError(f"unknown attributes {attributes:#x}")
    fields = (producer_id, producer_epoch, base_sequence)
    if producer_id == NO_PRODUCER_ID:
        if version == BATCH_V2:
            raise LocalProtocolError("batch layout v2 needs a producer id")
        if fields != _NO_PRODUCER:
            raise LocalProtocolError(
                "producer_epoch and base_sequence need a producer_id")
        if attributes:
            raise LocalProtocolError(
                "a transactional or control batch needs a producer_id (layout v2)")
        return version, _NO_PRODUCER
    if type(producer_id) is not int or not 0 <= producer_id <= _MAX_INT64:
        raise LocalProtocolError(f"producer_id out of range: {producer_id}")
    if version == BATCH_V0:
        raise LocalProtocolError("batch layout v0 carries no producer fields")
    if type(producer_epoch) is not int or not 0 <= producer_epoch <= _MAX_INT16:
        raise LocalProtocolError(f"producer_epoch out of range: {producer_epoch}")
    if attributes & CONTROL:
        if base_sequence != NO_SEQUENCE:
            raise LocalProtocolError("a control batch's base_sequence is -1")
    elif type(base_sequence) is not int or not 0 <= base_sequence <= _MAX_INT32:
        raise LocalProtocolError(f"base_sequence out of range: {base_sequence}")
    return BATCH_V2, fields


def _head(version: int, base_offset: int, leader_epoch: int, base_ts: int,
          count: int, producer: tuple[int, int, int] = _NO_PRODUCER) -> bytes:
    """A header up to its CRC (exclusive): ``header_size(version) - 5`` bytes.
    ``producer`` (id, epoch, base sequence) as :func:`_layout` returns them."""
    if version not in (BATCH_V0, BATCH_V1, BATCH_V2):
        raise LocalProtocolError(f"unknown batch layout version {version}")
    if (version == BATCH_V2) != (producer[0] >= 0):
        raise LocalProtocolError("producer fields go in batch layout v2, and only there")
    if not 0 <= base_offset <= _MAX_UINT64:
        raise LocalProtocolError(f"base_offset out of range: {base_offset}")
    if not _MIN_INT32 <= leader_epoch <= _MAX_INT32:
        raise LocalProtocolError(f"leader_epoch out of range: {leader_epoch}")
    try:
        if version == BATCH_V0:
            full = _HEADER_V0.pack(0x92, 0x95, 0xCF, base_offset, 0xD3, base_ts,
                                   0xCE, count, 0xCE, 0, 0)
        elif version == BATCH_V1:
            full = _HEADER_V1.pack(0x92, 0x96, 0xCF, base_offset, 0xD2, leader_epoch,
                                   0xD3, base_ts, 0xCE, count, 0xCE, 0, 0)
        else:
            producer_id, producer_epoch, base_sequence = producer
            full = _HEADER_V2.pack(0x92, 0x99, 0xCF, base_offset, 0xD2, leader_epoch,
                                   0xD3, producer_id, 0xD1, producer_epoch,
                                   0xD2, base_sequence, 0xD3, base_ts,
                                   0xCE, count, 0xCE, 0, 0)
    except (TypeError, ValueError, OverflowError, struct.error) as exc:
        raise LocalProtocolError(f"cannot encode batch: {exc}") from exc
    return full[:_BODY_AT[version] - 4]


def _head_crc(head: bytes, version: int) -> int:
    """The CRC of the header bytes it covers (``head`` as :func:`_head` builds it)."""
    start, end = _CRC_HEAD[version]
    return zlib.crc32(head[start:end])


def encode_batch(records: Sequence[BatchRecord], base_offset: int = 0, *,
                 version: int = CURRENT_BATCH_VERSION,
                 leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
                 producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_ID,
                 base_sequence: int = NO_PRODUCER_ID, transactional: bool = False,
                 control: bool = False) -> bytes:
    """One batch holding ``records``; the base timestamp is the first record's.

    Layout v1 unless ``version=0`` (the layout before cluster mode; brokers still take
    it). ``leader_epoch`` is the broker's to set: producers leave it -1.

    An idempotent producer passes its ``producer_id`` (0 to 2**63-1), ``producer_epoch``
    (0 to 32767) and the first record's ``base_sequence`` (0 to 2**31-1): the batch is
    then layout v2, ``version`` being 1 (the default) or 2; with ``version=0``, or
    without a producer id but with an epoch, a sequence or ``version=2``, or with a field
    out of range, LocalProtocolError.

    ``transactional`` and ``control`` set those attributes bits (v2 only: they need a
    producer id); a control batch is a broker's transaction marker, base sequence -1
    (:func:`encode_control_batch` builds one)."""
    if not records:
        raise LocalProtocolError("a batch holds at least one record")
    attributes = (TRANSACTIONAL if transactional else 0) | (CONTROL if control else 0)
    version, producer = _layout(version, producer_id, producer_epoch, base_sequence,
                                attributes)
    base_ts = records[0].timestamp_ms
    head = _head(version, base_offset, leader_epoch, base_ts, len(records), producer)
    rows = [
        [i, r.timestamp_ms - base_ts, r.key, r.value,
         r.headers if isinstance(r.headers, list | tuple) else list(r.headers)]
        for i, r in enumerate(records)
    ]
    try:
        body = bytes((attributes,)) + msgpack.packb(rows, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise LocalProtocolError(f"cannot encode batch: {exc}") from exc
    crc = zlib.crc32(body, _head_crc(head, version))
    return b"".join((head, _U32.pack(crc), body))


def control_record_key(commit: bool) -> bytes:
    """Kafka's control-record key: int16 version 0, int16 type (1 commit, 0 abort)."""
    return _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)


def marker_value(coordinator_epoch: int) -> bytes:
    """Kafka's end-transaction marker value: int16 version 0, int32 coordinator epoch."""
    if not _MIN_INT32 <= coordinator_epoch <= _MAX_INT32:
        raise LocalProtocolError(f"coordinator_epoch out of range: {coordinator_epoch}")
    return _MARKER_VALUE.pack(0, coordinator_epoch)


def parse_control_record(key: bytes | None, value: bytes | None) -> tuple[bool, int]:
    """``(commit, coordinator_epoch)`` from a control record's key and value, as Kafka
    reads them (a later version's extra bytes are ignored); :class:`CorruptBatchError`
    if they are not an end-transaction marker's."""
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptBatchError("control record key is not 4 bytes (version, type)")
    version, kind = _CONTROL_KEY.unpack_from(key)
    if version < 0 or kind not in (CONTROL_ABORT, CONTROL_COMMIT):
        raise CorruptBatchError(f"control record key: version {version}, type {kind} "
                                "(not a transaction marker)")
    if value is None or len(value) < _MARKER_VALUE.size:
        raise CorruptBatchError("marker value is not 6 bytes (version, coordinator epoch)")
    value_version, coordinator_epoch = _MARKER_VALUE.unpack_from(value)
    if value_version < 0:
        raise CorruptBatchError(f"marker value version {value_version}")
    return kind == CONTROL_COMMIT, int(coordinator_epoch)


def encode_control_batch(producer_id: int, producer_epoch: int, commit: bool,
                         coordinator_epoch: int, timestamp_ms: int, base_offset: int = 0,
                         *, leader_epoch: int = NO_PARTITION_LEADER_EPOCH) -> bytes:
    """A transaction marker in layout v2: attributes ``TRANSACTIONAL | CONTROL``, base
    sequence -1, one record ``[0, 0, key, value, []]`` whose key and value are Kafka's
    control-record key and marker value (§5.1, §5.5). Brokers alone write these."""
    record = BatchRecord(marker_value(coordinator_epoch), control_record_key(commit),
                         (), timestamp_ms)
    return encode_batch([record], base_offset, version=BATCH_V2, leader_epoch=leader_epoch,
                        producer_id=producer_id, producer_epoch=producer_epoch,
                        base_sequence=NO_SEQUENCE, transactional=True, control=True)


def control_marker(data: bytes | memoryview, pos: int = 0) -> tuple[bool, int]:
    """``(commit, coordinator_epoch)`` of the control batch at ``pos`` (CRC-checked);
    :class:`CorruptBatchError` if it is not one holding a marker."""
    view = memoryview(data)
    header = read_header(view, pos)
    if not header.is_control:
        raise CorruptBatchError("not a control batch", position=pos)
    for head, start, end in iter_batch_spans(view[pos:]):
        try:
            rows = msgpack.unpackb(view[pos + start + head.header_size:pos + end],
                                   raw=False, use_list=True)
        except _UNPACK_ERRORS as exc:
            raise CorruptBatchError(f"a control batch's record does not unpack: {exc}",
                                    position=pos) from exc
        row = rows[0] if isinstance(rows, list) and rows else None
        if type(row) is not list or len(row) != 5:
            raise CorruptBatchError("a control batch's record is not a record",
                                    position=pos)
        key, value = row[2], row[3]
        try:
            return parse_control_record(key if type(key) is bytes else None,
                                        value if type(value) is bytes else None)
        except CorruptBatchError as exc:
            exc.position = pos
            raise
    raise CorruptBatchError("no batch", position=pos)


class BatchWriter:
    """One batch built a record at a time: :func:`encode_batch`'s bytes for the same
    records, without a :class:`BatchRecord` kept per record.

    A producer appends records as they are sent and sends the batch much later; each
    record is packed when appended (into one growing buffer), so a record costs one
    msgpack call and leaves no object behind, and :meth:`build` only adds the header and
    the CRC. Appending checks everything packing needs (bin or nil key and value,
    ``(str, bin|nil)`` headers, an int timestamp whose delta msgpack can hold), so a
    record that does not fit raises before anything is written and the records before it
    stay as they were.

    ``version`` and the producer fields are :func:`encode_batch`'s (a producer id makes
    the batch v2, ``version`` then saying 1 or 2) and are checked here; they change the
    header alone, built once by :meth:`build`, which may also be given the producer
    fields: an idempotent producer numbers a batch when it first sends it, long after its
    records were packed. ``transactional`` (a transactional producer's batch) needs the
    producer fields by :meth:`build` at the latest.
    """

    __slots__ = ("_base_ts", "_built", "_count", "_pack", "_packer", "_pieces", "_producer",
                 "transactional", "version")

    def __init__(self, *, version: int = CURRENT_BATCH_VERSION,
                 producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_ID,
                 base_sequence: int = NO_PRODUCER_ID, transactional: bool = False) -> None:
        self.version, self._producer = _layout(version, producer_id, producer_epoch,
                                               base_sequence)
        self.transactional = transactional
        # msgpack's default first buffer is 256 KiB: a producer holds a writer per partition
        self._packer = msgpack.Packer(use_bin_type=True, autoreset=False,
                                      buf_size=WRITER_BUFFER)
        self._pack = self._packer.pack
        self._pieces: list[bytes] = []   # packed rows before the packer's, in order
        self._count = 0
        self._base_ts = 0
        self._built: bytes | None = None

    def __len__(self) -> int:
        return self._count

    @property
    def base_timestamp_ms(self) -> int:
        """The first record's timestamp (-1 before any)."""
        return self._base_ts if self._count else -1

    def append(self, key: bytes | None, value: bytes | None, timestamp_ms: int,
               headers: Sequence[tuple[str, bytes | None]] = ()) -> None:
        """Pack one record after the others; raises TypeError or ValueError (nothing
        written) for a record that is not one, LocalProtocolError once built."""
        if (type(timestamp_ms) is not int or not (key is None or type(key) is bytes)
                or not (value is None or type(value) is bytes) or self._built is not None):
            self._refuse(key, value, timestamp_ms)
        count = self._count
        if count:
            delta = timestamp_ms - self._base_ts
            if not -0x8000000000000000 <= delta <= 0xFFFFFFFFFFFFFFFF:  # msgpack's ints
                raise ValueError(f"timestamp_ms {timestamp_ms} is too far from the batch's "
                                 f"first, {self._base_ts}")
        else:
            if not _MIN_INT64 <= timestamp_ms <= _MAX_INT64:
                raise ValueError(f"timestamp_ms out of range: {timestamp_ms}")
            self._base_ts = timestamp_ms
            delta = 0
        if headers:
            row = _packed_row(count, delta, key, value, headers)
            packer = self._packer
            if count:   # rows packed so far go first
                self._pieces.append(packer.bytes())
                packer.reset()
            self._pieces.append(row)
        else:
            # a msgpack Packer that fails empties its buffer: only what cannot fail goes in
            self._pack((count, delta, key, value, ()))
        self._count = count + 1

    def _refuse(self, key: object, value: object, timestamp_ms: object) -> NoReturn:
        if self._built is not None:
            raise LocalProtocolError("the batch was built: it takes no more records")
        if type(timestamp_ms) is not int:
            raise TypeError(f"timestamp_ms must be an int, got {type(timestamp_ms).__name__}")
        raise TypeError("a record's key and value must be bytes or None")

    def build(self, *, producer_id: int = NO_PRODUCER_ID,
              producer_epoch: int = NO_PRODUCER_ID,
              base_sequence: int = NO_PRODUCER_ID) -> bytes:
        """The batch as a producer sends it (base offset 0, leader epoch -1); built once,
        after which the writer takes no more records and every call returns the same
        bytes.

        Given a ``producer_id`` (with its epoch and the first record's sequence, checked
        as the constructor checks them), the batch is built in layout v2 with these
        fields, in place of the constructor's; a writer built already refuses other
        producer fields than it was built with (LocalProtocolError)."""
        if producer_id != NO_PRODUCER_ID or producer_epoch != NO_PRODUCER_ID \
                or base_sequence != NO_PRODUCER_ID:
            version, producer = _layout(self.version, producer_id, producer_epoch,
                                        base_sequence)
            if self._built is not None:
                if producer != self._producer:
                    raise LocalProtocolError(
                        "the batch was built with other producer fields")
                return self._built
            self.version, self._producer = version, producer
        if self._built is not None:
            return self._built
        count = self._count
        if not count:
            raise LocalProtocolError("a batch holds at least one record")
        version = self.version
        attributes = TRANSACTIONAL if self.transactional else 0
        if attributes and version != BATCH_V2:
            raise LocalProtocolError(
                "a transactional batch needs a producer_id (layout v2)")
        head = _head(version, 0, NO_PARTITION_LEADER_EPOCH, self._base_ts, count,
                     self._producer)
        lead = bytes((attributes,)) + msgpack.Packer().pack_array_header(count)
        pieces = [lead, *self._pieces, self._packer.bytes()]
        crc = _head_crc(head, version)
        for piece in pieces:
            crc = zlib.crc32(piece, crc)
        self._built = b"".join((head, _U32.pack(crc), *pieces))
        self._pieces = []
        del self._pack, self._packer   # its buffer: as big as the batch, and no longer needed
        return self._built


def _packed_row(index: int, delta: int, key: bytes | None, value: bytes | None,
                headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    """One record with headers, packed alone: its header names may not encode (a lone
    surrogate), and a failed pack must not touch the batch's buffer."""
    pairs = list(headers)
    for pair in pairs:
        if (not isinstance(pair, list | tuple) or len(pair) != 2 or not isinstance(pair[0], str)
                or not (pair[1] is None or isinstance(pair[1], bytes))):
            raise TypeError("headers must be (str, bytes | None) pairs")
    try:
        packed: bytes = msgpack.packb([index, delta, key, value, pairs], use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"cannot encode the record's headers: {exc}") from exc
    return packed


def encode_kv_batch_steps(items: Sequence[tuple[bytes | None, bytes | None, int]],
                          base_offset: int = 0, *, rows_per_step: int = ENCODE_ROWS,
                          version: int = CURRENT_BATCH_VERSION,
                          ) -> Steps[bytes]:
    """``encode_batch`` of ``(key, value, timestamp_ms)`` records with no headers, byte
    for byte, ``rows_per_step`` rows between yields: a batch of 10 000 offset records
    takes several milliseconds to pack, too long for one step of the broker's loop.

    The records array is its header followed by each row packed alone, and the CRC runs
    over the pieces in order, so each piece is packed and checksummed once.
    """
    if not items:
        raise LocalProtocolError("a batch holds at least one record")
    count = len(items)
    base_ts = items[0][2]
    head = _head(version, base_offset, NO_PARTITION_LEADER_EPOCH, base_ts, count)
    packer = msgpack.Packer(use_bin_type=True)
    pack = packer.pack
    try:
        pieces = [b"\x00" + packer.pack_array_header(count)]
    except (TypeError, ValueError, OverflowError) as exc:
        raise LocalProtocolError(f"cannot encode batch: {exc}") from exc
    crc = zlib.crc32(pieces[0], _head_crc(head, version))
    no_headers: tuple[()] = ()
    for start in range(0, count, rows_per_step):
        if start:
            yield
        try:
            piece = b"".join([pack([i, ts - base_ts, key, value, no_headers])
                              for i, (key, value, ts)
                              in enumerate(items[start:start + rows_per_step], start)])
        except (TypeError, ValueError, OverflowError) as exc:
            raise LocalProtocolError(f"cannot encode batch: {exc}") from exc
        crc = zlib.crc32(piece, crc)
        pieces.append(piece)
    return b"".join((head, _U32.pack(crc), *pieces))


def with_base_offset(data: bytes | memoryview, base_offset: int) -> bytes:
    """``data`` with bytes 3-10 set to ``base_offset`` (every layout); the CRC does not
    cover them. ``data`` may be only the start of a batch (a stepped append's first
    piece)."""
    if not 0 <= base_offset <= _MAX_UINT64:
        raise LocalProtocolError(f"base_offset out of range: {base_offset}")
    view = memoryview(data)
    return b"".join((view[:3], _OFFSET.pack(base_offset), view[11:]))


def stamp_batch(data: bytes | memoryview, base_offset: int, leader_epoch: int) -> bytes:
    """A v1 or v2 batch (or its start, as :func:`with_base_offset` takes it) with its
    base offset and partition leader epoch set, at the same bytes in both (3-10, 12-15):
    what a broker does at append. Neither field is under the CRC."""
    view = memoryview(data)
    version = _VERSION_OF_MARKER.get(view[1], BATCH_V0) if len(view) >= 2 else BATCH_V0
    if version == BATCH_V0 or len(view) < header_size(version) or view[11] != 0xD2:
        raise LocalProtocolError(
            "only a v1 or v2 batch carries a leader epoch (upconvert v0)")
    if not 0 <= base_offset <= _MAX_UINT64:
        raise LocalProtocolError(f"base_offset out of range: {base_offset}")
    if not _MIN_INT32 <= leader_epoch <= _MAX_INT32:
        raise LocalProtocolError(f"leader_epoch out of range: {leader_epoch}")
    return b"".join((view[:3], _OFFSET.pack(base_offset), view[11:12],
                     _EPOCH.pack(leader_epoch), view[16:]))


def upconvert_v0(batch: bytes | memoryview) -> bytes:
    """The v1 form of a v0 batch (or of its start): byte 1 becomes ``0x96`` and
    ``0xd2`` + int32 -1 goes after the base offset. The CRC is kept: it covers the same
    bytes in both layouts."""
    view = memoryview(batch)
    if len(view) < HEADER_SIZE_V0 or view[0] != 0x92 or view[1] != 0x95:
        raise LocalProtocolError("not a v0 batch")
    return b"".join((b"\x92\x96", view[2:11], b"\xd2",
                     _EPOCH.pack(NO_PARTITION_LEADER_EPOCH), view[11:]))


def upconverted_header(header: BatchHeader) -> BatchHeader:
    """``header`` as :func:`upconvert_v0` leaves its batch."""
    return dataclasses.replace(header, version=BATCH_V1,
                               leader_epoch=NO_PARTITION_LEADER_EPOCH)


# --- checking -----------------------------------------------------------------------------


def read_header(buf: bytes | memoryview, pos: int = 0) -> BatchHeader:
    """The header at ``pos`` (any layout, told by byte 1), checking only the fixed
    marker bytes (no CRC, no records, no field's range)."""
    avail = len(buf) - pos
    version = _VERSION_OF_MARKER.get(buf[pos + 1], BATCH_V0) if avail >= 2 else BATCH_V0
    size = _HEADER_SIZES[version]
    if avail < size:
        raise CorruptBatchError(f"truncated header: {avail} bytes, need {size}",
                                position=pos)
    producer_id = producer_epoch = base_sequence = NO_PRODUCER_ID
    if version == BATCH_V1:
        (a2, a6, m_off, base, m_epoch, epoch, m_ts, ts, m_cnt, count, m_crc, crc,
         attributes) = _HEADER_V1.unpack_from(buf, pos)
        good = (a2, a6, m_off, m_epoch, m_ts, m_cnt, m_crc) == _MARKERS_V1
    elif version == BATCH_V2:
        (a2, a9, m_off, base, m_epoch, epoch, m_pid, producer_id, m_pep, producer_epoch,
         m_seq, base_sequence, m_ts, ts, m_cnt, count, m_crc, crc,
         attributes) = _HEADER_V2.unpack_from(buf, pos)
        good = (a2, a9, m_off, m_epoch, m_pid, m_pep, m_seq, m_ts, m_cnt,
                m_crc) == _MARKERS_V2
    else:
        (a2, a5, m_off, base, m_ts, ts, m_cnt, count, m_crc, crc,
         attributes) = _HEADER_V0.unpack_from(buf, pos)
        epoch = NO_PARTITION_LEADER_EPOCH
        good = (a2, a5, m_off, m_ts, m_cnt, m_crc) == _MARKERS_V0
    if not good:
        raise CorruptBatchError("bad header marker bytes (not a v0, v1 or v2 batch)",
                                position=pos)
    if attributes > 0x7F:
        raise CorruptBatchError(f"attributes byte {attributes:#x} is not a positive fixint",
                                position=pos)
    return BatchHeader(base_offset=base, base_timestamp_ms=ts, record_count=count, crc=crc,
                       attributes=attributes, leader_epoch=epoch, version=version,
                       producer_id=producer_id, producer_epoch=producer_epoch,
                       base_sequence=base_sequence)


def batch_crc(buf: bytes | memoryview, start: int, end: int) -> int:
    """The CRC-32 a batch spanning ``buf[start:end]`` should carry (v0: bytes 11-24 and
    30-end; v1: 16-29 and 35-end; v2: 16-46 and 52-end)."""
    view = memoryview(buf)
    version = _VERSION_OF_MARKER.get(view[start + 1], BATCH_V0)
    at, until = _CRC_HEAD[version]
    body = start + _BODY_AT[version]
    return zlib.crc32(view[body:end], zlib.crc32(view[start + at:start + until]))


def validate_batch(data: bytes) -> BatchHeader:
    """Check one produced batch as §5.2 says, without building records."""
    return run_steps(_validate_steps(data))


def check_records(data: bytes, header: BatchHeader, *,
                  limit: int = MAX_RECORD_ERRORS) -> None:
    """Check that every row of a batch :func:`validate_batch` passed is a record (§5.1).

    What a consumer's :func:`decode_records` would fail on, refused before it is stored.
    Rows are unpacked as tuples (cheaper than lists), at most :data:`RECORD_CHUNK` at a
    time so memory stays bounded, and each chunk is checked a column at a time with
    C-level builtins; only a chunk that fails is looked at row by row. Raises
    :class:`MalformedRecordError` naming up to ``limit`` bad rows.
    """
    collecting = gc.isenabled()
    if collecting:   # the rows are acyclic and die at once: scanning them is wasted work
        gc.disable()
    try:
        run_steps(_check_rows_steps(data, header, limit))
    finally:
        if collecting:
            gc.enable()


def check_batch_steps(data: bytes, *, limit: int = MAX_RECORD_ERRORS) -> Steps[BatchHeader]:
    """:func:`validate_batch` then :func:`check_records`, as steps (``protocol.steps``).

    Raises what they raise, in the same order, and returns the header. No step costs
    more than about a millisecond, whatever the batch holds: the CRC is taken
    :data:`CRC_PIECE` bytes at a time, the records array is walked :data:`SKIP_PIECE`
    bytes at a time (a streaming unpacker resumes a value it has begun when fed more),
    and rows are unpacked :data:`ROW_PIECE` bytes or :data:`RECORD_CHUNK` rows at a time.
    A small batch takes one step (the generator never yields). The garbage collector is
    paused within each step, as :func:`check_records` pauses it, never across a yield.
    """
    header = yield from _validate_steps(data)
    yield from _gc_paused(_check_rows_steps(data, header, limit))
    return header


def _validate_steps(data: bytes) -> Steps[BatchHeader]:
    size = len(data)
    if size < MIN_BATCH_SIZE:
        raise CorruptBatchError(f"batch of {size} bytes is shorter than {MIN_BATCH_SIZE}")
    header = read_header(data)
    check_header_fields(header, 0)
    hs = header.header_size
    if size <= hs:
        raise CorruptBatchError(f"batch of {size} bytes is shorter than {hs + 1}")
    view = memoryview(data)
    at, until = _CRC_HEAD[header.version]
    body = _BODY_AT[header.version]
    crc = zlib.crc32(view[at:until])   # as batch_crc takes it
    for at in range(body, size, CRC_PIECE):
        if at > body:
            yield
        crc = zlib.crc32(view[at:at + CRC_PIECE], crc)
    if crc != header.crc:
        raise CorruptBatchError("CRC mismatch")
    if header.is_control:   # as Kafka's broker refuses them: INVALID_RECORD
        raise MalformedRecordError("clients may not write control batches (transaction "
                                   "markers are the broker's)")
    count = _records_count(data, hs, 0)
    if count != header.record_count:
        raise CorruptBatchError(
            f"records array holds {count} items, header says {header.record_count}")
    # One skip of the whole records array, as iter_batch_spans does it, fed a piece at a
    # time: the unpacker keeps the array it has begun, so the errors are the same.
    unpacker = _unpacker(size)
    fed = hs
    while True:
        end = min(fed + SKIP_PIECE, size)
        unpacker.feed(view[fed:end])
        fed = end
        if _skip(unpacker, 0, more=fed < size):
            break
        yield
    if unpacker.tell() != size - hs:
        raise CorruptBatchError(
            f"{size - hs - unpacker.tell()} trailing bytes after the records array")
    return header


def _gc_paused(steps: Steps[T]) -> Steps[T]:
    """``steps`` with the garbage collector paused during each step (if it was on)."""
    while True:
        collecting = gc.isenabled()
        if collecting:
            gc.disable()
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        finally:
            if collecting:
                gc.enable()
        yield


class _Feed:
    """A streaming unpacker of rows fed from ``view[at:]`` a piece at a time."""

    __slots__ = ("unpacker", "_view", "_start", "_fed", "_piece")

    def __init__(self, view: memoryview, at: int, piece: int) -> None:
        self.unpacker = msgpack.Unpacker(raw=False, use_list=False, **_ROW_LIMITS,
                                         max_buffer_size=max(len(view) - at, 1))
        self._view = view
        self._start = self._fed = at
        self._piece = piece

    def tell(self) -> int:
        """Where the next value starts in ``view`` (between values only)."""
        return self._start + int(self.unpacker.tell())

    @property
    def pending(self) -> bool:
        """Whether bytes are left to feed."""
        return self._fed < len(self._view)

    def more(self) -> bool:
        """Feed the next piece; False if everything is fed already."""
        fed, size = self._fed, len(self._view)
        if fed >= size:
            return False
        self._fed = min(fed + self._piece, size)
        self.unpacker.feed(self._view[fed:self._fed])
        return True


def _check_rows_steps(data: bytes, header: BatchHeader, limit: int) -> Steps[None]:
    """:func:`check_records`'s work, yielding between pieces (the collector is the
    caller's business)."""
    count = header.record_count
    view = memoryview(data)
    hs = header.header_size
    at = hs + _array_header_size(data[hs])
    errors: list[RecordError] = []
    if count <= RECORD_CHUNK and len(data) - hs <= ROW_PIECE:
        # one small chunk: unpackb is faster than iterating an Unpacker
        try:
            rows = msgpack.unpackb(view[hs:], raw=False, use_list=False,
                                   **_ROW_LIMITS)
        except _UNPACK_ERRORS:
            yield from _walk_rows(view, at, 0, count, errors)
        else:
            _check_chunk(rows, 0, errors)
    else:
        # Chunks of RECORD_CHUNK rows, unpacked as their bytes are fed ROW_PIECE at a
        # time: a step unpacks what one piece holds (RECORD_CHUNK rows at most). A chunk
        # starts where the last one's rows ended (a row's start: where a walk can begin).
        # Only rows of the chunk being read live across a yield (the collector is on
        # between steps and scans what is alive).
        index = 0
        feed: _Feed | None = None
        while index < count and len(errors) < limit:
            if index:
                yield
            n = min(RECORD_CHUNK, count - index)
            if feed is None:
                feed = _Feed(view, at, ROW_PIECE)
            chunk_at = feed.tell()
            chunk: list[object] = []
            try:
                while True:
                    chunk.extend(islice(feed.unpacker, n - len(chunk)))
                    if len(chunk) == n:
                        break
                    if not feed.more():  # the framing was checked: the rows are all there
                        raise CorruptBatchError("truncated batch")
                    yield
            except _UNPACK_ERRORS:  # find the row that does not unpack by its bytes
                del chunk
                at = yield from _walk_rows(view, chunk_at, index, n, errors)
                feed = None
            else:
                _check_chunk(tuple(chunk), index, errors)
                del chunk
            index += n
    if errors:
        del errors[limit:]
        first = errors[0]
        more = " or more" if len(errors) == limit else ""
        raise MalformedRecordError(
            f"record {first.batch_index}: {first.message}"
            + (f" ({len(errors)}{more} bad records)" if len(errors) > 1 else ""),
            offset=header.base_offset + first.batch_index, record_errors=errors)


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
        check_header_fields(header, pos)
        count = _records_count(buf, pos + header.header_size, pos)
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


def decode_records(data: bytes, min_offset: int = 0, *,
                   control: bool = False) -> list[DecodedRecord]:
    """Every record of every batch in ``data`` at offset ``min_offset`` or above.

    Batches are CRC-checked; whole batches below ``min_offset`` are skipped undecoded,
    and so are control batches (transaction markers hold no application record) unless
    ``control`` (a conversion keeps them). Raises :class:`CorruptBatchError` at the
    first bad batch or record.
    """
    out, error = decode_records_partial(data, min_offset, control=control)
    if error is not None:
        raise error
    return out


def decode_records_partial(data: bytes, min_offset: int = 0, *, control: bool = False,
                           ) -> tuple[list[DecodedRecord], CorruptBatchError | None]:
    """The records :func:`decode_records` returns, up to the first bad batch or record.

    Returns every good record before the fault, and the fault (None if there is none)
    with ``offset`` set to the first offset not returned, so that a reader can hand out
    what it has and report where it stopped. Rows below ``min_offset`` are skipped
    unchecked, so reading from the offset after a bad record gets past it.
    """
    out: list[DecodedRecord] = []
    view = memoryview(data)
    try:
        for header, start, end in iter_batch_spans(data):
            if header.last_offset < min_offset or (header.is_control and not control):
                continue
            try:
                rows = msgpack.unpackb(view[start + header.header_size:end], raw=False,
                                       use_list=True)
            except _UNPACK_ERRORS:  # some row does not unpack: read the batch row by row
                _decode_rows_one_by_one(view, header, start, end, min_offset, out)
            else:
                _decode_rows(rows, header, min_offset, start, out)
    except CorruptBatchError as exc:
        if exc.offset < 0:
            exc.offset = _first_unread(view, exc.position, min_offset, out)
        return out, exc
    return out, None



def decode_batches_partial(data: bytes, min_offset: int = 0,
                           ) -> tuple[list[tuple[BatchHeader, list[DecodedRecord]]],
                                      CorruptBatchError | None]:
    """:func:`decode_records_partial` batch by batch: each batch's header (producer id,
    attributes) with its records at ``min_offset`` or above, control batches included
    (their one record is the marker), up to the first bad batch or record.

    A read_committed consumer needs the headers to skip aborted transactions, and every
    consumer to move past batches it hands out no record of. A batch wholly below
    ``min_offset`` comes with no records. The batch a bad record is in comes with the
    records before it; the fault's ``offset`` is the first offset not returned (a batch
    listed whole is returned)."""
    out: list[tuple[BatchHeader, list[DecodedRecord]]] = []
    view = memoryview(data)
    try:
        for header, start, end in iter_batch_spans(data):
            records: list[DecodedRecord] = []
            out.append((header, records))
            if header.last_offset < min_offset:
                continue
            try:
                rows = msgpack.unpackb(view[start + header.header_size:end], raw=False,
                                       use_list=True)
            except _UNPACK_ERRORS:  # some row does not unpack: read the batch row by row
                _decode_rows_one_by_one(view, header, start, end, min_offset, records)
            else:
                _decode_rows(rows, header, min_offset, start, records)
    except CorruptBatchError as exc:
        if exc.offset < 0:  # a batch that is not one: every batch before it is whole
            after = max(min_offset, out[-1][0].next_offset) if out else min_offset
            exc.offset = _first_unread(view, exc.position, after, [])
        return out, exc
    return out, None

# --- internals ----------------------------------------------------------------------------


def check_header_fields(header: BatchHeader, pos: int = 0) -> None:
    """The checks every stored batch's header passes (§5.2), whoever wrote it: v0 and
    v1 attributes 0, v2's only the transaction bits; ``record_count >= 1``; v2's producer
    fields >= 0 (a control batch's base sequence -1). :class:`CorruptBatchError` at
    ``pos`` otherwise."""
    allowed = _V2_ATTRIBUTES if header.version == BATCH_V2 else 0
    if header.attributes & ~allowed:
        raise CorruptBatchError(
            f"attributes {header.attributes} (unsupported in layout v{header.version})",
            position=pos)
    if header.record_count < 1:
        raise CorruptBatchError("record_count is 0", position=pos)
    if header.version == BATCH_V2 and (
            header.producer_id < 0 or header.producer_epoch < 0
            or (header.base_sequence < 0
                and not (header.is_control and header.base_sequence == NO_SEQUENCE))):
        raise CorruptBatchError(
            f"producer fields out of range: id {header.producer_id}, epoch "
            f"{header.producer_epoch}, base sequence {header.base_sequence}", position=pos)



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


def _skip(unpacker: msgpack.Unpacker, pos: int, *, more: bool = False) -> bool:
    """Skip one value; False if it is not all fed yet and ``more`` bytes are to come
    (the unpacker resumes it when fed them)."""
    try:
        unpacker.skip()
    except msgpack.OutOfData:
        if more:
            return False
        raise CorruptBatchError("truncated batch", position=pos) from None
    except (ValueError, msgpack.UnpackException) as exc:
        raise CorruptBatchError(f"malformed msgpack in records: {exc!r}",
                                position=pos) from exc
    return True


def _decode_rows(rows: object, header: BatchHeader, min_offset: int, pos: int,
                 out: list[DecodedRecord]) -> None:
    """Append the records of one batch's unpacked rows; rows below ``min_offset`` are not
    checked (a reader seeks past a bad one). Raises at the first bad row, after appending
    every record before it."""
    if not isinstance(rows, list) or len(rows) != header.record_count:
        raise CorruptBatchError("records array does not match record_count", position=pos,
                                offset=max(header.base_offset, min_offset))
    base, base_ts = header.base_offset, header.base_timestamp_ms
    for index in range(max(0, min_offset - base), len(rows)):
        row = rows[index]
        if type(row) is not list or len(row) != 5:
            _bad_row(row, index, header, pos)
        delta, ts_delta, key, value, raw_headers = row
        if (delta != index or type(ts_delta) is not int
                or not (key is None or type(key) is bytes)
                or not (value is None or type(value) is bytes)):
            _bad_row(row, index, header, pos)
        if raw_headers == []:
            headers: list[tuple[str, bytes | None]] = []
        else:
            if _headers_problem(raw_headers) is not None:
                _bad_row(row, index, header, pos)
            headers = [(name, hv) for name, hv in raw_headers]
        out.append(DecodedRecord(base + index, base_ts + ts_delta, key, value, headers))


def _decode_rows_one_by_one(view: memoryview, header: BatchHeader, start: int, end: int,
                            min_offset: int, out: list[DecodedRecord]) -> None:
    """:func:`_decode_rows` for a batch that does not unpack whole: each row on its own,
    so the records before the one that does not unpack are still read."""
    base = header.base_offset
    hs = header.header_size
    at = start + hs + _array_header_size(view[start + hs])
    skipper = _unpacker(end - at)
    skipper.feed(view[at:end])
    rows: list[object] = []
    for index in range(header.record_count):
        row_start = skipper.tell()
        skipper.skip()   # the framing was checked: each row skips
        if base + index < min_offset:
            rows.append(None)
            continue
        try:
            rows.append(msgpack.unpackb(view[at + row_start:at + skipper.tell()],
                                        raw=False, use_list=True))
        except _UNPACK_ERRORS as exc:
            _decode_rows(rows, dataclasses.replace(header, record_count=len(rows)),
                         min_offset, start, out)
            raise CorruptBatchError(
                f"record {index} of the batch at offset {base}: does not unpack: {exc}",
                position=start, offset=base + index) from exc
    _decode_rows(rows, header, min_offset, start, out)


def _bad_row(row: object, index: int, header: BatchHeader, pos: int) -> NoReturn:
    problem = _row_problem(row, index) or "not a record"
    raise CorruptBatchError(
        f"record {index} of the batch at offset {header.base_offset}: {problem}",
        position=pos, offset=header.base_offset + index)


def record_problem(row: object, index: int | None = None) -> str | None:
    """Why an unpacked ``row`` is not a record (§5.1), or None if it is one; with
    ``index``, its offset_delta must also be that (its place in the batch)."""
    return _row_problem(row, index)


def _row_problem(row: object, index: int | None) -> str | None:
    if not isinstance(row, list | tuple) or len(row) != 5:
        return f"not a 5-item array ({_kind(row)})"
    delta, ts_delta, key, value, headers = row
    if index is not None and (type(delta) is not int or delta != index):
        return f"offset_delta must be the record's index {index}"
    if type(ts_delta) is not int:
        return f"timestamp_delta_ms is {_kind(ts_delta)}, not an int"
    if not (key is None or type(key) is bytes):
        return f"key is {_kind(key)}, not bin or nil"
    if not (value is None or type(value) is bytes):
        return f"value is {_kind(value)}, not bin or nil"
    return _headers_problem(headers)


def _headers_problem(headers: object) -> str | None:
    if not isinstance(headers, list | tuple):
        return f"headers are {_kind(headers)}, not an array"
    for item in headers:
        if (not isinstance(item, list | tuple) or len(item) != 2 or type(item[0]) is not str
                or not (item[1] is None or type(item[1]) is bytes)):
            return "a header is not [str, bin|nil]"
    return None


def _kind(value: object) -> str:
    """A msgpack-ish name for a value's type, never the value (it may be megabytes)."""
    if isinstance(value, list | tuple):
        return f"an array of {len(value)}"
    return {type(None): "nil", bool: "a bool", int: "an int", float: "a float",
            str: "a str", bytes: "a bin", dict: "a map"}.get(type(value), "an ext")


def _check_chunk(rows: tuple[object, ...], first: int, errors: list[RecordError]) -> None:
    """Add the bad rows among ``rows`` (records ``first``, ``first + 1``, ...) to
    ``errors``."""
    if _rows_ok(rows, first):
        return
    for index, row in enumerate(rows, first):
        problem = _row_problem(row, index)
        if problem is not None:
            errors.append(RecordError(index, problem))


def _rows_ok(rows: tuple[object, ...], first: int) -> bool:
    """Whether tuple-unpacked ``rows`` are records ``first``, ``first + 1``, ...: each
    check is one C-level pass over a column, as cheap as checking per row can be.

    A row that is not a 5-item array stops ``zip`` (not iterable, or another length) or
    fails a column: a str or map row has no int offset_delta, a bin row no bin key.
    """
    try:
        deltas, stamps, keys, values, headers = zip(*rows, strict=True)
    except (TypeError, ValueError):
        return False
    n = len(rows)
    indexes = _INDEXES[:n] if first == 0 else tuple(range(first, first + n))
    # Only a float or a bool can equal an int index; a float makes the sum a float, and
    # a bool can only equal index 0 or 1. Cheaper than typing every delta.
    if deltas != indexes or type(sum(deltas)) is not int:
        return False
    if first < 2 and not set(map(type, deltas[:2 - first])) <= _INT:
        return False
    if (set(map(type, stamps)) != _INT
            or (keys.count(None) != n and not set(map(type, keys)) <= _BIN_OR_NIL)
            or not set(map(type, values)) <= _BIN_OR_NIL):
        return False
    if headers.count(()) == n:
        return True
    if set(map(type, headers)) != _TUPLE:
        return False
    items = tuple(chain.from_iterable(headers))
    if set(map(type, items)) != _TUPLE:
        return False
    try:   # a pair of another length stops zip, or leaves other than two columns
        names, header_values = zip(*items, strict=True)
    except ValueError:
        return False
    return set(map(type, names)) == _STR and set(map(type, header_values)) <= _BIN_OR_NIL


def _walk_rows(view: memoryview, at: int, first: int, n: int,
               errors: list[RecordError]) -> Steps[int]:
    """Check ``n`` rows starting at byte ``at`` one by one; returns where they end.

    A step checks up to :data:`WALK_ROWS` rows or :data:`ROW_PIECE` bytes of them; a
    row bigger than that is skipped and unpacked a piece at a time.
    """
    skipper = _Feed(view, at, ROW_PIECE)
    skipper.more()
    rows = done = 0
    for index in range(first, first + n):
        if rows >= WALK_ROWS or done >= ROW_PIECE:
            rows = done = 0
            yield
        row_start = skipper.tell()
        while not _skip(skipper.unpacker, 0, more=skipper.pending):
            skipper.more()   # the framing was checked: each row skips once all fed
            yield
        row_end = skipper.tell()
        rows += 1
        done += row_end - row_start
        try:
            if row_end - row_start <= ROW_PIECE:
                row = msgpack.unpackb(view[row_start:row_end], raw=False, use_list=False,
                                      **_ROW_LIMITS)
            else:
                row = yield from _unpack_big_row(view, row_start, row_end)
                rows = done = 0
        except _UNPACK_ERRORS as exc:
            errors.append(RecordError(index, f"does not unpack: {exc}"))
            continue
        problem = _row_problem(row, index)
        if problem is not None:
            errors.append(RecordError(index, problem))
    return skipper.tell()


def _unpack_big_row(view: memoryview, start: int, end: int) -> Steps[object]:
    """``unpackb(view[start:end])`` (one row), fed :data:`ROW_PIECE` bytes a step."""
    unpacker = msgpack.Unpacker(raw=False, use_list=False, max_buffer_size=end - start,
                                **_ROW_LIMITS)
    for at in range(start, end, ROW_PIECE):
        unpacker.feed(view[at:min(at + ROW_PIECE, end)])
        try:
            return unpacker.unpack()
        except msgpack.OutOfData:
            yield
    raise CorruptBatchError("truncated batch")   # the framing was checked: never


def _array_header_size(tag: int) -> int:
    """Bytes of the array header whose type byte is ``tag`` (checked by the caller)."""
    return 1 if tag < 0xDC else 3 if tag == 0xDC else 5


def _first_unread(view: memoryview, position: int, min_offset: int,
                  out: list[DecodedRecord]) -> int:
    """The offset a batch-level fault at ``position`` stops a reader at."""
    offset = out[-1].offset + 1 if out else min_offset
    try:
        return max(offset, read_header(view, position).base_offset)
    except CorruptBatchError:
        return offset
