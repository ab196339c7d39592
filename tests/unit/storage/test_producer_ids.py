"""Producer ids: unique across restarts of the broker, because each block is written down
(atomically, fsynced) before its first id goes out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from groupwire.broker.storage import FileOps, StorageError
from groupwire.broker.storage.producer_ids import (
    MAX_PRODUCER_ID,
    PRODUCER_IDS_FILE,
    LocalProducerIds,
)


class RecordingOps(FileOps):
    """Records every call that makes the reservation durable; fails on demand."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.fail = False

    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        if self.fail:
            raise OSError(28, "No space left on device")
        return super().open(path, flags, mode)

    def fsync(self, fd: int) -> None:
        self.calls.append("fsync")
        super().fsync(fd)

    def replace(self, src: Path, dst: Path) -> None:
        self.calls.append("replace")
        super().replace(src, dst)

    def fsync_dir(self, path: Path) -> None:
        self.calls.append("fsync_dir")
        super().fsync_dir(path)


def test_ids_count_up_and_each_block_is_written_first(tmp_path: Path) -> None:
    ops = RecordingOps()
    ids = LocalProducerIds(tmp_path, block_size=3, file_ops=ops)
    assert not (tmp_path / PRODUCER_IDS_FILE).exists()  # nothing reserved before use
    assert ids.next_id() == 0
    assert ops.calls == ["fsync", "replace", "fsync_dir"]
    assert json.loads((tmp_path / PRODUCER_IDS_FILE).read_bytes())["reserved_to"] == 3
    assert [ids.next_id(), ids.next_id()] == [1, 2]
    assert len(ops.calls) == 3  # the block lasts: no more writes
    assert ids.next_id() == 3
    assert ids.reserved_to == 6 and len(ops.calls) == 6


def test_a_restart_never_hands_out_an_id_again(tmp_path: Path) -> None:
    seen: list[int] = []
    for used in (2, 0, 5, 1):  # each run uses some ids, then the broker stops (or dies)
        ids = LocalProducerIds(tmp_path, block_size=4)
        seen += [ids.next_id() for _ in range(used)]
    ids = LocalProducerIds(tmp_path, block_size=4)
    seen.append(ids.next_id())
    assert len(set(seen)) == len(seen)
    assert seen == [0, 1, 4, 5, 6, 7, 8, 12, 16]


def test_a_block_that_cannot_be_written_hands_out_nothing(tmp_path: Path) -> None:
    ops = RecordingOps()
    ids = LocalProducerIds(tmp_path, block_size=2, file_ops=ops)
    ops.fail = True
    assert ids.next_id() is None
    assert not (tmp_path / PRODUCER_IDS_FILE).exists()
    ops.fail = False
    assert ids.next_id() == 0  # tried again on the next call
    assert LocalProducerIds(tmp_path).next_id() == 2


def test_an_unreadable_file_stops_the_broker(tmp_path: Path) -> None:
    (tmp_path / PRODUCER_IDS_FILE).write_bytes(b'{"format": 1, "reserved_to": "x"}')
    with pytest.raises(StorageError, match="producer ids"):
        LocalProducerIds(tmp_path)
    (tmp_path / PRODUCER_IDS_FILE).write_bytes(b"garbage")
    with pytest.raises(StorageError):
        LocalProducerIds(tmp_path)


def test_a_file_that_cannot_be_read_stops_the_broker(tmp_path: Path) -> None:
    (tmp_path / PRODUCER_IDS_FILE).mkdir()  # reading it fails, even as root
    with pytest.raises(StorageError, match="cannot read"):
        LocalProducerIds(tmp_path)


def test_ids_stop_at_the_int64_limit(tmp_path: Path) -> None:
    (tmp_path / PRODUCER_IDS_FILE).write_bytes(
        json.dumps({"format": 1, "reserved_to": MAX_PRODUCER_ID - 1}).encode())
    ids = LocalProducerIds(tmp_path, block_size=1000)
    assert [ids.next_id(), ids.next_id()] == [MAX_PRODUCER_ID - 1, MAX_PRODUCER_ID]
    assert ids.next_id() is None
