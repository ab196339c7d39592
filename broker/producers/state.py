"""One partition's idempotent producers: the last batches each wrote, by sequence.

Kafka's rules (KIP-98, as its broker applies them to a client's append):

- Each producer id has an epoch; a batch of an older epoch is refused
  INVALID_PRODUCER_EPOCH.
- A batch of the current epoch whose sequence range is one of the last
  :data:`BATCHES_KEPT` stored is a retry: it is answered with the offsets the first
  one got and stored nowhere.
- Otherwise its first sequence must follow the last one stored (after 2**31 - 1 comes
  0), and a new epoch starts at sequence 0: anything else is OUT_OF_ORDER_SEQUENCE_NUMBER.
- A producer id this partition has no state for (never seen, expired, or its batches
  all deleted) may start at any sequence, as Kafka accepts it since KIP-360.

Batches stored by replication or replayed from the log are recorded without these
checks: the leader checked them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Final

import msgpack

from groupwire.protocol.errors import ErrorCode

NO_PRODUCER_ID: Final = -1
NO_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
BATCHES_KEPT: Final = 5
"""Batches remembered per producer: a client keeps at most five in flight per partition
(``max.in.flight.requests.per.connection`` <= 5 with idempotence), so a retry is always
one of them."""
MAX_SEQUENCE: Final = 2**31 - 1
SNAPSHOT_VERSION: Final = 1


def last_sequence(first_seq: int, last_offset_delta: int) -> int:
    """A batch's last sequence: its first plus its last offset delta, wrapping past
    :data:`MAX_SEQUENCE` to 0 as Kafka's producers do."""
    return (first_seq + last_offset_delta) % (MAX_SEQUENCE + 1)


def _follows(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == MAX_SEQUENCE)


@dataclass(frozen=True, slots=True)
class ProducerBatch:
    """A batch's producer fields (Kafka's RecordBatch header), whichever its format."""

    producer_id: int
    epoch: int
    first_seq: int
    last_offset_delta: int
    timestamp_ms: int

    @property
    def last_seq(self) -> int:
        return last_sequence(self.first_seq, self.last_offset_delta)


@dataclass(frozen=True, slots=True)
class BatchMeta:
    """A stored batch, as a retry of it is recognised and answered."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp_ms: int


@dataclass(slots=True)
class ProducerEntry:
    """What one partition knows of one producer id."""

    producer_id: int
    epoch: int = NO_EPOCH
    batches: deque[BatchMeta] = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))
    last_timestamp_ms: int = -1
    """The last batch's timestamp (its max timestamp, else its append time): expiry
    counts from here."""

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1


@dataclass(frozen=True, slots=True)
class Append:
    """The batch may be appended (then :meth:`ProducerStates.record` it)."""


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A retry of a stored batch: answer with its offsets, store nothing."""

    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class Refused:
    """The batch breaks the producer's order or epoch: answer ``code``, store nothing."""

    code: ErrorCode
    message: str


APPEND: Final = Append()
Verdict = Append | Duplicate | Refused


class ProducerStates:
    """The idempotent producers of one partition (see the module docstring)."""

    def __init__(self, entries: Iterable[ProducerEntry] = ()) -> None:
        self._entries: dict[int, ProducerEntry] = {e.producer_id: e for e in entries}

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[ProducerEntry]:
        return iter(self._entries.values())

    def get(self, producer_id: int) -> ProducerEntry | None:
        return self._entries.get(producer_id)

    def check(self, producer_id: int, epoch: int, first_seq: int,
              last_seq: int) -> Verdict:
        """What a client's batch of ``producer_id`` is: to append, a retry, or refused."""
        entry = self._entries.get(producer_id)
        if entry is None or entry.epoch == NO_EPOCH:
            return APPEND  # unknown here: any sequence starts it (KIP-360)
        if epoch < entry.epoch:
            return Refused(ErrorCode.INVALID_PRODUCER_EPOCH,
                           f"producer {producer_id} epoch {epoch} is older than the "
                           f"current {entry.epoch}")
        if epoch > entry.epoch:
            if first_seq != 0:
                return Refused(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                               f"producer {producer_id} starts epoch {epoch} at sequence "
                               f"{first_seq}, not 0")
            return APPEND
        for batch in entry.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return Duplicate(batch.first_offset, batch.last_offset)
        if not _follows(entry.last_seq, first_seq):
            return Refused(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                           f"producer {producer_id} sent sequence {first_seq} after "
                           f"{entry.last_seq}")
        return APPEND

    def record(self, producer_id: int, epoch: int, first_seq: int, last_seq: int,
               first_offset: int, last_offset: int, timestamp_ms: int) -> None:
        """A batch of ``producer_id`` was stored at ``first_offset..last_offset``
        (appended after :meth:`check`, replicated, or replayed from the log)."""
        entry = self._entries.get(producer_id)
        if entry is None:
            entry = self._entries[producer_id] = ProducerEntry(producer_id)
        if epoch != entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()
        entry.batches.append(BatchMeta(first_seq, last_seq, first_offset, last_offset,
                                       timestamp_ms))
        entry.last_timestamp_ms = timestamp_ms

    def check_batch(self, batch: ProducerBatch) -> Verdict:
        """:meth:`check` for ``batch``."""
        return self.check(batch.producer_id, batch.epoch, batch.first_seq, batch.last_seq)

    def record_batch(self, batch: ProducerBatch, base_offset: int) -> None:
        """:meth:`record` for ``batch``, stored at ``base_offset``."""
        self.record(batch.producer_id, batch.epoch, batch.first_seq, batch.last_seq,
                    base_offset, base_offset + batch.last_offset_delta, batch.timestamp_ms)

    def expire(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Forget the producers whose last batch is older than ``expiration_ms``
        (Kafka's ``producer.id.expiration.ms``): their next batch starts afresh."""
        gone = [pid for pid, e in self._entries.items()
                if now_ms - e.last_timestamp_ms >= expiration_ms]
        for pid in gone:
            del self._entries[pid]
        return gone

    def truncated(self, end_offset: int) -> None:
        """The log lost every offset from ``end_offset`` on: batches there are forgotten,
        and a producer left with none is forgotten (its next batch starts afresh, as
        after expiry)."""
        for pid in list(self._entries):
            entry = self._entries[pid]
            kept = [b for b in entry.batches if b.last_offset < end_offset]
            if len(kept) == len(entry.batches):
                continue
            if not kept:
                del self._entries[pid]
                continue
            entry.batches.clear()
            entry.batches.extend(kept)
            entry.last_timestamp_ms = kept[-1].timestamp_ms

    # --- snapshots ----------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """Every producer's state as bytes (:func:`load_snapshot` reads them back)."""
        data: bytes = msgpack.packb([SNAPSHOT_VERSION, [
            [e.producer_id, e.epoch, e.last_timestamp_ms,
             [[b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp_ms]
              for b in e.batches]]
            for e in self._entries.values()]])
        return data


class SnapshotError(ValueError):
    """Snapshot bytes that are not one this module wrote."""


def load_snapshot(data: bytes) -> ProducerStates:
    """The states :meth:`ProducerStates.snapshot` wrote; :class:`SnapshotError` if the
    bytes are not such a snapshot (the caller then rebuilds from the log)."""
    try:
        version, rows = msgpack.unpackb(data, use_list=True, strict_map_key=True)
        if version != SNAPSHOT_VERSION:
            raise SnapshotError(f"snapshot version {version}, not {SNAPSHOT_VERSION}")
        entries = []
        for pid, epoch, last_ts, batches in rows:
            entry = ProducerEntry(int(pid), int(epoch), last_timestamp_ms=int(last_ts))
            entry.batches.extend(BatchMeta(*(int(v) for v in b)) for b in batches)
            entries.append(entry)
    except SnapshotError:
        raise
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise SnapshotError(f"not a producer-state snapshot: {exc}") from None
    return ProducerStates(entries)
