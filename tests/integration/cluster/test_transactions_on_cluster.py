"""Transactions on three brokers: any broker finds a transactional id's coordinator (the
leader of its ``__transaction_state`` partition, made on first need), markers reach
partitions other brokers lead, and a transaction survives its coordinator's broker or a
partition leader leaving in its middle: committed once, read_committed exactly once."""

from __future__ import annotations

import asyncio
from pathlib import Path

from groupwire import Consumer, Producer, TopicPartition
from groupwire.broker.storage.metadata import OFFSETS_TOPIC, TRANSACTIONS_TOPIC
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.hashing import coordinator_partition
from groupwire.protocol.messages import FindCoordinatorRequest, FindCoordinatorResponse
from tests.integration.cluster.harness import LocalCluster, leader_of, led_everywhere

TXN_PARTITIONS = 3
BOUND_S = 30


def _cluster(root: Path) -> LocalCluster:
    # min ISR 1: the second test leaves one broker of three, which takes the writes
    return LocalCluster(root, offsets_topic_num_partitions=3,
                        transaction_state_partitions=TXN_PARTITIONS, min_insync_replicas=1,
                        group_initial_rebalance_delay_ms=0, replica_fetch_wait_max_ms=50)


async def _coordinator(c: LocalCluster, tid: str) -> int:
    """Ask any broker until the id's coordinator is known (the topic is made on the
    first ask); its node id."""
    async with asyncio.timeout(BOUND_S):
        while True:
            answer = await c.send(next(iter(c.brokers)), FindCoordinatorRequest(
                key=tid, key_type=1), FindCoordinatorResponse)
            if answer.error_code == ErrorCode.NONE:
                return answer.node_id
            assert answer.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE, answer
            await c.until(lambda: led_everywhere(c, TRANSACTIONS_TOPIC, TXN_PARTITIONS))


async def _read_committed(bootstrap: str, topic: str, partitions: int,
                          want: int) -> list[bytes]:
    seen: list[bytes] = []
    async with Consumer(bootstrap, isolation_level="read_committed",
                        auto_offset_reset="earliest", fetch_max_wait_ms=100,
                        request_timeout_ms=5000) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        async with asyncio.timeout(BOUND_S):
            while len(seen) < want:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    seen.extend(r.value for r in records)
    return seen


async def test_a_transaction_commits_across_brokers_with_its_offsets(tmp_path: Path) -> None:
    c = _cluster(tmp_path)
    try:
        await c.start(1, 2, 3)
        await c.serving(offsets_partitions=3)
        await c.create_topic("out", 3, 3)
        await c.create_topic("in", 1, 3)
        coordinator = await _coordinator(c, "tx-a")
        p = coordinator_partition("tx-a", TXN_PARTITIONS)
        assert coordinator == leader_of(c, TRANSACTIONS_TOPIC, p)
        bootstrap = f"127.0.0.1:{c.brokers[coordinator % 3 + 1].port}"  # not it
        async with Producer(bootstrap, transactional_id="tx-a", linger_ms=1,
                            request_timeout_ms=5000) as producer, producer.transaction():
            for i in range(30):  # every partition: markers go to each leader
                await producer.send("out", b"v%02d" % i, partition=i % 3)
            await producer.send_offsets_to_transaction({TopicPartition("in", 0): 17},
                                                       "readers")
        seen = await _read_committed(bootstrap, "out", 3, 30)
        assert sorted(seen) == [b"v%02d" % i for i in range(30)]
        group_p = coordinator_partition("readers", 3)
        assert leader_of(c, OFFSETS_TOPIC, group_p) in c.brokers
        async with Consumer(bootstrap, group_id="readers",
                            request_timeout_ms=5000) as consumer:
            committed = await consumer.committed(TopicPartition("in", 0))
        assert committed is not None and committed.offset == 17
    finally:
        await c.close()


async def test_a_transaction_outlives_its_coordinator_and_a_partition_leader(
        tmp_path: Path) -> None:
    """Records sent, then the coordinator's broker leaves (its partition's leadership
    moves with the records replicated) and so does the leader of a partition written:
    the commit goes to the new coordinator, which writes the markers through the new
    leaders; the records are read_committed once each."""
    c = _cluster(tmp_path)
    try:
        await c.start(1, 2, 3)
        await c.serving(offsets_partitions=3)
        await c.create_topic("out", 3, 3)
        coordinator = await _coordinator(c, "tx-b")
        survivor = next(n for n in (1, 2, 3) if n != coordinator)
        bootstrap = f"127.0.0.1:{c.brokers[survivor].port}"
        async with Producer(bootstrap, transactional_id="tx-b", linger_ms=1, acks="all",
                            request_timeout_ms=5000, retry_backoff_ms=50) as producer:
            await producer.begin_transaction()
            for i in range(30):
                await producer.send("out", b"w%02d" % i, partition=i % 3)
            await producer.flush()
            await c.stop(coordinator)
            await c.until(lambda: led_everywhere(c, TRANSACTIONS_TOPIC, TXN_PARTITIONS)
                          and led_everywhere(c, "out", 3))
            leader = next(n for n in c.brokers if n != survivor
                          and any(leader_of(c, "out", p) == n for p in range(3)))
            await c.stop(leader)
            await c.until(lambda: led_everywhere(c, TRANSACTIONS_TOPIC, TXN_PARTITIONS)
                          and led_everywhere(c, "out", 3))
            await producer.commit_transaction()
        seen = await _read_committed(bootstrap, "out", 3, 30)
        assert sorted(seen) == [b"w%02d" % i for i in range(30)]
    finally:
        await c.close()
