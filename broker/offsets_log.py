"""``__consumer_offsets``: where the coordinator's records become durable, and compaction.

Every record has a key naming what it overwrites (a group's metadata, one partition's
committed offset) and a value, or none for a tombstone. This module keeps the latest
value per key of each partition in memory, so it can compact without reading the log:
when a partition holds far more records than live keys, it rolls a segment, appends the
live records as a snapshot, and once that snapshot is durable drops every segment before
it. Replaying the log at start then reads one snapshot plus what came after.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from groupwire.broker.coordinator import GroupRecord, encode_records, record_from_kv
from groupwire.broker.logs import get_logger
from groupwire.broker.storage import TopicStore
from groupwire.broker.storage.errors import StorageError
from groupwire.protocol.hashing import coordinator_partition

log = get_logger("groupwire.offsets_log")

OFFSETS_TOPIC = "__consumer_offsets"
SNAPSHOT_BATCH = 1000
"""Records per batch when writing a snapshot."""

KV = tuple[bytes, bytes | None, int]


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
            live = self._live[partition]
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

    def needs_compaction(self, partition: int) -> bool:
        records = self._records[partition]
        return (records >= self._compact_min
                and records > self._ratio * max(len(self._live[partition]), 1))

    def compact(self, partition: int, after_durable: Callable[[Callable[[], None]], None],
                ) -> None:
        """Append a snapshot of the live records, then (once durable) drop what precedes it."""
        plog = self._store.log(OFFSETS_TOPIC, partition)
        live = self._live[partition]
        try:
            plog.roll()
            start = plog.log_end_offset
            items = [(key, value, ts) for key, (value, ts) in live.items()]
            for i in range(0, len(items), SNAPSHOT_BATCH):
                self._store.append_kv(OFFSETS_TOPIC, partition, items[i:i + SNAPSHOT_BATCH])
        except StorageError as exc:
            log.error("compaction_failed", partition=partition, error=str(exc))
            return
        before = self._records[partition]
        self._records[partition] = len(items)
        self.compactions += 1

        def drop() -> None:
            deleted = plog.delete_segments_before(start)
            log.info("offsets_compacted", partition=partition, records_before=before,
                     live=len(items), segments_deleted=deleted)

        after_durable(drop)

    @staticmethod
    def _remember(live: dict[bytes, tuple[bytes, int]], key: bytes, value: bytes | None,
                  ts: int) -> None:
        if value is None:
            live.pop(key, None)
        else:
            live[key] = (value, ts)
