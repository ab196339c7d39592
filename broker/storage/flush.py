"""Fsync split in three so the event loop never blocks on the disk.

``take_dirty()`` (loop thread) lists what to sync and the log end offsets that covers;
``ticket.sync()`` (any thread) only calls fsync; ``complete(ticket)`` (loop thread) moves
high watermarks. The ticket syncs private duplicates of the descriptors, so a segment that
retention closes meanwhile cannot make it sync the wrong file. A log stays dirty until a
completed ticket covers its end, so a round that fails or is never completed is retried.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from groupwire.broker.storage.fileops import FileOps


@dataclass(eq=False, slots=True)
class FlushItem:
    """One partition's share of a ticket."""

    end_offset: int
    """Everything below this offset is durable once the ticket is synced."""
    fds: list[int]
    dirs: list[Path]
    on_synced: Callable[[], None]
    on_failed: Callable[[OSError], None]
    synced: bool = False


@dataclass(eq=False, slots=True)
class FlushTicket:
    items: Sequence[FlushItem]
    ops: FileOps
    errors: list[OSError] = field(default_factory=list)
    _released: bool = field(default=False, repr=False)

    @property
    def empty(self) -> bool:
        return not self.items

    @property
    def synced(self) -> bool:
        return all(item.synced for item in self.items)

    def sync(self) -> None:
        """fsync every file; thread-safe (touches no log state but a failure flag).

        Raises the first ``OSError`` after trying every item. A log whose fsync failed
        refuses further appends: the kernel may have dropped its written pages.
        """
        try:
            for item in self.items:
                try:
                    for fd in item.fds:
                        self.ops.fsync(fd)
                    for directory in item.dirs:
                        self.ops.fsync_dir(directory)
                except OSError as exc:
                    self.errors.append(exc)
                    item.on_failed(exc)
                else:
                    item.synced = True
        finally:
            self.release()
        if self.errors:
            raise self.errors[0]

    def release(self) -> None:
        """Close the duplicated descriptors (``sync`` and ``complete`` both do)."""
        if self._released:
            return
        self._released = True
        for item in self.items:
            for fd in item.fds:
                with contextlib.suppress(OSError):
                    self.ops.close(fd)

    def complete(self) -> None:
        """Advance the high watermark of every log whose files were synced."""
        self.release()
        for item in self.items:
            if item.synced:
                item.on_synced()
