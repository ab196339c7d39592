"""A partition log's idempotent producers: a retry of a stored batch stores nothing and
gets the first append's offset, after a clean restart (a snapshot), after a crash (a
replay of the log), across a truncation and on a follower."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from groupwire.broker.storage import PartitionLog
from groupwire.broker.storage.producer_log import (
    SNAPSHOT_FILE,
    ProducerRefused,
    producer_batch,
)
from groupwire.protocol import batches as mp
from groupwire.protocol.batches import BatchRecord
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.kafka import records as kr
from groupwire.protocol.steps import run_steps

PID = 77


def batch(seq: int, count: int = 2, *, pid: int = PID, epoch: int = 0,
          compression: int = kr.COMPRESSION_NONE) -> bytes:
    return kr.encode_batch([BatchRecord(value=b"v%d" % (seq + i), timestamp_ms=1_000 + seq)
                            for i in range(count)], compression=compression,
                           producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def msgpack_batch(seq: int, count: int = 2, *, pid: int = PID, epoch: int = 0) -> bytes:
    """The same batch in the msgpack layout v2 (docs/protocol.md §5.1)."""
    return mp.encode_batch([BatchRecord(value=b"v%d" % (seq + i), timestamp_ms=1_000 + seq)
                            for i in range(count)],
                           producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def send(log: PartitionLog, data: bytes) -> int:
    header: kr.KafkaBatchHeader | mp.BatchHeader = (
        mp.validate_batch(data) if data[0] == 0x92 else kr.validate_batch(data))
    return run_steps(log.append_steps(data, header, producer_batch(header)))


def test_both_formats_share_one_producer_state(open_log: Callable[..., PartitionLog],
                                               tmp_path: Path) -> None:
    """A producer's msgpack v2 and Kafka batches follow one sequence: a retry in either
    format is known, after a crash too (the log replayed)."""
    log = open_log()
    assert send(log, msgpack_batch(0)) == 0
    assert send(log, batch(2)) == 2
    assert send(log, msgpack_batch(4)) == 4
    assert send(log, msgpack_batch(0)) == 0
    with pytest.raises(ProducerRefused):
        send(log, msgpack_batch(9))
    log.close(sync=False)
    log = open_log()
    assert send(log, msgpack_batch(4)) == 4
    assert send(log, batch(2)) == 2
    assert log.log_end_offset == 6


def test_a_retry_is_answered_with_the_first_offset_and_stored_nowhere(
        open_log: Callable[..., PartitionLog]) -> None:
    log = open_log()
    assert [send(log, batch(s)) for s in (0, 2, 4)] == [0, 2, 4]
    assert send(log, batch(2)) == 2
    assert log.log_end_offset == 6
    with pytest.raises(ProducerRefused) as gap:
        send(log, batch(9))
    assert gap.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.log_end_offset == 6


def test_an_older_epoch_is_fenced(open_log: Callable[..., PartitionLog]) -> None:
    log = open_log()
    send(log, batch(0, epoch=5))
    with pytest.raises(ProducerRefused) as fenced:
        send(log, batch(2, epoch=4))
    assert fenced.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert log.log_end_offset == 2


def test_batches_without_a_producer_id_are_never_checked(
        open_log: Callable[..., PartitionLog]) -> None:
    log = open_log()
    plain = batch(0, pid=-1, epoch=-1)
    header = kr.validate_batch(plain)
    assert producer_batch(header) is None
    assert run_steps(log.append_steps(plain, header)) == 0
    assert run_steps(log.append_steps(plain, header)) == 2  # the same bytes again: stored


@pytest.mark.parametrize("clean", [True, False])
def test_state_survives_a_restart(open_log: Callable[..., PartitionLog], tmp_path: Path,
                                  clean: bool) -> None:
    """A clean close leaves a snapshot of the log end; a crash, the last segment roll's
    (the log after it is replayed). Either way a retry of the last batches is recognised
    after the restart."""
    log = open_log()
    for s in range(0, 40, 2):  # many small segments (256 bytes each)
        send(log, batch(s, compression=kr.COMPRESSION_LZ4 if s % 4 else kr.COMPRESSION_NONE))
    assert log.segment_count > 3
    end = log.log_end_offset
    log.close(sync=clean)
    snapshot = tmp_path / "t-0" / SNAPSHOT_FILE
    assert snapshot.exists()
    log = open_log()
    covered = log._producer_snapshot
    assert covered is not None and (covered[0] == end) == clean
    assert not snapshot.exists()  # read once: a crash later must not find it stale
    assert send(log, batch(38)) == 38
    assert send(log, batch(30)) == 30
    assert log.log_end_offset == 40
    assert send(log, batch(40)) == 40
    with pytest.raises(ProducerRefused):
        send(log, batch(20))  # older than the five remembered, and not next


def test_a_snapshot_covering_offsets_the_log_lost_is_not_used(
        open_log: Callable[..., PartitionLog], tmp_path: Path) -> None:
    log = open_log()
    for s in range(0, 12, 2):
        send(log, batch(s))
    log.close()
    log = open_log()
    log.truncate_to(6)  # before the state was needed: the snapshot covered 0-11
    assert send(log, batch(6)) == 6  # rebuilt from the log: 6 follows 4
    assert send(log, batch(4)) == 4


def test_a_truncation_forgets_the_cut_batches(open_log: Callable[..., PartitionLog]) -> None:
    log = open_log()
    for s in range(0, 10, 2):
        send(log, batch(s))
    log.truncate_to(6)
    assert log.log_end_offset == 6
    assert send(log, batch(6)) == 6  # lost with the cut: stored again, not a duplicate
    assert send(log, batch(8)) == 8


def test_a_follower_keeps_the_state_of_what_it_replicates(
        open_log: Callable[..., PartitionLog], tmp_path: Path) -> None:
    leader = open_log(directory=tmp_path / "leader")
    follower = open_log(directory=tmp_path / "follower")
    leader.become_leader(1)
    for s in range(0, 6, 2):
        send(leader, batch(s))
    follower.append_replica(leader.read(0, 2, True, to_log_end=True))  # the first batch
    assert follower.log_end_offset == 2
    run_steps(follower._producer_states())  # built now: later batches are recorded as
    follower.append_replica(leader.read(2, 1 << 20, True, to_log_end=True))  # they come
    assert follower.log_end_offset == 6
    # the follower takes over: a retry of the last batch is recognised there
    follower.become_leader(2)
    assert send(follower, batch(4)) == 4
    assert send(follower, batch(6)) == 6
    assert follower.log_end_offset == 8


def test_expiry_forgets_idle_producers(open_log: Callable[..., PartitionLog]) -> None:
    log = open_log()
    assert log.expire_producers(10**13, 1) == 0  # nothing built yet
    send(log, batch(0))
    assert log.expire_producers(1_000 + 500, 1_000) == 0
    assert log.expire_producers(1_000 + 1_000, 1_000) == 1
    assert send(log, batch(50)) == 2  # forgotten: any sequence starts it again
