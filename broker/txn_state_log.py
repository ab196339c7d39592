"""``__transaction_state``: where the transaction coordinator's records become durable,
compacted as ``__consumer_offsets`` is (``broker.compacted_log``).

Each transaction writes three or four records of its transactional id, and only the last
one counts (``broker.transactions.records``): uncompacted, the topic would grow without
bound and a restart replay all of it. Here a partition holding far more records than
live ids is compacted to one record per id, the expired ones (tombstones) gone.

The topic is made on the first transactional FindCoordinator, after this object exists:
partitions are learnt as they are first replayed or written (``CompactedLog``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from groupwire.broker.compacted_log import KV, CompactedLog
from groupwire.broker.logs import get_logger
from groupwire.broker.storage import TRANSACTIONS_TOPIC, TopicStore
from groupwire.broker.transactions import TxnRecord, record_from_kv
from groupwire.protocol.steps import Steps

log = get_logger("groupwire.txn_state_log")


class TxnStateLog:
    """The coordinator's records in ``__transaction_state``, by the partition the
    coordinator chose for each (``TransactionCoordinator.partition_of``)."""

    def __init__(self, store: TopicStore, *, compact_min_records: int = 10_000,
                 compact_ratio: int = 2) -> None:
        self._log = CompactedLog(store, TRANSACTIONS_TOPIC,
                                 compact_min_records=compact_min_records,
                                 compact_ratio=compact_ratio,
                                 compacted_event="transaction_state_compacted")

    @property
    def compactions(self) -> int:
        """Compactions whose snapshot was written whole."""
        return self._log.compactions

    def replay_partition(self, partition: int) -> Iterator[TxnRecord]:
        """``partition``'s records in log order, for ``TransactionCoordinator.
        load_partition``; learns its live ids afresh. An unreadable record is logged and
        skipped. Raises ``NoSuchPartitionError`` (a KeyError) at the first step if the
        topic has no such partition."""
        for rec in self._log.replay_kv(partition):
            assert rec.key is not None  # replay_kv yields keyed records only
            try:
                yield record_from_kv(rec.key, rec.value)
            except ValueError as exc:
                log.error("transaction_record_unreadable", partition=partition,
                          offset=rec.offset, error=str(exc))

    def write(self, partition: int, records: Sequence[TxnRecord], now_ms: int) -> int:
        """Append ``records`` to ``partition`` as one batch, written or not as a whole,
        stamped ``now_ms`` (wall clock); returns its base offset. Raises StorageError
        (``NoSuchPartitionError`` when the topic has no such partition), having changed
        nothing."""
        items: list[KV] = [(*r.to_kv(), now_ms) for r in records]
        return self._log.append(partition, items)

    def needs_compaction(self, partition: int) -> bool:
        """``partition`` holds at least ``compact_min_records`` records and more than
        ``compact_ratio`` times its live ids."""
        return self._log.needs_compaction(partition)

    def compact_steps(self, partition: int,
                      after_durable: Callable[[Callable[[], None]], None]) -> Steps[None]:
        """Append a snapshot of the live ids' records a batch a step, then hand
        ``after_durable`` the drop of the segments before it, to call once the snapshot is
        durable (``CompactedLog.compact_steps``: abandoned half-way, the log still replays
        to the latest record per id). Run one at a time per partition."""
        return self._log.compact_steps(partition, after_durable)
