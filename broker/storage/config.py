"""Storage settings: how often data reaches the disk, segment size, retention."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class FsyncPolicy(enum.StrEnum):
    """When written data is forced to disk, and so when it becomes readable.

    ``always``: the high watermark advances only once the data is fsynced.
    ``interval``: readable at once; the broker fsyncs every ``flush_interval_ms``.
    ``never``: readable at once; the OS writes back when it likes.
    """

    ALWAYS = "always"
    INTERVAL = "interval"
    NEVER = "never"


@dataclass(frozen=True, slots=True)
class StorageConfig:
    fsync: FsyncPolicy = FsyncPolicy.INTERVAL
    flush_interval_ms: int = 1000
    segment_bytes: int = 64 * 1024 * 1024
    offsets_partitions: int = 50
    """Partitions of ``__consumer_offsets``; only read when the data dir is created."""
    retention_ms: int = -1
    retention_bytes: int = -1

    def __post_init__(self) -> None:
        if not isinstance(self.fsync, FsyncPolicy):
            object.__setattr__(self, "fsync", FsyncPolicy(self.fsync))
        if self.segment_bytes < 1:
            raise ValueError(f"segment_bytes must be >= 1, got {self.segment_bytes}")
        if self.offsets_partitions < 1:
            raise ValueError(f"offsets_partitions must be >= 1, got {self.offsets_partitions}")
        if self.flush_interval_ms < 1:
            raise ValueError(f"flush_interval_ms must be >= 1, got {self.flush_interval_ms}")
