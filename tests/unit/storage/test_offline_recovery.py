"""A log offline after a failed fsync comes back by itself after the back-off, keeping
exactly what was acknowledged, and the round after a failure acknowledges nothing of it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import structlog

from groupwire.broker.storage import FsyncPolicy, PartitionLog, StorageConfig, StorageError

H = Any


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _log(tmp_path: Path, ops: Any, clock: Clock, policy: FsyncPolicy,
         segment_bytes: int = 10_000) -> PartitionLog:
    config = StorageConfig(fsync=policy, segment_bytes=segment_bytes, offline_retry_ms=500)
    return PartitionLog(tmp_path / "t-0", config, topic="t", partition=0, file_ops=ops,
                        clock=clock)


def _flush(log: PartitionLog) -> None:
    ticket = log.take_dirty()
    try:
        ticket.sync()
    finally:
        log.complete(ticket)


def test_the_round_after_a_failed_fsync_does_not_acknowledge_writes_it_missed(
        h: H, tmp_path: Path) -> None:
    """Written while the failing fsync ran, waiting for the next round: that round must
    fail too, not sync nothing and say all is durable."""
    ops = h.FailingOps()
    log = _log(tmp_path, ops, Clock(), FsyncPolicy.ALWAYS)
    h.append(log, [b"a"])
    failing = log.take_dirty()
    h.append(log, [b"b"])  # after the ticket was taken, before its fsync fails
    ops.fail_fsync = True
    with pytest.raises(OSError):
        failing.sync()
    log.complete(failing)
    ops.fail_fsync = False
    after = log.take_dirty()
    assert not after.empty
    with pytest.raises(OSError):
        after.sync()
    log.complete(after)
    assert log.high_watermark == 0
    assert log.take_dirty().empty  # reported once: later rounds are not failed by it


def test_an_offline_log_comes_back_after_the_back_off(h: H, tmp_path: Path) -> None:
    ops, clock = h.FailingOps(), Clock()
    log = _log(tmp_path, ops, clock, FsyncPolicy.ALWAYS, segment_bytes=120)
    h.append(log, [b"a" * 30])
    _flush(log)
    for value in (b"b" * 30, b"c" * 30):  # never acknowledged: their fsync fails
        h.append(log, [value])
    assert log.segment_count > 1
    ops.fail_fsync = True
    with structlog.testing.capture_logs() as logs:
        with pytest.raises(OSError):
            _flush(log)
        assert log.offline
        with pytest.raises(StorageError, match="offline after an fsync failure"):
            h.append(log, [b"refused"])
    assert [e["log_level"] for e in logs if e["event"] == "partition_offline"] == ["error"]
    ops.fail_fsync = False
    clock.now += 0.4
    with structlog.testing.capture_logs() as logs, pytest.raises(StorageError,
                                                                 match="retried in"):
        h.append(log, [b"too-early"])
    clock.now += 0.2
    with structlog.testing.capture_logs() as logs:
        assert h.append(log, [b"d"]) == 1  # b and c were never acknowledged: gone
    assert [e["event"] for e in logs] == ["partition_online"]
    assert logs[0]["unacknowledged_records_dropped"] == 2
    assert not log.offline and log.log_end_offset == 2
    _flush(log)
    assert h.values(h.read_all(log)) == [b"a" * 30, b"d"]
    log.close()
    again = _log(tmp_path, None, clock, FsyncPolicy.ALWAYS)
    assert again.recovery is None
    assert h.values(h.read_all(again)) == [b"a" * 30, b"d"]


def test_the_offline_reason_is_logged_once_at_error_level(h: H, tmp_path: Path) -> None:
    ops = h.FailingOps()
    log = _log(tmp_path, ops, Clock(), FsyncPolicy.ALWAYS)
    h.append(log, [b"a"])
    ops.fail_fsync = True
    with structlog.testing.capture_logs() as logs:
        with pytest.raises(OSError):
            _flush(log)
        for _ in range(3):
            with pytest.raises(StorageError):
                h.append(log, [b"x"])
    offline = [e for e in logs if e["event"] == "partition_offline"]
    assert len(offline) == 1
    assert offline[0]["log_level"] == "error"
    assert "injected failure" in offline[0]["error"]
    assert (offline[0]["topic"], offline[0]["partition"]) == ("t", 0)


@pytest.mark.parametrize("policy", [FsyncPolicy.INTERVAL, FsyncPolicy.NEVER])
def test_acknowledged_records_are_rewritten_and_kept(h: H, tmp_path: Path,
                                                     policy: FsyncPolicy) -> None:
    """Under interval/never what is above the last good fsync was acknowledged and may
    have been read: it is read back, written again and fsynced, not dropped."""

    class Recording(h.FailingOps):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.written: list[bytes] = []

        def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
            self.written.append(bytes(data))
            return super().pwrite(fd, data, offset)

    ops, clock = Recording(), Clock()
    log = _log(tmp_path, ops, clock, policy)
    h.append(log, [b"a"])
    _flush(log)
    h.append(log, [b"b"])
    h.append(log, [b"c"])
    ops.fail_fsync = True
    with pytest.raises(OSError):
        _flush(log)
    ops.fail_fsync = False
    ops.written.clear()
    clock.now += 1
    assert h.append(log, [b"d"]) == 3
    assert b"".join(ops.written).count(b"b") >= 1  # b and c went to the disk again
    assert h.values(h.read_all(log)) == [b"a", b"b", b"c", b"d"]


def test_a_tail_that_does_not_read_back_whole_is_cut_there(h: H, tmp_path: Path) -> None:
    """If the page cache lost what the failed fsync covered, the log is cut at the first
    batch that fails its check, as recovery at start would."""
    ops, clock = h.FailingOps(), Clock()
    log = _log(tmp_path, ops, clock, FsyncPolicy.INTERVAL)
    h.append(log, [b"a"])
    _flush(log)
    h.append(log, [b"b"])
    h.append(log, [b"c"])
    ops.fail_fsync = True
    with pytest.raises(OSError):
        _flush(log)
    ops.fail_fsync = False
    seg = tmp_path / "t-0" / f"{0:020d}.log"
    size = seg.stat().st_size
    fd = os.open(seg, os.O_WRONLY)
    try:
        os.pwrite(fd, b"\xff" * 4, size - 4)  # c's last bytes: its CRC no longer holds
    finally:
        os.close(fd)
    clock.now += 1
    with structlog.testing.capture_logs() as logs:
        assert h.append(log, [b"d"]) == 2
    online = [e for e in logs if e["event"] == "partition_online"]
    assert online[0]["acknowledged_records_lost"] == 1
    assert h.values(h.read_all(log)) == [b"a", b"b", b"d"]


def test_recovery_that_fails_again_waits_another_back_off(h: H, tmp_path: Path) -> None:
    ops, clock = h.FailingOps(), Clock()
    log = _log(tmp_path, ops, clock, FsyncPolicy.ALWAYS)
    h.append(log, [b"a"])
    ops.fail_fsync = True
    with pytest.raises(OSError):
        _flush(log)
    clock.now += 1
    with structlog.testing.capture_logs() as logs, pytest.raises(
            StorageError, match="bringing it back failed"):
        h.append(log, [b"b"])
    assert [e["event"] for e in logs] == ["partition_offline", "partition_recovery_failed"]
    ops.fail_fsync = False
    with pytest.raises(StorageError, match="retried in"):
        h.append(log, [b"b"])
    clock.now += 1
    assert h.append(log, [b"b"]) == 0
