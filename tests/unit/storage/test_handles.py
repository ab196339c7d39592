"""The descriptor pool on a fake disk: bounded, least recently used first, never closing
a pinned handle, never losing an fsync (nor its failure) to an eviction."""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pytest

from groupwire.broker.storage.fileops import FileOps
from groupwire.broker.storage.handles import (
    MIN_OPEN_FILES,
    HandlePool,
    PooledFile,
    default_max_open_files,
)

CAP = MIN_OPEN_FILES


class FakeDisk(FileOps):
    """Descriptors as numbers; records every call, fails or blocks on demand."""

    def __init__(self) -> None:
        self.next_fd = 100
        self.open_fds: dict[int, Path] = {}
        self.calls: list[tuple[str, str]] = []
        self.most_open = 0
        self.fail_fsync: set[Path] = set()
        self.emfile_once = False
        self.fsync_entered = threading.Event()
        self.fsync_release: threading.Event | None = None

    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        if self.emfile_once:
            self.emfile_once = False
            raise OSError(errno.EMFILE, "Too many open files")
        fd, self.next_fd = self.next_fd, self.next_fd + 1
        self.open_fds[fd] = path
        self.most_open = max(self.most_open, len(self.open_fds))
        self.calls.append(("open", path.name))
        return fd

    def close(self, fd: int) -> None:
        self.calls.append(("close", self.open_fds.pop(fd).name))

    def fsync(self, fd: int) -> None:
        path = self.open_fds[fd]  # KeyError: an fsync of a closed descriptor
        self.calls.append(("fsync", path.name))
        if self.fsync_release is not None:
            self.fsync_entered.set()
            self.fsync_release.wait(10)
        assert fd in self.open_fds, "descriptor closed during its fsync"
        if path in self.fail_fsync:
            raise OSError(errno.EIO, "injected fsync failure")


def files(pool: HandlePool, n: int, *, durable: bool = True, prefix: str = "f",
          ) -> list[PooledFile]:
    return [pool.register(Path(f"/d/{prefix}{i}"), durable=durable) for i in range(n)]


def write(pool: HandlePool, f: PooledFile) -> None:
    with pool.use(f, write=True):
        pass


def test_default_pool_is_half_of_what_the_reserve_leaves() -> None:
    assert default_max_open_files(1024) == 480
    assert default_max_open_files(256) == 96
    assert default_max_open_files(70) == MIN_OPEN_FILES


def test_descriptors_stay_within_capacity_and_the_least_recently_used_goes() -> None:
    disk = FakeDisk()
    pool = HandlePool(disk, CAP)
    fs = files(pool, CAP)
    with pool.use(fs[0]):  # fs[0] is now the most recently used
        pass
    extra = files(pool, 1, prefix="x")[0]
    assert fs[1].fd == -1 and fs[0].fd >= 0 and extra.fd >= 0
    for f in [*fs, extra] * 3:
        with pool.use(f) as fd:
            assert disk.open_fds[fd] == f.path
    assert disk.most_open == CAP == pool.open_count


def test_a_clean_handle_is_evicted_before_a_dirty_one_which_is_fsynced_first() -> None:
    disk = FakeDisk()
    pool = HandlePool(disk, CAP)
    fs = files(pool, CAP)
    write(pool, fs[0])  # oldest, but dirty
    x = files(pool, 1, prefix="x")[0]
    assert fs[0].fd >= 0 and fs[1].fd == -1  # the clean one went
    for f in [*fs[2:], x]:
        write(pool, f)
    files(pool, 1, prefix="y")  # only dirty ones left to evict: fs[0], oldest
    assert fs[0].fd == -1 and not fs[0].dirty
    i = disk.calls.index(("fsync", "f0"))
    assert disk.calls[i + 1] == ("close", "f0")
    assert pool.evictions_synced == 1
    pool.sync(fs[0], fs[0].written)  # already covered: no reopen, no second fsync
    assert disk.calls.count(("fsync", "f0")) == 1 and disk.calls.count(("open", "f0")) == 1


def test_index_files_and_never_policy_close_without_fsync() -> None:
    disk = FakeDisk()
    pool = HandlePool(disk, CAP)
    index = files(pool, CAP, durable=False)
    for f in index:
        write(pool, f)
    files(pool, 1, prefix="x")
    never = HandlePool(disk, CAP, sync_on_evict=False)
    logs = files(never, CAP, prefix="n")
    for f in logs:
        write(never, f)
    files(never, 1, prefix="y")
    assert not any(call == "fsync" for call, _ in disk.calls)


def test_a_handle_pinned_by_an_fsync_on_another_thread_is_never_closed() -> None:
    """The flusher fsyncs a segment while the loop needs every other slot: the pool
    evicts the others, and the segment's fsync runs on its own open descriptor."""
    disk = FakeDisk()
    pool = HandlePool(disk, CAP)
    fs = files(pool, CAP)
    write(pool, fs[0])
    disk.fsync_release = threading.Event()
    errors: list[BaseException] = []

    def flusher() -> None:
        try:
            pool.sync(fs[0], fs[0].written)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    thread = threading.Thread(target=flusher)
    thread.start()
    assert disk.fsync_entered.wait(10)
    more = files(pool, 2 * CAP, prefix="x")  # every unpinned slot turns over twice
    write(pool, fs[0])  # written meanwhile: not covered by the fsync in flight
    assert fs[0].fd >= 0 and ("close", "f0") not in disk.calls
    assert all(f.fd == -1 for f in more[:CAP])
    disk.fsync_release.set()
    thread.join(10)
    assert errors == []
    assert fs[0].dirty  # the second write needs another fsync
    disk.fsync_release = None
    pool.sync(fs[0], fs[0].written)
    assert not fs[0].dirty


def test_an_eviction_fsync_failure_sticks_to_the_file() -> None:
    disk = FakeDisk()
    pool = HandlePool(disk, CAP)
    seen: list[OSError] = []
    f = pool.register(Path("/d/failing"), durable=True, on_error=seen.append)
    others = files(pool, CAP - 1)
    write(pool, f)
    for g in others:
        write(pool, g)
    disk.fail_fsync.add(f.path)
    files(pool, 1, prefix="x")  # evicts f, whose fsync fails
    assert f.fd == -1 and len(seen) == 1 and f.error is seen[0]
    disk.fail_fsync.clear()  # a new descriptor's fsync would succeed: still refused
    with pytest.raises(OSError) as info:
        pool.sync(f, f.written)
    assert info.value is seen[0]
    pool.clear_error(f)  # its owner rewrote and fsynced the data
    pool.sync(f, f.written)


def test_emfile_gives_back_a_descriptor_and_retries() -> None:
    disk = FakeDisk()
    pool = HandlePool(disk, CAP)
    fs = files(pool, 4)
    disk.emfile_once = True
    x = files(pool, 1, prefix="x")[0]
    assert x.fd >= 0 and fs[0].fd == -1 and pool.open_count == 4


def test_a_retired_handle_closes_when_its_last_user_is_done() -> None:
    disk = FakeDisk()
    pool = HandlePool(disk, CAP)
    f = files(pool, 1)[0]
    with pool.use(f):
        pool.retire(f)
        assert f.fd >= 0
    assert f.fd == -1 and pool.open_count == 0
    with pytest.raises(OSError), pool.use(f):
        pass
    pool.sync(f, f.written + 1)  # a ticket naming a deleted segment: nothing to sync
