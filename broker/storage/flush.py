"""Fsync split in three so the event loop never blocks on the disk.

``take_dirty()`` (loop thread) lists what to sync and the log end offsets that covers;
``ticket.sync()`` (any thread) only calls fsync; ``complete(ticket)`` (loop thread) moves
high watermarks. The ticket names pooled files, not descriptors: each is pinned in the
pool only while its fsync runs, so a flush needs no descriptor beyond the pool's, and a
segment that is evicted meanwhile was fsynced on its way out (the ticket then skips it).
A log stays dirty until a completed ticket covers its end, so a round that fails or is
never completed is retried.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from groupwire.broker.storage.handles import HandlePool, PooledFile


@dataclass(eq=False, slots=True)
class FlushItem:
    """One partition's share of a ticket."""

    end_offset: int
    """Everything below this offset is durable once the ticket is synced."""
    files: list[tuple[PooledFile, int]]
    """Each file with the write generation the fsync must cover."""
    dirs: list[Path]
    on_synced: Callable[[], None]
    on_failed: Callable[[OSError], None]
    error: OSError | None = None
    """Set: the log already failed and this item only reports it (no fsync)."""
    writes: list[Callable[[], None]] = field(default_factory=list)
    """Small files to replace once the files are synced (a replica's high watermark):
    run by :meth:`FlushTicket.sync`, off the loop; an ``OSError`` fails the item."""
    synced: bool = False


@dataclass(eq=False, slots=True)
class FlushTicket:
    items: Sequence[FlushItem]
    pool: HandlePool
    errors: list[OSError] = field(default_factory=list)
    serial: int = 0
    """Its place among the store's tickets: a deleted partition's directory waits only
    for tickets taken before the deletion."""

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
        for item in self.items:
            if item.error is not None:
                self.errors.append(item.error)
                continue
            try:
                for f, generation in item.files:
                    self.pool.sync(f, generation)
                for directory in item.dirs:
                    self.pool.ops.fsync_dir(directory)
                for write in item.writes:
                    write()
            except OSError as exc:
                self.errors.append(exc)
                item.on_failed(exc)
            else:
                item.synced = True
        if self.errors:
            raise self.errors[0]

    def complete(self) -> None:
        """Advance the high watermark of every log whose files were synced."""
        for item in self.items:
            if item.synced:
                item.on_synced()
