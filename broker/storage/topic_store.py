"""Every partition log of the broker, under one data directory.

Layout::

    <data_dir>/meta.json                  cluster id, offsets partitions, topics
    <data_dir>/clean_shutdown             present only between a clean close and the next open
    <data_dir>/.lock                      flock'ed while open: one broker per directory
    <data_dir>/logs/<topic>-<partition>/  segments of one partition

All partitions are opened (and recovered) by the constructor, so the broker can listen
as soon as it returns. ``meta.json`` decides which partitions exist: a directory under
``logs/`` it does not name (a deleted topic's, left by a crash) is removed at open.
The logs' files share one descriptor pool (:class:`~broker.storage.handles.HandlePool`)
of ``config.max_open_files``.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from groupwire.broker.logs import get_logger
from groupwire.broker.storage.config import FsyncPolicy, StorageConfig
from groupwire.broker.storage.errors import (
    NoSuchPartitionError,
    PartitionCountError,
    PartitionLimitError,
    StorageError,
    TopicExistsError,
    TopicRefusedError,
)
from groupwire.broker.storage.fileops import FileOps
from groupwire.broker.storage.flush import FlushItem, FlushTicket
from groupwire.broker.storage.handles import HandlePool
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
from groupwire.broker.storage.segment import Trash, purge_segment
from groupwire.broker.topics.rules import MAX_PARTITIONS_PER_TOPIC
from groupwire.protocol.batches import BatchRecord, DecodedRecord, encode_batch, read_header

CLEAN_MARKER: Final = "clean_shutdown"
LOCK_FILE: Final = ".lock"
LOGS_DIR: Final = "logs"
DELETED_SUFFIX: Final = "-delete"
"""A deleted partition's directory is renamed ``<topic>-<partition>.<uuid>-delete``."""
MAX_PARTITIONS: Final = MAX_PARTITIONS_PER_TOPIC
"""Per topic (the wire contract's bound); the store as a whole has
``config.max_partitions``."""


log = get_logger("groupwire.storage")


class TopicStore:
    def __init__(self, data_dir: Path, config: StorageConfig | None = None, *,
                 file_ops: FileOps | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.config = config or StorageConfig()
        self._ops = file_ops or FileOps()
        self._pool = HandlePool(self._ops, self.config.max_open_files,
                                sync_on_evict=self.config.fsync is not FsyncPolicy.NEVER)
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._dirty: dict[PartitionLog, None] = {}
        self.recovery: list[RecoveryReport] = []
        """What recovery cut at open, one report per partition that lost bytes."""
        self.strays_removed: list[str] = []
        """Directories under ``logs/`` that ``meta.json`` does not name, removed at open."""
        self.fresh = False
        """True if ``meta.json`` did not exist at open (a new data dir)."""
        self._tickets_out: set[int] = set()
        """Serials of flush tickets taken and not completed."""
        self._tickets_taken = 0
        self._creating: dict[str, Creation] = {}
        """Creations begun and not finished, by topic: the name is taken, their partitions
        count against ``max_partitions``, and nothing else sees them yet."""
        self._meta_lock = threading.Lock()
        """Serialises ``meta.json`` writes: a creation commits on a worker thread."""
        self._doomed: dict[Path, int] = {}
        """Deleted partitions' directories, removed once no flush ticket may name them:
        each with the serial of the first ticket taken after its deletion."""
        self._deleting: dict[str, Deletion] = {}
        """Deletions begun and not finished: hidden already, ``meta.json`` not yet written."""
        self._dirs_lock = threading.Lock()
        """Held by a purge while it renames a directory aside, and by a creation taking
        a doomed directory back: a purge never removes a directory a creation made."""
        self._purging: set[Path] = set()
        """Doomed directories a purge under way will remove (under ``_dirs_lock``)."""
        self._trash: list[Trash] = []
        """Dropped segments whose removal failed: tried again by the next purge."""
        self._closed = False
        self.offline_listeners: list[Callable[[str, int], None]] = []
        """Called with ``(topic, partition)`` when a log is reported offline."""
        try:
            (self.data_dir / LOGS_DIR).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"data dir {self.data_dir} is not usable: "
                               f"{_os_reason(exc)}") from exc
        self._lock_fd = _lock(self.data_dir / LOCK_FILE)
        try:
            self.fresh = not (self.data_dir / META_FILE).exists()
            self._meta = self._load_or_create_meta()
            self._durable_topics = dict(self._meta.topics)
            """What ``meta.json`` names (under ``_meta_lock``): ahead of ``_meta.topics``
            while a committed creation waits for the loop thread to finish it."""
            if not self.fresh:  # without a metadata file, nothing says a directory is stray
                self._remove_strays()
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
        """Create ``name`` here and now (tools and tests; the broker splits it in three so
        the file system work runs off its event loop: :meth:`begin_create_topic`)."""
        self._run_here(self.begin_create_topic(name, num_partitions))

    def create_partitions(self, name: str, new_total: int) -> None:
        """Grow ``name`` to ``new_total`` partitions here and now (see :meth:`create_topic`)."""
        self._run_here(self.begin_create_partitions(name, new_total))

    def _run_here(self, creation: Creation) -> None:
        try:
            self.build(creation)
        finally:
            self.finish(creation)

    def begin_create_topic(self, name: str, num_partitions: int) -> Creation:
        """Loop thread: check and reserve a new topic; the name is taken from here on
        (TOPIC_ALREADY_EXISTS, as Kafka answers for a topic being created). Run
        :meth:`build` (any thread), then :meth:`finish` (loop thread) whatever happened."""
        self._check_open()
        check_topic_name(name)
        if name in self._meta.topics:
            raise TopicExistsError(f"topic {name!r} already exists")
        if name in self._creating:
            raise TopicExistsError(f"topic {name!r} already exists (it is being created)")
        if name in self._deleting:
            raise TopicExistsError(f"topic {name!r} already exists (it is being deleted)")
        if not 1 <= num_partitions <= MAX_PARTITIONS:
            raise PartitionCountError(
                f"number of partitions must be 1-{MAX_PARTITIONS}, got {num_partitions}")
        return self._reserve(name, 0, num_partitions)

    def begin_create_internal(self, name: str, num_partitions: int) -> Creation:
        """:meth:`begin_create_topic` for an internal topic the broker makes when first
        needed (``__transaction_state``): no client name rule applies to it."""
        self._check_open()
        if not self.is_internal(name):
            raise TopicRefusedError(f"{name} is not an internal topic")
        if name in self._meta.topics or name in self._creating:
            raise TopicExistsError(f"topic {name!r} already exists")
        return self._reserve(name, 0, num_partitions)

    def begin_create_partitions(self, name: str, new_total: int) -> Creation:
        """Loop thread: check and reserve growing ``name`` to ``new_total`` partitions
        (never shrinks; internal refused); then as :meth:`begin_create_topic`."""
        self._check_open()
        current = self._meta.topics.get(name)
        if current is None:
            raise NoSuchPartitionError(f"unknown topic {name!r}")
        if self.is_internal(name):
            raise TopicRefusedError(f"{name} is internal: its partitions are fixed")
        if name in self._creating:
            raise PartitionCountError(
                f"topic {name!r} is already being given more partitions: retry once that "
                f"is done")
        if new_total <= current:
            raise PartitionCountError(
                f"topic {name!r} has {current} partitions; the new total must be larger, "
                f"got {new_total}")
        if new_total > MAX_PARTITIONS:
            raise PartitionCountError(
                f"number of partitions must be at most {MAX_PARTITIONS}, got {new_total}")
        return self._reserve(name, current, new_total)

    def _reserve(self, name: str, first: int, total: int) -> Creation:
        self._check_partition_limit(name, total - first)
        creation = Creation(name, first, total)
        if self._doomed:  # ours now: a flush completing must not remove them
            self._doomed = {d: n for d, n in self._doomed.items()
                            if not _names_partition(d.name, name, first, total)}
        if self._purging:  # nor a purge under way (build removes what is left of them)
            with self._dirs_lock:
                self._purging = {d for d in self._purging
                                 if not _names_partition(d.name, name, first, total)}
        self._creating[name] = creation
        return creation

    @property
    def taken(self) -> set[str]:
        """Names being created or deleted: not free for a new topic yet."""
        return {*self._creating, *self._deleting}

    def creation_in_flight(self, name: str) -> Creation | None:
        """The creation (or growth) of ``name`` begun and not finished, if any."""
        return self._creating.get(name)

    @property
    def partitions_reserved(self) -> int:
        """Partitions of creations in flight (they count against ``max_partitions``)."""
        return sum(c.total - c.first for c in self._creating.values())

    def build(self, creation: Creation) -> None:
        """Any thread: create the partitions' directories and files, fsync them (unless
        the policy is ``never``), then rewrite ``meta.json``. Touches no state of the loop
        thread's: the logs stay in ``creation`` until :meth:`finish`. On failure what it
        made is removed again (best effort) and :class:`StorageError` raised;
        ``meta.json`` is then unchanged."""
        name, logs = creation.name, creation.logs
        sync = self.config.fsync is not FsyncPolicy.NEVER
        made: list[Path] = []
        try:
            for p in range(creation.first, creation.total):
                directory = self.data_dir / LOGS_DIR / f"{name}-{p}"
                if directory.exists():  # a deleted topic's, or a failed create's: not ours
                    self._discard_dir(directory)
                made.append(directory)
                plog = PartitionLog(directory, self.config, topic=name, partition=p,
                                    handles=self._pool, trust_index=False,
                                    on_dirty=creation.dirtied)
                logs.append(plog)
                if sync:  # here, not in the loop's next flush round over every log
                    ticket = plog.take_dirty()
                    ticket.sync()
                    plog.complete(ticket)
            self._ops.fsync_dir(self.data_dir / LOGS_DIR)
            with self._meta_lock:
                topics = {**self._durable_topics, name: creation.total}
                try:
                    self._write_meta(StoreMeta(self._meta.cluster_id,
                                               self._meta.offsets_partitions, topics))
                except StorageError:
                    # the new file may be in place but not durable: put the old one back
                    with contextlib.suppress(StorageError):
                        self._write_meta(StoreMeta(self._meta.cluster_id,
                                                   self._meta.offsets_partitions,
                                                   self._durable_topics))
                    raise
                self._durable_topics = topics
        except (OSError, StorageError) as exc:
            for plog in logs:
                plog.close(sync=False)
            logs.clear()
            for directory in made:
                with contextlib.suppress(OSError):  # else a stray, removed at next open
                    self._discard_dir(directory)
            with contextlib.suppress(OSError):
                self._ops.fsync_dir(self.data_dir / LOGS_DIR)
            if isinstance(exc, StorageError):
                raise
            raise StorageError(f"cannot create partitions of {name!r}: {exc}") from exc
        creation.built = True

    def finish(self, creation: Creation) -> None:
        """Loop thread, after :meth:`build` returned or raised: a built creation's
        partitions become visible (Metadata, Produce); either way the reservation ends."""
        if self._creating.get(creation.name) is creation:
            del self._creating[creation.name]
        if not creation.built:
            return
        name = creation.name
        for plog in creation.logs:
            plog.on_offline = functools.partial(self._log_offline, name, plog.partition)
            self._logs[(name, plog.partition)] = plog
        self._meta.topics = {**self._meta.topics, name: creation.total}
        creation.attached = True
        creation.dirtied.store = self
        for plog in creation.dirtied.logs:
            self._mark_dirty(plog)

    @property
    def partition_total(self) -> int:
        """Partitions hosted, internal ones included (what ``max_partitions`` bounds)."""
        return sum(self._meta.topics.values())

    def _check_partition_limit(self, name: str, adding: int) -> None:
        limit, hosted = self.config.max_partitions, self.partition_total
        reserved = self.partitions_reserved
        if hosted + reserved + adding > limit:
            being = f", and {reserved} are being created" if reserved else ""
            raise PartitionLimitError(
                f"{adding} more partitions for {name!r} would make "
                f"{hosted + reserved + adding}, over the broker's limit of {limit} "
                f"partitions (--max-partitions; it hosts {hosted}, internal topics "
                f"included{being})")

    def delete_topic(self, name: str) -> int:
        """Delete ``name`` here and now (tools and tests; the broker splits it so the file
        system work runs off its event loop: :meth:`begin_delete_topic`). Returns its
        partition count; raises as :meth:`begin_delete_topic` and :meth:`commit_deletes`
        (the topic is then untouched)."""
        deletion = self.begin_delete_topic(name)
        try:
            self.commit_deletes([deletion])
        finally:
            self.finish_delete(deletion)
        self.purge()
        return deletion.count

    def begin_delete_topic(self, name: str) -> Deletion:
        """Loop thread: check, then hide ``name`` at once (lookups answer unknown, its
        name stays taken). Run :meth:`commit_deletes` (any thread), then
        :meth:`finish_delete` (loop thread) whatever happened.

        ``meta.json`` is rewritten first: once that is durable the topic is gone, whatever
        happens next. Then each log is closed and its directory renamed aside and removed
        by a :meth:`purge` (after the flush in flight, if any: its ticket may fsync those
        directories). A crash, or a removal that fails, in between leaves directories no
        metadata names: the next open removes them, and so does creating a partition of
        the same name. Raises :class:`NoSuchPartitionError` for an unknown topic,
        :class:`TopicRefusedError` for an internal one."""
        self._check_open()
        count = self._meta.topics.get(name)
        if count is None:
            raise NoSuchPartitionError(f"unknown topic {name!r}")
        if self.is_internal(name):
            raise TopicRefusedError(f"{name} is internal: the broker's own topic, "
                                    "it cannot be deleted")
        if name in self._creating:  # the broker waits for a creation before deleting
            raise StorageError(f"topic {name!r} is being given more partitions")
        logs = []
        for p in range(count):
            plog = self._logs.pop((name, p))
            self._dirty.pop(plog, None)
            logs.append(plog)
        self._meta.topics = {t: n for t, n in self._meta.topics.items() if t != name}
        deletion = Deletion(name, count, logs)
        self._deleting[name] = deletion
        return deletion

    def commit_deletes(self, deletions: Sequence[Deletion]) -> None:
        """Any thread: one durable ``meta.json`` without the topics; raises
        :class:`StorageError` if it cannot be written (they are then restored by
        :meth:`finish_delete`)."""
        names = {d.name for d in deletions}
        with self._meta_lock:
            durable = {t: n for t, n in self._durable_topics.items() if t not in names}
            self._write_meta(StoreMeta(self._meta.cluster_id, self._meta.offsets_partitions,
                                       durable))
            self._durable_topics = durable
        for deletion in deletions:
            deletion.committed = True

    def finish_delete(self, deletion: Deletion, *, close: bool = True) -> None:
        """Loop thread: a committed deletion's logs are closed and their directories
        doomed (a :meth:`purge` removes them); one not committed is put back. With
        ``close`` False the caller closes them a slice at a time: :meth:`close_deleted`."""
        if self._deleting.get(deletion.name) is deletion:
            del self._deleting[deletion.name]
        if not deletion.committed:
            for p, plog in enumerate(deletion.logs):
                self._logs[(deletion.name, p)] = plog
                self._mark_dirty(plog)  # a flush sees whether anything is left to sync
            self._meta.topics = {**self._meta.topics, deletion.name: deletion.count}
            return
        if close:
            while self.close_deleted(deletion, len(deletion.logs)):
                pass

    def close_deleted(self, deletion: Deletion, most: int) -> bool:
        """Loop thread: close up to ``most`` more logs of a committed deletion (closing
        thousands takes milliseconds) and doom their directories; False once none is
        left."""
        logs = deletion.logs
        while most > 0 and deletion.closed < len(logs):
            plog = logs[deletion.closed]
            plog.close(sync=False)
            self._doomed[plog.directory] = self._tickets_taken
            deletion.closed += 1
            most -= 1
        return deletion.closed < len(logs)

    # --- removing files off the loop ----------------------------------------------------

    def take_purge(self) -> Purge:
        """Loop thread: what to remove now: doomed directories (once no flush ticket may
        name them) and the files of dropped segments. Run :meth:`run_purge` (any
        thread), then :meth:`end_purge` (loop thread)."""
        dirs: list[Path] = []
        if self._doomed:
            oldest = min(self._tickets_out, default=self._tickets_taken)
            dirs = sorted(d for d, after in self._doomed.items() if after <= oldest)
            for directory in dirs:
                del self._doomed[directory]
            with self._dirs_lock:
                self._purging.update(dirs)
        segments, self._trash = self._trash, []
        for plog in self._logs.values():
            if plog.has_trash:
                segments.extend(plog.take_trash())
        return Purge(dirs, segments)

    def run_purge(self, purge: Purge) -> None:
        """Any thread: rename each directory aside and remove it; mark each dropped
        segment deleted durably and unlink it. What fails is kept in ``purge``."""
        logs_dir = self.data_dir / LOGS_DIR
        for directory in purge.dirs:
            with self._dirs_lock:
                if directory not in self._purging:
                    continue  # a creation took the name back meanwhile
                trash = directory.with_name(
                    f"{directory.name}.{uuid.uuid4().hex}{DELETED_SUFFIX}")
                moved = False
                try:
                    self._ops.replace(directory, trash)
                    moved = True
                except FileNotFoundError:
                    pass  # already gone
                except OSError as exc:
                    purge.failed_dirs.append((directory, exc))
                    continue
                finally:
                    self._purging.discard(directory)
            if moved:
                try:
                    shutil.rmtree(trash)
                except OSError as exc:  # a stray now: removed at the next open
                    purge.failed_dirs.append((trash, exc))
        if purge.dirs:
            try:
                self._ops.fsync_dir(logs_dir)
            except OSError as exc:
                purge.failed_dirs.append((logs_dir, exc))
        for segment in purge.segments:
            try:
                purge_segment(self._ops, segment)
            except OSError as exc:
                purge.failed_segments.append((segment, exc))

    def end_purge(self, purge: Purge) -> None:
        """Loop thread: log what failed; dropped segments are tried again by the next
        purge (they are marked ``.deleted`` or still named as segments: either way never
        served, and recovery removes the marked ones)."""
        for path, exc in purge.failed_dirs:
            log.warning("directory_not_removed", path=str(path), error=str(exc),
                        retry="removed at the next start")
        for segment, exc in purge.failed_segments:
            log.warning("segment_not_removed", path=str(segment.log_path), error=str(exc),
                        retry="at the next retention check")
            self._trash.append(segment)

    def purge(self) -> Purge:
        """:meth:`take_purge`, :meth:`run_purge` and :meth:`end_purge` here and now (tools,
        tests, and close)."""
        purge = self.take_purge()
        if not purge.empty:
            self.run_purge(purge)
            self.end_purge(purge)
        return purge

    def _discard_dir(self, directory: Path) -> None:
        """Rename ``directory`` aside (atomic: its name is free at once, even if the
        removal below fails), then remove it."""
        trash = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}{DELETED_SUFFIX}")
        self._ops.replace(directory, trash)
        shutil.rmtree(trash)

    def _remove_strays(self) -> None:
        """Remove every directory under ``logs/`` that is no partition of ``meta.json``."""
        logs = self.data_dir / LOGS_DIR
        wanted = {f"{t}-{p}" for t, n in self._meta.topics.items() for p in range(n)}
        strays = sorted(e.name for e in os.scandir(logs)
                        if e.is_dir(follow_symlinks=False) and e.name not in wanted)
        if not strays:
            return
        try:
            for name in strays:
                shutil.rmtree(logs / name)
            self._ops.fsync_dir(logs)
        except OSError as exc:
            raise StorageError(f"cannot remove partition directories no topic names "
                               f"({', '.join(strays)}): {_os_reason(exc)}") from exc
        self.strays_removed = strays

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
                            topic=topic, partition=partition, handles=self._pool,
                            trust_index=trust_index, on_dirty=self._mark_dirty)
        plog.on_offline = functools.partial(self._log_offline, topic, partition)
        self._logs[(topic, partition)] = plog
        if plog.recovery is not None:
            self.recovery.append(plog.recovery)
        return plog

    def _log_offline(self, topic: str, partition: int) -> None:
        for listener in list(self.offline_listeners):
            listener(topic, partition)

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
        serial = self._tickets_taken
        self._tickets_taken += 1
        self._tickets_out.add(serial)
        return FlushTicket(items=items, pool=self._pool, serial=serial)

    def complete(self, ticket: FlushTicket) -> None:
        """Loop thread, after ``ticket.sync()`` returned: advance high watermarks."""
        ticket.complete()
        if not ticket.synced:
            for plog in self._offline_logs():
                plog.report_offline()
        self._tickets_out.discard(ticket.serial)

    # --- health -------------------------------------------------------------------------

    def _offline_logs(self) -> list[PartitionLog]:
        # tuple() copies at once: the metrics thread reads this while the loop may add logs
        return [plog for plog in tuple(self._logs.values()) if plog.offline]

    def offline_partitions(self) -> list[tuple[str, int, str]]:
        """``(topic, partition, why)`` of every log offline after a failed fsync."""
        return [(plog.topic, plog.partition, plog.offline_reason or "")
                for plog in self._offline_logs()]

    @property
    def open_files(self) -> int:
        """Descriptors the file pool holds now."""
        return self._pool.open_count

    @property
    def file_evictions(self) -> tuple[int, int]:
        """Descriptors the pool closed to make room: all, and those that needed an fsync
        first (many of those mean ``max_open_files`` is too small for the load)."""
        return self._pool.evictions, self._pool.evictions_synced

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
        self._pool.close_all()
        if sync:  # (sync=False leaves the files as a crash would)
            self._tickets_out.clear()  # closed: no flush runs any more
            self.purge()
        if clean:
            with contextlib.suppress(OSError):
                self._ops.write_file_atomic(self.data_dir / CLEAN_MARKER, b"")
        os.close(self._lock_fd)

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError("storage is closed")


class _Dirtied:
    """``on_dirty`` of logs being created: collected off the loop thread, handed to the
    store by :meth:`TopicStore.finish`, then passed straight through."""

    def __init__(self, store: TopicStore | None = None) -> None:
        self.logs: list[PartitionLog] = []
        self.store = store

    def __call__(self, plog: PartitionLog) -> None:
        if self.store is not None:
            self.store._mark_dirty(plog)
        else:
            self.logs.append(plog)


@dataclass(eq=False)
class Deletion:
    """A topic being deleted: hidden since :meth:`TopicStore.begin_delete_topic`."""

    name: str
    count: int
    logs: list[PartitionLog]
    committed: bool = False
    """``meta.json`` without it is durable: it is gone for good."""
    closed: int = 0
    """Its logs closed so far (:meth:`TopicStore.close_deleted`)."""


@dataclass(eq=False)
class Purge:
    """Files to remove off the loop, and what could not be."""

    dirs: list[Path]
    segments: list[Trash]
    failed_dirs: list[tuple[Path, OSError]] = field(default_factory=list)
    failed_segments: list[tuple[Trash, OSError]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.dirs and not self.segments


@dataclass(eq=False)
class Creation:
    """A topic, or more partitions of one, being created: ``[first, total)``."""

    name: str
    first: int
    total: int
    logs: list[PartitionLog] = field(default_factory=list)
    dirtied: _Dirtied = field(default_factory=_Dirtied)
    built: bool = False
    """:meth:`TopicStore.build` succeeded: durable, named by ``meta.json``."""
    attached: bool = False
    """:meth:`TopicStore.finish` made it visible."""

    @property
    def partitions(self) -> int:
        return self.total - self.first


def _names_partition(directory: str, topic: str, first: int, total: int) -> bool:
    """Whether ``directory`` is ``<topic>-<p>`` for a ``p`` in ``[first, total)``."""
    stem, dash, number = directory.rpartition("-")
    return (dash == "-" and stem == topic and number.isdigit()
            and first <= int(number) < total)


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
