"""A leader whose view of etcd is not current (fenced: lease lost, image stale) moves
no high watermark and acknowledges no acks=all produce: the ISR it would rest on may
already be a new leader's (issue 24's zombie leader). ISR changes go through a txn
guarded by the partition state's revision, so a stale leader's write fails."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from groupwire.broker.cluster.image import ClusterImage
from groupwire.broker.cluster.keys import PartitionState, encode_partition, partition_key
from groupwire.broker.cluster.txn import Put, Txn
from groupwire.broker.etcd import MemoryStore
from groupwire.broker.replication.leader import LeaderStates
from groupwire.broker.storage import StorageConfig, TopicStore
from groupwire.protocol.batches import BatchRecord, encode_batch, validate_batch
from groupwire.protocol.errors import ErrorCode

CLUSTER = "c1"
TP = ("t", 0)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TopicStore]:
    s = TopicStore(tmp_path / "data", StorageConfig(offsets_partitions=1))
    s.create_topic("t", 1)
    yield s
    s.close(sync=False)


def _append(store: TopicStore) -> int:
    batch = encode_batch([BatchRecord(value=b"v", timestamp_ms=1)])
    plog = store.log(*TP)
    plog.append(batch, validate_batch(batch))
    return plog.log_end_offset


async def test_an_untrusted_leader_neither_moves_the_high_watermark_nor_acks(
        store: TopicStore) -> None:
    trusted = [True]
    image = ClusterImage(CLUSTER)
    state = PartitionState(1, 3, (1, 2), 0)
    image.partitions[TP] = state
    etcd = MemoryStore()
    leaders = LeaderStates(1, store, etcd, CLUSTER, lambda: image, replica_lag_time_max_ms=60000,
                           min_insync_replicas=1, on_high_watermark=lambda _tp: None,
                           trusted=lambda: trusted[0])
    store.log(*TP).become_leader(3)
    leaders.lead(TP, (1, 2), state)
    end = _append(store)
    leaders.appended(TP)

    trusted[0] = False  # its watch stalled: the image may be long out of date
    leaders.follower_fetched(TP, 2, end)  # would make the batch committed
    assert store.log(*TP).high_watermark == 0
    assert await leaders.acked(TP, end, timeout_ms=50) == ErrorCode.NOT_LEADER_OR_FOLLOWER

    trusted[0] = True  # caught up, still the leader
    leaders.follower_fetched(TP, 2, end)
    assert store.log(*TP).high_watermark == end
    assert await leaders.acked(TP, end, timeout_ms=50) == ErrorCode.NONE
    await leaders.close()
    await etcd.close()


async def test_a_stale_leaders_isr_write_fails_on_its_revision_guard(
        store: TopicStore) -> None:
    etcd = MemoryStore()
    key = partition_key(CLUSTER, *TP)
    old = PartitionState(1, 0, (1, 2, 3), 0)
    await etcd.txn(Txn((), (Put(key, encode_partition(old)),)))
    kvs, revision = await etcd.get_prefix("/groupwire/")
    stale = ClusterImage.from_kvs(CLUSTER, kvs, revision)  # what the zombie last saw
    # Meanwhile the controller moved leadership to broker 2 (epoch 1, ISR [2, 3]).
    await etcd.txn(Txn((), (Put(key, encode_partition(PartitionState(2, 1, (2, 3), 1))),)))
    leaders = LeaderStates(1, store, etcd, CLUSTER, lambda: stale, replica_lag_time_max_ms=1,
                           min_insync_replicas=1, on_high_watermark=lambda _tp: None,
                           clock=lambda: 10_000)
    store.log(*TP).become_leader(0)
    leaders.lead(TP, (1, 2, 3), old)
    leaders.shrink_now()  # followers 2 and 3 never fetch: shrink to [1]
    for task in list(leaders._writes):
        await task
    rs = leaders.states[TP]
    assert rs.isr == {1, 2, 3} and rs.pending_isr is None  # not shrunk to itself
    assert leaders.isr_shrinks == 0
    current = await etcd.get(key)
    assert current is not None and b'"leader":2' in current.value.replace(b" ", b"")
    await leaders.close()
    await etcd.close()
