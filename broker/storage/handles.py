"""A bounded pool of open file descriptors, shared by every log of the broker.

Partitions are many and descriptors few. A partition's files are opened when used and
closed again, least recently used first, when the pool needs the slot for another file,
so what storage holds is bounded by the pool's capacity, not by the partition count.

- A handle is *pinned* while in use (a write, a read, an fsync on the flusher thread) and
  is never closed while pinned: an fsync always runs on a descriptor of the right file.
- A *durable* file (a segment's log) written since its last fsync is fsynced before its
  descriptor is closed, so evicting it neither loses durability nor a write-back error
  (Linux reports those to descriptors open when they happen; one opened later may never
  hear of it). Clean handles are evicted first; index files never need it.
- An fsync failure sticks to the file (:attr:`PooledFile.error`): a later fsync on a new
  descriptor may succeed although the pages never reached the disk, so nothing is counted
  durable until the log owning the file has recovered (``clear_error``).

Thread-safe: the event loop and the flusher thread share one lock, never held across an
fsync.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from groupwire.broker.storage.fileops import FileOps

MIN_OPEN_FILES: Final = 16
"""Smallest pool: an append pins two files, an fsync one, a read one, with room to spare."""
RESERVED_FILES: Final = 64
"""Descriptors kept out of the default pool whatever the limit: stdio, the listening and
metrics sockets, the data dir lock, metadata writes, directory fsyncs, the event loop."""
_UNLIMITED: Final = 1 << 20
DEFAULT_POOL_FILES: Final = 256
"""Pool of a store opened without a size (tools and tests; the broker always sets one)."""


def default_max_open_files(nofile_limit: int) -> int:
    """The pool size for a process limit: half of what the reserve leaves.

    The other half is for what else scales with load, client connections (one descriptor
    each): at a limit of 1024 that is 480 files and room for about 480 connections; at
    the usual hard limits (524288 and up) both are plentiful.
    """
    return max(MIN_OPEN_FILES, (nofile_limit - RESERVED_FILES) // 2)


def raise_nofile_limit() -> tuple[int, int]:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit; ``(before, now)``.

    The soft limit is often 1024 for historical reasons (``select``), while the hard one
    is what the operator allows; asyncio does not use ``select`` on Linux.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:  # not on Linux; count it as a large finite one
        return _UNLIMITED, _UNLIMITED
    target = hard if hard != resource.RLIM_INFINITY else max(soft, _UNLIMITED)
    if soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):  # e.g. above fs.nr_open or OPEN_MAX: keep it
            return soft, soft
        return soft, target
    return soft, soft


class PooledFile:
    """One file the pool may open and close at will; ``fd`` is -1 while closed."""

    __slots__ = ("closing", "durable", "error", "fd", "on_error", "path", "pins", "retired",
                 "synced", "written")

    def __init__(self, path: Path, durable: bool,
                 on_error: Callable[[OSError], None] | None) -> None:
        self.path = path
        self.durable = durable
        """fsynced before its descriptor is closed (a segment log; not an index)."""
        self.on_error = on_error
        """Called (on whichever thread) when an fsync of this file fails."""
        self.fd = -1
        self.pins = 0
        self.written = 0
        """Generation of writes: bumped after each write through the pool."""
        self.synced = 0
        """The ``written`` generation the last successful fsync covered."""
        self.error: OSError | None = None
        self.closing = False
        self.retired = False

    @property
    def dirty(self) -> bool:
        return self.written > self.synced


class HandlePool:
    def __init__(self, ops: FileOps, capacity: int = DEFAULT_POOL_FILES, *,
                 sync_on_evict: bool = True) -> None:
        if capacity < MIN_OPEN_FILES:
            raise ValueError(f"a file pool needs at least {MIN_OPEN_FILES} files, "
                             f"got {capacity}")
        self.ops = ops
        self.capacity = capacity
        self._sync_on_evict = sync_on_evict
        self._cond = threading.Condition(threading.Lock())
        self._lru: OrderedDict[PooledFile, None] = OrderedDict()
        """Open files, least recently used first (pinned ones included)."""
        self._open = 0
        """Descriptors held: ``_lru`` plus the ones being fsynced before they close."""
        self.evictions = 0
        self.evictions_synced = 0
        """Evictions that had to fsync first: many of them mean the pool is too small."""

    @property
    def open_count(self) -> int:
        return self._open

    # --- registering and forgetting -----------------------------------------------------

    def register(self, path: Path, *, durable: bool, flags: int = 0,
                 on_error: Callable[[OSError], None] | None = None) -> PooledFile:
        """A file of the pool, opened now (read-write, plus ``flags``: ``O_CREAT``,
        ``O_TRUNC``) so that a missing or unwritable file fails here; reopening it later
        uses no extra flags, so it never truncates."""
        f = PooledFile(path, durable, on_error)
        with self._cond:
            self._acquire_locked(f, flags)
            self._unpin_locked(f)
        return f

    def retire(self, f: PooledFile) -> None:
        """Forget ``f`` (its segment is closed or deleted): its descriptor is closed now,
        or by whoever unpins it last. Nothing is fsynced."""
        with self._cond:
            f.retired = True
            if f.pins == 0 and not f.closing:
                self._close_locked(f)

    def drop(self, f: PooledFile) -> None:
        """Close ``f``'s descriptor without an fsync if unused; it reopens on next use."""
        with self._cond:
            if f.fd >= 0 and f.pins == 0 and not f.closing:
                self._close_locked(f)

    def clear_error(self, f: PooledFile) -> None:
        """The owner rewrote and fsynced what the failed fsync covered: trust it again."""
        with self._cond:
            f.error = None
            f.synced = f.written

    def mark_written(self, f: PooledFile) -> None:
        """``f`` holds data this run must fsync though it did not write it (a log
        recovered after a crash: the previous run's pages may still be unsynced)."""
        with self._cond:
            f.written += 1

    # --- using --------------------------------------------------------------------------

    @contextmanager
    def use(self, f: PooledFile, *, write: bool = False) -> Iterator[int]:
        """Pin ``f`` (opening it if needed) and yield its descriptor. With ``write`` the
        file counts as written once the block ends, even if it raised (a partial write
        or a truncate may have changed it)."""
        with self._cond:
            fd = self._acquire_locked(f, 0)
        try:
            yield fd
        finally:
            with self._cond:
                if write:
                    f.written += 1
                self._unpin_locked(f)

    def sync(self, f: PooledFile, target: int) -> None:
        """fsync ``f`` unless a successful fsync already covered write generation
        ``target``; raises the file's sticky error, or the fsync's. A retired file is
        skipped: its log was closed (fsyncing what it must) or deleted meanwhile."""
        with self._cond:
            if f.error is not None:
                raise f.error
            if f.synced >= target or f.retired:
                return
            fd = self._acquire_locked(f, 0)
            generation = f.written
        try:
            self.ops.fsync(fd)
        except OSError as exc:
            with self._cond:
                self._failed_locked(f, exc)
                self._unpin_locked(f)
            raise
        with self._cond:
            if f.error is None and generation > f.synced:
                f.synced = generation
            self._unpin_locked(f)

    def close_all(self) -> None:
        """Close every unpinned descriptor (the store is closing); no fsync."""
        with self._cond:
            for f in [f for f in self._lru if f.pins == 0 and not f.closing]:
                self._close_locked(f)

    # --- internals (lock held) ----------------------------------------------------------

    def _acquire_locked(self, f: PooledFile, create_flags: int) -> int:
        while True:
            if f.retired:
                raise OSError(errno.EBADF, "file is closed", str(f.path))
            if f.fd >= 0 and not f.closing:
                f.pins += 1
                self._lru.move_to_end(f)
                return f.fd
            if f.closing:
                self._cond.wait()
                continue
            if self._open >= self.capacity:
                if not self._evict_one_locked():
                    self._cond.wait()  # every slot pinned: another thread unpins soon
                continue
            try:
                fd = self.ops.open(f.path, os.O_RDWR | create_flags)
            except OSError as exc:
                # descriptors taken outside the pool (sockets): give one back and retry
                if exc.errno in (errno.EMFILE, errno.ENFILE) and self._evict_one_locked():
                    continue
                raise
            f.fd = fd
            f.pins = 1
            self._open += 1
            self._lru[f] = None
            return fd

    def _evict_one_locked(self) -> bool:
        """Close the least recently used unpinned handle, a clean one if there is one
        (fsyncing a dirty durable one first, without the lock); False if none is free."""
        dirty: PooledFile | None = None
        for f in self._lru:
            if f.pins or f.closing:
                continue
            if not self._needs_sync(f):
                self.evictions += 1
                self._close_locked(f)
                return True
            if dirty is None:
                dirty = f
        if dirty is None:
            return False
        f, fd, generation = dirty, dirty.fd, dirty.written
        f.closing = True
        self._cond.release()
        error: OSError | None = None
        try:
            self.ops.fsync(fd)
        except OSError as exc:
            error = exc
        finally:
            self._cond.acquire()
        f.closing = False
        if error is not None:
            self._failed_locked(f, error)
        elif generation > f.synced:
            f.synced = generation
        self.evictions += 1
        self.evictions_synced += 1
        self._close_locked(f)
        self._cond.notify_all()
        return True

    def _needs_sync(self, f: PooledFile) -> bool:
        return self._sync_on_evict and f.durable and f.dirty and f.error is None

    def _failed_locked(self, f: PooledFile, exc: OSError) -> None:
        f.error = exc
        if f.on_error is not None:
            f.on_error(exc)

    def _unpin_locked(self, f: PooledFile) -> None:
        f.pins -= 1
        if f.pins == 0:
            if f.retired:
                self._close_locked(f)
            self._cond.notify_all()

    def _close_locked(self, f: PooledFile) -> None:
        if f.fd < 0:
            return
        fd, f.fd = f.fd, -1
        self._lru.pop(f, None)
        self._open -= 1
        with contextlib.suppress(OSError):  # the descriptor is gone either way
            self.ops.close(fd)
