"""A partition log's idempotent producers: built from the log, kept beside it.

The rules are the sans-I/O core's (``broker.producers.state``); this module is what the
log does for them: read each batch's producer fields (a Kafka batch's header, a msgpack
batch's in layout v2), rebuild the state by reading the headers of the batches in the
log, and keep a snapshot file so that a clean restart reads one file rather than the log.

The state is built only when first needed (an idempotent producer's first batch since
the log was opened), so a log no idempotent producer writes to never pays for it. A
snapshot is written at a clean close, naming the log end offset it covers; opening reads
it once and deletes it (a later crash must not find a snapshot of a log that has moved
on), then replays the batches above that offset. Without one (a crash), every batch of
the log is replayed: one header read per batch, in steps.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
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
from groupwire.protocol.batches import HEADER_SIZE_V2, BatchHeader
from groupwire.protocol.batches import read_header as read_msgpack_header
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.kafka import records as kafka
from groupwire.protocol.stored_batches import MSGPACK_MARKER, AnyHeader

SNAPSHOT_FILE: Final = "producer-snapshot"
V2_MARKER: Final = 0x99
"""Byte 1 of a msgpack batch in layout v2, the one with producer fields (§5.1)."""


class ProducerRefused(Exception):
    """An idempotent producer's batch out of order or of a fenced epoch: nothing of it
    was stored; answer ``code``."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


REPLAY_STEP: Final = 512
"""Batch headers read between two yields of a replay (a read each)."""


def producer_batch(header: AnyHeader) -> ProducerBatch | None:
    """``header``'s producer fields (a Kafka batch's, or a msgpack v2 batch's), or None
    when it has no producer id (not idempotent)."""
    if isinstance(header, kafka.KafkaBatchHeader):
        if header.producer_id == NO_PRODUCER_ID:
            return None
        return ProducerBatch(header.producer_id, header.producer_epoch,
                             header.base_sequence, header.last_offset_delta,
                             header.max_timestamp_ms)
    if isinstance(header, BatchHeader) and header.producer_id != NO_PRODUCER_ID:
        return ProducerBatch(header.producer_id, header.producer_epoch, header.base_sequence,
                             header.record_count - 1, header.base_timestamp_ms)
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


def write_snapshot(ops: FileOps, directory: Path, states: ProducerStates, end_offset: int,
                   *, sync: bool) -> None:
    """The states as they stand at ``end_offset`` (the log end), beside the log."""
    ops.write_file_atomic(directory / SNAPSHOT_FILE,
                          msgpack.packb([end_offset, states.snapshot()]), sync=sync)


def take_snapshot(ops: FileOps, directory: Path) -> tuple[int, ProducerStates] | None:
    """The snapshot beside the log, as ``(end offset it covers, states)``, deleting the
    file; None when there is none or it does not read (the log is replayed instead)."""
    path = directory / SNAPSHOT_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    with contextlib.suppress(FileNotFoundError):
        ops.unlink(path)
    try:
        end_offset, body = msgpack.unpackb(data)
        if not isinstance(end_offset, int) or not isinstance(body, bytes):
            raise SnapshotError("not [offset, bytes]")
        return end_offset, load_snapshot(body)
    except (SnapshotError, ValueError, TypeError, msgpack.UnpackException):
        return None


def replay(states: ProducerStates, segments: list[Segment], from_offset: int,
           ) -> Iterator[None]:
    """Record into ``states`` every producer batch stored from ``from_offset`` on,
    reading each batch's header from its segment; yields every :data:`REPLAY_STEP`."""
    read = 0
    for seg in segments:
        if seg.next_offset <= from_offset:
            continue
        first = seg.entry_for(from_offset) if from_offset > seg.base_offset else 0
        for i in range(max(first, 0), seg.entry_count):
            base = seg.bases[i]
            if base < from_offset:
                continue
            start = seg.positions[i]
            head = seg.read(start, min(start + kafka.HEADER_SIZE, seg.end_of(i)))
            batch = read_producer_batch(head)
            if batch is not None:
                states.record_batch(batch, base)
            read += 1
            if read % REPLAY_STEP == 0:
                yield

