"""A partition log's transactions (docs/protocol.md §5.5): transactional batches and the
markers the broker writes, the last stable offset and the aborted transactions
read_committed reads are told of, across restarts (snapshot and replay), truncation,
retention, replication and a durability policy that holds the high watermark back."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import msgpack
import pytest

from groupwire.broker.storage import FileOps, FsyncPolicy, PartitionLog
from groupwire.broker.storage.producer_log import (
    REPLAY_STEP,
    SNAPSHOT_FILE,
    ProducerRefused,
    producer_batch,
)
from groupwire.broker.storage.segment import purge_segment
from groupwire.protocol import batches as mp
from groupwire.protocol.batches import BatchRecord
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.kafka import records as kr
from groupwire.protocol.steps import run_steps
from groupwire.protocol.stored_batches import (
    iter_any_batch_spans,
    read_control_marker,
)

Factory = Callable[..., PartitionLog]
TS = 1_000


class Producer:
    """A transactional producer's batches to one partition, in either format."""

    def __init__(self, pid: int, epoch: int = 0, *, kafka: bool = False) -> None:
        self.pid, self.epoch, self.kafka, self.seq = pid, epoch, kafka, 0

    def batch(self, count: int = 2, *, txn: bool = True) -> bytes:
        records = [BatchRecord(b"%d-%d" % (self.pid, self.seq + i), None, (), TS + i)
                   for i in range(count)]
        seq, self.seq = self.seq, self.seq + count
        if self.kafka:
            return kr.encode_batch(records, producer_id=self.pid, producer_epoch=self.epoch,
                                   base_sequence=seq, is_transactional=txn)
        return mp.encode_batch(records, producer_id=self.pid, producer_epoch=self.epoch,
                               base_sequence=seq, transactional=txn)

    def send(self, log: PartitionLog, count: int = 2, *, txn: bool = True) -> int:
        data = self.batch(count, txn=txn)
        header: kr.KafkaBatchHeader | mp.BatchHeader = (
            kr.validate_batch(data) if self.kafka else mp.validate_batch(data))
        return run_steps(log.append_steps(data, header, producer_batch(header)))

    def end(self, log: PartitionLog, commit: bool, *, epoch: int | None = None,
            coordinator_epoch: int = 0) -> int:
        if epoch is not None:
            self.epoch, self.seq = epoch, 0
        return run_steps(log.append_marker_steps(self.pid, self.epoch, commit,
                                                 coordinator_epoch, TS + 500))


def plain(log: PartitionLog, count: int = 1) -> int:
    data = mp.encode_batch([BatchRecord(b"p", None, (), TS)] * count)
    return log.append(data, mp.validate_batch(data))


def batches(log: PartitionLog) -> list[tuple[int, bool, bool, bool]]:
    """``(base offset, kafka, transactional, control)`` of every stored batch."""
    data = log.read(log.log_start_offset, 1 << 24, True, to_log_end=True)
    out = []
    offset = log.log_start_offset
    while data:
        for h, _, _ in iter_any_batch_spans(data):
            out.append((h.base_offset, h.kafka, h.transactional, h.control))
            offset = h.next_offset
        data = log.read(offset, 1 << 24, True, to_log_end=True) if offset < \
            log.log_end_offset else b""
    return out


def committed_values(log: PartitionLog) -> list[bytes | None]:
    """What a read_committed consumer gets: records below the last stable offset, less
    those of the aborted transactions it is told of, by Kafka's consumer's rule (a
    producer's batches are skipped from its aborted transaction's first offset to its
    abort marker)."""
    out: list[bytes | None] = []
    offset = log.log_start_offset
    while True:
        data, aborted = log.read_committed(offset, 1 << 20, True)
        if not data:
            return out
        pending = sorted(aborted, key=lambda t: t[1])
        skipping: set[int] = set()
        for h, start, end in iter_any_batch_spans(data):
            batch = data[start:end]
            pid = (kr.read_header(batch) if h.kafka else mp.read_header(batch)).producer_id
            while pending and pending[0][1] <= h.last_offset:
                skipping.add(pending.pop(0)[0])
            if h.control:
                if not read_control_marker(batch)[0]:
                    skipping.discard(pid)
            elif not (h.transactional and pid in skipping):
                records = kr.decode_records(batch) if h.kafka else mp.decode_records(batch)
                out += [r.value for r in records if r.offset >= offset]
            offset = h.next_offset


@pytest.mark.parametrize("kafka", [False, True])
def test_the_last_stable_offset_follows_transactions(open_log: Factory, kafka: bool) -> None:
    log = open_log()
    a, b = Producer(1, kafka=kafka), Producer(2, kafka=kafka)
    assert plain(log) == 0
    assert log.last_stable_offset == 1 == log.high_watermark
    assert a.send(log) == 1                   # 1-2: a's transaction opens at 1
    assert b.send(log) == 3                   # 3-4: b's at 3
    assert plain(log) == 5
    assert log.last_stable_offset == 1
    assert log.read(1, 1 << 20, True, to_stable=True) == b""
    stable = log.read(0, 1 << 20, True, to_stable=True)
    assert [h.base_offset for h, _, _ in iter_any_batch_spans(stable)] == [0]
    assert log.read_committed(0, 1 << 20, True) == (stable, [])
    assert len(list(iter_any_batch_spans(log.read(0, 1 << 20, True)))) == 4
    assert a.end(log, commit=True) == 6
    assert log.last_stable_offset == 3        # b's still open
    assert b.end(log, commit=False) == 7
    assert log.last_stable_offset == log.high_watermark == 8
    assert log.aborted_transactions(0, 8) == [(2, 3)]
    assert log.aborted_transactions(5, 8) == [(2, 3)]
    assert log.aborted_transactions(8, 9) == []
    assert committed_values(log) == [b"p", b"1-0", b"1-1", b"p"]
    markers = [(o, k) for o, k, _, c in batches(log) if c]
    assert markers == [(6, kafka), (7, kafka)]   # the log's own format: no conversion


def test_a_marker_is_in_the_logs_format(open_log: Factory) -> None:
    log = open_log()
    a = Producer(1)
    a.send(log)
    a.end(log, commit=True)
    assert not log.holds_kafka
    Producer(2, kafka=True).send(log, txn=False)   # the first Kafka batch: from now on
    a.send(log)
    a.end(log, commit=False, coordinator_epoch=3)
    stored = batches(log)
    assert [(o, k, c) for o, k, _, c in stored] == [
        (0, False, False), (2, False, True), (3, True, False), (5, False, False),
        (7, True, True)]
    data = log.read(7, 1 << 20, True)
    assert read_control_marker(data) == (False, 3)
    assert read_control_marker(log.read(2, 1 << 20, True)) == (True, 0)


def test_a_stale_epoch_or_coordinator_writes_no_marker(open_log: Factory) -> None:
    log = open_log()
    a = Producer(1, epoch=5)
    a.send(log)
    a.end(log, commit=False, epoch=6, coordinator_epoch=2)   # the coordinator's bump
    with pytest.raises(ProducerRefused) as old:
        run_steps(log.append_marker_steps(1, 5, True, 2, TS))
    assert old.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(ProducerRefused) as zombie_coordinator:
        run_steps(log.append_marker_steps(1, 6, True, 1, TS))
    assert zombie_coordinator.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    zombie = Producer(1, epoch=5)
    zombie.seq = 2
    with pytest.raises(ProducerRefused) as fenced:
        zombie.send(log)
    assert fenced.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert log.log_end_offset == 3


def test_a_non_transactional_batch_inside_a_transaction_is_refused(
        open_log: Factory) -> None:
    log = open_log()
    a = Producer(1)
    a.send(log)
    with pytest.raises(ProducerRefused) as refused:
        a.send(log, txn=False)
    assert refused.value.code == ErrorCode.INVALID_TXN_STATE
    assert log.log_end_offset == 2


def test_markers_are_written_only_by_append_marker_steps(open_log: Factory) -> None:
    log = open_log()
    marker = mp.encode_control_batch(1, 0, True, 0, TS)
    header = mp.read_header(marker)
    with pytest.raises(ValueError, match="append_marker_steps"):
        run_steps(log.append_steps(marker, header, producer_batch(header)))
    with pytest.raises(ValueError, match="append_marker_steps"):
        run_steps(log.append_steps(marker, header))
    assert log.log_end_offset == 0


@pytest.mark.parametrize("clean", [True, False])
@pytest.mark.parametrize("stepped", [True, False])
def test_a_restart_with_a_transaction_open_gives_the_right_lso(
        open_log: Factory, tmp_path: Path, clean: bool, stepped: bool) -> None:
    """A clean close leaves a snapshot of the log end, a crash the last roll's (the log
    after it replayed); either way the transaction left open holds the last stable
    offset once the state is built, in steps (what the shell does) or at once by the
    property."""
    log = open_log()
    a, b = Producer(1), Producer(2, kafka=True)
    for _ in range(3):
        plain(log, 3)
    b.send(log)
    b.end(log, commit=False)                  # 9-10, marker 11: aborted
    a.send(log)                               # 12-13: open
    for _ in range(3):
        plain(log, 3)
    assert log.segment_count >= 3
    expected = (log.last_stable_offset, log.aborted_transactions(0, 100))
    assert expected == (12, [(2, 9)])
    log.close(sync=clean)
    assert (tmp_path / "t-0" / SNAPSHOT_FILE).exists()
    log = open_log()
    assert not log.producer_states_built
    if stepped:
        run_steps(log.producer_states_steps())
        assert log.producer_states_built
    assert (log.last_stable_offset, log.aborted_transactions(0, 100)) == expected
    assert a.end(log, commit=True) == 23
    assert log.last_stable_offset == 24
    assert committed_values(log).count(b"1-0") == 1
    assert b"2-0" not in committed_values(log)


def test_an_old_snapshot_is_not_trusted_with_transactions(open_log: Factory,
                                                          tmp_path: Path) -> None:
    """A version 1 snapshot (from before transactions) is refused: the log is
    replayed, and the transaction in it found."""
    log = open_log()
    Producer(1).send(log)
    log.close()
    path = tmp_path / "t-0" / SNAPSHOT_FILE
    end_offset, _, start = msgpack.unpackb(path.read_bytes())
    path.write_bytes(msgpack.packb([end_offset, msgpack.packb([1, []]), start]))
    log = open_log()
    assert log.last_stable_offset == 0


def test_the_build_in_steps_follows_appends_and_restarts_after_a_cut(
        open_log: Factory) -> None:
    log = open_log(segment_bytes=1 << 16)
    a = Producer(1)
    a.send(log)                               # 0-1
    a.end(log, commit=False)                  # 2
    for _ in range(3 * REPLAY_STEP):
        plain(log)                            # 3..
    log.close(sync=False)                     # a crash
    (log.directory / SNAPSHOT_FILE).unlink(missing_ok=True)  # and no roll's snapshot:
    log = open_log(segment_bytes=1 << 16)                     # the whole log is replayed
    build = log.producer_states_steps()
    next(build)                               # a step of the replay, then others run
    assert plain(log) == 3 + 3 * REPLAY_STEP  # an append meanwhile
    other = log.producer_states_steps()       # a second caller drives the same build
    next(other)
    assert not log.producer_states_built
    log.truncate_to(2)                        # cuts the marker: the build starts again
    run_steps(build)
    assert log.producer_states_built and run_steps(other) is not None
    assert log.last_stable_offset == 0        # the transaction is open again
    assert log.aborted_transactions(0, 100) == []
    assert log.log_end_offset == 2


def test_appends_during_a_build_are_in_the_state(open_log: Factory) -> None:
    log = open_log(segment_bytes=1 << 16)
    for _ in range(2 * REPLAY_STEP):
        plain(log)
    log.close(sync=False)
    log = open_log(segment_bytes=1 << 16)
    build = log.producer_states_steps()
    next(build)
    a = Producer(7)
    data = a.batch()
    header = mp.validate_batch(data)
    # an append of a transactional batch waits for the same build, then is checked
    appending = log.append_steps(data, header, producer_batch(header))
    next(appending)
    run_steps(build)
    assert run_steps(appending) == 2 * REPLAY_STEP
    assert log.last_stable_offset == 2 * REPLAY_STEP


def test_a_truncation_above_the_markers_keeps_the_state(open_log: Factory) -> None:
    log = open_log()
    a, b = Producer(1), Producer(2)
    a.send(log)                               # 0-1
    a.end(log, commit=False)                  # 2
    b.send(log)                               # 3-4
    b.send(log)                               # 5-6
    c = Producer(3)
    c.send(log)                               # 7-8
    assert log.last_stable_offset == 3
    log.truncate_to(5)
    assert log.producer_states_built          # followed in place
    assert log.last_stable_offset == 3
    log.truncate_to(3)
    assert log.last_stable_offset == 3 == log.log_end_offset
    assert log.aborted_transactions(0, 3) == [(1, 0)]


def test_a_truncation_below_a_marker_reopens_its_transaction(open_log: Factory) -> None:
    log = open_log()
    a = Producer(1)
    plain(log)                                # 0
    a.send(log)                               # 1-2
    a.end(log, commit=False)                  # 3
    plain(log)                                # 4
    assert log.aborted_transactions(0, 10) == [(1, 1)]
    assert log.last_stable_offset == 5
    log.truncate_to(3)                        # the abort marker is lost
    assert log.last_stable_offset == 1
    assert log.aborted_transactions(0, 10) == []
    assert a.end(log, commit=True) == 3       # the coordinator writes it again
    assert log.last_stable_offset == 4


@pytest.mark.parametrize("purged", [True, False])
def test_retention_prunes_aborts_and_the_lso_never_falls_below_the_log_start(
        open_log: Factory, purged: bool) -> None:
    log = open_log(segment_bytes=200)
    a, b = Producer(1), Producer(2)
    a.send(log)
    a.end(log, commit=False)                  # 0-1, marker 2
    b.send(log)                               # 3-4: open
    for _ in range(8):
        plain(log, 2)
    assert log.aborted_transactions(0, 100) == [(1, 0)]
    log.roll()
    dropped = log.delete_segments_before(log.log_end_offset)
    assert dropped and log.log_start_offset > 4
    assert log.aborted_transactions(0, 100) == []
    assert log.last_stable_offset == log.log_start_offset   # b's first offset is gone
    start = log.log_start_offset
    trash = log.take_trash()
    log.close()
    if purged:
        for t in trash:
            purge_segment(FileOps(), t)
    log = open_log(segment_bytes=200)
    if purged:                                # the snapshot agrees
        assert log.log_start_offset == start
        assert log.aborted_transactions(0, 100) == []
        assert log.last_stable_offset == log.log_start_offset
    else:   # the dropped segments came back (no purge before the close): replayed
        assert log.log_start_offset == 0
        assert log.aborted_transactions(0, 100) == [(1, 0)]
        assert log.last_stable_offset == 3
    b.end(log, commit=True)
    assert log.last_stable_offset == log.log_end_offset


def test_a_marker_above_the_high_watermark_keeps_its_transaction_unstable(
        open_log: Factory) -> None:
    """--fsync always: the high watermark waits for the fsync, and the transaction a
    marker ended is stable only once it is below the high watermark."""
    log = open_log(FsyncPolicy.ALWAYS)
    a = Producer(1)
    plain(log)
    a.send(log)

    def flush() -> None:
        ticket = log.take_dirty()
        ticket.sync()
        log.complete(ticket)

    flush()
    assert log.last_stable_offset == 1
    a.end(log, commit=True)                   # offset 3, not yet durable
    assert log.high_watermark == 3 and log.last_stable_offset == 1
    assert log.read(1, 1 << 20, True, to_stable=True) == b""
    flush()
    assert log.high_watermark == 4 == log.last_stable_offset
    assert committed_values(log) == [b"p", b"1-0", b"1-1"]


@pytest.mark.parametrize("built_first", [True, False])
def test_a_follower_keeps_the_transactions_it_replicates(open_log: Factory, tmp_path: Path,
                                                         built_first: bool) -> None:
    leader = open_log(directory=tmp_path / "leader")
    follower = open_log(directory=tmp_path / "follower")
    leader.become_leader(1)
    a, b = Producer(1), Producer(2, kafka=True)
    a.send(leader)
    b.send(leader)
    a.end(leader, commit=False)
    b.send(leader)
    leader.set_high_watermark(leader.log_end_offset)
    if built_first:
        run_steps(follower.producer_states_steps())
    offset = 0
    while offset < leader.log_end_offset:
        offset = follower.append_replica(leader.read(offset, 100, True, to_log_end=True))
    follower.set_high_watermark(leader.high_watermark)
    assert follower.last_stable_offset == leader.last_stable_offset == 2
    assert follower.aborted_transactions(0, 100) == leader.aborted_transactions(0, 100) == [
        (1, 0)]
    follower.become_leader(2)                 # takes over: the state goes on
    with pytest.raises(ProducerRefused) as refused:
        b.send(follower, txn=False)
    assert refused.value.code == ErrorCode.INVALID_TXN_STATE
    b.end(follower, commit=True)
    follower.set_high_watermark(follower.log_end_offset)
    assert follower.last_stable_offset == follower.log_end_offset
