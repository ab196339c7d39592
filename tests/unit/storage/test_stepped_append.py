"""A big batch appended in steps (``PartitionLog.append_steps``): written a piece a step,
it counts only once whole, one stepped append at a time, and a write given up halfway
(abandoned, the log closed or gone offline) leaves the log as it was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from groupwire.broker.storage import FsyncPolicy, StorageError
from groupwire.broker.storage import partition_log as partition_log_module
from groupwire.protocol.batches import validate_batch
from groupwire.protocol.steps import run_steps
from tests.steps import steps_taken

H = Any  # the `h` fixture: helpers from conftest

PIECE = 64


@pytest.fixture(autouse=True)
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(partition_log_module, "WRITE_PIECE", PIECE)


def big(h: H, tag: bytes, records: int = 6) -> bytes:
    """A batch of several pieces (~7 with 6 records)."""
    batch: bytes = h.make_batch([tag + b"-%d-" % i + b"x" * 40 for i in range(records)])
    assert len(batch) > 4 * PIECE
    return batch


def stepped(log: Any, batch: bytes) -> Any:
    return log.append_steps(batch, validate_batch(batch))


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def on_disk_size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("*.log"))


def test_a_big_batch_takes_several_steps_and_counts_only_at_the_last(
        h: H, open_log: Any, tmp_path: Path) -> None:
    log = open_log(segment_bytes=300)
    h.append(log, [b"first"])
    batch = big(h, b"b")
    steps = stepped(log, batch)
    pieces = -(-len(batch) // PIECE)
    for _ in range(pieces - 1):
        next(steps)
        assert (log.log_end_offset, log.high_watermark) == (1, 1)
        assert h.values(h.read_all(log)) == [b"first"]
    assert log.segment_count == 2  # rolled at the start: the batch does not fit the first
    assert run_steps(steps) == 1
    assert log.log_end_offset == log.high_watermark == 7
    assert h.values(h.read_all(log))[1:] == [b"b-%d-" % i + b"x" * 40 for i in range(6)]

    same = open_log(segment_bytes=300, directory=tmp_path / "sync")
    h.append(same, [b"first"])
    assert same.append(batch, validate_batch(batch)) == 1
    assert files(tmp_path / "t-0") == files(tmp_path / "sync")  # .log and .index alike


def test_a_small_batch_is_appended_in_one_step(h: H, open_log: Any) -> None:
    log = open_log(segment_bytes=10_000)
    batch = h.make_batch([b"small"])
    assert len(batch) <= PIECE
    assert steps_taken(stepped(log, batch)) == (0, 0)
    assert h.values(h.read_all(log)) == [b"small"]


def test_a_second_append_waits_for_the_first_and_lands_after_it(h: H, open_log: Any) -> None:
    log = open_log(segment_bytes=10_000)
    first, second, small = big(h, b"one"), big(h, b"two"), h.make_batch([b"three"])
    one = stepped(log, first)
    next(one)
    two, three = stepped(log, second), stepped(log, small)
    for _ in range(3):
        next(two)
        next(three)
    with pytest.raises(StorageError, match="stepped append under way"):
        h.append(log, [b"refused"])  # internal topics' synchronous append
    assert log.log_end_offset == 0
    assert run_steps(one) == 0
    assert run_steps(two) == 6
    assert run_steps(three) == 12
    assert [v[:5] for v in h.values(h.read_all(log))] == (
        [b"one-%d" % i for i in range(6)] + [b"two-%d" % i for i in range(6)] + [b"three"])


def test_an_abandoned_append_leaves_the_log_as_it_was(h: H, open_log: Any,
                                                      tmp_path: Path) -> None:
    log = open_log(segment_bytes=10_000)
    h.append(log, [b"a"])
    before = (log.log_end_offset, log.size_bytes, on_disk_size(tmp_path / "t-0"))
    steps = stepped(log, big(h, b"lost"))
    next(steps)
    next(steps)
    assert on_disk_size(tmp_path / "t-0") > before[2]  # pieces were written
    steps.close()  # the task running it was cancelled
    assert (log.log_end_offset, log.size_bytes, on_disk_size(tmp_path / "t-0")) == before
    assert run_steps(stepped(log, big(h, b"next"))) == 1
    h.append(log, [b"z"])
    assert [v[:6] for v in h.values(h.read_all(log))] == (
        [b"a"] + [b"next-%d" % i for i in range(6)] + [b"z"])
    log.close()
    again = open_log(segment_bytes=10_000)
    assert again.recovery is None
    assert len(h.read_all(again)) == 8


def test_a_clean_shutdown_halfway_leaves_no_torn_tail(h: H, open_log: Any) -> None:
    log = open_log(segment_bytes=10_000)
    h.append(log, [b"a"])
    steps = stepped(log, big(h, b"lost"))
    next(steps)
    log.close()  # the broker closes its storage before the task is cancelled
    with pytest.raises(StorageError, match="closed"):
        run_steps(steps)
    again = open_log(segment_bytes=10_000, trust_index=True)
    assert again.recovery is None  # the index was trusted: the files end where it does
    assert h.values(h.read_all(again)) == [b"a"]


def test_a_log_closed_halfway_fails_the_append(h: H, open_log: Any) -> None:
    log = open_log(segment_bytes=10_000)
    steps = stepped(log, big(h, b"lost"))
    next(steps)
    log.close(sync=False)  # its topic was deleted
    with pytest.raises(StorageError, match="is closed"):
        run_steps(steps)
    assert log.log_end_offset == 0


def test_a_log_gone_offline_halfway_fails_the_append_and_keeps_nothing(
        h: H, open_log: Any, tmp_path: Path) -> None:
    ops = h.FailingOps()
    log = open_log(FsyncPolicy.INTERVAL, segment_bytes=10_000, ops=ops)
    h.append(log, [b"a"])
    before = on_disk_size(tmp_path / "t-0")
    steps = stepped(log, big(h, b"lost"))
    next(steps)
    ticket = log.take_dirty()  # the flusher's round, whose fsync fails
    ops.fail_fsync = True
    with pytest.raises(OSError):
        ticket.sync()
    log.complete(ticket)
    assert log.offline
    with pytest.raises(StorageError, match="went offline"):
        run_steps(steps)
    assert log.log_end_offset == 1
    assert on_disk_size(tmp_path / "t-0") == before
    assert h.values(h.read_all(log)) == [b"a"]


def test_a_flush_halfway_does_not_count_the_batch_durable(h: H, open_log: Any) -> None:
    log = open_log(FsyncPolicy.ALWAYS, segment_bytes=10_000)
    h.append(log, [b"a"])
    steps = stepped(log, big(h, b"b"))
    next(steps)
    ticket = log.take_dirty()
    ticket.sync()
    log.complete(ticket)
    assert log.high_watermark == 1
    assert run_steps(steps) == 1
    assert log.high_watermark == 1  # written whole, not yet fsynced
    ticket = log.take_dirty()
    assert not ticket.empty
    ticket.sync()
    log.complete(ticket)
    assert log.high_watermark == 7
    assert log.take_dirty().empty
