"""Three brokers in one cluster (in process, an in-memory etcd): registration, the
controller's topics, Metadata and FindCoordinator from the image, leaders that serve and
followers that refuse, and a new leader once a broker is gone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from groupwire.broker.clustering import controller_apis
from groupwire.broker.storage.metadata import OFFSETS_TOPIC
from groupwire.protocol.batches import BatchRecord, encode_batch
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.hashing import coordinator_partition
from groupwire.protocol.messages import (
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
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
    c = LocalCluster(tmp_path, offsets_topic_num_partitions=5)
    try:
        await c.start(*NODES)
        await c.until(lambda: all(_offsets_led(c, b) for b in c.brokers))
        yield c
    finally:
        await c.close()


def _offsets_led(c: LocalCluster, node_id: int) -> bool:
    """Every offsets partition has a leader that has taken it on (seen from node_id)."""
    image = image_of(c, node_id)
    if OFFSETS_TOPIC not in image.topics:
        return False
    for p in range(5):
        state = image.partitions.get((OFFSETS_TOPIC, p))
        if state is None or state.leader not in c.brokers:
            return False
        leader = c.brokers[state.leader].cluster
        assert leader is not None
        if leader.leadership.led.get((OFFSETS_TOPIC, p)) != state.leader_epoch:
            return False
    return True


async def _create(c: LocalCluster, node_id: int, name: str, partitions: int = 3,
                  rf: int = 3) -> CreateTopicsResponse:
    return await c.send(node_id, CreateTopicsRequest(topics=[CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=rf)]), CreateTopicsResponse)


def _produce(topic: str, p: int, value: bytes, acks: int = -1) -> ProduceRequest:
    batch = encode_batch([BatchRecord(value, timestamp_ms=1)])
    return ProduceRequest(acks=acks, topic_data=[TopicProduceData(
        name=topic, partition_data=[PartitionProduceData(index=p, records=batch)])])


async def test_every_broker_describes_the_same_cluster(cluster: LocalCluster) -> None:
    answers = [await cluster.send(n, MetadataRequest(topics=None), MetadataResponse)
               for n in NODES]
    for md in answers:
        assert [b.node_id for b in md.brokers] == list(NODES)
        assert {b.port for b in md.brokers} == {cluster.brokers[n].port for n in NODES}
        assert md.controller_id == controller_of(cluster)
        assert md.cluster_id == "test"
        offsets = next(t for t in md.topics if t.name == OFFSETS_TOPIC)
        assert offsets.is_internal and len(offsets.partitions) == 5
        for part in offsets.partitions:
            assert sorted(part.replica_nodes) == list(NODES)
            assert sorted(part.isr_nodes) == list(NODES)
            assert part.leader_id in NODES and part.offline_replicas == []
    assert answers[0] == answers[1] == answers[2]


async def test_find_coordinator_names_the_offsets_partition_leader_from_any_broker(
        cluster: LocalCluster) -> None:
    for group in ("g1", "orders", "x" * 40):
        leader = leader_of(cluster, OFFSETS_TOPIC, coordinator_partition(group, 5))
        for n in NODES:
            found = await cluster.send(n, FindCoordinatorRequest(key=group),
                                       FindCoordinatorResponse)
            assert found.error_code == ErrorCode.NONE
            assert (found.node_id, found.port) == (leader, cluster.brokers[leader].port)


async def test_topics_are_created_grown_and_deleted_by_the_controller_only(
        cluster: LocalCluster) -> None:
    controller = controller_of(cluster)
    other = next(n for n in NODES if n != controller)
    refused = await _create(cluster, other, "t")
    assert refused.topics[0].error_code == ErrorCode.NOT_CONTROLLER
    assert f"broker {controller} is" in (refused.topics[0].error_message or "")
    too_many = await _create(cluster, controller, "t", rf=4)
    assert too_many.topics[0].error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    created = await _create(cluster, controller, "t", partitions=3, rf=2)
    assert created.topics[0].error_code == ErrorCode.NONE
    assert created.topics[0].replication_factor == 2
    again = await _create(cluster, controller, "t")
    assert again.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    await cluster.until(lambda: led_everywhere(cluster, "t", 3))
    md = await cluster.send(other, MetadataRequest(topics=[MetadataRequestTopic(name="t")]),
                            MetadataResponse)
    parts = md.topics[0].partitions
    assert [len(p.replica_nodes) for p in parts] == [2, 2, 2]
    assert sorted(p.replica_nodes[0] for p in parts) == sorted(NODES)  # leaders spread
    # Each replica's broker holds the topic locally.
    for p in parts:
        for r in p.replica_nodes:
            store = cluster.brokers[r].store
            assert store is not None and store.partition_count("t") == 3

    grow_elsewhere = await cluster.send(other, CreatePartitionsRequest(
        topics=[CreatePartitionsTopic(name="t", count=5)]), CreatePartitionsResponse)
    assert grow_elsewhere.results[0].error_code == ErrorCode.NOT_CONTROLLER
    grown = await cluster.send(controller, CreatePartitionsRequest(
        topics=[CreatePartitionsTopic(name="t", count=5)]), CreatePartitionsResponse)
    assert grown.results[0].error_code == ErrorCode.NONE
    await cluster.until(lambda: led_everywhere(cluster, "t", 5))

    gone = await cluster.send(controller, DeleteTopicsRequest(topic_names=["t"]),
                              DeleteTopicsResponse)
    assert gone.responses[0].error_code == ErrorCode.NONE

    def deleted_everywhere() -> bool:
        return all(b.store is not None and b.store.partition_count("t") is None
                   for b in cluster.brokers.values())
    await cluster.until(deleted_everywhere)
    md = await cluster.send(other, MetadataRequest(topics=[MetadataRequestTopic(name="t")]),
                            MetadataResponse)
    assert md.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_only_the_leader_takes_produce_and_fetch(cluster: LocalCluster) -> None:
    controller = controller_of(cluster)
    assert (await _create(cluster, controller, "t", 1)).topics[0].error_code == 0
    await cluster.until(lambda: led_everywhere(cluster, "t", 1))
    leader = leader_of(cluster, "t", 0)
    follower = next(n for n in NODES if n != leader)
    ok = await cluster.send(leader, _produce("t", 0, b"v"), ProduceResponse)
    assert ok.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    no = await cluster.send(follower, _produce("t", 0, b"v"), ProduceResponse)
    answer = no.responses[0].partition_responses[0]
    assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert f"broker {leader} does" in (answer.error_message or "")
    fetch = FetchRequest(max_wait_ms=0, topics=[FetchTopic(topic="t", partitions=[
        FetchPartition(partition=0, fetch_offset=0)])])
    got = await cluster.send(follower, fetch, FetchResponse)
    assert got.responses[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    epoch = image_of(cluster, leader).partitions[("t", 0)].leader_epoch
    stale = FetchRequest(max_wait_ms=0, topics=[FetchTopic(topic="t", partitions=[
        FetchPartition(partition=0, fetch_offset=0, current_leader_epoch=epoch + 1)])])
    got = await cluster.send(leader, stale, FetchResponse)
    assert got.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_LEADER_EPOCH


async def test_acks_all_needs_min_insync_replicas(tmp_path: Path) -> None:
    c = LocalCluster(tmp_path, offsets_topic_num_partitions=1,
                     offsets_topic_replication_factor=1, min_insync_replicas=2)
    try:
        await c.start(1, 2)
        await c.until(lambda: _controller_known(c))
        controller = controller_of(c)
        assert (await _create(c, controller, "one", 1, rf=1)).topics[0].error_code == 0
        await c.until(lambda: led_everywhere(c, "one", 1))
        leader = leader_of(c, "one", 0)
        refused = await c.send(leader, _produce("one", 0, b"v", acks=-1), ProduceResponse)
        answer = refused.responses[0].partition_responses[0]
        assert answer.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
        store = c.brokers[leader].store
        assert store is not None and store.log("one", 0).log_end_offset == 0
        taken = await c.send(leader, _produce("one", 0, b"v", acks=1), ProduceResponse)
        assert taken.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    finally:
        await c.close()


def _controller_known(c: LocalCluster) -> bool:
    return all(image_of(c, n).controller_id is not None for n in c.brokers)


async def test_a_leaving_leaders_partitions_get_new_leaders(cluster: LocalCluster) -> None:
    controller = controller_of(cluster)
    assert (await _create(cluster, controller, "t", 3)).topics[0].error_code == 0
    await cluster.until(lambda: led_everywhere(cluster, "t", 3))
    victim = leader_of(cluster, "t", 0)
    before = image_of(cluster, victim).partitions[("t", 0)]
    await cluster.stop(victim)
    await cluster.until(lambda: led_everywhere(cluster, "t", 3)
                        and _offsets_led(cluster, next(iter(cluster.brokers))))
    survivor = next(iter(cluster.brokers))
    after = image_of(cluster, survivor).partitions[("t", 0)]
    assert after.leader != victim and after.leader in before.isr
    assert after.leader_epoch == before.leader_epoch + 1
    assert victim not in after.isr
    md = await cluster.send(survivor, MetadataRequest(topics=[MetadataRequestTopic(name="t")]),
                            MetadataResponse)
    assert victim not in [b.node_id for b in md.brokers]
    part = md.topics[0].partitions[0]
    assert part.offline_replicas == [victim] and part.leader_id == after.leader
    ok = await cluster.send(after.leader, _produce("t", 0, b"after"), ProduceResponse)
    assert ok.responses[0].partition_responses[0].error_code == ErrorCode.NONE


async def test_a_topic_change_the_watch_never_brings_back_times_out(
        cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    controller = controller_of(cluster)
    node = cluster.brokers[controller].cluster
    assert node is not None and node.controller is not None
    never = asyncio.Event()

    async def watch_stalled(_predicate: object) -> None:
        await never.wait()
    monkeypatch.setattr(controller_apis, "CONTROLLER_WAIT_S", 0.05)
    monkeypatch.setattr(node.controller.watcher, "until", watch_stalled)
    answer = await _create(cluster, controller, "stuck")
    assert answer.topics[0].error_code == ErrorCode.REQUEST_TIMED_OUT
    assert "may or may not" in (answer.topics[0].error_message or "")
