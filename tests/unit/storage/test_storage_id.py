"""The data dir's storage identity: written once, fsynced, read back unchanged; a new
(wiped) directory gets a new one; a damaged file stops the broker naming it."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from groupwire.broker.storage.errors import StorageError
from groupwire.broker.storage.fileops import FileOps
from groupwire.broker.storage.storage_id import STORAGE_ID_FILE, load_or_create_storage_id


class CountingOps(FileOps):
    def __init__(self) -> None:
        self.fsyncs = 0
        self.dir_fsyncs = 0

    def fsync(self, fd: int) -> None:
        self.fsyncs += 1
        super().fsync(fd)

    def fsync_dir(self, path: Path) -> None:
        self.dir_fsyncs += 1
        super().fsync_dir(path)


def test_an_id_is_written_once_and_read_back(tmp_path: Path) -> None:
    ops = CountingOps()
    first = load_or_create_storage_id(tmp_path, ops)
    assert uuid.UUID(first)
    assert (ops.fsyncs, ops.dir_fsyncs) == (1, 1)
    assert load_or_create_storage_id(tmp_path, ops) == first
    assert (ops.fsyncs, ops.dir_fsyncs) == (1, 1)  # nothing written the second time


def test_a_wiped_dir_gets_a_new_id(tmp_path: Path) -> None:
    first = load_or_create_storage_id(tmp_path)
    (tmp_path / STORAGE_ID_FILE).unlink()
    assert load_or_create_storage_id(tmp_path) != first


def test_a_damaged_file_is_refused_naming_it(tmp_path: Path) -> None:
    (tmp_path / STORAGE_ID_FILE).write_text("not an id\n")
    with pytest.raises(StorageError, match=STORAGE_ID_FILE):
        load_or_create_storage_id(tmp_path)
