"""``__consumer_offsets``: where the coordinator's records become durable, and compaction.

Every record has a key naming what it overwrites (a group's metadata, one partition's
committed offset) and a value, or none for a tombstone. This module keeps the latest
value per key of each partition in memory, so it can compact without reading the log:
when a partition holds far more records than live keys, it rolls a segment, appends the
live records as a snapshot, and once that snapshot is durable drops every segment before
it. Replaying the log at start then reads one snapshot plus what came after.

Both long writes run as steps (``protocol.steps``) the broker spreads over loop turns:
a large OffsetCommit's batch is encoded ahead (:meth:`OffsetsLog.prepare_steps`) and
appended in one piece (:meth:`OffsetsLog.write_prepared`); a compaction writes its
snapshot a batch a step (:meth:`OffsetsLog.compact_steps`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from groupwire.broker.coordinator import GroupRecord, encode_records, record_from_kv
from groupwire.broker.logs import get_logger
from groupwire.broker.storage import TopicStore
from groupwire.broker.storage.errors import StorageError
from groupwire.protocol.batches import BatchHeader, encode_kv_batch_steps, read_header
from groupwire.protocol.hashing import coordinator_partition
from groupwire.protocol.steps import Steps, run_steps

log = get_logger("groupwire.offsets_log")

OFFSETS_TOPIC = "__consumer_offsets"
SNAPSHOT_BATCH = 1000
"""Records per batch when writing a snapshot."""

PREPARE_STEP = 2048
"""Records :meth:`OffsetsLog.prepare_steps` takes per step besides encoding them."""

KV = tuple[bytes, bytes | None, int]


@dataclass(frozen=True, slots=True)
class PreparedWrite:
    """One group's offset records, encoded as the batch :meth:`OffsetsLog.write_prepared`
    appends, with what they make of the partition's live keys."""

    partition: int
    batch: bytes
    header: BatchHeader
    live: dict[bytes, tuple[bytes, int]]


class OffsetsLog:
    def __init__(self, store: TopicStore, *, compact_min_records: int = 10_000,
                 compact_ratio: int = 2) -> None:
        self._store = store
        self._partitions = store.partition_count(OFFSETS_TOPIC) or 1
        self._live: list[dict[bytes, tuple[bytes, int]]] = [
            {} for _ in range(self._partitions)]
        self._records: list[int] = [0] * self._partitions
        self._compact_min = compact_min_records
        self._ratio = compact_ratio
        self.compactions = 0

    def partition_of(self, group_id: str) -> int:
        return coordinator_partition(group_id, self._partitions)

    def replay(self) -> Iterator[GroupRecord]:
        """Every record, in log order, for ``Coordinator.load``; learns the live keys."""
        for partition in range(self._partitions):
            yield from self.replay_partition(partition)

    def replay_partition(self, partition: int) -> Iterator[GroupRecord]:
        """One partition's records, in log order, for ``Coordinator.load_partition``
        (a broker that became its leader): its live keys are learnt afresh, since as a
        follower this broker copied records without looking at them."""
        live = self._live[partition] = {}
        self._records[partition] = 0
        for rec in self._store.scan(OFFSETS_TOPIC, partition):
            if rec.key is None:
                continue
            self._records[partition] += 1
            self._remember(live, rec.key, rec.value, rec.timestamp_ms)
            try:
                yield record_from_kv(rec.key, rec.value)
            except ValueError as exc:
                log.error("group_record_unreadable", partition=partition,
                          offset=rec.offset, error=str(exc))

    def write(self, records: Sequence[GroupRecord], now_ms: int) -> list[int]:
        """Append the records (one batch per partition); returns the partitions written.

        Raises StorageError when a partition cannot be written. The records of one group
        (all of one OffsetCommit) go to one partition, so they are one append: written
        or not as a whole.
        """
        by_partition: dict[int, list[KV]] = {}
        by_group: dict[str, list[KV]] = {}
        for group_id, key, value in encode_records(records):
            items = by_group.get(group_id)
            if items is None:
                items = by_group[group_id] = by_partition.setdefault(
                    self.partition_of(group_id), [])
            items.append((key, value, now_ms))
        for partition, items in by_partition.items():
            self._store.append_kv(OFFSETS_TOPIC, partition, items)
            live = self._live[partition]
            for key, value, ts in items:
                if value is None:
                    live.pop(key, None)
                else:
                    live[key] = (value, ts)
            self._records[partition] += len(items)
        return list(by_partition)

    def prepare_steps(self, group_id: str, records: Sequence[tuple[bytes, bytes]],
                      now_ms: int) -> Steps[PreparedWrite]:
        """The batch ``write`` would append for these offset commits of one group
        (``to_kv`` bytes, none a tombstone), encoded in steps; nothing is written."""
        items: list[KV] = []
        live: dict[bytes, tuple[bytes, int]] = {}
        for start in range(0, len(records), PREPARE_STEP):
            chunk = records[start:start + PREPARE_STEP]
            items.extend([(key, value, now_ms) for key, value in chunk])
            live.update([(key, (value, now_ms)) for key, value in chunk])
            yield
        batch = yield from encode_kv_batch_steps(items)
        return PreparedWrite(self.partition_of(group_id), batch, read_header(batch), live)

    def write_prepared(self, prepared: PreparedWrite) -> int:
        """Append a prepared batch (one append: written or not as a whole); returns its
        partition. Raises StorageError when it cannot be written."""
        partition = prepared.partition
        self._store.log(OFFSETS_TOPIC, partition).append(prepared.batch, prepared.header)
        self._live[partition].update(prepared.live)
        self._records[partition] += prepared.header.record_count
        return partition

    def needs_compaction(self, partition: int) -> bool:
        records = self._records[partition]
        return (records >= self._compact_min
                and records > self._ratio * max(len(self._live[partition]), 1))

    def compact_steps(self, partition: int,
                      after_durable: Callable[[Callable[[], None]], None]) -> Steps[None]:
        """Append a snapshot of the live records a batch a step, then (once durable) drop
        what precedes it. Run one at a time per partition.

        Writes go on between steps. Each key's value is read when its batch is written:
        the current one, or none if deleted meanwhile (its tombstone is after the roll);
        keys written meanwhile are after the roll too. So replaying from any point on,
        the snapshot abandoned half-way (closing the generator, a storage error) or not,
        gives the live keys: every record of the snapshot holds a value the key had,
        and any later change of it is written after it.
        """
        plog = self._store.log(OFFSETS_TOPIC, partition)
        live = self._live[partition]
        try:
            plog.roll()
        except StorageError as exc:
            log.error("compaction_failed", partition=partition, error=str(exc))
            return
        start = plog.log_end_offset
        before = self._records[partition]
        keys = list(live)
        written = 0
        for at in range(0, len(keys), SNAPSHOT_BATCH):
            yield
            items: list[KV] = []
            for key in keys[at:at + SNAPSHOT_BATCH]:
                current = live.get(key)
                if current is not None:
                    items.append((key, *current))
            if not items:
                continue
            try:
                batch = run_steps(encode_kv_batch_steps(items, rows_per_step=len(items)))
                plog.append(batch, read_header(batch))
            except StorageError as exc:
                log.error("compaction_failed", partition=partition, error=str(exc),
                          snapshot_written=written)
                return
            self._records[partition] += len(items)
            written += len(items)
        self._records[partition] -= before  # once the drop is done: what the log holds
        self.compactions += 1

        def drop() -> None:
            deleted = plog.delete_segments_before(start)
            log.info("offsets_compacted", partition=partition, records_before=before,
                     live=written, segments_deleted=deleted)

        after_durable(drop)

    @staticmethod
    def _remember(live: dict[bytes, tuple[bytes, int]], key: bytes, value: bytes | None,
                  ts: int) -> None:
        if value is None:
            live.pop(key, None)
        else:
            live[key] = (value, ts)
