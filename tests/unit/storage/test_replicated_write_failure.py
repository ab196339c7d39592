"""A failed write (a full disk) takes a replicated log offline, as a failed fsync does,
and says so to its listener, so cluster mode moves the partition's leadership away;
a single broker's log stays online (its next append simply tries again).
``bring_online`` brings an offline log back without an append once the disk does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from groupwire.broker.storage import PartitionLog, StorageConfig, StorageError

H = Any


def _log(tmp_path: Path, ops: Any) -> PartitionLog:
    return PartitionLog(tmp_path / "t-0", StorageConfig(offline_retry_ms=0), topic="t",
                        partition=0, file_ops=ops)


@pytest.mark.parametrize("replicated", [True, False])
def test_a_failed_write_takes_only_a_replicated_log_offline(
        h: H, tmp_path: Path, replicated: bool) -> None:
    ops = h.FailingOps()
    log = _log(tmp_path, ops)
    told: list[str] = []
    log.on_offline = lambda: told.append("offline")
    if replicated:
        log.become_leader(1)
    h.append(log, [b"a"])
    ops.fail_pwrite_in = 0
    with pytest.raises(StorageError):
        h.append(log, [b"refused"])
    assert log.offline is replicated
    assert told == (["offline"] if replicated else [])

    # the disk takes writes again: asked, the log comes back, with what it had
    ops.fail_pwrite_in = None
    assert log.bring_online()
    assert not log.offline
    assert h.append(log, [b"b"]) == 1
    assert log.log_end_offset == 2
    log.close(sync=False)


def test_bring_online_fails_while_the_disk_still_does(h: H, tmp_path: Path) -> None:
    ops = h.FailingOps()
    log = _log(tmp_path, ops)
    log.become_leader(1)
    h.append(log, [b"a"])
    ops.fail_pwrite_in = 0
    with pytest.raises(StorageError):
        h.append(log, [b"refused"])
    ops.fail_pwrite_in = 0  # recovery rewrites the unsynced tail: that fails too
    assert not log.bring_online()
    assert log.offline
    log.close(sync=False)
