"""Producer-state snapshots at segment rolls, as Kafka takes them: after a crash (no clean
close) the state is built from the last roll's snapshot plus the log after it, not from
the log's start; one describing offsets since cut is not used (nor, at open, one beyond
what the crash left of the log)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from groupwire.broker.producers.state import Duplicate
from groupwire.broker.storage import PartitionLog
from groupwire.broker.storage.producer_log import SNAPSHOT_FILE, producer_batch
from groupwire.protocol import batches as mp
from groupwire.protocol.batches import BatchRecord
from groupwire.protocol.steps import run_steps

Factory = Callable[..., PartitionLog]


def _send(log: PartitionLog, pid: int, seq: int, count: int = 3) -> int:
    data = mp.encode_batch([BatchRecord(b"x" * 20, None, (), 1000 + i) for i in range(count)],
                           producer_id=pid, producer_epoch=0, base_sequence=seq)
    header = mp.validate_batch(data)
    return run_steps(log.append_steps(data, header, producer_batch(header)))


def _fill(log: PartitionLog, pid: int, batches: int) -> None:
    for i in range(batches):
        _send(log, pid, 3 * i)


def test_a_roll_leaves_a_snapshot_a_crashed_log_builds_from(open_log: Factory,
                                                            tmp_path: Path) -> None:
    log = open_log(segment_bytes=256)
    _fill(log, 7, 20)  # many rolls: each leaves the state as of its offset
    assert log.segment_count > 2
    assert (tmp_path / "t-0" / SNAPSHOT_FILE).exists()
    # a crash: reopened without a clean close, the last roll's snapshot is the start
    again = open_log(segment_bytes=256)
    snapshot = again._producer_snapshot
    assert snapshot is not None and 0 < snapshot[0] <= again.log_end_offset
    states = run_steps(again.producer_states_steps())
    # the state knows the last batches: a retry of the last one is recognised
    entry = states.get(7)
    assert entry is not None and entry.last_seq == 3 * 20 - 1
    assert isinstance(states.check(7, 0, 57, 59), Duplicate)


def test_a_cut_log_drops_the_roll_snapshot_that_described_it(open_log: Factory,
                                                           tmp_path: Path) -> None:
    log = open_log(segment_bytes=256)
    _fill(log, 7, 20)
    end = log.log_end_offset
    log.truncate_to(3)  # the roll snapshots described offsets cut now
    assert not (tmp_path / "t-0" / SNAPSHOT_FILE).exists()
    _send(log, 8, 0)
    again = open_log(segment_bytes=256)
    assert again.log_end_offset < end
    states = run_steps(again.producer_states_steps())
    entry = states.get(7)
    assert entry is not None and entry.last_seq == 2  # only what the log holds now
    assert states.get(8) is not None
