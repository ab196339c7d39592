"""One partition's idempotent and transactional producers: the last batches each wrote,
by sequence, and the transactions open, ended and aborted in it.

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

Transactions (KIP-98), as Kafka's partition keeps them:

- A transactional batch of a producer with no transaction open here starts one at its
  first offset; a producer with one open may not write a non-transactional batch
  (INVALID_TXN_STATE).
- A marker (a control batch the broker writes for the transaction coordinator) ends it:
  its epoch must be at least the producer's (INVALID_PRODUCER_EPOCH otherwise) and
  becomes the producer's epoch, which is how a coordinator's epoch bump fences the
  producer's older instance; a coordinator epoch older than the last marker's is
  TRANSACTION_COORDINATOR_FENCED. An abort is remembered as ``(producer id, first
  offset, last offset = the marker's)``: read_committed consumers are told of the aborted
  transactions their records hold and drop those records.
- The first unstable offset is the first offset of the earliest transaction still open,
  or of one ended by a marker not yet below the high watermark (the marker could still be
  lost). A partition's last stable offset is that, or the high watermark if lower:
  read_committed consumers read below it.
- A producer with a transaction open is never forgotten by expiry.

Batches and markers stored by replication or replayed from the log are recorded without
these checks: the leader checked them.
"""

from __future__ import annotations

from bisect import bisect_left
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
NO_OFFSET: Final = -1
SNAPSHOT_VERSION: Final = 2
"""2 added transactions; a version 1 snapshot is refused (:class:`SnapshotError`), so
the state is rebuilt from the log, which knows every transactional batch and marker."""


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
    transactional: bool = False
    control: bool = False
    """A transaction marker: recorded by :meth:`ProducerStates.record_marker` (with
    what its record says), never checked or recorded as a batch."""

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
    """The last batch's (or marker's) timestamp (its max timestamp, else its append
    time): expiry counts from here."""
    coordinator_epoch: int = -1
    """The coordinator epoch of the last marker written for this producer."""
    txn_first_offset: int = NO_OFFSET
    """The first offset of the transaction open here, or :data:`NO_OFFSET`."""

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


@dataclass(frozen=True, slots=True)
class TxnRange:
    """A transaction of ``producer_id`` in this partition: its first offset and its
    marker's offset (``last_offset``)."""

    producer_id: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """What a marker ended: the transaction's range and whether it was aborted."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


APPEND: Final = Append()
Verdict = Append | Duplicate | Refused


class ProducerStates:
    """The idempotent and transactional producers of one partition (see the module
    docstring)."""

    def __init__(self, entries: Iterable[ProducerEntry] = (), *,
                 aborted: Iterable[TxnRange] = (), ended: Iterable[TxnRange] = (),
                 last_marker_offset: int = NO_OFFSET) -> None:
        self._entries: dict[int, ProducerEntry] = {e.producer_id: e for e in entries}
        self._open: dict[int, int] = {e.producer_id: e.txn_first_offset
                                      for e in self._entries.values()
                                      if e.txn_first_offset != NO_OFFSET}
        """Producer id -> first offset of its open transaction."""
        self._aborted: list[TxnRange] = sorted(aborted, key=lambda t: t.last_offset)
        """Aborted transactions, by marker offset (the order markers are written in)."""
        self._aborted_ends: list[int] = [t.last_offset for t in self._aborted]
        self._longest_abort = max((t.last_offset - t.first_offset for t in self._aborted),
                                  default=0)
        """The most offsets an aborted transaction spans (never lowered): a read need not
        look at aborts whose marker lies that far past its end."""
        self._ended: list[TxnRange] = list(ended)
        """Transactions whose marker may still lie at or above the high watermark: they
        stay unstable until it passes the marker (:meth:`first_unstable_offset`)."""
        self._last_marker_offset = last_marker_offset
        """The offset of the last marker recorded (never forgotten by expiry): a
        truncation below it cannot be followed in place (:meth:`truncated`)."""

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[ProducerEntry]:
        return iter(self._entries.values())

    def get(self, producer_id: int) -> ProducerEntry | None:
        return self._entries.get(producer_id)

    def check(self, producer_id: int, epoch: int, first_seq: int, last_seq: int,
              transactional: bool = False) -> Verdict:
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
            return self._txn_state(entry, transactional)
        for batch in entry.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return Duplicate(batch.first_offset, batch.last_offset)
        if not _follows(entry.last_seq, first_seq):
            return Refused(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                           f"producer {producer_id} sent sequence {first_seq} after "
                           f"{entry.last_seq}")
        return self._txn_state(entry, transactional)

    @staticmethod
    def _txn_state(entry: ProducerEntry, transactional: bool) -> Append | Refused:
        if entry.txn_first_offset != NO_OFFSET and not transactional:
            return Refused(ErrorCode.INVALID_TXN_STATE,
                           f"producer {entry.producer_id} has a transaction open here "
                           f"since offset {entry.txn_first_offset}: a non-transactional "
                           "batch is refused")
        return APPEND

    def record(self, producer_id: int, epoch: int, first_seq: int, last_seq: int,
               first_offset: int, last_offset: int, timestamp_ms: int,
               transactional: bool = False) -> None:
        """A batch of ``producer_id`` was stored at ``first_offset..last_offset``
        (appended after :meth:`check`, replicated, or replayed from the log); a
        transactional one starts a transaction unless one is open."""
        entry = self._entries.get(producer_id)
        if entry is None:
            entry = self._entries[producer_id] = ProducerEntry(producer_id)
        if epoch != entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()
        entry.batches.append(BatchMeta(first_seq, last_seq, first_offset, last_offset,
                                       timestamp_ms))
        entry.last_timestamp_ms = timestamp_ms
        if transactional and entry.txn_first_offset == NO_OFFSET:
            entry.txn_first_offset = first_offset
            self._open[producer_id] = first_offset

    def check_batch(self, batch: ProducerBatch) -> Verdict:
        """:meth:`check` for ``batch`` (not a marker: :meth:`check_marker`)."""
        if batch.control:
            raise ValueError("a control batch is a marker: check_marker")
        return self.check(batch.producer_id, batch.epoch, batch.first_seq, batch.last_seq,
                          batch.transactional)

    def record_batch(self, batch: ProducerBatch, base_offset: int) -> None:
        """:meth:`record` for ``batch``, stored at ``base_offset`` (not a marker:
        :meth:`record_marker`)."""
        if batch.control:
            raise ValueError("a control batch is a marker: record_marker")
        self.record(batch.producer_id, batch.epoch, batch.first_seq, batch.last_seq,
                    base_offset, base_offset + batch.last_offset_delta, batch.timestamp_ms,
                    batch.transactional)

    # --- transaction markers --------------------------------------------------------------

    def check_marker(self, producer_id: int, epoch: int,
                     coordinator_epoch: int | None = None) -> Append | Refused:
        """Whether a marker of ``producer_id`` at ``epoch`` may be written: an epoch
        older than the producer's is INVALID_PRODUCER_EPOCH, a ``coordinator_epoch``
        older than the last marker's TRANSACTION_COORDINATOR_FENCED (a coordinator that
        lost its transactional ids to another). A marker with no transaction open here is
        written all the same (it ends nothing), as Kafka writes it."""
        entry = self._entries.get(producer_id)
        if entry is None:
            return APPEND
        if epoch < entry.epoch:
            return Refused(ErrorCode.INVALID_PRODUCER_EPOCH,
                           f"marker of producer {producer_id} at epoch {epoch}, older "
                           f"than the current {entry.epoch}")
        if coordinator_epoch is not None and coordinator_epoch < entry.coordinator_epoch:
            return Refused(ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                           f"marker of producer {producer_id} from coordinator epoch "
                           f"{coordinator_epoch}, older than {entry.coordinator_epoch}")
        return APPEND

    def record_marker(self, producer_id: int, epoch: int, commit: bool, offset: int,
                      timestamp_ms: int, coordinator_epoch: int = -1,
                      ) -> CompletedTxn | None:
        """A marker of ``producer_id`` was stored at ``offset`` (written after
        :meth:`check_marker`, replicated, or replayed): the open transaction ends there,
        an abort is remembered, and ``epoch`` becomes the producer's (a higher one: its
        batches of older epochs are fenced). Returns what ended, None if nothing was
        open."""
        entry = self._entries.get(producer_id)
        if entry is None:
            entry = self._entries[producer_id] = ProducerEntry(producer_id)
        if epoch != entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()
        entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp_ms = timestamp_ms
        self._last_marker_offset = max(self._last_marker_offset, offset)
        first = entry.txn_first_offset
        if first == NO_OFFSET:
            return None
        entry.txn_first_offset = NO_OFFSET
        del self._open[producer_id]
        txn = TxnRange(producer_id, first, offset)
        self._ended.append(txn)
        if not commit:
            self._aborted.append(txn)
            self._aborted_ends.append(offset)
            self._longest_abort = max(self._longest_abort, offset - first)
        return CompletedTxn(producer_id, first, offset, aborted=not commit)

    def open_transactions(self) -> dict[int, int]:
        """Producer id -> first offset, of every transaction open here."""
        return dict(self._open)

    def first_unstable_offset(self, high_watermark: int | None = None) -> int | None:
        """The first offset of the earliest transaction not yet stable, or None.

        Open transactions are unstable; with ``high_watermark``, so are ended ones whose
        marker lies at or above it (not replicated, or not fsynced, yet: it could be
        lost), and ended ones below it are forgotten from then on. Without it, only open
        ones count."""
        first = min(self._open.values(), default=None)
        if high_watermark is None:
            return first
        self._ended = [t for t in self._ended if t.last_offset >= high_watermark]
        for txn in self._ended:
            if first is None or txn.first_offset < first:
                first = txn.first_offset
        return first

    def aborted_between(self, start: int, end: int) -> list[tuple[int, int]]:
        """``(producer_id, first_offset)`` of each aborted transaction a read of
        ``[start, end)`` must be told of: its marker at or after ``start``, its first
        offset before ``end`` (Kafka's rule); by marker offset."""
        i = bisect_left(self._aborted_ends, start)
        j = bisect_left(self._aborted_ends, end + self._longest_abort, lo=i)
        return [(t.producer_id, t.first_offset) for t in self._aborted[i:j]
                if t.first_offset < end]

    @property
    def aborted(self) -> list[TxnRange]:
        """Every aborted transaction remembered, by marker offset."""
        return list(self._aborted)

    @property
    def last_marker_offset(self) -> int:
        return self._last_marker_offset

    def log_start_moved(self, log_start_offset: int) -> None:
        """Retention dropped everything below ``log_start_offset``: aborted (and ended)
        transactions wholly below it are forgotten (no read can reach them)."""
        i = bisect_left(self._aborted_ends, log_start_offset)
        if i:
            del self._aborted[:i], self._aborted_ends[:i]
        self._ended = [t for t in self._ended if t.last_offset >= log_start_offset]

    def expire(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Forget the producers whose last batch is older than ``expiration_ms``
        (Kafka's ``producer.id.expiration.ms``): their next batch starts afresh. A
        producer with a transaction open is kept (its marker will come)."""
        gone = [pid for pid, e in self._entries.items()
                if now_ms - e.last_timestamp_ms >= expiration_ms
                and e.txn_first_offset == NO_OFFSET]
        for pid in gone:
            del self._entries[pid]
        return gone

    def truncated(self, end_offset: int) -> bool:
        """The log lost every offset from ``end_offset`` on: batches there are forgotten,
        a producer left with none is forgotten (its next batch starts afresh, as after
        expiry) unless it has a transaction open below ``end_offset``, and transactions
        that started there are gone.

        Returns False, changing nothing, when a marker was cut (``end_offset`` at or
        below the last one): the transaction it ended is open again, from a first offset
        this state no longer knows; the caller rebuilds the state from the log."""
        if end_offset <= self._last_marker_offset:
            return False
        for pid in list(self._entries):
            entry = self._entries[pid]
            if entry.txn_first_offset >= end_offset:
                entry.txn_first_offset = NO_OFFSET
                del self._open[pid]
            kept = [b for b in entry.batches if b.last_offset < end_offset]
            if len(kept) == len(entry.batches):
                continue
            if not kept and entry.txn_first_offset == NO_OFFSET:
                del self._entries[pid]
                continue
            entry.batches.clear()
            entry.batches.extend(kept)
            if kept:
                entry.last_timestamp_ms = kept[-1].timestamp_ms
        return True

    # --- snapshots ----------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """Every producer's state and the transactions remembered, as bytes
        (:func:`load_snapshot` reads them back)."""
        data: bytes = msgpack.packb([SNAPSHOT_VERSION, [
            [e.producer_id, e.epoch, e.last_timestamp_ms,
             [[b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp_ms]
              for b in e.batches], e.coordinator_epoch, e.txn_first_offset]
            for e in self._entries.values()],
            [[t.producer_id, t.first_offset, t.last_offset] for t in self._aborted],
            [[t.producer_id, t.first_offset, t.last_offset] for t in self._ended],
            self._last_marker_offset])
        return data


class SnapshotError(ValueError):
    """Snapshot bytes that are not one this module wrote."""


def load_snapshot(data: bytes) -> ProducerStates:
    """The states :meth:`ProducerStates.snapshot` wrote; :class:`SnapshotError` if the
    bytes are not such a snapshot (the caller then rebuilds from the log)."""
    try:
        version, *parts = msgpack.unpackb(data, use_list=True, strict_map_key=True)
        if version != SNAPSHOT_VERSION:
            raise SnapshotError(f"snapshot version {version}, not {SNAPSHOT_VERSION}")
        rows, aborted, ended, last_marker = parts
        entries = []
        for pid, epoch, last_ts, batches, coordinator_epoch, txn_first in rows:
            entry = ProducerEntry(int(pid), int(epoch), last_timestamp_ms=int(last_ts),
                                  coordinator_epoch=int(coordinator_epoch),
                                  txn_first_offset=int(txn_first))
            entry.batches.extend(BatchMeta(*(int(v) for v in b)) for b in batches)
            entries.append(entry)
        return ProducerStates(
            entries, aborted=[TxnRange(*(int(v) for v in t)) for t in aborted],
            ended=[TxnRange(*(int(v) for v in t)) for t in ended],
            last_marker_offset=int(last_marker))
    except SnapshotError:
        raise
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise SnapshotError(f"not a producer-state snapshot: {exc}") from None
