"""Replication across three in-process brokers: followers copy the leader's batches,
acks=all is answered once the ISR has them, a new leader has every acknowledged record,
and a returning broker catches up and rejoins the ISR."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from groupwire.protocol.batches import BatchRecord, decode_records, encode_batch
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    CreatableTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)
from tests.integration.cluster.harness import (
    LocalCluster,
    controller_of,
    image_of,
    leader_of,
    led_everywhere,
)

NODES = (1, 2, 3)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[LocalCluster]:
    c = LocalCluster(tmp_path, offsets_topic_num_partitions=1,
                     replica_fetch_wait_max_ms=50)
    try:
        await c.start(*NODES)
        await c.until(lambda: all(image_of(c, n).controller_id is not None for n in c.brokers))
        created = await c.send(controller_of(c), CreateTopicsRequest(topics=[CreatableTopic(
            name="t", num_partitions=1, replication_factor=3)]), CreateTopicsResponse)
        assert created.topics[0].error_code == ErrorCode.NONE
        await c.until(lambda: led_everywhere(c, "t", 1))
        yield c
    finally:
        await c.close()


async def _produce(c: LocalCluster, node: int, value: bytes, acks: int = -1,
                   timeout_ms: int = 5000) -> tuple[int, int]:
    batch = encode_batch([BatchRecord(value, timestamp_ms=1)])
    answer = await c.send(node, ProduceRequest(acks=acks, timeout_ms=timeout_ms, topic_data=[
        TopicProduceData(name="t", partition_data=[PartitionProduceData(index=0,
                                                                        records=batch)])]),
        ProduceResponse)
    part = answer.responses[0].partition_responses[0]
    return part.error_code, part.base_offset


async def _read_all(c: LocalCluster, node: int) -> list[bytes]:
    got = await c.send(node, FetchRequest(max_wait_ms=0, topics=[FetchTopic(
        topic="t", partitions=[FetchPartition(partition=0, fetch_offset=0)])]), FetchResponse)
    part = got.responses[0].partitions[0]
    assert part.error_code == ErrorCode.NONE, part.error_message
    return [r.value or b"" for r in decode_records(bytes(part.records))]


def _log_end(c: LocalCluster, node: int) -> int:
    store = c.brokers[node].store
    assert store is not None
    return store.log("t", 0).log_end_offset


async def test_acks_all_answers_once_every_isr_member_has_the_batch(
        cluster: LocalCluster) -> None:
    leader = leader_of(cluster, "t", 0)
    for i in range(20):
        code, base = await _produce(cluster, leader, b"v%d" % i)
        assert (code, base) == (ErrorCode.NONE, i)
        # Answered acks=all: every ISR member's log already has it.
        assert all(_log_end(cluster, n) >= i + 1 for n in NODES)
    assert await _read_all(cluster, leader) == [b"v%d" % i for i in range(20)]
    # Followers hold the leader's batches byte for byte, epochs included.
    stores = [cluster.brokers[n].store for n in NODES]
    reads = {s.log("t", 0).read(0, 1 << 20, True, to_log_end=True)  # type: ignore[union-attr]
             for s in stores}
    assert len(reads) == 1


async def test_a_new_leader_has_every_acknowledged_record(cluster: LocalCluster) -> None:
    leader = leader_of(cluster, "t", 0)
    acked = []
    for i in range(10):
        code, _ = await _produce(cluster, leader, b"a%d" % i)
        assert code == ErrorCode.NONE
        acked.append(b"a%d" % i)
    before = image_of(cluster, leader).partitions[("t", 0)]
    await cluster.stop(leader)
    survivor = next(iter(cluster.brokers))
    await cluster.until(lambda: led_everywhere(cluster, "t", 1)
                        and image_of(cluster, survivor).partitions[("t", 0)].leader_epoch
                        > before.leader_epoch)
    new_leader = leader_of(cluster, "t", 0)
    assert new_leader != leader
    # Everything acknowledged is on the new leader; consumers see it once the other
    # follower's fetch has moved the new leader's high watermark (as in Kafka).
    assert _log_end(cluster, new_leader) == 10
    new_store = cluster.brokers[new_leader].store
    assert new_store is not None
    await cluster.until(lambda: new_store.log("t", 0).high_watermark == 10)
    assert await _read_all(cluster, new_leader) == acked
    code, base = await _produce(cluster, new_leader, b"after")
    assert (code, base) == (ErrorCode.NONE, 10)
    # OffsetsForLeaderEpoch answers from the new leader's epoch cache: the old epoch
    # ends where the new one began (a follower truncates there), the new one at the end.
    ends = await cluster.send(new_leader, OffsetsForLeaderEpochRequest(
        replica_id=leader, topics=[OffsetForLeaderTopic(topic="t", partitions=[
            OffsetForLeaderPartition(partition=0, leader_epoch=e)
            for e in (before.leader_epoch, before.leader_epoch + 1)])]),
        OffsetsForLeaderEpochResponse)
    assert [(p.error_code, p.leader_epoch, p.end_offset)
            for p in ends.topics[0].partitions] == [
        (ErrorCode.NONE, before.leader_epoch, 10),
        (ErrorCode.NONE, before.leader_epoch + 1, 11)]
    # The old epoch's leader is fenced: its epoch is over.
    store = cluster.brokers[new_leader].store
    assert store is not None
    assert store.log("t", 0).epoch_cache.latest_epoch == before.leader_epoch + 1


async def test_a_returning_follower_catches_up_and_rejoins_the_isr(
        cluster: LocalCluster) -> None:
    leader = leader_of(cluster, "t", 0)
    follower = next(n for n in NODES if n != leader)
    await cluster.stop(follower)
    await cluster.until(lambda: follower not in image_of(cluster, leader).partitions[("t", 0)].isr)
    metrics = cluster.brokers[leader].metrics.registry
    led = metrics.get_sample_value("groupwire_cluster_leader_partitions")
    assert led is not None and led >= 1  # "t" and maybe the offsets partition
    # Every partition it leads has a replica on the stopped broker (RF 3 over 3).
    assert metrics.get_sample_value("groupwire_cluster_under_replicated_partitions") == led
    assert metrics.get_sample_value("groupwire_cluster_live_brokers") == 2
    for i in range(5):  # ISR of two: still enough for acks=all (min 2)
        assert (await _produce(cluster, leader, b"w%d" % i))[0] == ErrorCode.NONE
    await cluster.start(follower)
    await cluster.until(lambda: follower in image_of(cluster, leader).partitions[("t", 0)].isr)
    assert _log_end(cluster, follower) == _log_end(cluster, leader) == 5
    await cluster.until(lambda: metrics.get_sample_value(
        "groupwire_cluster_under_replicated_partitions") == 0)
    assert metrics.get_sample_value("groupwire_cluster_isr_expands_total") == led
