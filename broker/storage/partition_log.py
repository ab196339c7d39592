"""One topic partition's log: append batches, serve byte ranges of whole batches.

Appends patch the base offset and write the batch as produced; reads bisect the in-memory
index to a contiguous byte range of one segment and return it with one ``pread``, never
decoding records. A log may hold msgpack batches and Kafka's (magic 2) in any mix
(``protocol.stored_batches``): both are stored and served as sent, so what a read returns
is whatever mix was appended in that range; turning it into one format is the reader's
door's business. What reads may serve ends at the high watermark, which the fsync policy
moves: at once after a write, or (``always``) once a flush ticket covering it completes.

A failed fsync takes the log offline: appends are refused, reads go on. After
``offline_retry_ms`` the next append (or roll) tries to bring it back: it cuts the log to
the high watermark (what was never acknowledged nor served goes), reads back, checks,
rewrites and fsyncs everything above the last successful fsync, and only then accepts
writes again (docs/design/storage.md, "Failed fsync").

Producers' state (``broker.storage.producer_log``): an idempotent producer's batch is
checked against it before it is appended (:meth:`PartitionLog.append_steps`), a
transaction marker too (:meth:`PartitionLog.append_marker_steps`), and it says which
transactions are open and which were aborted: the *last stable offset*
(:attr:`PartitionLog.last_stable_offset`), below which read_committed consumers read
(``read(..., to_stable=True)``, :meth:`PartitionLog.read_committed`), and the aborted
transactions such a read must be told of (:meth:`PartitionLog.aborted_transactions`).
It is built from the log when first needed: after a restart, a transaction left open
keeps the last stable offset at its first offset only once the state is built, so the
shell runs :meth:`PartitionLog.producer_states_steps` (in steps: a header read per
batch of the log) before it answers anything that states a last stable offset; the
properties build it at once if it is not (correct, but holding the loop for as long).

A log becomes *replicated* once cluster mode calls :meth:`PartitionLog.become_leader`,
:meth:`~PartitionLog.append_replica` or :meth:`~PartitionLog.set_high_watermark` (or at
open, if it was before): it then keeps its leader-epoch cache in
``leader-epoch-checkpoint`` and its high watermark is set from outside (the leader's
replica state, or the leader's answer on a follower) and saved in ``high-watermark`` at
each flush. Until then the log behaves as in single-broker mode, writing neither file.
"""

from __future__ import annotations

import contextlib
import os
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

from groupwire.broker.cluster.epochs import (
    SINGLE_BROKER_LEADER_EPOCH,
    EpochEntry,
    LeaderEpochCache,
)
from groupwire.broker.logs import get_logger
from groupwire.broker.producers.state import Duplicate, ProducerBatch, ProducerStates, Refused
from groupwire.broker.storage.config import FsyncPolicy, StorageConfig
from groupwire.broker.storage.errors import CorruptLogError, OffsetNotInLogError, StorageError
from groupwire.broker.storage.fileops import FileOps
from groupwire.broker.storage.flush import FlushItem, FlushTicket
from groupwire.broker.storage.handles import HandlePool
from groupwire.broker.storage.producer_log import (
    SNAPSHOT_FILE,
    ProducerRefused,
    record_stored,
    replay,
    take_snapshot,
    write_snapshot,
)
from groupwire.broker.storage.recovery import RecoveryReport, open_segments
from groupwire.broker.storage.replica_files import (
    EPOCH_CHECKPOINT_FILE,
    HIGH_WATERMARK_FILE,
    load_epoch_cache,
    load_high_watermark,
    save_epoch_cache,
    save_high_watermark,
)
from groupwire.broker.storage.segment import Segment, Trash
from groupwire.protocol.batches import (
    BATCH_V0,
    NO_PARTITION_LEADER_EPOCH,
    CorruptBatchError,
    DecodedRecord,
)
from groupwire.protocol.steps import Steps, run_steps
from groupwire.protocol.stored_batches import (
    AnyHeader,
    StoredHeader,
    as_stored,
    decode_any_records,
    encode_marker,
    iter_any_batch_spans,
    read_any_header,
    stamp_stored,
    stamped_header,
)

KAFKA_MARKER: Final = "kafka-batches"
"""An empty file in a partition's directory: some batch of this log is Kafka's."""
SCAN_CHUNK_BYTES: Final = 1024 * 1024
WRITE_PIECE = 1024 * 1024
"""Bytes of a batch written in one step of :meth:`PartitionLog.append_steps` (~2-3 ms)."""

log = get_logger("groupwire.storage")


class PartitionLog:
    """A segmented append-only log. Not thread-safe: one (event loop) thread uses it; only
    a :class:`FlushTicket`'s ``sync`` may run elsewhere."""

    def __init__(self, directory: Path, config: StorageConfig, *, topic: str = "",
                 partition: int = 0, file_ops: FileOps | None = None,
                 trust_index: bool = False,
                 on_dirty: Callable[[PartitionLog], None] | None = None,
                 handles: HandlePool | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``handles``: the store's descriptor pool (a private one if None, over
        ``file_ops``); ``clock``: seconds, for the offline retry back-off."""
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self._config = config
        self._always = config.fsync is FsyncPolicy.ALWAYS
        if handles is None:
            handles = HandlePool(file_ops or FileOps(), config.max_open_files,
                                 sync_on_evict=config.fsync is not FsyncPolicy.NEVER)
        self._pool = handles
        self._ops = handles.ops
        self._on_dirty = on_dirty
        self._clock = clock
        self._failed: OSError | None = None
        self._failed_at = 0.0
        self._durable = 0  # set properly below; an eviction may fail while opening
        self._fail_reported = 0
        """Log end offset up to which writes were already answered with the failure."""
        self._offline_logged = False
        self.on_offline: Callable[[], None] | None = None
        """Called (loop thread) when the log is reported offline: cluster mode moves the
        partition's leadership away, or stops following it."""
        self._epoch = 0
        """Bumped by each recovery: a ticket taken before it neither fails nor advances
        the log again."""
        self.holds_kafka = (directory / KAFKA_MARKER).exists()
        """Whether a Kafka batch was ever stored here: only then does a read for a
        msgpack consumer need converting (``broker.fetch``)."""
        segments, report = open_segments(directory, handles, topic=topic,
                                         partition=partition, trust_index=trust_index,
                                         on_error=self._file_failed)
        self.recovery: RecoveryReport | None = report
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._leo = segments[-1].next_offset
        self._hw = self._leo
        self._sync_files = config.fsync is not FsyncPolicy.NEVER
        self._replicated = False
        self._epoch_cache = LeaderEpochCache()
        self._leader_epoch = SINGLE_BROKER_LEADER_EPOCH
        """Stamped into the batches :meth:`append` stores (v1)."""
        self._hw_saved: int | None = None
        """The high watermark the ``high-watermark`` file holds (None: no file)."""
        try:
            if config.replica_files:
                self._load_replica_files()
            elif self._has_replica_files():
                log.warning("replica_files_ignored", topic=topic, partition=partition,
                            why="this data dir served a cluster; a single broker serves "
                                "its whole log")
        except BaseException:
            for seg in segments:
                seg.close()
            raise
        self._unsynced: list[Segment] = [s for s in segments if s.touched]
        self._durable = self._unsynced[0].base_offset if self._unsynced else self._leo
        """Everything below was fsynced (by this run, or before a clean shutdown)."""
        self._dir_gen = 1 if self._unsynced else 0
        self._dir_synced_gen = 0
        self._dirty = False
        self._fail_reported = self._leo
        self._closed = False
        self._trash: list[Trash] = []
        """Segments retention or compaction dropped whose files are not removed yet."""
        self._appending = False
        """A stepped append is under way: other appends wait for it (or are refused)."""
        self._producers: ProducerStates | None = None
        """Idempotent and transactional producers' state, built from the log when first
        needed (``broker.storage.producer_log``); None until then."""
        self._producers_build: Iterator[None] | None = None
        """The build under way (:meth:`producer_states_steps`): every caller drives the
        same one."""
        self._producers_gen = 0
        """Bumped by each cut of the log: a build that spanned one starts again."""
        snapshot = take_snapshot(self._ops, directory, self.log_start_offset)
        self._producer_snapshot = (
            snapshot if snapshot is not None and snapshot[0] <= self._leo else None)
        """The snapshot a clean close, or the last segment roll, left: where the build
        starts, unless the log was cut below the offset it covers (a crash lost the
        unsynced tail it described)."""
        if self._unsynced or self._dir_gen:
            self._mark_dirty()

    # --- offsets ------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._segments[0].base_offset

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def high_watermark(self) -> int:
        return self._hw

    @property
    def replicated(self) -> bool:
        """Cluster mode told this log it is a replica (now or in an earlier run)."""
        return self._replicated

    @property
    def leader_epoch(self) -> int:
        """The epoch stamped into batches appended as leader."""
        return self._leader_epoch

    @property
    def epoch_cache(self) -> LeaderEpochCache:
        """The leader-epoch cache; change it only through this log's methods."""
        return self._epoch_cache

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def offline(self) -> bool:
        """True once an fsync failed: appends are refused, reads go on, until the log
        has recovered (tried on an append once ``offline_retry_ms`` passed)."""
        return self._failed is not None

    @property
    def offline_reason(self) -> str | None:
        failed = self._failed
        return None if failed is None else str(failed)

    # --- writing ------------------------------------------------------------------------

    def append(self, batch: bytes, header: AnyHeader) -> int:
        """Append one validated batch (either format) at the log end offset; returns its
        base offset.

        Raises :class:`StorageError` if it cannot be written; the log is then unchanged.
        Holds the loop for the whole write: only internal topics, whose batches are
        small, call it; it is refused while an :meth:`append_steps` is under way.
        """
        self._check_writable()
        self._check_idle()
        stored = self._based(batch, as_stored(header))
        if stored.kafka:
            self._note_kafka()
        self._assign_epoch(stored)
        data = stamp_stored(batch, stored)
        seg = self._active_for(len(data))
        try:
            seg.append(data, stored)
        except StorageError as exc:
            self._write_failed(exc)
            raise
        self._appended(seg, stored)
        return stored.base_offset

    def append_steps(self, batch: bytes, header: AnyHeader,
                     producer: ProducerBatch | None = None) -> Steps[int]:
        """:meth:`append` in steps: a batch over ``WRITE_PIECE`` bytes is written a piece
        a step, so a big one never holds the loop for long.

        One stepped append at a time: a second waits (yielding) for the first. The batch
        counts (index entry, log end offset) only after its last piece; until then no
        read reaches it and a flush does not count it. Raises :class:`StorageError` if
        the log is closed (topic deleted) or goes offline meanwhile; the written part is
        then cut, as it is if the steps are abandoned (closed) halfway.

        ``producer``: the batch's idempotent producer fields. It is checked against the
        producers' state first, with no other append in between: a retry of a batch
        stored already returns that batch's base offset and stores nothing, a batch out
        of order or of a fenced epoch, or a non-transactional one from a producer with a
        transaction open here, raises :class:`ProducerRefused`. A transactional batch
        starts its producer's transaction here unless one is open. A control batch is
        refused (ValueError): markers are :meth:`append_marker_steps`'.
        """
        if (producer is not None and producer.control) or as_stored(header).control:
            raise ValueError("a control batch is written by append_marker_steps")
        while self._appending:
            yield
        if producer is not None:
            self._appending = True
            try:
                states = yield from self.producer_states_steps()
            finally:
                self._appending = False
            verdict = states.check_batch(producer)
            if isinstance(verdict, Duplicate):
                return verdict.first_offset
            if isinstance(verdict, Refused):
                raise ProducerRefused(verdict.code, verdict.message)
        base = yield from self._append_unchecked(batch, header)
        if producer is not None and self._producers is not None:
            self._producers.record_batch(producer, base)
        return base

    def _append_unchecked(self, batch: bytes, header: AnyHeader) -> Steps[int]:
        if len(batch) <= WRITE_PIECE:
            return self.append(batch, header)
        self._check_writable()
        given = as_stored(header)
        stored = self._based(batch, given)
        if stored.kafka:
            self._note_kafka()
        self._assign_epoch(stored)
        self._appending = True
        try:
            # an upconverted v0 batch is 5 bytes longer: only its first piece changes
            yield from self._write_stepped(memoryview(batch), stored,
                                           stored.header_size - given.header_size)
        finally:
            self._appending = False
        return stored.base_offset

    def _write_stepped(self, view: memoryview, stored: StoredHeader, shift: int,
                       ) -> Steps[None]:
        """Write one batch a ``WRITE_PIECE`` a step, the first piece stamped as
        ``stored`` says (``shift`` bytes longer once stamped); it counts after the last."""
        seg = self._active_for(len(view) + shift)
        pos = seg.begin_write()
        try:
            seg.write_piece(stamp_stored(view[:WRITE_PIECE], stored), pos)
            for start in range(WRITE_PIECE, len(view), WRITE_PIECE):
                yield
                self._check_still_writable()
                seg.write_piece(view[start:start + WRITE_PIECE], pos + shift + start)
            seg.finish_write(stored, pos, pos + shift + len(view))
        except BaseException as exc:  # GeneratorExit too: the task was cancelled
            if not self._closed:
                seg.abandon_write()
            if isinstance(exc, StorageError):
                self._write_failed(exc)
            raise
        self._appended(seg, stored)

    def _based(self, batch: bytes, header: StoredHeader) -> StoredHeader:
        """``header`` as the batch is stored: at the log end offset with this log's
        leader epoch; a msgpack v0 batch in layout v1, unless it goes to a log that is
        not replicated (stored as sent). A Kafka batch keeps its format."""
        if len(batch) < header.header_size + 1 or header.record_count < 1:
            raise ValueError("append needs a validated batch")
        return stamped_header(header, self._leo, self._leader_epoch,
                              keep_v0=not self._replicated)

    # --- replication --------------------------------------------------------------------

    def become_leader(self, epoch: int) -> None:
        """Lead from now on in ``epoch``: appends stamp it into their batches (a v0 batch is
        upconverted first), and the cache says it starts at the log end (Kafka assigns a
        new leader's epoch there when it takes over). Refused while a stepped append is
        under way: its batch carries the old epoch and would land inside the new one."""
        self._check_open()
        self._check_idle()
        latest = self._epoch_cache.latest_epoch
        if epoch < 0 or (latest is not None and epoch < latest):
            raise ValueError(f"leader epoch {epoch} of {self.topic}-{self.partition} is "
                             f"older than the latest one, {latest}")
        first = not self._replicated
        self._replicated = True
        self._leader_epoch = epoch
        self._epoch_cache.assign(epoch, self._leo)
        if first or latest != self._epoch_cache.latest_epoch:
            self._save_epochs()

    def append_replica(self, data: bytes) -> int:
        """A follower's append of whole batches exactly as the leader stored them (base
        offsets and leader epochs kept); returns the new log end offset.

        Batches wholly below the log end are skipped (the leader's answer starts at the
        batch holding the fetch offset); one that does not start at the log end is a gap
        (:class:`StorageError`, nothing appended). Every batch is checked (framing, CRC)
        first: a bad one raises :class:`CorruptLogError` and nothing is appended. Each
        batch's epoch (v1) goes into the cache, saved before the batch is written: after
        a crash in between, opening drops entries past the log end."""
        return run_steps(self.append_replica_steps(data))

    def append_replica_steps(self, data: bytes) -> Steps[int]:
        """:meth:`append_replica`, a step per batch and per ``WRITE_PIECE`` of a big one;
        one at a time with :meth:`append_steps` (each waits for the other)."""
        while self._appending:
            yield
        self._check_writable()
        try:
            spans = list(iter_any_batch_spans(data))
        except CorruptBatchError as exc:
            raise CorruptLogError(f"replica data for {self.topic}-{self.partition}: "
                                  f"{exc.message} (byte {exc.position})") from exc
        if any(header.kafka for header, _, _ in spans):
            self._note_kafka()
        expected = self._leo
        for header, _, _ in spans:
            if header.next_offset <= expected:
                continue
            if header.base_offset != expected:
                raise StorageError(
                    f"replica data for {self.topic}-{self.partition} has a batch at offset "
                    f"{header.base_offset} where {expected} was expected (a gap)")
            expected = header.next_offset
        if not self._replicated:
            self._replicated = True
            self._save_epochs()
        view = memoryview(data)
        self._appending = True
        try:
            for header, start, end in spans:
                if header.next_offset <= self._leo:
                    continue
                self._check_still_writable()
                if header.kafka or header.version != BATCH_V0:
                    self._assign_epoch(header)
                yield from self._write_stepped(view[start:end], header, 0)
                if self._producers is not None:
                    record_stored(self._producers, view[start:end], 0, header.base_offset)
                yield
        finally:
            self._appending = False
        if self._producers is not None:
            self._producers.first_unstable_offset(self._hw)  # forgets ended ones below
        return self._leo

    def truncate_to(self, offset: int) -> None:
        """Cut the log so that it ends at ``offset``, or at the start of the batch
        holding it (a follower whose log diverged from its leader's): whole segments
        above go, the cache forgets epochs starting there or later, and the high
        watermark comes down if it was above."""
        self._check_open()
        self._check_idle()
        if offset >= self._leo:
            return
        segments = self._segments
        cut = max(offset, self.log_start_offset)
        seg = segments[bisect_right(self._bases, cut) - 1]
        if seg.entry_count and cut < seg.next_offset:
            cut = seg.bases[seg.entry_for(cut)]
        try:
            while len(segments) > 1 and segments[-1].base_offset >= cut:
                gone = segments.pop()
                self._bases.pop()
                self._dir_gen += 1
                self._unsynced = [s for s in self._unsynced if s is not gone]
                gone.delete()
            active = segments[-1]
            active.touched = True   # fsynced before a clean shutdown is recorded
            active.truncate_from(cut)
        except OSError as exc:
            self._leo = segments[-1].next_offset  # what was cut before it failed
            self._hw = min(self._hw, self._leo)
            self._fail(exc, self._durable)
            raise StorageError(f"cannot truncate {self.topic}-{self.partition} to "
                               f"{cut}: {exc}") from exc
        finally:
            self._epoch += 1  # a ticket taken before it covers what is gone
        if not self._unsynced or self._unsynced[-1] is not active:
            self._unsynced.append(active)
        self._leo = cut
        self._hw = min(self._hw, cut)
        self._durable = min(self._durable, cut)
        self._producers_cut(cut)
        self._fail_reported = min(self._fail_reported, cut)
        self._mark_dirty()
        before = self._epoch_cache.entries
        self._epoch_cache.truncate_from_end(cut)
        if self._replicated and self._epoch_cache.entries != before:
            self._save_epochs()

    # --- idempotent and transactional producers ---------------------------------------

    @property
    def producer_states_built(self) -> bool:
        """Whether the producers' state is in memory: :attr:`last_stable_offset` and
        :meth:`aborted_transactions` then cost nothing."""
        return self._producers is not None

    def producer_states_steps(self) -> Steps[ProducerStates]:
        """The producers' state, built first if need be: from the snapshot a clean close
        left, else from the log's start, replaying every batch above (a header read
        each, :data:`~.producer_log.REPLAY_STEP` batches a step).

        Callers meanwhile drive the same build; appends and retention meanwhile are
        followed, a truncation starts it again. Run it (``yield from``) before answering
        with a last stable offset: a restart leaves the state unbuilt, and a transaction
        open then is known only once it is built. Raises :class:`StorageError` if the log
        is closed meanwhile."""
        while self._producers is None:
            build = self._producers_build
            if build is None:
                build = self._producers_build = self._build_producer_states()
            try:
                next(build)
            except StopIteration:
                if self._producers_build is build:
                    self._producers_build = None
                continue
            except BaseException:
                if self._producers_build is build:
                    self._producers_build = None
                raise
            yield
        return self._producers

    _producer_states = producer_states_steps

    def _build_producer_states(self) -> Iterator[None]:
        while True:
            gen = self._producers_gen
            snapshot, self._producer_snapshot = self._producer_snapshot, None
            start, states = snapshot if snapshot is not None else (
                self.log_start_offset, ProducerStates())
            self._check_open()
            yield from replay(states, self._segments, start, self._replayed_step)
            self._check_open()
            if gen == self._producers_gen:
                states.log_start_moved(self.log_start_offset)
                states.first_unstable_offset(self._hw)
                self._producers = states
                return

    def _replayed_step(self, states: ProducerStates) -> None:
        self._check_open()
        states.first_unstable_offset(self._hw)   # forgets ended transactions below it

    def _producers_cut(self, end: int) -> None:
        """The log lost everything from ``end`` on: so do the producers' state (rebuilt
        from the log at its next use if a marker was cut) and a snapshot that covered any
        of it; a build under way starts again."""
        if self._producers is not None and not self._producers.truncated(end):
            self._producers = None
        self._producers_gen += 1
        # a roll's snapshot may describe what was just cut: gone, a crash replays instead
        with contextlib.suppress(OSError):
            self._ops.unlink(self.directory / SNAPSHOT_FILE)
        if self._producer_snapshot is not None and self._producer_snapshot[0] > end:
            self._producer_snapshot = None

    def append_marker_steps(self, producer_id: int, producer_epoch: int, commit: bool,
                            coordinator_epoch: int, timestamp_ms: int) -> Steps[int]:
        """Write a transaction marker (WriteTxnMarkers, for the transaction coordinator)
        for ``producer_id``; returns its offset.

        The marker is a control batch in the log's format (Kafka's if the log
        :attr:`holds_kafka`, msgpack layout v2 otherwise, so neither door converts more
        than before), checked against the producers' state with no append in between: a
        ``producer_epoch`` older than the producer's, or a ``coordinator_epoch`` older
        than its last marker's, raises :class:`ProducerRefused` (INVALID_PRODUCER_EPOCH,
        TRANSACTION_COORDINATOR_FENCED) and writes nothing. Written, it ends the
        producer's transaction here (an abort is remembered for read_committed reads)
        and its epoch becomes the producer's. Raises :class:`StorageError` if it cannot
        be written."""
        while self._appending:
            yield
        self._appending = True
        try:
            states = yield from self.producer_states_steps()
        finally:
            self._appending = False
        verdict = states.check_marker(producer_id, producer_epoch, coordinator_epoch)
        if isinstance(verdict, Refused):
            raise ProducerRefused(verdict.code, verdict.message)
        data = encode_marker(kafka_format=self.holds_kafka, producer_id=producer_id,
                             producer_epoch=producer_epoch, commit=commit,
                             coordinator_epoch=coordinator_epoch, timestamp_ms=timestamp_ms)
        base = self.append(data, read_any_header(data))
        states.record_marker(producer_id, producer_epoch, commit, base, timestamp_ms,
                             coordinator_epoch)
        states.first_unstable_offset(self._hw)   # forgets ended transactions below it
        return base

    def _built_states(self) -> ProducerStates:
        states = self._producers
        if states is None:
            states = run_steps(self.producer_states_steps())
        return states

    @property
    def last_stable_offset(self) -> int:
        """The offset below which every transaction has ended, for good (Kafka's LSO):
        the first offset of the earliest transaction open, or ended by a marker not yet
        below the high watermark; the high watermark if that is lower or there is none
        (never below the log start). Builds the producers' state at once if it is not
        (:meth:`producer_states_steps` does it in steps)."""
        first = self._built_states().first_unstable_offset(self._hw)
        hw = self._hw
        if first is None or first >= hw:
            return hw
        return max(first, self.log_start_offset)

    def aborted_transactions(self, start: int, end: int) -> list[tuple[int, int]]:
        """``(producer_id, first_offset)`` of each aborted transaction a read_committed
        read of offsets ``[start, end)`` must be told of (its marker at or after
        ``start``, its first offset before ``end``), by marker offset; ``end`` is the
        offset after the last batch read (or the last stable offset). Builds the
        producers' state at once if it is not."""
        return self._built_states().aborted_between(start, end)

    def read_committed(self, fetch_offset: int, max_bytes: int, first_batch_always: bool,
                       ) -> tuple[bytes, list[tuple[int, int]]]:
        """A read_committed consumer's read: :meth:`read` below the last stable offset,
        and the aborted transactions (:meth:`aborted_transactions`) its batches hold."""
        data, end = self._read(fetch_offset, max_bytes, first_batch_always,
                               self.last_stable_offset)
        if not data:
            return data, []
        return data, self._built_states().aborted_between(fetch_offset, end)

    def expire_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle ``expiration_ms`` (``--producer-id-expiration-ms``);
        how many were forgotten."""
        if self._producers is None:
            return 0
        return len(self._producers.expire(now_ms, expiration_ms))

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch's answer for ``epoch``: ``(epoch, end offset)`` of the
        largest epoch at or below it, or ``(-1, -1)`` (``LeaderEpochCache.end_offset_for``).
        A single broker's log keeps no cache: it has had one epoch, 0, since its start."""
        cache = self._epoch_cache if self._replicated else LeaderEpochCache(
            [EpochEntry(SINGLE_BROKER_LEADER_EPOCH, self.log_start_offset)])
        return cache.end_offset_for(epoch, self._leo)

    def set_high_watermark(self, offset: int) -> None:
        """The high watermark from outside (replicated mode): kept within
        ``[log_start_offset, log_end_offset]``. It may come down (a follower takes its
        new leader's, which can lag)."""
        self._replicated = True
        hw = max(self.log_start_offset, min(offset, self._leo))
        if hw != self._hw:
            self._hw = hw
            if hw != self._hw_saved:
                self._mark_dirty()

    def _assign_epoch(self, header: StoredHeader) -> None:
        """Note ``header``'s epoch in the cache (replicated logs), saving the checkpoint
        before the batch is written if that changed it. An epoch older than the latest
        (a leader's log with batches stamped out of order) is left out, not refused."""
        if not self._replicated or header.leader_epoch == NO_PARTITION_LEADER_EPOCH:
            return
        latest = self._epoch_cache.latest_epoch
        if latest is not None and header.leader_epoch <= latest:
            if header.leader_epoch < latest:
                log.warning("replica_epoch_out_of_order", topic=self.topic,
                            partition=self.partition, epoch=header.leader_epoch,
                            latest_epoch=latest, base_offset=header.base_offset)
            return
        self._epoch_cache.assign(header.leader_epoch, header.base_offset)
        self._save_epochs()

    def _save_epochs(self) -> None:
        """Write the checkpoint; a failure takes the log offline, as a failed fsync
        does (a replica whose cache may be lost cannot be trusted to truncate right)."""
        try:
            save_epoch_cache(self._ops, self.directory, self._epoch_cache,
                             sync=self._sync_files)
        except OSError as exc:
            self._fail(exc, self._durable)
            raise StorageError(f"cannot write the leader-epoch checkpoint of "
                               f"{self.topic}-{self.partition}: {exc}") from exc

    def _has_replica_files(self) -> bool:
        return any((self.directory / name).exists()
                   for name in (EPOCH_CHECKPOINT_FILE, HIGH_WATERMARK_FILE))

    def _load_replica_files(self) -> None:
        """Open as a replica if an earlier run was one: the cache without the epochs
        recovery may have cut, the high watermark as last flushed (the log start if it
        was never flushed), never past the log end."""
        try:
            cache = load_epoch_cache(self._ops, self.directory)
        except (OSError, ValueError) as exc:
            log.warning("epoch_checkpoint_unreadable", topic=self.topic,
                        partition=self.partition, error=str(exc))
            cache = LeaderEpochCache()
            self._replicated = True
        try:
            saved_hw = load_high_watermark(self._ops, self.directory)
        except (OSError, ValueError) as exc:
            log.warning("high_watermark_unreadable", topic=self.topic,
                        partition=self.partition, error=str(exc))
            saved_hw = None
            self._replicated = True
        if cache is None and saved_hw is None and not self._replicated:
            return
        self._replicated = True
        if cache is not None:
            self._epoch_cache = cache
        before = self._epoch_cache.entries
        self._epoch_cache.truncate_from_end(self._leo)
        latest = self._epoch_cache.latest_epoch
        if latest is not None:
            self._leader_epoch = latest
        self._hw_saved = saved_hw
        start = self.log_start_offset
        self._hw = max(start, min(saved_hw if saved_hw is not None else start, self._leo))
        if self._epoch_cache.entries != before:
            self._save_epochs()

    def _active_for(self, size: int) -> Segment:
        """The segment a batch of ``size`` bytes goes to, rolling a full one."""
        seg = self._segments[-1]
        if seg.size > 0 and seg.size + size > self._config.segment_bytes:
            seg = self._roll()
        return seg

    def _note_kafka(self) -> None:
        """Leave a mark before the first Kafka batch is written, durable as the batch
        will be: after a restart the log still knows that reads may need converting."""
        if self.holds_kafka:
            return
        marker = self.directory / KAFKA_MARKER
        try:
            marker.touch()
            if self._sync_files:
                fd = os.open(self.directory, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        except OSError as exc:
            raise StorageError(f"cannot mark {self.topic}-{self.partition} as holding "
                               f"Kafka batches: {exc}") from exc
        self.holds_kafka = True

    def _appended(self, seg: Segment, header: StoredHeader) -> None:
        """The batch just indexed in ``seg`` counts: readers and flushes see it."""
        self._leo = header.next_offset
        if not self._always and not self._replicated:
            self._hw = self._leo
        if not self._unsynced or self._unsynced[-1] is not seg:
            self._unsynced.append(seg)
        self._mark_dirty()

    def _check_idle(self) -> None:
        if self._appending:
            raise StorageError(f"log {self.topic}-{self.partition} has a stepped append "
                               "under way")

    def _check_still_writable(self) -> None:
        """Between the pieces of a stepped append: the topic may have been deleted, or an
        fsync (on the flusher's thread) may have failed, since the last piece."""
        if self._closed:
            raise StorageError(f"log {self.topic}-{self.partition} is closed")
        failed = self._failed
        if failed is not None:
            self.report_offline()
            raise StorageError(f"log {self.topic}-{self.partition} went offline after an "
                               f"fsync failure: {failed}")

    def _roll(self) -> Segment:
        try:
            new = Segment(self.directory, self._leo, self._pool, create=True,
                          on_error=self._file_failed)
        except OSError as exc:
            base_name = f"{self._leo:020d}"
            for suffix in (".log", ".index"):
                with contextlib.suppress(OSError):
                    self._ops.unlink(self.directory / (base_name + suffix))
            raise StorageError(f"cannot create segment {base_name}: {exc}") from exc
        with contextlib.suppress(OSError):
            self._segments[-1].seal()
        self._segments.append(new)
        self._bases.append(new.base_offset)
        self._dir_gen += 1
        self._snapshot_producers()
        return new

    def _snapshot_producers(self) -> None:
        """At a roll, as Kafka takes its producer snapshots: the producers' state as of
        the log end, so that after a crash the build replays from here, not from the log
        start. Not fsynced: a torn or lost snapshot only means a longer replay, and one
        beyond what the crash left of the log is ignored at the next open."""
        kept = ((self._leo, self._producers) if self._producers is not None
                else self._producer_snapshot)
        if kept is None or not len(kept[1]):
            return
        try:
            write_snapshot(self._ops, self.directory, kept[1], kept[0], sync=False,
                           log_start_offset=self.log_start_offset)
        except OSError as exc:
            log.warning("producer_snapshot_not_written", topic=self.topic,
                        partition=self.partition, error=str(exc))

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"log {self.topic}-{self.partition} is closed")

    def _check_writable(self) -> None:
        if self._closed:
            raise StorageError(f"log {self.topic}-{self.partition} is closed")
        failed = self._failed
        if failed is None:
            return
        self.report_offline()
        wait_s = self._failed_at + self._config.offline_retry_ms / 1000 - self._clock()
        if wait_s > 0:
            raise StorageError(f"log {self.topic}-{self.partition} is offline after an "
                               f"fsync failure: {failed} (retried in "
                               f"{max(1, round(wait_s * 1000))} ms)")
        self._recover()

    def _write_failed(self, exc: StorageError) -> None:
        """A replicated log goes offline on a failed write too (a full disk), as Kafka
        takes a log dir offline on any I/O error, so cluster mode moves its leadership to
        a replica whose disk takes writes. A single broker's log stays online: its next
        append simply tries again."""
        cause = exc.__cause__
        if self._replicated and self._failed is None and isinstance(cause, OSError):
            self._fail(cause, self._durable)
            self.report_offline()

    def bring_online(self) -> bool:
        """Whether the log takes writes now, trying to recover first if it is offline
        and ``offline_retry_ms`` has passed: a replica cluster mode stopped fetching has
        no append to bring it back."""
        try:
            self._check_writable()
        except StorageError:
            return False
        return True

    def report_offline(self) -> None:
        """Log (once per failure, at error level) why the log went offline; loop thread,
        since the failure itself may be noticed on the flusher's."""
        failed = self._failed
        if failed is None or self._offline_logged:
            return
        self._offline_logged = True
        log.error("partition_offline", topic=self.topic, partition=self.partition,
                  error=str(failed), high_watermark=self._hw, log_end_offset=self._leo,
                  retry_in_ms=self._config.offline_retry_ms)
        if self.on_offline is not None:
            self.on_offline()

    def _mark_dirty(self) -> None:
        if not self._dirty:
            self._dirty = True
            if self._on_dirty is not None:
                self._on_dirty(self)

    # --- durability ---------------------------------------------------------------------

    def flush_item(self) -> FlushItem | None:
        """This log's part of a flush ticket, or None (and no longer dirty) if synced."""
        if self._closed:
            self._dirty = False
            return None
        failed = self._failed
        if failed is not None:
            self.report_offline()
            self._dirty = False
            if self._leo <= self._fail_reported:
                return None
            # written after the failing fsync was taken and waiting for the next one:
            # the next round must not acknowledge them
            self._fail_reported = self._leo
            return FlushItem(end_offset=self._leo, files=[], dirs=[], on_synced=_nothing,
                             on_failed=_ignore, error=failed)
        dir_pending = self._dir_gen > self._dir_synced_gen
        hw = self._hw if self._replicated and self._hw != self._hw_saved else None
        if (self._durable >= self._leo and not self._unsynced and not dir_pending
                and hw is None):
            self._dirty = False
            return None
        segments = list(self._unsynced)
        files = [(seg.log_file, seg.log_file.written) for seg in segments]
        end, gen, epoch = self._leo, self._dir_gen, self._epoch
        writes: list[Callable[[], None]] = []
        if hw is not None:
            ops, directory, sync = self._ops, self.directory, self._sync_files

            def write_hw() -> None:   # on the flusher's thread
                if self._closed:
                    return
                try:
                    save_high_watermark(ops, directory, hw, sync=sync)
                except FileNotFoundError:
                    if not self._closed:
                        raise   # else deleted meanwhile: its directory went

            writes.append(write_hw)

        def synced() -> None:
            if hw is not None:
                self._hw_saved = hw
            if epoch == self._epoch:
                self._synced(end, segments, gen)

        def failed_sync(exc: OSError) -> None:
            if epoch == self._epoch:
                self._fail(exc, end)

        return FlushItem(end_offset=end, files=files,
                         dirs=[self.directory] if dir_pending else [],
                         on_synced=synced, on_failed=failed_sync, writes=writes)

    def _synced(self, end: int, segments: list[Segment], gen: int) -> None:
        if end > self._durable:
            self._durable = end
        if self._always and not self._replicated and end > self._hw:
            self._hw = min(end, self._leo)
        self._dir_synced_gen = max(self._dir_synced_gen, gen)
        done = {id(s) for s in segments if s.next_offset <= end}
        self._unsynced = [s for s in self._unsynced if id(s) not in done]

    def _fail(self, exc: OSError, reported_end: int) -> None:
        # May run on the thread syncing a ticket: plain attribute stores, the failure
        # last, so the loop never sees it without its time.
        self._failed_at = self._clock()
        self._fail_reported = max(self._fail_reported, reported_end)
        self._offline_logged = False
        self._failed = exc

    def _file_failed(self, exc: OSError) -> None:
        """An fsync of one of this log's files failed outside a ticket (evicted from the
        descriptor pool): no write was answered with it yet."""
        self._fail(exc, self._durable)

    def _recover(self) -> None:
        """Come back online after a failed fsync, or raise :class:`StorageError`.

        What lies above the high watermark was never acknowledged nor served (only with
        ``--fsync always`` is there any) and is cut. What lies between the last good
        fsync and the high watermark was acknowledged under ``interval``/``never`` and
        may have been read: it is kept if it reads back whole and valid, rewritten and
        fsynced; the log is cut at the first batch that does not (as recovery at start
        would). Loop thread.
        """
        failed = self._failed
        leo_before, hw_before = self._leo, self._hw
        # What was never acknowledged: above the high watermark, or on a replica (whose
        # high watermark waits for followers) above what an acks=1 answer covered.
        cut = self._hw
        if self._replicated:
            cut = max(self._hw, self._durable) if self._always else self._leo
        try:
            while len(self._segments) > 1 and self._segments[-1].base_offset > cut:
                seg = self._segments.pop()
                self._bases.pop()
                seg.delete()
                self._dir_gen += 1
            self._segments[-1].truncate_from(cut)
            for i, seg in enumerate(self._segments):
                suspect = seg.next_offset > self._durable or seg.log_file.error is not None
                if not suspect:
                    continue
                first = (bisect_left(seg.bases, self._durable)
                         if self._durable > seg.base_offset else 0)
                if not seg.rewrite_tail(first):
                    later = self._segments[i + 1:]
                    del self._segments[i + 1:], self._bases[i + 1:]
                    seg.sealed = False
                    self._dir_gen += len(later)
                    for gone in later:  # files left by a failure: cut at the next start
                        gone.delete()
                    break
            self._ops.fsync_dir(self.directory)
            end = self._segments[-1].next_offset
            if self._replicated and self._epoch_cache.latest_epoch is not None:
                self._epoch_cache.truncate_from_end(end)
                self._save_epochs()
        except (OSError, StorageError) as exc:
            self._leo = self._segments[-1].next_offset  # what was cut before it failed
            self._hw = min(self._hw, self._leo)
            self._failed_at = self._clock()
            self._offline_logged = True
            log.warning("partition_recovery_failed", topic=self.topic,
                        partition=self.partition, error=str(exc), first_error=str(failed),
                        retry_in_ms=self._config.offline_retry_ms)
            raise StorageError(f"log {self.topic}-{self.partition} is offline after an "
                               f"fsync failure ({failed}); bringing it back failed: "
                               f"{exc}") from exc
        self._epoch += 1
        self._leo = self._segments[-1].next_offset
        self._producers_cut(self._leo)
        self._hw = min(hw_before, self._leo) if self._replicated else self._leo
        self._durable = self._leo
        self._unsynced = []
        self._dir_synced_gen = self._dir_gen
        self._fail_reported = self._leo
        self._failed = None
        self._offline_logged = False
        log.warning("partition_online", topic=self.topic, partition=self.partition,
                    after_error=str(failed), log_end_offset=self._leo,
                    unacknowledged_records_dropped=max(0, leo_before - hw_before),
                    acknowledged_records_lost=max(0, hw_before - self._leo))

    def take_dirty(self) -> FlushTicket:
        """A ticket for this log alone (``TopicStore.take_dirty`` covers every log)."""
        item = self.flush_item()
        return FlushTicket(items=[item] if item is not None else [], pool=self._pool)

    def complete(self, ticket: FlushTicket) -> None:
        ticket.complete()

    # --- reading ------------------------------------------------------------------------

    def read(self, fetch_offset: int, max_bytes: int, first_batch_always: bool, *,
             to_log_end: bool = False, to_stable: bool = False) -> bytes:
        """Whole batches from the one holding ``fetch_offset``, below the high watermark
        (what consumers see), with ``to_stable`` below the last stable offset (what
        read_committed consumers see: :meth:`read_committed` adds the aborted
        transactions), or with ``to_log_end`` below the log end (a follower's fetch: it
        copies what is not committed yet too).

        At most ``max_bytes``, except that with ``first_batch_always`` the first batch is
        returned whatever its size (KIP-74). Stops at a segment end. Raises
        :class:`OffsetNotInLogError` outside ``[log_start_offset, log_end_offset]``; from
        the high watermark to the log end a consumer's read is empty, as in Kafka (a new
        leader's high watermark may trail what its consumers already read).
        """
        if self._closed:
            raise StorageError(f"log {self.topic}-{self.partition} is closed")
        limit = (self._leo if to_log_end
                 else self.last_stable_offset if to_stable else self._hw)
        return self._read(fetch_offset, max_bytes, first_batch_always, limit)[0]

    def _read(self, fetch_offset: int, max_bytes: int, first_batch_always: bool,
              limit: int) -> tuple[bytes, int]:
        """:meth:`read` below ``limit``, and the offset just past what it returns."""
        if self._closed:
            raise StorageError(f"log {self.topic}-{self.partition} is closed")
        start = self.log_start_offset
        if not start <= fetch_offset <= self._leo:
            raise OffsetNotInLogError(
                f"offset {fetch_offset} is outside [{start}, {self._leo}] "
                f"for {self.topic}-{self.partition}")
        if fetch_offset >= limit:
            return b"", fetch_offset
        return self._slice(fetch_offset, max_bytes, first_batch_always, limit)

    def _slice(self, offset: int, max_bytes: int, first_batch_always: bool,
               limit: int) -> tuple[bytes, int]:
        """Bytes of whole batches from the one holding ``offset`` (< ``limit``), and the
        offset just past them."""
        seg = self._segments[bisect_right(self._bases, offset) - 1]
        n = seg.entry_count
        i = seg.entry_for(offset)
        start = seg.positions[i]
        j = bisect_left(seg.bases, limit, lo=i)
        stop = seg.positions[j] if j < n else seg.size
        budget_end = start + max(max_bytes, 0)
        if budget_end >= stop:
            end, k = stop, j
        else:
            k = bisect_right(seg.positions, budget_end, lo=i) - 1
            end = seg.positions[k]
            if end == start:
                if not first_batch_always:
                    return b"", offset
                k = i + 1
                end = seg.end_of(i)
        data = seg.read(start, end)
        bad = seg.first_bad_batch(data, i, k)
        if bad is not None:
            if bad == i:
                raise CorruptLogError(
                    f"corrupt batch in {self.topic}-{self.partition} at offset "
                    f"{seg.bases[bad]} (segment {seg.base_offset}, byte {seg.positions[bad]}):"
                    " CRC or offset does not match; not served")
            k, data = bad, data[:seg.positions[bad] - start]
        next_offset = seg.bases[k] if k < n else seg.next_offset
        return data, next_offset

    def scan(self, from_offset: int = 0) -> Iterator[DecodedRecord]:
        """Every record from ``from_offset`` up to the log end offset (not the high
        watermark): replaying internal topics at start."""
        offset = from_offset
        while True:
            offset = max(offset, self.log_start_offset)
            if offset >= self._leo:
                return
            data, offset_next = self._slice(offset, SCAN_CHUNK_BYTES, True, self._leo)
            yield from self._decode(data, offset)
            offset = offset_next

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """The first offset whose record timestamp is >= ``timestamp_ms``, with that
        timestamp; None if no record below the high watermark has one. Decodes batches
        (slow path); a sealed segment decoded once is skipped by its largest timestamp."""
        hw = self._hw
        active = self._segments[-1]
        for seg in list(self._segments):
            if seg.base_offset >= hw:
                break
            if seg.max_record_ts is not None and seg.max_record_ts < timestamp_ms:
                continue
            largest, whole = -1, True
            for i in range(seg.entry_count):
                if seg.bases[i] >= hw:
                    whole = False
                    break
                for rec in self._decode(seg.read(seg.positions[i], seg.end_of(i)), 0):
                    if rec.timestamp_ms >= timestamp_ms:
                        return rec.offset, rec.timestamp_ms
                    largest = max(largest, rec.timestamp_ms)
            if whole and seg is not active:
                seg.max_record_ts = largest
        return None

    def _decode(self, data: bytes, min_offset: int) -> list[DecodedRecord]:
        try:
            return decode_any_records(data, min_offset)
        except CorruptBatchError as exc:
            raise StorageError(f"corrupt data in {self.topic}-{self.partition}: "
                               f"{exc.message}") from exc

    # --- retention and shutdown ---------------------------------------------------------

    def apply_retention(self, now_ms: int, retention_ms: int, retention_bytes: int) -> int:
        """Drop whole oldest segments (never the active one, never data above the high
        watermark) past either limit (-1 = unlimited); returns how many were dropped.
        Their data is gone from the log at once; their files wait in :meth:`take_trash`."""
        total = self.size_bytes

        def expired(seg: Segment) -> bool:
            nonlocal total
            too_old = retention_ms >= 0 and now_ms - seg.max_timestamp > retention_ms
            too_big = retention_bytes >= 0 and total - seg.size >= retention_bytes
            if too_old or too_big:
                total -= seg.size
                return True
            return False

        return self._drop_oldest(expired)

    @property
    def has_trash(self) -> bool:
        return bool(self._trash)

    def take_trash(self) -> list[Trash]:
        """Loop thread: the files of segments dropped since the last call, to remove off
        the loop (:meth:`TopicStore.purge <broker.storage.topic_store.TopicStore.purge>`);
        until then they are still on disk, and a crash brings them back."""
        trash, self._trash = self._trash, []
        return trash

    def roll(self) -> None:
        """Start a new segment now (unless the active one is empty): what is appended next
        begins a segment, so everything before it can later be dropped whole."""
        self._check_writable()
        self._check_idle()
        if self._segments[-1].size > 0:
            self._roll()

    def delete_segments_before(self, offset: int) -> int:
        """Drop whole segments that end at or before ``offset`` (compaction of internal
        topics: a snapshot was appended at ``offset``); returns how many."""
        return self._drop_oldest(lambda seg: seg.next_offset <= offset)

    def _drop_oldest(self, drop: Callable[[Segment], bool]) -> int:
        if self._closed:
            return 0
        deleted = 0
        segments = self._segments
        while len(segments) > 1:
            seg = segments[0]
            if seg.next_offset > self._hw or not drop(seg):
                break
            segments.pop(0)
            self._bases.pop(0)
            self._unsynced = [s for s in self._unsynced if s is not seg]
            self._trash.append(seg.discard())  # its files go off the loop: take_trash
            deleted += 1
        if deleted and self._producers is not None:
            self._producers.log_start_moved(self.log_start_offset)
        if deleted and self._replicated and self._epoch_cache.latest_epoch is not None:
            before = self._epoch_cache.entries
            self._epoch_cache.truncate_from_start(self.log_start_offset)
            if self._epoch_cache.entries != before:
                with contextlib.suppress(StorageError):  # the log is offline then
                    self._save_epochs()
        return deleted

    def close(self, *, sync: bool = True) -> bool:
        """Close the files, fsyncing what this run wrote first unless ``sync`` is False.

        Returns True if the files on disk are complete and consistent (a clean shutdown).
        """
        if self._closed:
            return False
        self._closed = True
        clean = sync and self._failed is None
        for seg in self._segments:
            if sync and seg.touched:
                try:
                    if seg.tail_dirty and not seg.truncate_tail():
                        clean = False
                    seg.sync_all()
                except OSError:
                    clean = False
            try:
                seg.close()
            except OSError:
                clean = False
        if sync and self._dir_gen:
            try:
                self._ops.fsync_dir(self.directory)
            except OSError:
                clean = False
        if sync and clean:
            kept = ((self._leo, self._producers) if self._producers is not None
                    else self._producer_snapshot)
            if kept is not None:
                try:
                    write_snapshot(self._ops, self.directory, kept[1], kept[0],
                                   sync=self._sync_files,
                                   log_start_offset=self.log_start_offset)
                except OSError:
                    clean = False
        if sync and self._replicated and self._hw != self._hw_saved:
            try:
                save_high_watermark(self._ops, self.directory, self._hw,
                                    sync=self._sync_files)
                self._hw_saved = self._hw
            except OSError:
                clean = False
        return clean


def _nothing() -> None:
    pass


def _ignore(exc: OSError) -> None:
    pass

