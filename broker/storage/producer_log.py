"""A partition log's idempotent and transactional producers: built from the log, kept
beside it.

The rules are the sans-I/O core's (``broker.producers.state``); this module is what the
log does for them: read each batch's producer fields (a Kafka batch's header, a msgpack
batch's in layout v2, with their transactional and control bits), rebuild the state by
reading the headers of the batches in the log (and a transaction marker's one record),
and keep a snapshot file so that a clean restart reads one file rather than the log.

The state is built only when first needed (an idempotent producer's first batch since
the log was opened, or a marker, or a read that needs the last stable offset), so a log
no idempotent producer writes to and no read_committed consumer reads never pays for it.
A snapshot is written at a clean close, naming the log end offset it covers and the log
start its aborted transactions were pruned to; opening reads it once and deletes it (a
later crash must not find a snapshot of a log that has moved on), then replays the
batches above that offset. Without one (a crash, a snapshot of another version, or one
whose log start is past the log's: segments retention dropped came back), every batch of
the log is replayed: one header read per batch, in steps.
"""

from __future__ import annotations

import contextlib
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Final

import msgpack

from groupwire.broker.producers.state import (
    NO_PRODUCER_ID,
    ProducerBatch,
    ProducerStates,
    SnapshotError,
    load_snapshot,
)
from groupwire.broker.storage.fileops import FileOps
from groupwire.broker.storage.segment import Segment
from groupwire.protocol.batches import HEADER_SIZE_V2, BatchHeader, CorruptBatchError
from groupwire.protocol.batches import read_header as read_msgpack_header
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.kafka import records as kafka
from groupwire.protocol.stored_batches import MSGPACK_MARKER, AnyHeader, read_control_marker

SNAPSHOT_FILE: Final = "producer-snapshot"
V2_MARKER: Final = 0x99
"""Byte 1 of a msgpack batch in layout v2, the one with producer fields (§5.1)."""


class ProducerRefused(Exception):
    """An idempotent producer's batch out of order or of a fenced epoch, a
    non-transactional batch inside a transaction, or a marker of a fenced producer or
    coordinator epoch: nothing of it was stored; answer ``code``."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


REPLAY_STEP: Final = 512
"""Batch headers read between two yields of a replay (a read each)."""


def producer_batch(header: AnyHeader) -> ProducerBatch | None:
    """``header``'s producer fields (a Kafka batch's, or a msgpack v2 batch's) with its
    transactional and control bits, or None when it has no producer id (not
    idempotent)."""
    if isinstance(header, kafka.KafkaBatchHeader):
        if header.producer_id == NO_PRODUCER_ID:
            return None
        return ProducerBatch(header.producer_id, header.producer_epoch,
                             header.base_sequence, header.last_offset_delta,
                             header.max_timestamp_ms, header.is_transactional,
                             header.is_control)
    if isinstance(header, BatchHeader) and header.producer_id != NO_PRODUCER_ID:
        return ProducerBatch(header.producer_id, header.producer_epoch, header.base_sequence,
                             header.record_count - 1, header.base_timestamp_ms,
                             header.is_transactional, header.is_control)
    return None


def read_producer_batch(data: bytes | memoryview, pos: int = 0) -> ProducerBatch | None:
    """:func:`producer_batch` of the stored batch at ``pos`` of ``data`` (at least its
    header)."""
    if data[pos] == MSGPACK_MARKER:
        if len(data) - pos < HEADER_SIZE_V2 or data[pos + 1] != V2_MARKER:
            return None  # v0 and v1 carry no producer
        return producer_batch(read_msgpack_header(data, pos))
    if len(data) - pos < kafka.HEADER_SIZE:
        return None
    return producer_batch(kafka.read_header(data, pos))


def record_stored(states: ProducerStates, data: bytes | memoryview, pos: int,
                  base_offset: int) -> None:
    """Record into ``states`` the stored batch at ``pos`` of ``data`` (at ``base_offset``):
    a producer's batch, or a transaction marker (then ``data`` holds the whole batch:
    its record says commit or abort). A marker whose record does not read is left out
    (the broker wrote it; nothing but a bug makes one)."""
    batch = read_producer_batch(data, pos)
    if batch is None:
        return
    if not batch.control:
        states.record_batch(batch, base_offset)
        return
    try:
        commit, coordinator_epoch = read_control_marker(data, pos)
    except CorruptBatchError:
        return
    states.record_marker(batch.producer_id, batch.epoch, commit, base_offset,
                         batch.timestamp_ms, coordinator_epoch)


def write_snapshot(ops: FileOps, directory: Path, states: ProducerStates, end_offset: int,
                   *, sync: bool, log_start_offset: int = 0) -> None:
    """The states as they stand at ``end_offset`` (the log end), beside the log; they
    forgot the aborted transactions below ``log_start_offset`` (retention)."""
    ops.write_file_atomic(directory / SNAPSHOT_FILE,
                          msgpack.packb([end_offset, states.snapshot(), log_start_offset]),
                          sync=sync)


def take_snapshot(ops: FileOps, directory: Path, log_start_offset: int | None = None,
                  ) -> tuple[int, ProducerStates] | None:
    """The snapshot beside the log, as ``(end offset it covers, states)``, deleting the
    file; None when there is none or it does not read, or when it was taken with a later
    log start than ``log_start_offset`` (segments retention dropped came back: their
    aborted transactions are not in it). The log is replayed instead."""
    path = directory / SNAPSHOT_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    with contextlib.suppress(FileNotFoundError):
        ops.unlink(path)
    try:
        end_offset, body, *rest = msgpack.unpackb(data)
        if not isinstance(end_offset, int) or not isinstance(body, bytes):
            raise SnapshotError("not [offset, bytes]")
        start = rest[0] if rest else 0
        if not isinstance(start, int):
            raise SnapshotError("not [offset, bytes, offset]")
        if log_start_offset is not None and start > log_start_offset:
            return None
        return end_offset, load_snapshot(body)
    except (SnapshotError, ValueError, TypeError, msgpack.UnpackException):
        return None


def replay(states: ProducerStates, segments: Sequence[Segment], from_offset: int,
           on_step: Callable[[ProducerStates], None] | None = None) -> Iterator[None]:
    """Record into ``states`` every producer batch and marker stored from ``from_offset``
    on, reading each batch's header from its segment (a marker's whole batch); yields
    every :data:`REPLAY_STEP`, calling ``on_step`` when it resumes.

    ``segments`` is the log's own list, read afresh at each batch: what is appended,
    rolled or dropped by retention while the replay yields is followed (it ends at the
    log end as it is when the replay ends, with no yield in between). A truncation
    meanwhile is the caller's to notice.
    """
    offset = from_offset
    read = 0
    while True:
        seg, first = _locate(segments, offset)
        if seg is None:
            return
        for i in range(first, seg.entry_count):
            base = seg.bases[i]
            start, end = seg.positions[i], seg.end_of(i)
            head = seg.read(start, min(start + kafka.HEADER_SIZE, end))
            if _is_control(head):
                head = seg.read(start, end)
            record_stored(states, head, 0, base)
            offset = seg.bases[i + 1] if i + 1 < seg.entry_count else seg.next_offset
            read += 1
            if read % REPLAY_STEP == 0:
                yield
                if on_step is not None:
                    on_step(states)
                break   # the segments may have changed: find the next batch afresh
        else:
            offset = max(offset, seg.next_offset)


def _locate(segments: Sequence[Segment], offset: int) -> tuple[Segment | None, int]:
    """The segment holding the first batch at or above ``offset``, and its index there;
    ``(None, 0)`` past the log end."""
    for seg in segments:
        if seg.next_offset <= offset or not seg.entry_count:
            continue
        return seg, (bisect_left(seg.bases, offset) if offset > seg.base_offset else 0)
    return None, 0


def _is_control(head: bytes | memoryview) -> bool:
    """Whether the batch whose header starts ``head`` is a transaction marker."""
    if head[0] == MSGPACK_MARKER:
        return (len(head) >= HEADER_SIZE_V2 and head[1] == V2_MARKER
                and bool(read_msgpack_header(head).is_control))
    return len(head) >= kafka.HEADER_SIZE and kafka.read_header(head).is_control
