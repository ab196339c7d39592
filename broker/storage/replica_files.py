"""The two small files a replicated partition keeps beside its segments.

``leader-epoch-checkpoint`` holds the partition's leader-epoch cache (epoch -> start
offset, ``broker.cluster.epochs``), rewritten whenever it changes; ``high-watermark``
holds the high watermark as last flushed, so a restarted replica does not serve what it
never knew was committed. Both are replaced whole (a temporary file renamed over them),
so a crash leaves the old or the new one; a file that does not parse is reported and
treated as missing, which errs on the safe side (an empty cache falls back to the high
watermark, a missing high watermark to the log start).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from groupwire.broker.cluster.epochs import LeaderEpochCache
from groupwire.broker.storage.fileops import FileOps

EPOCH_CHECKPOINT_FILE: Final = "leader-epoch-checkpoint"
HIGH_WATERMARK_FILE: Final = "high-watermark"
_HW_VERSION: Final = 0


def read_file(ops: FileOps, path: Path) -> bytes | None:
    """The whole file, or None if there is none."""
    try:
        fd = ops.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        return ops.read_exact(fd, ops.size(fd), 0)
    finally:
        ops.close(fd)


def load_epoch_cache(ops: FileOps, directory: Path) -> LeaderEpochCache | None:
    """The cache in ``directory``'s checkpoint, None if there is no file; ValueError if
    it does not parse."""
    data = read_file(ops, directory / EPOCH_CHECKPOINT_FILE)
    return None if data is None else LeaderEpochCache.decode(data)


def save_epoch_cache(ops: FileOps, directory: Path, cache: LeaderEpochCache, *,
                     sync: bool) -> None:
    ops.write_file_atomic(directory / EPOCH_CHECKPOINT_FILE, cache.encode(), sync=sync)


def encode_high_watermark(offset: int) -> bytes:
    return f"{_HW_VERSION}\n{offset}\n".encode("ascii")


def decode_high_watermark(data: bytes) -> int:
    """ValueError for anything :func:`encode_high_watermark` would not have written."""
    lines = data.split(b"\n")
    if len(lines) != 3 or lines[2] != b"" or lines[0] != str(_HW_VERSION).encode():
        raise ValueError(f"high-watermark file is not '{_HW_VERSION}\\n<offset>\\n'")
    if not lines[1].isdigit():
        raise ValueError(f"high-watermark file: offset {lines[1]!r} is not an integer")
    return int(lines[1])


def load_high_watermark(ops: FileOps, directory: Path) -> int | None:
    data = read_file(ops, directory / HIGH_WATERMARK_FILE)
    return None if data is None else decode_high_watermark(data)


def save_high_watermark(ops: FileOps, directory: Path, offset: int, *, sync: bool) -> None:
    ops.write_file_atomic(directory / HIGH_WATERMARK_FILE, encode_high_watermark(offset),
                          sync=sync)
