"""An internal topic compacted by key: what ``__consumer_offsets`` and
``__transaction_state`` share.

Every record has a key naming what it overwrites and a value, or none for a tombstone.
:class:`CompactedLog` keeps the latest value per key of each partition in memory, so it can
compact without reading the log: when a partition holds far more records than live keys,
it rolls a segment, appends the live records as a snapshot, and once that snapshot is
durable drops every segment before it. Replaying the log at start then reads one snapshot
plus what came after. What a key means is the caller's business (``broker.offsets_log``,
``broker.txn_state_log``).

Partitions are learnt as they are used, not fixed at construction: ``__transaction_state``
is created while the broker runs, after its log objects were made. A partition's state
appears the first time it is replayed or written (a write to a partition the store lacks
fails before that), and one never used needs no compaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from groupwire.broker.logs import get_logger
from groupwire.broker.storage import TopicStore
from groupwire.broker.storage.errors import StorageError
from groupwire.protocol.batches import (
    BatchHeader,
    DecodedRecord,
    encode_kv_batch_steps,
    read_header,
)
from groupwire.protocol.steps import Steps, run_steps

log = get_logger("groupwire.compacted_log")

SNAPSHOT_BATCH = 1000
"""Records per batch when writing a snapshot."""

KV = tuple[bytes, bytes | None, int]
"""``(key, value or None for a tombstone, timestamp_ms)``, as ``TopicStore.append_kv``."""

Live = dict[bytes, tuple[bytes, int]]
"""A partition's live keys: each one's latest value and its timestamp."""


class CompactedLog:
    """The live keys and record counts of one internal topic's partitions, and their
    compaction. Callers write through it (:meth:`append`, :meth:`append_encoded`) so that
    it knows what each partition holds; one that appends behind its back must
    :meth:`replay_kv` the partition before compacting it."""

    def __init__(self, store: TopicStore, topic: str, *, compact_min_records: int = 10_000,
                 compact_ratio: int = 2, compacted_event: str = "log_compacted") -> None:
        """``compacted_event``: the log event a finished compaction is reported as."""
        self._store = store
        self.topic = topic
        self._compact_min = compact_min_records
        self._ratio = compact_ratio
        self._event = compacted_event
        self._live: list[Live] = []
        self._records: list[int] = []
        self._grow(store.partition_count(topic) or 0)
        self.compactions = 0
        """Compactions whose snapshot was written whole."""

    @property
    def partitions(self) -> int:
        """How many partitions it has state for (those of the topic when it was made,
        and any used since)."""
        return len(self._live)

    def live(self, partition: int) -> Mapping[bytes, tuple[bytes, int]]:
        """``partition``'s live keys (empty if never used)."""
        return self._live[partition] if partition < len(self._live) else {}

    def record_count(self, partition: int) -> int:
        """Keyed records ``partition`` holds, as far as this object has seen."""
        return self._records[partition] if partition < len(self._records) else 0

    def _grow(self, count: int) -> None:
        while len(self._live) < count:
            self._live.append({})
            self._records.append(0)

    def _use(self, partition: int) -> None:
        if partition < 0:
            raise ValueError(f"no partition {partition} of {self.topic}")
        self._grow(partition + 1)

    def replay_kv(self, partition: int) -> Iterator[DecodedRecord]:
        """``partition``'s keyed records, in log order; its live keys and record count are
        learnt afresh (a follower copied records without looking at them). Raises
        ``NoSuchPartitionError`` (a KeyError) at the first step if the store lacks it."""
        records = self._store.scan(self.topic, partition)
        self._use(partition)
        live = self._live[partition] = {}
        self._records[partition] = 0
        for rec in records:
            if rec.key is None:
                continue
            self._records[partition] += 1
            if rec.value is None:
                live.pop(rec.key, None)
            else:
                live[rec.key] = (rec.value, rec.timestamp_ms)
            yield rec

    def append(self, partition: int, items: Sequence[KV]) -> int:
        """Append ``items`` as one batch (written or not as a whole); returns its base
        offset. Raises StorageError (``NoSuchPartitionError`` for a partition the store
        lacks), having changed nothing."""
        offset = self._store.append_kv(self.topic, partition, items)
        self._use(partition)
        live = self._live[partition]
        for key, value, ts in items:
            if value is None:
                live.pop(key, None)
            else:
                live[key] = (value, ts)
        self._records[partition] += len(items)
        return offset

    def append_encoded(self, partition: int, batch: bytes, header: BatchHeader,
                       live: Mapping[bytes, tuple[bytes, int]]) -> int:
        """Append a batch encoded ahead (its records none a tombstone, ``live`` the keys
        and values they hold); returns its base offset. Raises StorageError."""
        offset = self._store.log(self.topic, partition).append(batch, header)
        self._use(partition)
        self._live[partition].update(live)
        self._records[partition] += header.record_count
        return offset

    def needs_compaction(self, partition: int) -> bool:
        if partition >= len(self._records):
            return False
        records = self._records[partition]
        return (records >= self._compact_min
                and records > self._ratio * max(len(self._live[partition]), 1))

    def compact_steps(self, partition: int,
                      after_durable: Callable[[Callable[[], None]], None], *,
                      batch: int | None = None) -> Steps[None]:
        """Append a snapshot of the live records ``batch`` (``SNAPSHOT_BATCH``) a step,
        then hand ``after_durable`` the drop of what precedes it, to call once the
        snapshot is durable. Run one at a time per partition.

        Writes go on between steps. Each key's value is read when its batch is written:
        the current one, or none if deleted meanwhile (its tombstone is after the roll);
        keys written meanwhile are after the roll too. So replaying from any point on,
        the snapshot abandoned half-way (closing the generator, a storage error) or not,
        gives the live keys: every record of the snapshot holds a value the key had,
        and any later change of it is written after it.
        """
        size = batch or SNAPSHOT_BATCH
        topic = self.topic
        plog = self._store.log(topic, partition)
        self._use(partition)
        live = self._live[partition]
        try:
            plog.roll()
        except StorageError as exc:
            log.error("compaction_failed", topic=topic, partition=partition, error=str(exc))
            return
        start = plog.log_end_offset
        before = self._records[partition]
        keys = list(live)
        written = 0
        for at in range(0, len(keys), size):
            yield
            items: list[KV] = []
            for key in keys[at:at + size]:
                current = live.get(key)
                if current is not None:
                    items.append((key, *current))
            if not items:
                continue
            try:
                encoded = run_steps(encode_kv_batch_steps(items, rows_per_step=len(items)))
                plog.append(encoded, read_header(encoded))
            except StorageError as exc:
                log.error("compaction_failed", topic=topic, partition=partition,
                          error=str(exc), snapshot_written=written)
                return
            self._records[partition] += len(items)
            written += len(items)
        self._records[partition] -= before  # once the drop is done: what the log holds
        self.compactions += 1
        event = self._event

        def drop() -> None:
            deleted = plog.delete_segments_before(start)
            log.info(event, topic=topic, partition=partition, records_before=before,
                     live=written, segments_deleted=deleted)

        after_durable(drop)
