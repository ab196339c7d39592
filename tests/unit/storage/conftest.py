"""Helpers for the storage tests: building batches, reading a whole log, failing disks.

Shared as fixtures (``h``, ``open_log``) rather than imports, so they work whatever import
mode pytest runs in.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from groupwire.broker.storage import FileOps, FsyncPolicy, PartitionLog, StorageConfig
from groupwire.protocol.batches import (
    BatchRecord,
    DecodedRecord,
    decode_records,
    encode_batch,
    validate_batch,
)


def make_batch(values: Sequence[bytes], ts: int = 1_000) -> bytes:
    return encode_batch([BatchRecord(value=v, timestamp_ms=ts + i) for i, v in enumerate(values)])


def append(log: PartitionLog, values: Sequence[bytes], ts: int = 1_000) -> int:
    batch = make_batch(values, ts)
    return log.append(batch, validate_batch(batch))


def read_all(log: PartitionLog, start: int | None = None) -> list[DecodedRecord]:
    """Every record below the high watermark, fetching as a consumer would."""
    offset = log.log_start_offset if start is None else start
    out: list[DecodedRecord] = []
    while offset < log.high_watermark:
        records = decode_records(log.read(offset, 1 << 20, True), offset)
        assert records, "a read below the high watermark returned nothing"
        out += records
        offset = records[-1].offset + 1
    return out


def values(records: Sequence[DecodedRecord]) -> list[bytes | None]:
    return [r.value for r in records]


class FailingOps(FileOps):
    """A disk that fails on demand: the n-th following pwrite, fsync, truncate or open."""

    def __init__(self) -> None:
        self.fail_pwrite_in: int | None = None
        self.partial_first = False
        self.fail_truncate = False
        self.fail_fsync = False
        self.fail_open = False
        self.errno = errno.ENOSPC

    def _error(self) -> OSError:
        return OSError(self.errno, "injected failure")

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        if self.fail_pwrite_in is not None:
            if self.fail_pwrite_in == 0:
                if self.partial_first:
                    self.partial_first = False
                    return super().pwrite(fd, memoryview(data)[: max(1, len(data) // 2)],
                                          offset)
                raise self._error()
            self.fail_pwrite_in -= 1
        return super().pwrite(fd, data, offset)

    def truncate(self, fd: int, size: int) -> None:
        if self.fail_truncate:
            raise self._error()
        super().truncate(fd, size)

    def fsync(self, fd: int) -> None:
        if self.fail_fsync:
            raise self._error()
        super().fsync(fd)

    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        if self.fail_open:
            raise self._error()
        return super().open(path, flags, mode)


LogFactory = Callable[..., PartitionLog]


class Helpers:
    make_batch = staticmethod(make_batch)
    append = staticmethod(append)
    read_all = staticmethod(read_all)
    values = staticmethod(values)
    FailingOps = FailingOps


@pytest.fixture
def h() -> type[Helpers]:
    return Helpers


@pytest.fixture
def open_log(tmp_path: Path) -> LogFactory:
    """Open (or reopen) the partition log under tmp_path with small segments."""

    def factory(policy: FsyncPolicy = FsyncPolicy.NEVER, segment_bytes: int = 256,
                ops: FileOps | None = None, trust_index: bool = False,
                directory: Path | None = None, replica_files: bool = True) -> PartitionLog:
        config = StorageConfig(fsync=policy, segment_bytes=segment_bytes,
                               replica_files=replica_files)
        return PartitionLog(directory or tmp_path / "t-0", config, topic="t", partition=0,
                            file_ops=ops, trust_index=trust_index)

    return factory
