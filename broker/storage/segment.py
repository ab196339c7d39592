"""One segment: a log file of concatenated batches and its offset index.

``<base_offset:020d>.log`` holds batches exactly as produced (base offset patched);
``<base_offset:020d>.index`` holds one 32-byte entry per batch: base offset, file position,
record count and base timestamp (little-endian int64s). The index is kept in memory as
``array('q')`` columns so a fetch finds its byte range by bisection, never by decoding.
The index file only saves a scan after a clean shutdown; recovery rebuilds it otherwise.
"""

from __future__ import annotations

import contextlib
import os
import struct
import sys
from array import array
from bisect import bisect_right
from pathlib import Path
from typing import Final

from groupwire.broker.storage.errors import StorageError
from groupwire.broker.storage.fileops import FileOps
from groupwire.protocol.batches import (
    BatchHeader,
    CorruptBatchError,
    batch_crc,
    iter_batch_spans,
    read_header,
    validate_batch,
)

LOG_SUFFIX: Final = ".log"
INDEX_SUFFIX: Final = ".index"
INDEX_ENTRY: Final = struct.Struct("<qqqq")
_BIG_ENDIAN: Final = sys.byteorder == "big"


def segment_stem(base_offset: int) -> str:
    return f"{base_offset:020d}"


def parse_segment_name(name: str) -> int | None:
    """The base offset in a ``.log`` file name, or None if it is not a segment."""
    stem, dot, suffix = name.partition(".")
    if not dot or "." + suffix != LOG_SUFFIX or len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


class Segment:
    """A segment's files and in-memory index; writes roll back on failure."""

    __slots__ = ("_ops", "base_offset", "bases", "fd", "index_fd", "index_path", "log_path",
                 "max_record_ts", "max_timestamp", "next_offset", "positions", "size",
                 "tail_dirty", "timestamps", "touched", "verified_end")

    def __init__(self, directory: Path, base_offset: int, ops: FileOps, *, create: bool) -> None:
        self._ops = ops
        self.base_offset = base_offset
        stem = segment_stem(base_offset)
        self.log_path = directory / (stem + LOG_SUFFIX)
        self.index_path = directory / (stem + INDEX_SUFFIX)
        flags = os.O_RDWR | (os.O_CREAT | os.O_TRUNC if create else 0)
        self.fd = ops.open(self.log_path, flags)
        try:
            self.index_fd: int | None = ops.open(self.index_path, os.O_RDWR | os.O_CREAT
                                                 | (os.O_TRUNC if create else 0))
        except OSError:
            ops.close(self.fd)
            raise
        self.size = 0
        self.next_offset = base_offset
        self.bases = array("q")
        self.positions = array("q")
        self.timestamps = array("q")
        self.max_timestamp = -1
        self.max_record_ts: int | None = None
        """Largest record timestamp, cached once a sealed segment was decoded."""
        self.tail_dirty = False
        self.touched = create
        """Written during this run: fsynced before a clean shutdown is recorded."""
        self.verified_end = 0
        """File position up to which every batch is known good (checked since opening or
        written by this run): reads below it skip the CRC check."""

    # --- opening ------------------------------------------------------------------------

    def load_index(self) -> bool:
        """Trust the index file if it agrees with the log file; False means scan instead."""
        ops = self._ops
        assert self.index_fd is not None
        log_size = ops.size(self.fd)
        raw = ops.pread(self.index_fd, ops.size(self.index_fd), 0)
        if len(raw) % INDEX_ENTRY.size:
            return False
        if not raw:
            return log_size == 0
        cols = array("q")
        cols.frombytes(raw)
        if _BIG_ENDIAN:
            cols.byteswap()
        bases, positions, counts, stamps = cols[0::4], cols[1::4], cols[2::4], cols[3::4]
        if bases[0] != self.base_offset or positions[0] != 0 or positions[-1] >= log_size:
            return False
        for i in range(1, len(bases)):
            if bases[i] != bases[i - 1] + counts[i - 1] or positions[i] <= positions[i - 1]:
                return False
        try:
            last = validate_batch(ops.read_exact(self.fd, log_size - positions[-1],
                                                 positions[-1]))
        except CorruptBatchError:
            return False
        if last.base_offset != bases[-1] or last.record_count != counts[-1]:
            return False
        self.bases, self.positions, self.timestamps = bases, positions, stamps
        self.size = log_size
        self.next_offset = bases[-1] + counts[-1]
        self.max_timestamp = max(stamps)
        return True

    def recover(self) -> tuple[int, str] | None:
        """Scan and verify every batch, truncate at the first bad one, rewrite the index.

        Returns ``(bytes truncated, why)`` when anything was cut, else None.
        """
        ops = self._ops
        file_size = ops.size(self.fd)
        data = ops.read_exact(self.fd, file_size, 0) if file_size else b""
        self._reset()
        expected = self.base_offset
        good_end = 0
        reason: str | None = None
        try:
            for header, start, end in iter_batch_spans(data):
                if header.base_offset != expected:
                    reason = (f"batch at byte {start} has base offset {header.base_offset}, "
                              f"expected {expected}")
                    break
                self._add(header, start, end)
                expected = header.next_offset
                good_end = end
        except CorruptBatchError as exc:
            reason = f"{exc.message} (batch at byte {exc.position})"
        self.touched = True
        self.verified_end = good_end
        if good_end < file_size:
            ops.truncate(self.fd, good_end)
        self._rewrite_index()
        if good_end < file_size:
            return file_size - good_end, reason or "trailing bytes"
        return None

    def _reset(self) -> None:
        self.size = 0
        self.next_offset = self.base_offset
        self.bases, self.positions, self.timestamps = array("q"), array("q"), array("q")
        self.max_timestamp = -1
        self.max_record_ts = None

    def _add(self, header: BatchHeader, start: int, end: int) -> None:
        self.bases.append(header.base_offset)
        self.positions.append(start)
        self.timestamps.append(header.base_timestamp_ms)
        self.size = end
        self.next_offset = header.next_offset
        if header.base_timestamp_ms > self.max_timestamp:
            self.max_timestamp = header.base_timestamp_ms

    def _rewrite_index(self) -> None:
        assert self.index_fd is not None
        following = [*self.bases[1:], self.next_offset] if self.bases else []
        counts = [b - a for a, b in zip(self.bases, following, strict=True)]
        cols = array("q", [v for row in zip(self.bases, self.positions, counts,
                                            self.timestamps, strict=True) for v in row])
        if _BIG_ENDIAN:
            cols.byteswap()
        self._ops.truncate(self.index_fd, 0)
        self._ops.write_all(self.index_fd, cols.tobytes(), 0)

    # --- writing ------------------------------------------------------------------------

    def append(self, data: bytes, header: BatchHeader) -> None:
        """Write one batch (base offset already patched) and its index entry, or nothing."""
        ops = self._ops
        assert self.index_fd is not None, "append to a sealed segment"
        pos = self.size
        index_pos = len(self.bases) * INDEX_ENTRY.size
        self.touched = True
        if self.tail_dirty:
            self.truncate_tail()
        entry = INDEX_ENTRY.pack(header.base_offset, pos, header.record_count,
                                 header.base_timestamp_ms)
        try:
            ops.write_all(self.fd, data, pos)
            ops.write_all(self.index_fd, entry, index_pos)
        except OSError as exc:
            self.tail_dirty = True
            self.truncate_tail()
            raise StorageError(f"write to {self.log_path.name} failed: {exc}") from exc
        self._add(header, pos, pos + len(data))
        self.max_record_ts = None
        if self.verified_end == pos:
            self.verified_end = self.size

    def truncate_tail(self) -> bool:
        """Cut the files back to what the index in memory holds; False if that failed."""
        try:
            self._ops.truncate(self.fd, self.size)
            if self.index_fd is not None:
                self._ops.truncate(self.index_fd, len(self.bases) * INDEX_ENTRY.size)
        except OSError:
            return False
        self.tail_dirty = False
        return True

    def seal(self) -> None:
        """No more appends: release the index file (its entries stay in memory)."""
        if self.index_fd is not None:
            self._ops.close(self.index_fd)
            self.index_fd = None

    def sync_all(self) -> None:
        """fsync log and index (before recording a clean shutdown)."""
        self._ops.fsync(self.fd)
        if self.index_fd is not None:
            self._ops.fsync(self.index_fd)
        else:
            fd = self._ops.open(self.index_path, os.O_RDONLY)
            try:
                self._ops.fsync(fd)
            finally:
                self._ops.close(fd)

    def close(self) -> None:
        self.seal()
        if self.fd >= 0:
            self._ops.close(self.fd)
            self.fd = -1

    def delete(self) -> None:
        self.close()
        for path in (self.log_path, self.index_path):
            with contextlib.suppress(FileNotFoundError):
                self._ops.unlink(path)

    # --- reading ------------------------------------------------------------------------

    @property
    def entry_count(self) -> int:
        return len(self.bases)

    def entry_for(self, offset: int) -> int:
        """Index of the batch holding ``offset`` (which must be in this segment)."""
        return bisect_right(self.bases, offset) - 1

    def end_of(self, i: int) -> int:
        """File position just past batch ``i``."""
        return self.positions[i + 1] if i + 1 < len(self.positions) else self.size

    def read(self, start: int, end: int) -> bytes:
        try:
            return self._ops.read_exact(self.fd, end - start, start)
        except OSError as exc:
            raise StorageError(f"read from {self.log_path.name} failed: {exc}") from exc

    def first_bad_batch(self, data: bytes, first: int, stop: int) -> int | None:
        """Check batches ``first``..``stop - 1`` (``data`` holds exactly them) against their
        CRC and index entry; the index of the first bad one, or None.

        A log opened after a clean shutdown trusts its index and is not rescanned, so a disk
        that rotted a byte since is caught here, before the batch leaves the broker. Checked
        batches are remembered, so a steady consumer pays for each batch once.
        """
        base = self.positions[first]
        if base + len(data) <= self.verified_end:
            return None
        view = memoryview(data)
        for i in range(first, stop):
            start, end = self.positions[i] - base, self.end_of(i) - base
            if self.positions[i] + (end - start) <= self.verified_end:
                continue
            try:
                header = read_header(view, start)
            except CorruptBatchError:
                return i
            if header.base_offset != self.bases[i] or batch_crc(view, start, end) != header.crc:
                return i
            if self.verified_end == self.positions[i]:
                self.verified_end = self.positions[i] + (end - start)
        return None
