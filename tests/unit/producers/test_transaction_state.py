"""Transactions in a partition's producer state (broker/producers, KIP-98): transactional
batches open a transaction, markers end it (an older epoch fenced, a higher one taken),
aborts are remembered for read_committed reads, the first unstable offset, retention,
expiry, truncation and snapshots."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupwire.broker.producers.state import (
    APPEND,
    SNAPSHOT_VERSION,
    CompletedTxn,
    Duplicate,
    ProducerStates,
    Refused,
    SnapshotError,
    TxnRange,
    last_sequence,
    load_snapshot,
)
from groupwire.protocol.errors import ErrorCode

PID = 4000


class Log:
    """A partition's offsets and its producer states, as the log drives them."""

    def __init__(self) -> None:
        self.states = ProducerStates()
        self.end = 0
        self.seqs: dict[int, int] = {}

    def send(self, count: int = 2, *, pid: int = PID, epoch: int = 0, txn: bool = True,
             ts: int = 1_000, seq: int | None = None) -> int | Duplicate | Refused:
        """A producer's next batch: its base offset once appended, else the verdict."""
        first = self.seqs.get(pid, 0) if seq is None else seq
        last = last_sequence(first, count - 1)
        verdict = self.states.check(pid, epoch, first, last, txn)
        if verdict is not APPEND:
            assert isinstance(verdict, Duplicate | Refused)
            return verdict
        base = self.end
        self.end += count
        self.states.record(pid, epoch, first, last, base, self.end - 1, ts, txn)
        self.seqs[pid] = last + 1
        return base

    def marker(self, commit: bool, *, pid: int = PID, epoch: int = 0, ts: int = 2_000,
               coordinator_epoch: int = 0) -> int | Refused:
        verdict = self.states.check_marker(pid, epoch, coordinator_epoch)
        if verdict is not APPEND:
            assert isinstance(verdict, Refused)
            return verdict
        offset = self.end
        self.end += 1
        self.states.record_marker(pid, epoch, commit, offset, ts, coordinator_epoch)
        return offset


def test_a_transactional_batch_opens_a_transaction_a_marker_ends_it() -> None:
    log = Log()
    log.send(2, pid=1, txn=False)                           # 0-1: idempotent only
    assert log.states.first_unstable_offset() is None
    assert log.send(3) == 2                                 # 2-4: opens at 2
    assert log.send(2) == 5                                 # 5-6: the same transaction
    assert log.states.first_unstable_offset() == 2
    assert log.states.open_transactions() == {PID: 2}
    entry = log.states.get(PID)
    assert entry is not None and entry.txn_first_offset == 2
    assert log.marker(commit=True) == 7
    assert log.states.first_unstable_offset() is None
    assert log.states.aborted_between(0, 100) == []         # a commit is not remembered
    assert log.send(1) == 8                                 # the next one opens anew
    assert log.states.first_unstable_offset() == 8


def test_record_marker_says_what_it_ended() -> None:
    states = ProducerStates()
    states.record(PID, 0, 0, 1, 10, 11, 1_000, transactional=True)
    assert states.record_marker(PID, 0, False, 12, 1_001) == CompletedTxn(PID, 10, 12, True)
    assert states.record_marker(PID, 0, False, 13, 1_002) is None   # nothing open: nothing
    assert states.aborted == [TxnRange(PID, 10, 12)]


def test_a_non_transactional_batch_inside_a_transaction_is_invalid_txn_state() -> None:
    log = Log()
    log.send(2)
    refused = log.send(1, txn=False)
    assert isinstance(refused, Refused) and refused.code == ErrorCode.INVALID_TXN_STATE
    assert log.end == 2
    assert log.send(2, seq=0) == Duplicate(0, 1)   # a retry is still a retry
    log.marker(commit=False)
    assert log.send(1, txn=False) == 3            # after the marker it may


def test_a_markers_epoch_fences_the_producers_older_instance() -> None:
    """The coordinator bumps the epoch and writes the abort with it: the zombie's
    batches of the old epoch are INVALID_PRODUCER_EPOCH, the new instance starts at 0."""
    log = Log()
    log.send(2, epoch=3)
    assert log.marker(commit=False, epoch=4) == 2
    zombie = log.send(1, epoch=3)
    assert isinstance(zombie, Refused) and zombie.code == ErrorCode.INVALID_PRODUCER_EPOCH
    out_of_order = log.send(1, epoch=4, seq=5)
    assert isinstance(out_of_order, Refused)
    assert out_of_order.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.send(1, epoch=4, seq=0) == 3
    stale = log.marker(commit=True, epoch=3)
    assert isinstance(stale, Refused) and stale.code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert log.states.first_unstable_offset() == 3   # nothing was written


def test_a_coordinator_epoch_older_than_the_last_markers_is_fenced() -> None:
    log = Log()
    log.send(1)
    assert log.marker(commit=True, coordinator_epoch=7) == 1
    log.send(1)
    old = log.marker(commit=False, coordinator_epoch=6)
    assert isinstance(old, Refused)
    assert old.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert log.states.check_marker(PID, 0) is APPEND   # not checked when not given
    assert log.marker(commit=False, coordinator_epoch=7) == 3


def test_a_marker_for_a_producer_unknown_here_is_written_and_ends_nothing() -> None:
    log = Log()
    assert log.marker(commit=False, pid=9, epoch=2) == 0
    assert log.states.aborted == [] and log.states.first_unstable_offset() is None
    entry = log.states.get(9)
    assert entry is not None and entry.epoch == 2


def test_aborted_transactions_of_a_read_follow_kafkas_rule() -> None:
    """Told of an abort when its marker is at or after the read's start and its first
    offset before the read's end."""
    log = Log()
    log.send(2, pid=1)                           # 0-1 (pid 1)
    log.send(2, pid=2)                           # 2-3 (pid 2)
    log.send(1, pid=1)                           # 4
    log.marker(False, pid=1)                     # 5: aborts 0-5
    log.send(1, pid=3)                           # 6
    log.marker(True, pid=2)                      # 7: commits 2-7
    log.marker(False, pid=3)                     # 8: aborts 6-8
    log.send(1, pid=1)                           # 9
    log.marker(False, pid=1)                     # 10: aborts 9-10
    between = log.states.aborted_between
    assert between(0, 11) == [(1, 0), (3, 6), (1, 9)]
    assert between(0, 6) == [(1, 0)]
    assert between(5, 7) == [(1, 0), (3, 6)]
    assert between(6, 9) == [(3, 6)]
    assert between(7, 8) == [(3, 6)]
    assert between(9, 10) == [(1, 9)]
    assert between(11, 20) == []


def test_the_first_unstable_offset_waits_for_the_high_watermark_to_pass_the_marker() -> None:
    """A marker not yet replicated (or fsynced) could be lost: its transaction stays
    unstable until the high watermark passes it, as Kafka keeps it."""
    log = Log()
    log.send(2, pid=1)                        # 0-1
    log.send(2, pid=2)                        # 2-3
    log.marker(True, pid=1)                   # 4
    assert log.states.first_unstable_offset() == 2
    assert log.states.first_unstable_offset(high_watermark=4) == 0
    assert log.states.first_unstable_offset(high_watermark=5) == 2
    assert log.states.first_unstable_offset(high_watermark=4) == 2   # forgotten once passed
    log.marker(False, pid=2)                  # 5
    assert log.states.first_unstable_offset(high_watermark=5) == 2
    assert log.states.first_unstable_offset(high_watermark=6) is None


def test_retention_forgets_aborts_wholly_below_the_log_start() -> None:
    log = Log()
    for pid in (1, 2, 3):
        log.send(2, pid=pid)
        log.marker(False, pid=pid)            # 0-2, 3-5, 6-8
    log.send(1, pid=4)                        # 9, open
    log.states.log_start_moved(5)
    assert [t.producer_id for t in log.states.aborted] == [2, 3]
    log.states.log_start_moved(6)
    assert log.states.aborted_between(0, 100) == [(3, 6)]
    log.states.log_start_moved(20)            # an open transaction stays open
    assert log.states.aborted == [] and log.states.first_unstable_offset() == 9


def test_expiry_never_forgets_a_producer_with_a_transaction_open() -> None:
    log = Log()
    log.send(1, pid=1, ts=1_000)
    log.send(1, pid=2, ts=1_000, txn=False)
    assert log.states.expire(now_ms=10**9, expiration_ms=1_000) == [2]
    assert log.states.get(1) is not None and log.states.first_unstable_offset() == 0
    log.marker(True, pid=1, ts=5_000)
    assert log.states.expire(now_ms=5_999, expiration_ms=1_000) == []   # the marker's time
    assert log.states.expire(now_ms=6_000, expiration_ms=1_000) == [1]


def test_a_truncation_above_every_marker_is_followed_in_place() -> None:
    log = Log()
    log.send(2, pid=1)                        # 0-1
    log.marker(False, pid=1)                  # 2
    log.send(2, pid=2)                        # 3-4, open
    log.send(2, pid=2)                        # 5-6
    log.send(2, pid=3)                        # 7-8, open
    assert log.states.truncated(6)            # 5-6 and 7-8 go
    assert log.states.open_transactions() == {2: 3}
    assert log.states.get(3) is None
    entry = log.states.get(2)
    assert entry is not None and [b.first_offset for b in entry.batches] == [3]
    assert log.states.aborted_between(0, 10) == [(1, 0)]
    assert log.states.truncated(3)            # pid 2's transaction began there: gone
    assert log.states.open_transactions() == {} and log.states.get(2) is None


def test_a_producer_with_an_open_transaction_is_kept_when_its_batches_are_cut() -> None:
    log = Log()
    log.send(1, pid=1)                        # 0, opens
    for _ in range(6):
        log.send(1, pid=1)                    # 1-6: only the last five are kept
    assert log.states.truncated(2)
    entry = log.states.get(1)
    assert entry is not None and not entry.batches and entry.txn_first_offset == 0
    assert log.states.first_unstable_offset() == 0


def test_a_truncation_that_cuts_a_marker_asks_for_a_rebuild() -> None:
    log = Log()
    log.send(2)                               # 0-1
    log.marker(False)                         # 2
    before = log.states.snapshot()
    assert not log.states.truncated(2)        # the transaction would be open again
    assert log.states.snapshot() == before    # untouched: the caller rebuilds
    assert log.states.last_marker_offset == 2
    assert log.states.truncated(3)


def test_a_snapshot_keeps_every_transaction() -> None:
    log = Log()
    log.send(2, pid=1, epoch=2)
    log.marker(False, pid=1, epoch=3, coordinator_epoch=5)   # 2: aborted, epoch bumped
    log.send(2, pid=2)                                       # 3-4: open
    log.send(1, pid=3, txn=False)                            # 5
    log.send(1, pid=4)                                       # 6
    log.marker(True, pid=4)                                  # 7: ended, unreplicated
    copy = load_snapshot(log.states.snapshot())
    for states in (log.states, copy):
        assert states.open_transactions() == {2: 3}
        assert states.aborted_between(0, 10) == [(1, 0)]
        assert states.first_unstable_offset(high_watermark=7) == 3
        assert states.last_marker_offset == 7
    for pid in (1, 2, 3, 4):
        a, b = log.states.get(pid), copy.get(pid)
        assert a is not None and b is not None
        assert (a.epoch, list(a.batches), a.last_timestamp_ms, a.coordinator_epoch,
                a.txn_first_offset) == (b.epoch, list(b.batches), b.last_timestamp_ms,
                                        b.coordinator_epoch, b.txn_first_offset)
    fresh = Log()
    fresh.states, fresh.end, fresh.seqs = copy, log.end, dict(log.seqs)
    zombie = fresh.send(1, pid=1, epoch=2)
    assert isinstance(zombie, Refused) and zombie.code == ErrorCode.INVALID_PRODUCER_EPOCH
    fenced = fresh.marker(True, pid=1, epoch=3, coordinator_epoch=4)
    assert isinstance(fenced, Refused)
    assert fenced.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED


def test_a_version_1_snapshot_is_refused_so_the_log_is_replayed() -> None:
    """Version 1 knew no transactions: the state is rebuilt from the log instead."""
    assert SNAPSHOT_VERSION == 2
    old = msgpack.packb([1, [[PID, 0, 1_000, [[0, 1, 0, 1, 1_000]]]]])
    with pytest.raises(SnapshotError, match="version 1"):
        load_snapshot(old)
    with pytest.raises(SnapshotError):
        load_snapshot(msgpack.packb([2, [], []]))   # a version 2 that is cut short


_Op = tuple[str, int]   # ("batch", pid) / ("commit", pid) / ("abort", pid) / ("plain", pid)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["batch", "batch", "commit", "abort", "plain"]),
                          st.integers(1, 3)), max_size=40),
       st.integers(0, 45), st.integers(0, 45), st.integers(0, 45))
def test_the_state_agrees_with_the_logs_history(ops: list[_Op], a: int, b: int,
                                                hw: int) -> None:
    """Against a model that reads the whole history: the open transactions, the first
    unstable offset (with a high watermark), the aborts a read must be told of, and the
    same after a snapshot's round trip."""
    log = Log()
    history: list[tuple[int, str, int]] = []   # (offset, kind, pid)
    for kind, pid in ops:
        if kind in ("commit", "abort"):
            offset = log.marker(kind == "commit", pid=pid)
            assert isinstance(offset, int)
        else:
            got = log.send(1, pid=pid, txn=kind == "batch")
            if isinstance(got, Refused):
                assert got.code == ErrorCode.INVALID_TXN_STATE
                continue
            assert isinstance(got, int)
            offset = got
        history.append((offset, kind, pid))
    open_at: dict[int, int] = {}
    txns: list[tuple[int, int, int, bool]] = []   # pid, first, marker, aborted
    for offset, kind, pid in history:
        if kind == "batch":
            open_at.setdefault(pid, offset)
        elif kind in ("commit", "abort") and pid in open_at:
            txns.append((pid, open_at.pop(pid), offset, kind == "abort"))
    unstable = [*open_at.values(), *(f for _, f, m, _ in txns if m >= hw)]
    start, end = min(a, b), max(a, b)
    told = [(p, f) for p, f, m, aborted in txns if aborted and m >= start and f < end]
    copy = load_snapshot(log.states.snapshot())
    for states in (log.states, copy):
        assert states.open_transactions() == open_at
        assert states.aborted_between(start, end) == told
    for states in (log.states, copy):   # the high watermark forgets: ask each once
        assert states.first_unstable_offset(hw) == min(unstable, default=None)
