"""Idempotent producers' state (broker/producers): Kafka's sequence rules, retries
answered with the first append's offsets, snapshots, expiry, truncation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupwire.broker import producers
from groupwire.broker.producers.state import (
    APPEND,
    MAX_SEQUENCE,
    Duplicate,
    ProducerStates,
    Refused,
    SnapshotError,
    last_sequence,
    load_snapshot,
)
from groupwire.protocol.errors import ErrorCode
from tests.unit.coordinator.test_coord_purity import FORBIDDEN, _imported_modules

PID = 4000


class Log:
    """A partition's offsets and its producer states, as the log drives them."""

    def __init__(self) -> None:
        self.states = ProducerStates()
        self.end = 0

    def send(self, first_seq: int, count: int, epoch: int = 0, pid: int = PID,
             ts: int = 1000) -> Duplicate | Refused | int:
        """The batch's base offset once appended, else the verdict."""
        last = last_sequence(first_seq, count - 1)
        verdict = self.states.check(pid, epoch, first_seq, last)
        if verdict is not APPEND:
            assert isinstance(verdict, Duplicate | Refused)
            return verdict
        base = self.end
        self.end += count
        self.states.record(pid, epoch, first_seq, last, base, self.end - 1, ts)
        return base


def test_the_core_imports_no_io_or_clock() -> None:
    sources = sorted(Path(producers.__file__).parent.glob("*.py"))
    assert {p.name: _imported_modules(p) & FORBIDDEN for p in sources
            if _imported_modules(p) & FORBIDDEN} == {}
    code = ("import sys, groupwire.broker.producers.state; print(sorted(m for m in "
            "('asyncio', 'socket', 'selectors', 'threading') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_batches_in_sequence_are_appended_and_a_gap_is_refused() -> None:
    log = Log()
    assert log.send(0, 3) == 0
    assert log.send(3, 2) == 3
    gap = log.send(6, 1)
    assert isinstance(gap, Refused)
    assert gap.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.send(5, 1) == 5
    assert log.end == 6


def test_a_retry_of_any_of_the_last_five_gets_its_first_offsets() -> None:
    log = Log()
    bases = [log.send(seq, 1) for seq in range(7)]
    assert bases == list(range(7))
    for seq in range(2, 7):
        assert log.send(seq, 1) == Duplicate(seq, seq)
    older = log.send(1, 1)  # past the five remembered: no longer known as a retry
    assert isinstance(older, Refused)
    assert older.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.end == 7


def test_a_retry_must_match_the_whole_range() -> None:
    log = Log()
    log.send(0, 4)
    part = log.send(0, 2)
    assert isinstance(part, Refused)
    assert part.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_epochs_fence_older_ones_and_start_at_sequence_zero() -> None:
    log = Log()
    log.send(0, 5, epoch=3)
    old = log.send(5, 1, epoch=2)
    assert isinstance(old, Refused)
    assert old.code == ErrorCode.INVALID_PRODUCER_EPOCH
    late = log.send(5, 1, epoch=4)
    assert isinstance(late, Refused)
    assert late.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.send(0, 1, epoch=4) == 5
    # the old epoch's batches are no longer retries of anything: they are fenced
    fenced = log.send(0, 5, epoch=3)
    assert isinstance(fenced, Refused)
    assert fenced.code == ErrorCode.INVALID_PRODUCER_EPOCH


def test_an_unknown_producer_may_start_anywhere_and_producers_are_separate() -> None:
    log = Log()
    assert log.send(17, 2, pid=1) == 0
    assert log.send(0, 1, pid=2) == 2
    assert log.send(19, 1, pid=1) == 3
    assert isinstance(log.send(0, 1, pid=1), Refused)


def test_sequences_wrap_past_the_int32_maximum() -> None:
    assert last_sequence(MAX_SEQUENCE - 1, 3) == 1
    log = Log()
    log.send(MAX_SEQUENCE - 1, 2)
    assert log.send(0, 3) == 2
    assert log.send(0, 3) == Duplicate(2, 4)
    wrapped = Log()
    assert wrapped.send(MAX_SEQUENCE - 1, 4) == 0  # MAX-1 .. 1
    assert wrapped.send(2, 1) == 4


def test_a_snapshot_reads_back_the_same_decisions() -> None:
    log = Log()
    for seq in range(8):
        log.send(seq * 2, 2, pid=seq % 3, epoch=seq % 3, ts=seq)
    copy = load_snapshot(log.states.snapshot())
    assert len(copy) == len(log.states) == 3
    for pid in range(3):
        a, b = log.states.get(pid), copy.get(pid)
        assert a is not None and b is not None
        assert (a.epoch, list(a.batches), a.last_timestamp_ms) == \
               (b.epoch, list(b.batches), b.last_timestamp_ms)
    with pytest.raises(SnapshotError):
        load_snapshot(b"\x92\x05\x90")  # another version
    with pytest.raises(SnapshotError):
        load_snapshot(b"not msgpack at all")


def test_expiry_forgets_a_producer_idle_that_long() -> None:
    log = Log()
    log.send(0, 1, pid=1, ts=1_000)
    log.send(0, 1, pid=2, ts=5_000)
    assert log.states.expire(now_ms=10_000, expiration_ms=6_000) == [1]
    assert log.states.get(1) is None and log.states.get(2) is not None
    assert log.send(40, 1, pid=1) == 2  # starts afresh


def test_truncation_forgets_the_batches_the_log_lost() -> None:
    log = Log()
    for seq in range(4):
        log.send(seq, 1, pid=1, ts=seq)  # offsets 0-3
    log.send(0, 1, pid=2)  # offset 4
    log.states.truncated(2)
    entry = log.states.get(1)
    assert entry is not None and entry.last_seq == 1 and entry.last_timestamp_ms == 1
    assert log.states.get(2) is None
    log.end = 2
    assert log.send(2, 1, pid=1) == 2  # resent after the truncation: appended again


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=30), st.data())
def test_retries_within_the_window_never_append_twice(sizes: list[int],
                                                      data: st.DataObject) -> None:
    """A producer with up to five batches in flight, each possibly resent after later
    ones were stored: every batch is stored once, and every resend is answered with
    the offsets its first append got."""
    log = Log()
    first_base: dict[int, int] = {}
    seqs, seq = [], 0
    for size in sizes:
        seqs.append((seq, size))
        seq += size
    for i, (first, size) in enumerate(seqs):
        got = log.send(first, size)
        assert isinstance(got, int)
        first_base[i] = got
        window = list(range(max(0, i - 4), i + 1))
        for j in data.draw(st.lists(st.sampled_from(window), max_size=3)):
            again = log.send(*seqs[j])
            assert again == Duplicate(first_base[j], first_base[j] + seqs[j][1] - 1)
    assert log.end == sum(sizes)
