"""One segment: a log file of concatenated batches and its offset index.

``<base_offset:020d>.log`` holds batches exactly as produced (base offset patched), of
either format, msgpack or Kafka's (``protocol.stored_batches``), in any mix;
``<base_offset:020d>.index`` holds one 32-byte entry per batch: base offset, file position,
offset count (the record count of every batch a producer writes) and timestamp (a msgpack
batch's base timestamp, a Kafka batch's max timestamp), little-endian int64s. The index
is kept in memory as ``array('q')`` columns so a fetch finds its byte range by bisection,
never by decoding.
The index file only saves a scan after a clean shutdown; recovery rebuilds it otherwise.
Both files are pooled (:class:`~broker.storage.handles.PooledFile`): open only while the pool
has room for them, reopened on use.
"""

from __future__ import annotations

import contextlib
import os
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from groupwire.broker.storage.errors import StorageError
from groupwire.broker.storage.fileops import FileOps
from groupwire.broker.storage.handles import HandlePool, PooledFile
from groupwire.protocol.batches import CorruptBatchError
from groupwire.protocol.stored_batches import (
    StoredHeader,
    crc_matches,
    iter_any_batch_spans,
    read_any_header,
    validate_any_batch,
)

LOG_SUFFIX: Final = ".log"
INDEX_SUFFIX: Final = ".index"
DELETED_SUFFIX: Final = ".deleted"
"""A segment file renamed ``<name>.deleted``: retention dropped it; recovery removes it,
never loads it (Kafka's way: the rename marks the deletion, the unlink may come later)."""
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

    __slots__ = ("_ops", "_pool", "base_offset", "bases", "index_file", "index_path", "log_file",
                 "log_path", "max_record_ts", "max_timestamp", "next_offset", "positions",
                 "sealed", "size", "stale_tail", "tail_dirty", "timestamps", "touched",
                 "verified_end")

    def __init__(self, directory: Path, base_offset: int, pool: HandlePool, *, create: bool,
                 on_error: Callable[[OSError], None] | None = None) -> None:
        """``on_error``: an fsync of the log file failed (maybe on another thread)."""
        self._pool = pool
        self._ops = pool.ops
        self.base_offset = base_offset
        stem = segment_stem(base_offset)
        self.log_path = directory / (stem + LOG_SUFFIX)
        self.index_path = directory / (stem + INDEX_SUFFIX)
        truncate = os.O_CREAT | os.O_TRUNC if create else 0
        self.log_file: PooledFile = pool.register(self.log_path, durable=True, flags=truncate,
                                                  on_error=on_error)
        try:
            self.index_file: PooledFile = pool.register(
                self.index_path, durable=False, flags=os.O_CREAT | truncate)
        except OSError:
            pool.retire(self.log_file)
            raise
        if create:
            pool.mark_written(self.log_file)  # a new (or emptied) file: fsync it once
        self.sealed = False
        self.size = 0
        self.next_offset = base_offset
        self.bases = array("q")
        self.positions = array("q")
        self.timestamps = array("q")
        self.max_timestamp = -1
        self.max_record_ts: int | None = None
        """Largest record timestamp, cached once a sealed segment was decoded."""
        self.tail_dirty = False
        """The log file may hold bytes past ``size`` (a write failed or is under way):
        cut before the next write and before a clean shutdown."""
        self.stale_tail = False
        """Bytes of an earlier failed write stayed past ``size`` when a write began."""
        self.touched = create
        """Written during this run: fsynced before a clean shutdown is recorded."""
        self.verified_end = 0
        """File position up to which every batch is known good (checked since opening or
        written by this run): reads below it skip the CRC check."""

    # --- opening ------------------------------------------------------------------------

    def load_index(self) -> bool:
        """Trust the index file if it agrees with the log file; False means scan instead."""
        ops, pool = self._ops, self._pool
        with pool.use(self.log_file) as fd:
            log_size = ops.size(fd)
        with pool.use(self.index_file) as index_fd:
            raw = ops.pread(index_fd, ops.size(index_fd), 0)
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
            with pool.use(self.log_file) as fd:
                tail = ops.read_exact(fd, log_size - positions[-1], positions[-1])
            last = validate_any_batch(tail)
        except CorruptBatchError:
            return False
        if last.base_offset != bases[-1] or last.offset_count != counts[-1]:
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
        ops, pool = self._ops, self._pool
        with pool.use(self.log_file) as fd:
            file_size = ops.size(fd)
            data = ops.read_exact(fd, file_size, 0) if file_size else b""
        self._reset()
        expected = self.base_offset
        good_end = 0
        reason: str | None = None
        try:
            for header, start, end in iter_any_batch_spans(data):
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
        pool.mark_written(self.log_file)  # the crashed run's pages may be unsynced
        if good_end < file_size:
            with pool.use(self.log_file, write=True) as fd:
                ops.truncate(fd, good_end)
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

    def _add(self, header: StoredHeader, start: int, end: int) -> None:
        self.bases.append(header.base_offset)
        self.positions.append(start)
        self.timestamps.append(header.timestamp_ms)
        self.size = end
        self.next_offset = header.next_offset
        if header.timestamp_ms > self.max_timestamp:
            self.max_timestamp = header.timestamp_ms

    def _rewrite_index(self) -> None:
        following = [*self.bases[1:], self.next_offset] if self.bases else []
        counts = [b - a for a, b in zip(self.bases, following, strict=True)]
        cols = array("q", [v for row in zip(self.bases, self.positions, counts,
                                            self.timestamps, strict=True) for v in row])
        if _BIG_ENDIAN:
            cols.byteswap()
        with self._pool.use(self.index_file, write=True) as index_fd:
            self._ops.truncate(index_fd, 0)
            self._ops.write_all(index_fd, cols.tobytes(), 0)

    # --- writing ------------------------------------------------------------------------

    def append(self, data: bytes, header: StoredHeader) -> None:
        """Write one batch (base offset already patched) and its index entry, or nothing."""
        pos = self.begin_write()
        try:
            self.write_piece(data, pos)
            self.finish_write(header, pos, pos + len(data))
        except StorageError:
            self.abandon_write()
            raise

    # A batch may also be written in pieces, between which others use the event loop
    # (``PartitionLog.append_steps``): ``begin_write``, ``write_piece`` for each piece,
    # then ``finish_write``, or ``abandon_write`` if it fails or is given up. Until
    # ``finish_write`` nothing of the batch is in the index, so no read reaches it.

    def begin_write(self) -> int:
        """Start writing a batch at the end; returns its file position."""
        assert not self.sealed, "append to a sealed segment"
        self.touched = True
        if self.tail_dirty:
            self.truncate_tail()
        self.stale_tail = self.tail_dirty  # the cut failed: bytes past size stay
        self.tail_dirty = True  # a clean shutdown now cuts what this write leaves
        return self.size

    def write_piece(self, data: bytes | memoryview, at: int) -> None:
        try:
            with self._pool.use(self.log_file, write=True) as fd:
                self._ops.write_all(fd, data, at)
        except OSError as exc:
            raise StorageError(f"write to {self.log_path.name} failed: {exc}") from exc

    def finish_write(self, header: StoredHeader, pos: int, end: int) -> None:
        """Write the index entry of the batch at ``pos``..``end``; only then does it count."""
        entry = INDEX_ENTRY.pack(header.base_offset, pos, header.offset_count,
                                 header.timestamp_ms)
        try:
            with self._pool.use(self.index_file, write=True) as index_fd:
                self._ops.write_all(index_fd, entry, len(self.bases) * INDEX_ENTRY.size)
        except OSError as exc:
            raise StorageError(f"write to {self.log_path.name} failed: {exc}") from exc
        self._add(header, pos, end)
        self.max_record_ts = None
        if self.verified_end == pos:
            self.verified_end = self.size
        self.tail_dirty = self.stale_tail

    def abandon_write(self) -> bool:
        """Cut what a begun write left past the end; False if that failed (the next
        write, or a clean shutdown, tries again)."""
        self.tail_dirty = True
        return self.truncate_tail()

    def truncate_tail(self) -> bool:
        """Cut the files back to what the index in memory holds; False if that failed."""
        try:
            with self._pool.use(self.log_file, write=True) as fd:
                self._ops.truncate(fd, self.size)
            if not self.sealed:
                with self._pool.use(self.index_file, write=True) as index_fd:
                    self._ops.truncate(index_fd, len(self.bases) * INDEX_ENTRY.size)
        except OSError:
            return False
        self.tail_dirty = False
        return True

    # --- coming back after a failed fsync -------------------------------------------------

    def truncate_from(self, offset: int) -> None:
        """Cut every batch at or above ``offset`` (a batch boundary, or the end); the
        segment becomes the active one again."""
        i = bisect_left(self.bases, offset)
        end = self.positions[i] if i < len(self.bases) else self.size
        with self._pool.use(self.log_file, write=True) as fd:
            self._ops.truncate(fd, end)
        del self.bases[i:], self.positions[i:], self.timestamps[i:]
        self.size = end
        self.next_offset = offset
        self.max_timestamp = max(self.timestamps, default=-1)
        self.max_record_ts = None
        self.verified_end = min(self.verified_end, end)
        self.tail_dirty = False
        self.sealed = False
        self._rewrite_index()

    def rewrite_tail(self, first: int) -> bool:
        """Make batches ``first``.. durable again after a failed fsync; False if one of
        them was bad and the segment was cut there.

        A failed write-back may leave pages marked clean in the page cache although the
        disk never got them, so a second fsync would succeed without writing anything.
        The batches are read back, checked (CRC, offsets, positions), written again so
        their pages are dirty, and fsynced; the segment is cut at the first bad one.
        """
        ops, pool = self._ops, self._pool
        n = len(self.bases)
        pos = self.positions[first] if first < n else self.size
        with pool.use(self.log_file, write=True) as fd:
            data = ops.read_exact(fd, self.size - pos, pos) if pos < self.size else b""
            kept, good_end = first, pos
            try:
                for header, start, end in iter_any_batch_spans(data):
                    if (kept >= n or header.base_offset != self.bases[kept]
                            or pos + start != self.positions[kept]):
                        break
                    kept += 1
                    good_end = pos + end
            except CorruptBatchError:
                pass
            if good_end > pos:
                ops.write_all(fd, memoryview(data)[:good_end - pos], pos)
            whole = kept == n and good_end == self.size
            if not whole:
                ops.truncate(fd, good_end)
                next_offset = self.bases[kept] if kept < n else self.next_offset
                del self.bases[kept:], self.positions[kept:], self.timestamps[kept:]
                self.size, self.next_offset = good_end, next_offset
                self.max_timestamp = max(self.timestamps, default=-1)
                self.max_record_ts = None
            ops.fsync(fd)
        self._rewrite_index()  # also if an earlier attempt left it half written
        if self.verified_end >= pos:
            self.verified_end = self.size
        self.tail_dirty = False
        pool.clear_error(self.log_file)
        return whole

    def seal(self) -> None:
        """No more appends: the index file is not needed until shutdown (its entries stay
        in memory), so its descriptor goes back to the pool now."""
        self.sealed = True
        self._pool.drop(self.index_file)

    def sync_all(self) -> None:
        """fsync log and index (before recording a clean shutdown)."""
        if self.log_file.error is not None:
            raise self.log_file.error
        for f in (self.log_file, self.index_file):
            with self._pool.use(f) as fd:
                self._ops.fsync(fd)

    def close(self) -> None:
        self.sealed = True
        self._pool.retire(self.log_file)
        self._pool.retire(self.index_file)

    def discard(self) -> Trash:
        """Close the segment, leaving its files for :func:`purge_segment` (off the loop)."""
        self.close()
        return Trash(self.log_path, self.index_path)

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
            with self._pool.use(self.log_file) as fd:
                return self._ops.read_exact(fd, end - start, start)
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
                header = read_any_header(view, start)
            except CorruptBatchError:
                return i
            if (header.base_offset != self.bases[i]
                    or not crc_matches(view, start, end, header)):
                return i
            if self.verified_end == self.positions[i]:
                self.verified_end = self.positions[i] + (end - start)
        return None


@dataclass(frozen=True, slots=True)
class Trash:
    """A dropped segment's files, to be removed off the event loop."""

    log_path: Path
    index_path: Path


def purge_segment(ops: FileOps, trash: Trash) -> None:
    """Any thread: rename the files ``.deleted`` (the log first: from then on recovery
    never loads the segment), fsync the directory so that mark is durable, then unlink
    them. Raises ``OSError``; calling it again resumes (files already gone are fine)."""
    marked = []
    for path in (trash.log_path, trash.index_path):
        gone = path.with_name(path.name + DELETED_SUFFIX)
        with contextlib.suppress(FileNotFoundError):  # marked before, or its directory went
            ops.replace(path, gone)
        marked.append(gone)
    with contextlib.suppress(FileNotFoundError):  # the partition was deleted meanwhile
        ops.fsync_dir(trash.log_path.parent)
    for gone in marked:
        with contextlib.suppress(FileNotFoundError):
            ops.unlink(gone)
