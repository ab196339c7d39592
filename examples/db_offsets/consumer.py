"""Offsets kept in the application's database: the rebalance-listener pattern.

Each batch of a partition is applied and that partition's next offset stored in ONE
database transaction, so a record's effect and "this record is done" commit together.
On assignment the consumer seeks every partition to the offset the database holds; the
broker's committed offsets are not used at all. A consumer killed at any moment leaves
the database either before or after a whole batch: nothing is applied twice or lost.

    python examples/db_offsets/consumer.py --bootstrap 127.0.0.1:9092 --topic orders \\
        --group billing --db sqlite:///billing.db      # or postgresql://..., mysql://...
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from store import Store

from groupwire import Consumer, RebalanceListener, Record, TopicPartition


class SeekToStoredOffsets(RebalanceListener):
    """On assignment, continue each partition where the database says it stopped."""

    def __init__(self, consumer: Consumer, store: Store) -> None:
        self.consumer = consumer
        self.store = store

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        for tp in assigned:
            offset = self.store.next_offset(tp.topic, tp.partition)
            if offset is not None:
                self.consumer.seek(tp, offset)

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        # every applied batch is already in the database with its offset: nothing to flush
        pass

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        pass


async def run(bootstrap: str, topic: str, group: str, db_url: str, name: str) -> None:
    store = Store(db_url)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    consumer = Consumer(bootstrap, group_id=group, client_id=name, enable_auto_commit=False,
                        auto_offset_reset="earliest", session_timeout_ms=10000,
                        heartbeat_interval_ms=500)
    async with consumer:
        consumer.subscribe([topic], listener=SeekToStoredOffsets(consumer, store))
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=200)
            for tp, records in batches.items():
                def apply(db: Store, tp: TopicPartition = tp,
                          records: list[Record] = records) -> None:
                    for record in records:
                        db.add_result(tp.topic, tp.partition, record.offset,
                                      (record.value or b"").decode())
                    db.set_next_offset(tp.topic, tp.partition, records[-1].offset + 1)

                store.in_transaction(apply)  # retried whole if the database asks
    store.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", default="127.0.0.1:9092", help="broker HOST:PORT")
    p.add_argument("--topic", required=True, help="topic to consume")
    p.add_argument("--group", required=True, help="consumer group")
    p.add_argument("--db", default="sqlite:///offsets-example.db",
                   help="database URL: sqlite:///PATH (default), postgresql://..., mysql://...")
    p.add_argument("--name", default="db-consumer", help="client id")
    args = p.parse_args()
    asyncio.run(run(args.bootstrap, args.topic, args.group, args.db, args.name))


if __name__ == "__main__":
    main()
