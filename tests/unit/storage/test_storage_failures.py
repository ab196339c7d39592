"""Injected disk failures: StorageError, a consistent log, acknowledged data intact."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest

from groupwire.broker.storage import StorageError
from groupwire.protocol.errors import ErrorCode

H = Any


def on_disk_size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("*.log"))


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
@pytest.mark.parametrize(("nth_write", "partial"), [(0, False), (0, True), (1, False)])
def test_a_failed_append_leaves_the_log_as_it_was(h: H, open_log: Any, tmp_path: Path,
                                                  code: int, nth_write: int,
                                                  partial: bool) -> None:
    """nth_write 0 fails the batch write (maybe after half of it), 1 the index entry."""
    ops = h.FailingOps()
    ops.errno = code
    log = open_log(segment_bytes=10_000, ops=ops)
    for i in range(3):
        h.append(log, [b"ok-%d" % i])
    size = on_disk_size(tmp_path / "t-0")
    ops.fail_pwrite_in, ops.partial_first = nth_write, partial
    with pytest.raises(StorageError) as info:
        h.append(log, [b"lost"])
    assert info.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert (log.log_end_offset, log.high_watermark) == (3, 3)
    assert on_disk_size(tmp_path / "t-0") == size  # truncated back to the last good end
    assert h.values(h.read_all(log)) == [b"ok-0", b"ok-1", b"ok-2"]
    ops.fail_pwrite_in = None
    assert h.append(log, [b"ok-3"]) == 3
    log.close(sync=False)
    again = open_log(segment_bytes=10_000)
    assert again.recovery is None
    assert h.values(h.read_all(again)) == [b"ok-0", b"ok-1", b"ok-2", b"ok-3"]


def test_a_failed_truncate_is_retried_and_recovery_cuts_what_remains(
        h: H, open_log: Any, tmp_path: Path) -> None:
    ops = h.FailingOps()
    log = open_log(segment_bytes=10_000, ops=ops)
    h.append(log, [b"a"])
    ops.fail_pwrite_in, ops.partial_first, ops.fail_truncate = 0, True, True
    with pytest.raises(StorageError):
        h.append(log, [b"half-written"])
    assert h.values(h.read_all(log)) == [b"a"]  # the torn bytes are never served
    log.close(sync=False)
    again = open_log(segment_bytes=10_000)
    assert again.recovery is not None and again.recovery.truncated_bytes > 0
    assert h.values(h.read_all(again)) == [b"a"]
    again.close()
    ops2 = h.FailingOps()
    log = open_log(segment_bytes=10_000, ops=ops2)
    ops2.fail_pwrite_in, ops2.partial_first, ops2.fail_truncate = 0, True, True
    with pytest.raises(StorageError):
        h.append(log, [b"half-written"])
    ops2.fail_pwrite_in, ops2.fail_truncate = None, False
    assert h.append(log, [b"b"]) == 1  # the next append cuts the leftover first
    log.close(sync=False)
    assert h.values(h.read_all(open_log(segment_bytes=10_000))) == [b"a", b"b"]


def test_a_failed_segment_roll_keeps_the_old_segment_active(h: H, open_log: Any,
                                                            tmp_path: Path) -> None:
    ops = h.FailingOps()
    log = open_log(segment_bytes=170, ops=ops)  # two 79-byte batches fit, not three
    h.append(log, [b"x" * 40])
    h.append(log, [b"y" * 40])
    ops.fail_open = True
    with pytest.raises(StorageError):
        h.append(log, [b"z" * 40])  # needs a new segment
    assert log.segment_count == 1 and log.log_end_offset == 2
    assert sorted(p.name for p in (tmp_path / "t-0").iterdir()) == [
        "00000000000000000000.index", "00000000000000000000.log"]
    ops.fail_open = False
    assert h.append(log, [b"z" * 40]) == 2
    assert log.segment_count == 2
    assert h.values(h.read_all(log)) == [b"x" * 40, b"y" * 40, b"z" * 40]


def test_a_failing_disk_at_close_records_no_clean_shutdown(h: H, tmp_path: Path) -> None:
    from groupwire.broker.storage import StorageConfig, TopicStore

    ops = h.FailingOps()
    store = TopicStore(tmp_path / "d", StorageConfig(offsets_partitions=1), file_ops=ops)
    store.create_topic("t", 1)
    h.append(store.log("t", 0), [b"a"])
    ops.fail_fsync = True
    store.close()
    assert not (tmp_path / "d" / "clean_shutdown").exists()
    again = TopicStore(tmp_path / "d", StorageConfig(offsets_partitions=1))
    assert h.values(h.read_all(again.log("t", 0))) == [b"a"]
    again.close()
    assert (tmp_path / "d" / "clean_shutdown").exists()
