"""The transaction coordinator (KIP-98, with KIP-360's producer-id recovery) as a state
machine over plain inputs.

Inputs: the four transactional requests (``init_producer_id``, ``add_partitions``,
``add_offsets``, ``end_txn``), each carrying a ``token`` the shell chooses to find its
request again; the outcome of each record write (``stored`` / ``write_failed``) and of
each marker job (``markers_written`` / ``markers_failed``); ``expire`` when
``next_deadline`` has come; and partition hosting (``load_partition`` /
``unload_partition``). Each returns a :class:`~.outputs.Result`. ``describe``,
``list_transactions`` and ``counters`` only read.

Kafka's rules, as its ``TransactionCoordinator`` applies them to transactions of
transaction version 1 (the client never bumps its own epoch), with one difference of
mechanism: Kafka marks a transactional id's metadata with a ``pendingState`` while its
append is in flight and overwrites it once replicated; here the stored metadata is kept
as it is and the next one waits beside it (``_Pending``), so a failed write reverts by
dropping it (as Kafka's newer coordinator runtime reverts uncommitted state). While it
waits, or while markers are out, other requests for the id are answered
CONCURRENT_TRANSACTIONS, as Kafka does.

Times: ``now_ms`` is always the shell's monotonic clock; the records carry wall-clock
times, converted by the offset ``set_wall_clock`` gives (zero by default: in tests both
clocks are one).
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field, fields, replace
from typing import Final

from groupwire.broker.transactions.config import TransactionConfig
from groupwire.broker.transactions.outputs import (
    EMPTY_RESULT,
    ListedTransaction,
    MarkerWork,
    Reply,
    Result,
    Transition,
    TxnCounters,
    TxnDescription,
    TxnListing,
    Write,
)
from groupwire.broker.transactions.records import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_START,
    Partition,
    TxnMetadata,
    TxnRecord,
)
from groupwire.broker.transactions.state import (
    BY_NAME,
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    DEAD,
    EMPTY,
    IDLE,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    PREPARE_EPOCH_FENCE,
    PREPARED,
    TxnState,
    check_transition,
)
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.hashing import coordinator_partition

OFFSETS_TOPIC: Final = "__consumer_offsets"
MAX_EPOCH: Final = 32767
"""Java's ``Short.MaxValue``: the largest producer epoch."""

_NONE: Final = ErrorCode.NONE
_CONCURRENT: Final = ErrorCode.CONCURRENT_TRANSACTIONS
_FENCED: Final = ErrorCode.PRODUCER_FENCED
_MAPPING: Final = ErrorCode.INVALID_PRODUCER_ID_MAPPING
_BAD_STATE: Final = ErrorCode.INVALID_TXN_STATE


def epoch_exhausted(epoch: int) -> bool:
    """Kafka's ``isEpochExhausted``: no more epochs are handed out from ``MAX_EPOCH - 1``
    on, so that fencing the producer (a bump) always has one left."""
    return epoch >= MAX_EPOCH - 1


class _Kind(enum.Enum):
    """Why a record is being written: what its outcome does."""

    INIT = "InitProducerId"
    ADD = "AddPartitions"
    END = "EndTxn"
    FENCE = "InitProducerId fencing an open transaction"
    TIMEOUT = "timeout abort"
    COMPLETE = "markers written"
    EXPIRE = "id expired"


_UNASKED: Final = frozenset({_Kind.TIMEOUT, _Kind.COMPLETE, _Kind.EXPIRE})
"""Writes the coordinator makes on its own: after a failure it tries them again."""


@dataclass(slots=True)
class _Pending:
    token: int
    kind: _Kind
    target: TxnMetadata | None
    """The metadata once stored; None for a tombstone."""
    path: tuple[TxnState, ...]
    """The states the id passes through to the target's (checked against the table)."""
    reply: int | None
    """The token of the request waiting for the outcome."""


@dataclass(slots=True)
class _Entry:
    transactional_id: str
    partition: int
    meta: TxnMetadata | None
    """What is stored; None while the InitProducerId that creates the id is in flight."""
    pending: _Pending | None = None
    marker_token: int | None = None
    """The marker job out, if any."""
    unmarked: frozenset[Partition] = frozenset()
    """In PrepareCommit/PrepareAbort: the partitions not yet known to have the marker."""
    retry_at: int | None = None
    """After a failure of the coordinator's own work: not before then."""
    deadline: int | None = None
    sched: int = 0
    """Sequence number of the live heap item for ``deadline`` (0: none)."""


@dataclass(slots=True)
class _Hosted:
    coordinator_epoch: int
    ids: set[str] = field(default_factory=set)


@dataclass(slots=True)
class _Counts:
    commits: int = 0
    aborts_client: int = 0
    aborts_timeout: int = 0
    aborts_fenced: int = 0
    producers_fenced: int = 0
    ids_expired: int = 0


class TransactionCoordinator:
    """The transactional ids of the ``__transaction_state`` partitions this broker hosts.

    Every input returns a :class:`Result`; the coordinator keeps no reference to it.
    Tokens it makes (write and marker tokens) are positive, increase, and are never
    reused by this instance; an outcome reported for a token it no longer knows (its
    partition was unloaded since, or it was reported already) is ignored and returns an
    empty Result. A new instance numbers from 1 again: never report to it the outcomes
    of the one it replaced.
    """

    def __init__(self, config: TransactionConfig | None = None) -> None:
        self.config = config if config is not None else TransactionConfig()
        self._entries: dict[str, _Entry] = {}
        self._hosted: dict[int, _Hosted] = {}
        self._writes: dict[int, _Entry] = {}
        self._marker_jobs: dict[int, _Entry] = {}
        self._heap: list[tuple[int, int, _Entry]] = []
        self._seq = 0
        self._last_token = 0
        self._wall_offset_ms = 0
        self._counts = _Counts()
        self._replies: list[Reply] = []
        self._out_writes: list[Write] = []
        self._out_markers: list[MarkerWork] = []
        self._transitions: list[Transition] = []

    # --- placement and hosting -------------------------------------------------------

    def partition_of(self, transactional_id: str) -> int:
        """The ``__transaction_state`` partition that holds ``transactional_id``
        (Kafka's ``abs(hashCode) % partitions``)."""
        return coordinator_partition(transactional_id, self.config.partitions)

    def hosts(self, partition: int) -> bool:
        return partition in self._hosted

    def hosted_partitions(self) -> frozenset[int]:
        return frozenset(self._hosted)

    def coordinator_epoch(self, partition: int) -> int | None:
        hosted = self._hosted.get(partition)
        return None if hosted is None else hosted.coordinator_epoch

    def set_wall_clock(self, wall_ms: int, now_ms: int) -> None:
        """The wall clock read ``wall_ms`` when the monotonic one read ``now_ms``: the
        times written into records and returned by ``describe`` are moved onto it, and
        loaded records' times moved back. Never called: both clocks are one."""
        self._wall_offset_ms = wall_ms - now_ms

    def load_partition(self, partition: int, records: Iterable[TxnRecord],
                       coordinator_epoch: int, now_ms: int) -> Result:
        """Host ``partition`` from its records in log order (the last per id wins, a
        tombstone removes it); ``coordinator_epoch`` is the partition's leader epoch,
        stamped on marker work. Decisions stored but not completed (PrepareCommit,
        PrepareAbort) have their markers sent again: the Result carries that work. Open
        transactions keep the deadline of their start; idle ids that of their last update
        (``expire`` acts on those already past). Loading a hosted partition replaces it
        (its pending work forgotten, as by :meth:`unload_partition`). Raises
        ``ValueError``, hosting nothing new, for a record of another partition or in a
        state never stored (Dead, PrepareEpochFence)."""
        self._reset()
        self._check_partition(partition)
        loaded: dict[str, TxnMetadata] = {}
        for record in records:
            tid = record.transactional_id
            if self.partition_of(tid) != partition:
                raise ValueError(f"transactional id {tid!r} is not in partition {partition}")
            if record.metadata is None:
                loaded.pop(tid, None)
            elif record.metadata.state in (DEAD, PREPARE_EPOCH_FENCE):
                raise ValueError(f"transactional id {tid!r} stored in state "
                                 f"{record.metadata.state.value}, which is never stored")
            else:
                loaded[tid] = record.metadata
        self._drop(partition)
        hosted = self._hosted[partition] = _Hosted(coordinator_epoch)
        for tid, meta in loaded.items():
            entry = _Entry(tid, partition, meta.shifted(-self._wall_offset_ms))
            self._entries[tid] = entry
            hosted.ids.add(tid)
            if meta.state in PREPARED:
                entry.unmarked = meta.partitions
                self._advance(entry, now_ms)
            else:
                self._schedule(entry)
        return self._build()

    def unload_partition(self, partition: int, now_ms: int) -> Result:
        """Forget ``partition``'s ids (another broker leads it now, and resumes them from
        its records): requests waiting on a write are answered NOT_COORDINATOR; the
        outcomes of its writes and marker jobs, if reported later, are ignored."""
        self._reset()
        self._drop(partition)
        return self._build()

    # --- requests --------------------------------------------------------------------

    def init_producer_id(self, token: int, transactional_id: str, transaction_timeout_ms: int,
                         producer_id: int, producer_epoch: int, fresh_producer_id: int,
                         now_ms: int) -> Result:
        """InitProducerId for a transactional id (the shell answers those without one).

        ``producer_id``/``producer_epoch``: the producer's current ones (KIP-360), both
        -1 when it has none. ``fresh_producer_id``: an unused producer id the shell
        allocated, taken only if the id is new or its epochs are exhausted. NONE comes
        with the producer id and epoch once the record is stored. An open transaction is
        aborted with the epoch bumped (the old producer fenced) and the request answered
        CONCURRENT_TRANSACTIONS once that is stored: the client retries."""
        self._reset()
        if fresh_producer_id < 0:
            raise ValueError(f"fresh_producer_id must be a producer id, got {fresh_producer_id}")
        # KIP-360: the producer names both its id and epoch, or neither
        if not transactional_id or (
                (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH)):
            return self._answer(token, ErrorCode.INVALID_REQUEST)
        expected = None if producer_id == NO_PRODUCER_ID else (producer_id, producer_epoch)
        if not 0 < transaction_timeout_ms <= self.config.transaction_max_timeout_ms:
            return self._answer(token, ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        partition = self.partition_of(transactional_id)
        if partition not in self._hosted:
            return self._answer(token, ErrorCode.NOT_COORDINATOR)
        entry = self._entries.get(transactional_id)
        if entry is None:
            entry = _Entry(transactional_id, partition, None)
            self._entries[transactional_id] = entry
            self._hosted[partition].ids.add(transactional_id)
            target = TxnMetadata(fresh_producer_id, fresh_producer_id, 0, NO_PRODUCER_EPOCH,
                                 transaction_timeout_ms, EMPTY, frozenset(), NO_START, now_ms)
            self._write(entry, _Kind.INIT, target, (EMPTY,), token)
            return self._build()
        meta = entry.meta
        if meta is None or entry.pending is not None or meta.state in PREPARED:
            return self._answer(token, _CONCURRENT)
        if expected is not None and not self._known_producer(meta, *expected):
            return self._fenced(token)
        if meta.state is ONGOING:
            self._write(entry, _Kind.FENCE, self._fence(meta, now_ms),
                        (PREPARE_EPOCH_FENCE, PREPARE_ABORT), token)
            return self._build()
        bumped = self._next_producer(meta, expected, transaction_timeout_ms,
                                     fresh_producer_id, now_ms)
        if bumped is None:
            return self._fenced(token)
        self._write(entry, _Kind.INIT, bumped, (EMPTY,), token)
        return self._build()

    def add_partitions(self, token: int, transactional_id: str, producer_id: int,
                       producer_epoch: int, partitions: Collection[Partition],
                       now_ms: int) -> Result:
        """AddPartitionsToTxn: one code for all the partitions (the shell spreads it).
        Answered at once when they are all in the open transaction already, else once
        the record with them is stored. A transaction begins (its timeout starts) with
        the first AddPartitions after InitProducerId or the last EndTxn."""
        self._reset()
        entry, code = self._producer_entry(transactional_id, producer_id, producer_epoch)
        if entry is None:
            return self._answer(token, code)
        meta = entry.meta
        assert meta is not None
        if meta.state in PREPARED:
            return self._answer(token, _CONCURRENT)
        added = frozenset(partitions)
        if meta.state is ONGOING and added <= meta.partitions:
            return self._answer(token, _NONE)
        start = now_ms if meta.state in IDLE else meta.start_ms
        target = replace(meta, state=ONGOING, partitions=meta.partitions | added,
                         start_ms=start, update_ms=now_ms)
        self._write(entry, _Kind.ADD, target, (ONGOING,), token)
        return self._build()

    def add_offsets(self, token: int, transactional_id: str, producer_id: int,
                    producer_epoch: int, group_id: str, now_ms: int) -> Result:
        """AddOffsetsToTxn: adds the group's ``__consumer_offsets`` partition, so the
        offsets the producer commits for it (TxnOffsetCommit) get the markers too."""
        return self.add_partitions(token, transactional_id, producer_id, producer_epoch,
                                   (self.offsets_partition(group_id),), now_ms)

    def offsets_partition(self, group_id: str) -> Partition:
        return OFFSETS_TOPIC, coordinator_partition(group_id, self.config.offsets_partitions)

    def end_txn(self, token: int, transactional_id: str, producer_id: int, producer_epoch: int,
                commit: bool, now_ms: int) -> Result:
        """EndTxn. From Ongoing: the decision is stored (PrepareCommit / PrepareAbort),
        then answered NONE, and the Result of ``stored`` carries the marker work. A retry
        finding the same decision completed is answered NONE, still in progress
        CONCURRENT_TRANSACTIONS; the other decision, or no transaction, INVALID_TXN_STATE.
        Only the current epoch may end a transaction: a producer fenced meanwhile (by a
        new producer or a timeout's abort) is answered PRODUCER_FENCED."""
        self._reset()
        entry, code = self._producer_entry(transactional_id, producer_id, producer_epoch)
        if entry is None:
            return self._answer(token, code)
        meta = entry.meta
        assert meta is not None
        state = meta.state
        if state is ONGOING:
            target = replace(meta, state=PREPARE_COMMIT if commit else PREPARE_ABORT,
                             update_ms=now_ms)
            self._write(entry, _Kind.END, target, (target.state,), token)
            return self._build()
        if state is (COMPLETE_COMMIT if commit else COMPLETE_ABORT):
            return self._answer(token, _NONE, meta.producer_id, meta.producer_epoch)
        if state is (PREPARE_COMMIT if commit else PREPARE_ABORT):
            return self._answer(token, _CONCURRENT)
        return self._answer(token, _BAD_STATE)

    # --- outcomes --------------------------------------------------------------------

    def stored(self, write_token: int, now_ms: int) -> Result:
        """The write's record is durable: the state it describes takes effect, and the
        reply that waited for it goes out (with the marker work of a decision)."""
        self._reset()
        entry = self._writes.pop(write_token, None)
        if entry is None:
            return EMPTY_RESULT
        pending = entry.pending
        assert pending is not None and pending.token == write_token
        entry.pending = None
        source = EMPTY if entry.meta is None else entry.meta.state
        for target_state in pending.path:
            self._transitions.append((entry.transactional_id, source, target_state))
            source = target_state
        target = pending.target
        if target is None:
            self._forget(entry)
            self._counts.ids_expired += 1
            return self._build()
        entry.meta = target
        entry.retry_at = None
        kind = pending.kind
        if pending.reply is not None:
            if kind is _Kind.FENCE:
                self._replies.append(Reply(pending.reply, _CONCURRENT))
            elif kind is _Kind.ADD:
                self._replies.append(Reply(pending.reply, _NONE))
            else:
                self._replies.append(Reply(pending.reply, _NONE, target.producer_id,
                                           target.producer_epoch))
        if target.state in PREPARED:
            entry.unmarked = target.partitions
            counts = self._counts
            if kind is _Kind.END:
                if target.state is PREPARE_COMMIT:
                    counts.commits += 1
                else:
                    counts.aborts_client += 1
            elif kind is _Kind.FENCE:
                counts.aborts_fenced += 1
            else:
                counts.aborts_timeout += 1
        else:
            entry.unmarked = frozenset()
        self._advance(entry, now_ms)
        return self._build()

    def write_failed(self, write_token: int, code: ErrorCode, now_ms: int) -> Result:
        """The write did not happen (and will not): the id stays as it was stored, and
        the waiting request is answered ``code`` (see ``outputs.write_error_code``).
        The coordinator's own writes are tried again ``retry_backoff_ms`` later."""
        self._reset()
        if code == _NONE:
            raise ValueError("a failed write needs the code of its failure")
        entry = self._writes.pop(write_token, None)
        if entry is None:
            return EMPTY_RESULT
        pending = entry.pending
        assert pending is not None and pending.token == write_token
        entry.pending = None
        if pending.reply is not None:
            self._replies.append(Reply(pending.reply, code))
        if entry.meta is None:
            self._forget(entry)
            return self._build()
        if pending.kind in _UNASKED:
            entry.retry_at = now_ms + self.config.retry_backoff_ms
        self._advance(entry, now_ms)
        return self._build()

    def markers_written(self, marker_token: int, now_ms: int) -> Result:
        """Every partition of the marker job has its marker: the Complete record is
        written (its partitions cleared)."""
        return self.markers_failed(marker_token, (), now_ms)

    def markers_failed(self, marker_token: int, retry: Collection[Partition],
                       now_ms: int) -> Result:
        """The job's markers are written except in ``retry``'s partitions, which are
        sent again (a new job) ``retry_backoff_ms`` later."""
        self._reset()
        entry = self._marker_jobs.pop(marker_token, None)
        if entry is None:
            return EMPTY_RESULT
        entry.marker_token = None
        entry.unmarked = entry.unmarked & frozenset(retry)
        if entry.unmarked:
            entry.retry_at = now_ms + self.config.retry_backoff_ms
        self._advance(entry, now_ms)
        return self._build()

    # --- time ------------------------------------------------------------------------

    def next_deadline(self) -> int | None:
        """When :meth:`expire` has work next (monotonic ms), None if never without
        another input. The shell keeps one timer armed for it, re-reading it after
        every input."""
        heap = self._heap
        while heap and heap[0][2].sched != heap[0][1]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def expire(self, now_ms: int) -> Result:
        """Everything due by ``now_ms``: open transactions past their timeout aborted
        with the epoch bumped (the producer fenced), idle ids past their expiration
        removed (a tombstone), and work that failed tried again."""
        self._reset()
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            _, seq, entry = heapq.heappop(heap)
            if entry.sched != seq:
                continue
            entry.sched = 0
            entry.deadline = None
            self._advance(entry, now_ms)
        return self._build()

    # --- reads -----------------------------------------------------------------------

    def describe(self, transactional_ids: Iterable[str]) -> list[TxnDescription]:
        """DescribeTransactions, one answer per id in the order asked."""
        answers = []
        for tid in transactional_ids:
            if not tid:
                answers.append(TxnDescription(tid, ErrorCode.INVALID_REQUEST))
                continue
            if self.partition_of(tid) not in self._hosted:
                answers.append(TxnDescription(tid, ErrorCode.NOT_COORDINATOR))
                continue
            entry = self._entries.get(tid)
            meta = None if entry is None else entry.meta
            if meta is None:
                answers.append(TxnDescription(tid, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND))
                continue
            start = meta.start_ms if meta.start_ms == NO_START else (
                meta.start_ms + self._wall_offset_ms)
            answers.append(TxnDescription(
                tid, _NONE, meta.state.value, meta.timeout_ms, start, meta.producer_id,
                meta.producer_epoch, tuple(sorted(meta.partitions))))
        return answers

    def list_transactions(self, state_filters: Collection[str] = (),
                          producer_id_filters: Collection[int] = ()) -> TxnListing:
        """ListTransactions: the ids whose state is one of ``state_filters`` and whose
        producer id one of ``producer_id_filters`` (an empty filter lets all through)."""
        states = {BY_NAME[name] for name in state_filters if name in BY_NAME}
        unknown = tuple(name for name in state_filters if name not in BY_NAME)
        pids = frozenset(producer_id_filters)
        listed = []
        for tid in sorted(self._entries):
            meta = self._entries[tid].meta
            if meta is None:
                continue
            if state_filters and meta.state not in states:
                continue
            if pids and meta.producer_id not in pids:
                continue
            listed.append(ListedTransaction(tid, meta.producer_id, meta.state.value))
        return TxnListing(tuple(listed), unknown)

    def counters(self) -> TxnCounters:
        counts = self._counts
        return TxnCounters(**{f.name: getattr(counts, f.name) for f in fields(TxnCounters)})

    # --- the rules -------------------------------------------------------------------

    @staticmethod
    def _known_producer(meta: TxnMetadata, producer_id: int, epoch: int) -> bool:
        """Whether a producer naming ``(producer_id, epoch)`` may re-initialize: it holds
        the current producer id (its epoch is judged next), or the previous one whose
        epochs ran out (a retry of the call that replaced it)."""
        return (producer_id == meta.producer_id
                or (producer_id == meta.last_producer_id and epoch_exhausted(epoch)))

    @staticmethod
    def _fence(meta: TxnMetadata, now_ms: int) -> TxnMetadata:
        """The open transaction aborted by the coordinator, its epoch bumped so the
        producer that opened it is fenced (PrepareEpochFence, then PrepareAbort)."""
        if meta.producer_epoch >= MAX_EPOCH:
            raise RuntimeError(f"cannot fence producer {meta.producer_id}: epoch "
                               f"{meta.producer_epoch} is the last")
        return replace(meta, producer_epoch=meta.producer_epoch + 1,
                       last_producer_epoch=NO_PRODUCER_EPOCH, state=PREPARE_ABORT,
                       update_ms=now_ms)

    @staticmethod
    def _next_producer(meta: TxnMetadata, expected: tuple[int, int] | None, timeout_ms: int,
                       fresh_producer_id: int, now_ms: int) -> TxnMetadata | None:
        """InitProducerId on an idle id: the next producer id and epoch, or None
        (PRODUCER_FENCED) for a producer whose epoch is neither the current nor, for a
        retry, the previous one."""
        epoch = meta.producer_epoch
        if epoch_exhausted(epoch) and (expected is None or expected[1] == epoch):
            return TxnMetadata(fresh_producer_id, meta.producer_id, 0,
                               NO_PRODUCER_EPOCH if expected is None else epoch,
                               timeout_ms, EMPTY, frozenset(), NO_START, now_ms)
        if expected is None:
            epoch, last = epoch + 1, NO_PRODUCER_EPOCH
        elif expected[1] == epoch:
            epoch, last = epoch + 1, epoch
        elif expected[1] == meta.last_producer_epoch:
            last = meta.last_producer_epoch  # a retry of the call that bumped it
        else:
            return None
        return TxnMetadata(meta.producer_id, meta.producer_id, epoch, last, timeout_ms, EMPTY,
                           frozenset(), NO_START, now_ms)

    def _producer_entry(self, transactional_id: str, producer_id: int, producer_epoch: int,
                        ) -> tuple[_Entry | None, ErrorCode]:
        """The entry AddPartitions/EndTxn may act on, else the code refusing the request:
        Kafka's checks in Kafka's order."""
        if not transactional_id:
            return None, ErrorCode.INVALID_REQUEST
        if self.partition_of(transactional_id) not in self._hosted:
            return None, ErrorCode.NOT_COORDINATOR
        entry = self._entries.get(transactional_id)
        if entry is None:
            return None, _MAPPING
        meta = entry.meta
        if meta is None:  # its InitProducerId is being stored
            return None, _CONCURRENT
        if meta.producer_id != producer_id:
            return None, _MAPPING
        if meta.producer_epoch != producer_epoch:
            self._counts.producers_fenced += 1
            return None, _FENCED
        if entry.pending is not None:
            return None, _CONCURRENT
        return entry, _NONE

    # --- the coordinator's own work --------------------------------------------------

    def _advance(self, entry: _Entry, now_ms: int) -> None:
        """Do what is due for ``entry`` by ``now_ms`` (send markers, complete, abort on
        timeout, expire), then schedule its next deadline."""
        meta = entry.meta
        if (meta is not None and entry.pending is None and entry.marker_token is None
                and (entry.retry_at is None or entry.retry_at <= now_ms)):
            state = meta.state
            if state in PREPARED:
                if entry.unmarked:
                    self._send_markers(entry, meta)
                else:
                    done = COMPLETE_COMMIT if state is PREPARE_COMMIT else COMPLETE_ABORT
                    target = replace(meta, state=done, partitions=frozenset(),
                                     update_ms=now_ms)
                    self._write(entry, _Kind.COMPLETE, target, (done,), None)
            elif state is ONGOING:
                if now_ms >= meta.start_ms + meta.timeout_ms:
                    self._write(entry, _Kind.TIMEOUT, self._fence(meta, now_ms),
                                (PREPARE_EPOCH_FENCE, PREPARE_ABORT), None)
            elif now_ms >= meta.update_ms + self.config.transactional_id_expiration_ms:
                self._write(entry, _Kind.EXPIRE, None, (DEAD,), None)
        self._schedule(entry)

    def _deadline(self, entry: _Entry) -> int | None:
        meta = entry.meta
        if meta is None or entry.pending is not None or entry.marker_token is not None:
            return None
        state = meta.state
        if state in PREPARED:
            return entry.retry_at
        if state is ONGOING:
            deadline = meta.start_ms + meta.timeout_ms
        else:
            deadline = meta.update_ms + self.config.transactional_id_expiration_ms
        return deadline if entry.retry_at is None else max(deadline, entry.retry_at)

    def _schedule(self, entry: _Entry) -> None:
        deadline = self._deadline(entry)
        if deadline == entry.deadline:
            return
        entry.deadline = deadline
        if deadline is None:
            entry.sched = 0
            return
        self._seq += 1
        entry.sched = self._seq
        heap = self._heap
        heapq.heappush(heap, (deadline, self._seq, entry))
        if len(heap) > 2 * len(self._entries) + 64:
            # Items whose deadline moved stay until they surface, and an idle id's is a
            # week away: rebuild from the live ones before they pile up.
            heap[:] = [(e.deadline, e.sched, e) for e in self._entries.values()
                       if e.sched and e.deadline is not None]
            heapq.heapify(heap)

    def _send_markers(self, entry: _Entry, meta: TxnMetadata) -> None:
        token = self._token()
        entry.marker_token = token
        entry.retry_at = None
        self._marker_jobs[token] = entry
        self._out_markers.append(MarkerWork(
            token, entry.transactional_id, meta.producer_id, meta.producer_epoch,
            meta.state is PREPARE_COMMIT, self._hosted[entry.partition].coordinator_epoch,
            tuple(sorted(entry.unmarked))))

    def _write(self, entry: _Entry, kind: _Kind, target: TxnMetadata | None,
               path: tuple[TxnState, ...], reply: int | None) -> None:
        source = EMPTY if entry.meta is None else entry.meta.state
        for state in path:
            check_transition(source, state)
            source = state
        token = self._token()
        entry.pending = _Pending(token, kind, target, path, reply)
        entry.retry_at = None
        self._writes[token] = entry
        stored = None if target is None else target.shifted(self._wall_offset_ms)
        self._out_writes.append(Write(token, entry.partition,
                                      TxnRecord(entry.transactional_id, stored)))
        self._schedule(entry)  # nothing is due while the write is out

    def _forget(self, entry: _Entry) -> None:
        del self._entries[entry.transactional_id]
        self._hosted[entry.partition].ids.discard(entry.transactional_id)
        entry.sched = 0

    def _drop(self, partition: int) -> None:
        hosted = self._hosted.pop(partition, None)
        if hosted is None:
            return
        for tid in sorted(hosted.ids):
            entry = self._entries.pop(tid)
            entry.sched = 0
            pending = entry.pending
            if pending is not None:
                del self._writes[pending.token]
                if pending.reply is not None:
                    self._replies.append(Reply(pending.reply, ErrorCode.NOT_COORDINATOR))
            if entry.marker_token is not None:
                del self._marker_jobs[entry.marker_token]

    def _check_partition(self, partition: int) -> None:
        if not 0 <= partition < self.config.partitions:
            raise ValueError(f"transaction state partition {partition} not in "
                             f"[0, {self.config.partitions})")

    # --- output ----------------------------------------------------------------------

    def _token(self) -> int:
        self._last_token += 1
        return self._last_token

    def _fenced(self, token: int) -> Result:
        self._counts.producers_fenced += 1
        return self._answer(token, _FENCED)

    def _answer(self, token: int, code: ErrorCode, producer_id: int = NO_PRODUCER_ID,
                producer_epoch: int = NO_PRODUCER_EPOCH) -> Result:
        self._replies.append(Reply(token, code, producer_id, producer_epoch))
        return self._build()

    def _reset(self) -> None:
        self._replies.clear()
        self._out_writes.clear()
        self._out_markers.clear()
        self._transitions.clear()

    def _build(self) -> Result:
        if not (self._replies or self._out_writes or self._out_markers or self._transitions):
            return EMPTY_RESULT
        result = Result(tuple(self._replies), tuple(self._out_writes),
                        tuple(self._out_markers), tuple(self._transitions))
        self._reset()
        return result
