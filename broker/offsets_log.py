"""``__consumer_offsets``: where the coordinator's records become durable, and compaction.

Every record has a key naming what it overwrites (a group's metadata, one partition's
committed offset) and a value, or none for a tombstone. The latest value per key of each
partition is kept in memory (``broker.compacted_log``), so a partition is compacted
without reading the log: when it holds far more records than live keys, its live records
are appended as a snapshot and, once that is durable, every segment before it dropped.
Replaying the log at start then reads one snapshot plus what came after.

Both long writes run as steps (``protocol.steps``) the broker spreads over loop turns:
a large OffsetCommit's batch is encoded ahead (:meth:`OffsetsLog.prepare_steps`) and
appended in one piece (:meth:`OffsetsLog.write_prepared`); a compaction writes its
snapshot a batch a step (:meth:`OffsetsLog.compact_steps`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from groupwire.broker import compacted_log
from groupwire.broker.compacted_log import KV, CompactedLog
from groupwire.broker.coordinator import GroupRecord, encode_records, record_from_kv
from groupwire.broker.logs import get_logger
from groupwire.broker.storage import TopicStore
from groupwire.protocol.batches import BatchHeader, encode_kv_batch_steps, read_header
from groupwire.protocol.hashing import coordinator_partition
from groupwire.protocol.steps import Steps

log = get_logger("groupwire.offsets_log")

OFFSETS_TOPIC = "__consumer_offsets"
SNAPSHOT_BATCH = compacted_log.SNAPSHOT_BATCH
"""Records per batch when writing a snapshot."""

PREPARE_STEP = 2048
"""Records :meth:`OffsetsLog.prepare_steps` takes per step besides encoding them."""

__all__ = ["KV", "OFFSETS_TOPIC", "OffsetsLog", "PreparedWrite"]


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
        self._partitions = store.partition_count(OFFSETS_TOPIC) or 1
        self._log = CompactedLog(store, OFFSETS_TOPIC, compact_min_records=compact_min_records,
                                 compact_ratio=compact_ratio,
                                 compacted_event="offsets_compacted")

    @property
    def compactions(self) -> int:
        return self._log.compactions

    @property
    def _live(self) -> list[dict[bytes, tuple[bytes, int]]]:
        """Each partition's live keys (what tests compare)."""
        return [dict(self._log.live(p)) for p in range(self._partitions)]

    @property
    def _records(self) -> list[int]:
        """Each partition's record count (what tests compare)."""
        return [self._log.record_count(p) for p in range(self._partitions)]

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
        for rec in self._log.replay_kv(partition):
            assert rec.key is not None  # replay_kv yields keyed records only
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
            self._log.append(partition, items)
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
        self._log.append_encoded(prepared.partition, prepared.batch, prepared.header,
                                 prepared.live)
        return prepared.partition

    def needs_compaction(self, partition: int) -> bool:
        return self._log.needs_compaction(partition)

    def compact_steps(self, partition: int,
                      after_durable: Callable[[Callable[[], None]], None]) -> Steps[None]:
        """Append a snapshot of the live records a batch a step, then (once durable) drop
        what precedes it (``CompactedLog.compact_steps``: a snapshot abandoned half-way
        still replays to the live keys). Run one at a time per partition."""
        return self._log.compact_steps(partition, after_durable, batch=SNAPSHOT_BATCH)
