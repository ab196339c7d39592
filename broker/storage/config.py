"""Storage settings: how often data reaches the disk, segment size, retention, limits."""

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
    max_open_files: int = 256
    """Descriptors the store's file pool may hold (the broker derives it from
    RLIMIT_NOFILE); partitions beyond what fits have their files reopened on use."""
    max_partitions: int = 20_000
    """Partitions the store hosts in all, internal ones included: creating more is
    refused. Each costs memory (about 2 KB idle), start-up time and metric series."""
    offline_retry_ms: int = 5000
    """A log offline after a failed fsync tries to come back on the next append once
    this long has passed since the failure (or since its last attempt)."""
    replica_files: bool = True
    """Read a partition's ``leader-epoch-checkpoint`` and ``high-watermark`` at open. A
    single broker does not: a data dir that served a cluster then serves its whole log,
    its high watermark at the log end."""

    def __post_init__(self) -> None:
        if not isinstance(self.fsync, FsyncPolicy):
            object.__setattr__(self, "fsync", FsyncPolicy(self.fsync))
        if self.segment_bytes < 1:
            raise ValueError(f"segment_bytes must be >= 1, got {self.segment_bytes}")
        if self.offsets_partitions < 1:
            raise ValueError(f"offsets_partitions must be >= 1, got {self.offsets_partitions}")
        if self.flush_interval_ms < 1:
            raise ValueError(f"flush_interval_ms must be >= 1, got {self.flush_interval_ms}")
        if self.max_open_files < 16:
            raise ValueError(f"max_open_files must be >= 16, got {self.max_open_files}")
        if self.max_partitions < 1:
            raise ValueError(f"max_partitions must be >= 1, got {self.max_partitions}")
        if self.offline_retry_ms < 0:
            raise ValueError(f"offline_retry_ms must be >= 0, got {self.offline_retry_ms}")
