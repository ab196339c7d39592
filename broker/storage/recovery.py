"""Opening a partition's directory: find its segments, verify them, cut a torn tail.

After a crash the last writes may be torn, and a disk may return garbage. Every batch of
every segment whose index is not trusted is checked (markers, structure, CRC, offsets
following on); the log is cut at the first bad batch and later segments are deleted, so
every complete batch before that point is kept and nothing after it is ever served.
Files named ``*.deleted`` (segments retention dropped, whose unlink had not happened yet)
are removed, never loaded.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from groupwire.broker.storage.errors import StorageError
from groupwire.broker.storage.handles import HandlePool
from groupwire.broker.storage.segment import DELETED_SUFFIX, Segment, parse_segment_name


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What recovery cut from one partition, and why."""

    topic: str
    partition: int
    truncated_bytes: int
    reason: str
    segment: int
    """Base offset of the segment where the log was cut."""
    deleted_segments: int
    log_end_offset: int

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def open_segments(directory: Path, pool: HandlePool, *, topic: str, partition: int,
                  trust_index: bool, on_error: Callable[[OSError], None] | None = None,
                  ) -> tuple[list[Segment], RecoveryReport | None]:
    """The segments of ``directory``, oldest first, the last one open for appends.
    ``on_error`` goes to every segment (an fsync of its log failed)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        names = os.listdir(directory)
        bases = sorted(b for name in names if (b := parse_segment_name(name)) is not None)
        for name in names:
            if name.endswith(DELETED_SUFFIX):  # dropped by retention: never loaded again
                with contextlib.suppress(OSError):  # ignored if it stays; tried next open
                    pool.ops.unlink(directory / name)
    except OSError as exc:
        raise StorageError(f"cannot open log directory {directory}: {exc}") from exc
    segments: list[Segment] = []
    truncated = deleted = 0
    reason: str | None = None
    cut_at = -1
    expected = bases[0] if bases else 0
    try:
        for base in bases:
            if reason is None and base != expected:
                reason, cut_at = f"segment {base} does not continue the log at {expected}", base
            if reason is not None:
                truncated += _delete_segment_files(directory, base, pool)
                deleted += 1
                continue
            seg = Segment(directory, base, pool, create=False, on_error=on_error)
            segments.append(seg)
            if not (trust_index and seg.load_index()):
                cut = seg.recover()
                if cut is not None:
                    truncated += cut[0]
                    reason, cut_at = cut[1], base
            expected = seg.next_offset
        if not segments:
            segments.append(Segment(directory, expected, pool, create=True,
                                    on_error=on_error))
        for seg in segments[:-1]:
            seg.seal()
    except OSError as exc:
        for seg in segments:
            seg.close()
        raise StorageError(f"cannot recover log {directory}: {exc}") from exc
    report = None
    if reason is not None:
        report = RecoveryReport(topic=topic, partition=partition, truncated_bytes=truncated,
                                reason=reason, segment=cut_at, deleted_segments=deleted,
                                log_end_offset=segments[-1].next_offset)
    return segments, report


def _delete_segment_files(directory: Path, base: int, pool: HandlePool) -> int:
    seg = Segment(directory, base, pool, create=False)
    with pool.use(seg.log_file) as fd:
        size = pool.ops.size(fd)
    seg.delete()
    return size
