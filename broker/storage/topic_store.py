"""Every partition log of the broker, under one data directory.

Layout::

    <data_dir>/meta.json                  cluster id, offsets partitions, topics
    <data_dir>/clean_shutdown             present only between a clean close and the next open
    <data_dir>/.lock                      flock'ed while open: one broker per directory
    <data_dir>/logs/<topic>-<partition>/  segments of one partition

All partitions are opened (and recovered) by the constructor, so the broker can listen
as soon as it returns.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

from groupwire.broker.storage.config import StorageConfig
from groupwire.broker.storage.errors import (
    NoSuchPartitionError,
    PartitionCountError,
    StorageError,
    TopicExistsError,
    TopicRefusedError,
)
from groupwire.broker.storage.fileops import FileOps
from groupwire.broker.storage.flush import FlushItem, FlushTicket
from groupwire.broker.storage.metadata import (
    EVENTS_TOPIC,
    INTERNAL_TOPICS,
    META_FILE,
    OFFSETS_TOPIC,
    StoreMeta,
    check_topic_name,
)
from groupwire.broker.storage.partition_log import PartitionLog
from groupwire.broker.storage.recovery import RecoveryReport
from groupwire.protocol.batches import BatchRecord, DecodedRecord, encode_batch, read_header

CLEAN_MARKER: Final = "clean_shutdown"
LOCK_FILE: Final = ".lock"
LOGS_DIR: Final = "logs"
MAX_PARTITIONS: Final = 10_000
"""Per topic: each partition holds open files, so a typo cannot exhaust descriptors."""


class TopicStore:
    def __init__(self, data_dir: Path, config: StorageConfig | None = None, *,
                 file_ops: FileOps | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.config = config or StorageConfig()
        self._ops = file_ops or FileOps()
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._dirty: dict[PartitionLog, None] = {}
        self.recovery: list[RecoveryReport] = []
        """What recovery cut at open, one report per partition that lost bytes."""
        self._closed = False
        try:
            (self.data_dir / LOGS_DIR).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"data dir {self.data_dir} is not usable: "
                               f"{_os_reason(exc)}") from exc
        self._lock_fd = _lock(self.data_dir / LOCK_FILE)
        try:
            self._meta = self._load_or_create_meta()
            clean = self._consume_clean_marker()
            for topic, count in self._meta.topics.items():
                for p in range(count):
                    self._open_partition(topic, p, trust_index=clean)
        except BaseException:
            for plog in self._logs.values():
                plog.close(sync=False)
            os.close(self._lock_fd)
            raise

    # --- metadata -----------------------------------------------------------------------

    @property
    def cluster_id(self) -> str:
        return self._meta.cluster_id

    @property
    def offsets_partitions(self) -> int:
        return self._meta.offsets_partitions

    def topics(self) -> dict[str, int]:
        """Every topic, internal ones included, with its partition count."""
        return dict(self._meta.topics)

    def is_internal(self, name: str) -> bool:
        return name in INTERNAL_TOPICS

    def partition_count(self, name: str) -> int | None:
        return self._meta.topics.get(name)

    def recovery_reports(self) -> list[dict[str, object]]:
        """:attr:`recovery` as plain dicts, ready to log as fields."""
        return [r.as_dict() for r in self.recovery]

    def create_topic(self, name: str, num_partitions: int) -> None:
        self._check_open()
        check_topic_name(name)
        if name in self._meta.topics:
            raise TopicExistsError(f"topic {name!r} already exists")
        if not 1 <= num_partitions <= MAX_PARTITIONS:
            raise PartitionCountError(
                f"number of partitions must be 1-{MAX_PARTITIONS}, got {num_partitions}")
        self._add_partitions(name, 0, num_partitions)

    def create_partitions(self, name: str, new_total: int) -> None:
        """Grow ``name`` to ``new_total`` partitions (never shrinks; internal refused)."""
        self._check_open()
        current = self._meta.topics.get(name)
        if current is None:
            raise NoSuchPartitionError(f"unknown topic {name!r}")
        if self.is_internal(name):
            raise TopicRefusedError(f"{name} is internal: its partitions are fixed")
        if new_total <= current:
            raise PartitionCountError(
                f"topic {name!r} has {current} partitions; the new total must be larger, "
                f"got {new_total}")
        if new_total > MAX_PARTITIONS:
            raise PartitionCountError(
                f"number of partitions must be at most {MAX_PARTITIONS}, got {new_total}")
        self._add_partitions(name, current, new_total)

    def _add_partitions(self, name: str, first: int, total: int) -> None:
        opened: list[PartitionLog] = []
        try:
            for p in range(first, total):
                opened.append(self._open_partition(name, p, trust_index=False))
            self._ops.fsync_dir(self.data_dir / LOGS_DIR)
            topics = {**self._meta.topics, name: total}
            self._write_meta(StoreMeta(self._meta.cluster_id, self._meta.offsets_partitions,
                                       topics))
        except (OSError, StorageError) as exc:
            for plog in opened:
                del self._logs[(name, plog.partition)]
                self._dirty.pop(plog, None)
                plog.close(sync=False)
            if isinstance(exc, StorageError):
                raise
            raise StorageError(f"cannot create partitions of {name!r}: {exc}") from exc
        self._meta.topics = topics

    def _load_or_create_meta(self) -> StoreMeta:
        path = self.data_dir / META_FILE
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            meta = StoreMeta(cluster_id=str(uuid.uuid4()),
                             offsets_partitions=self.config.offsets_partitions)
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {exc}") from exc
        else:
            meta = StoreMeta.load(raw, str(path))
        wanted = {OFFSETS_TOPIC: meta.offsets_partitions, EVENTS_TOPIC: 1}
        if any(meta.topics.get(t) != n for t, n in wanted.items()):
            meta.topics.update(wanted)
            self._write_meta(meta)
        return meta

    def _write_meta(self, meta: StoreMeta) -> None:
        try:
            self._ops.write_file_atomic(self.data_dir / META_FILE, meta.dump())
        except OSError as exc:
            raise StorageError(f"cannot write {META_FILE}: {exc}") from exc

    def _consume_clean_marker(self) -> bool:
        """Whether the last run closed cleanly; the marker is removed (durably) before any
        write, so a crash from here on is never mistaken for a clean shutdown."""
        marker = self.data_dir / CLEAN_MARKER
        if not marker.exists():
            return False
        try:
            self._ops.unlink(marker)
            self._ops.fsync_dir(self.data_dir)
        except OSError as exc:
            raise StorageError(f"cannot remove {marker}: {exc}") from exc
        return True

    # --- logs ---------------------------------------------------------------------------

    def _open_partition(self, topic: str, partition: int, *, trust_index: bool) -> PartitionLog:
        plog = PartitionLog(self.data_dir / LOGS_DIR / f"{topic}-{partition}", self.config,
                            topic=topic, partition=partition, file_ops=self._ops,
                            trust_index=trust_index, on_dirty=self._mark_dirty)
        self._logs[(topic, partition)] = plog
        if plog.recovery is not None:
            self.recovery.append(plog.recovery)
        return plog

    def _mark_dirty(self, plog: PartitionLog) -> None:
        self._dirty[plog] = None

    def log(self, topic: str, partition: int) -> PartitionLog:
        """The log of one partition; :class:`NoSuchPartitionError` (a ``KeyError``
        too) if there is none."""
        try:
            return self._logs[(topic, partition)]
        except KeyError:
            raise NoSuchPartitionError(
                f"unknown topic or partition {topic}-{partition}") from None

    def append_kv(self, topic: str, partition: int,
                  items: Sequence[tuple[bytes, bytes | None, int]]) -> int:
        """Append ``(key, value or None for a tombstone, timestamp_ms)`` items as one batch;
        returns its base offset (the log end offset, unchanged, if ``items`` is empty)."""
        plog = self.log(topic, partition)
        if not items:
            return plog.log_end_offset
        batch = encode_batch([BatchRecord(value=v, key=k, timestamp_ms=ts)
                              for k, v, ts in items])
        return plog.append(batch, read_header(batch))

    def scan(self, topic: str, partition: int, from_offset: int = 0,
             ) -> Iterator[DecodedRecord]:
        """Every record from ``from_offset`` to the log end offset (replay at start)."""
        return self.log(topic, partition).scan(from_offset)

    # --- durability ---------------------------------------------------------------------

    def take_dirty(self) -> FlushTicket:
        """Loop thread: what to fsync for everything written so far (maybe nothing)."""
        items: list[FlushItem] = []
        for plog in list(self._dirty):
            item = plog.flush_item()
            if item is None:
                del self._dirty[plog]
            else:
                items.append(item)
        return FlushTicket(items=items, ops=self._ops)

    def complete(self, ticket: FlushTicket) -> None:
        """Loop thread, after ``ticket.sync()`` returned: advance high watermarks."""
        ticket.complete()

    # --- shutdown -----------------------------------------------------------------------

    def close(self, *, sync: bool = True) -> None:
        """Fsync and close every log, then record a clean shutdown so the next open can
        trust the indexes. ``sync=False`` closes as a crash would leave things (tests)."""
        if self._closed:
            return
        self._closed = True
        clean = sync
        for plog in self._logs.values():
            if not plog.close(sync=sync):
                clean = False
        if clean:
            with contextlib.suppress(OSError):
                self._ops.write_file_atomic(self.data_dir / CLEAN_MARKER, b"")
        os.close(self._lock_fd)

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError("storage is closed")


def _lock(path: Path) -> int:
    """Hold ``path`` flock'ed with our pid in it; a second broker names the first one."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise StorageError(f"data dir {path.parent} is not usable: cannot open {path}: "
                           f"{exc.strerror or exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = _lock_holder(fd)
        os.close(fd)
        raise StorageError(f"data dir {path.parent} is in use by another broker"
                           f"{f' (pid {holder})' if holder else ''}") from exc
    with contextlib.suppress(OSError):  # the pid is for the message above, not the lock
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _lock_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return text if text.isdigit() else ""


def _os_reason(exc: OSError) -> str:
    """``Not a directory: /x/logs`` rather than ``[Errno 20] Not a directory: '/x/logs'``."""
    if exc.strerror and exc.filename:
        return f"{exc.strerror}: {exc.filename}"
    return exc.strerror or str(exc)
