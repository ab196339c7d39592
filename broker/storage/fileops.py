"""Every system call storage makes, behind one object tests can replace.

Tests run as root, so permissions cannot make a disk fail; a ``FileOps`` subclass whose
``pwrite`` raises ``OSError(ENOSPC)`` can. Methods raise ``OSError`` as the os module does;
storage turns that into :class:`~broker.storage.errors.StorageError`.
"""

from __future__ import annotations

import os
from pathlib import Path


class FileOps:
    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        return os.open(path, flags | getattr(os, "O_CLOEXEC", 0), mode)

    def close(self, fd: int) -> None:
        os.close(fd)

    def dup(self, fd: int) -> int:
        return os.dup(fd)

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        return os.pwrite(fd, data, offset)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        return os.pread(fd, size, offset)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def truncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def size(self, fd: int) -> int:
        return os.fstat(fd).st_size

    def unlink(self, path: Path) -> None:
        os.unlink(path)

    def replace(self, src: Path, dst: Path) -> None:
        os.replace(src, dst)

    def fsync_dir(self, path: Path) -> None:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # --- helpers built on the calls above (so a test overriding one sees them all) ------

    def write_all(self, fd: int, data: bytes | memoryview, offset: int) -> None:
        """``pwrite`` until every byte is written (a regular file may take it in parts)."""
        view = memoryview(data)
        while view:
            n = self.pwrite(fd, view, offset)
            if n <= 0:
                raise OSError(f"pwrite wrote {n} bytes")
            view = view[n:]
            offset += n

    def read_exact(self, fd: int, size: int, offset: int) -> bytes:
        data = self.pread(fd, size, offset)
        if len(data) != size:
            raise OSError(f"short read: {len(data)} of {size} bytes at {offset}")
        return data

    def write_file_atomic(self, path: Path, data: bytes, *, sync: bool = True) -> None:
        """Replace ``path`` with ``data`` so a crash leaves the old or the new file whole
        (with ``sync`` False, as whole as the OS keeps an unsynced rename: ``--fsync
        never``)."""
        tmp = path.with_name(path.name + ".tmp")
        fd = self.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            self.write_all(fd, data, 0)
            if sync:
                self.fsync(fd)
        finally:
            self.close(fd)
        self.replace(tmp, path)
        if sync:
            self.fsync_dir(path.parent)
