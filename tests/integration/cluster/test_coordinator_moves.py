"""Coordinators that move: when the broker leading a group's offsets partition leaves,
the partition's new leader loads the group from the replicated log, and a member that
goes on heartbeating with its member id and generation carries on without a rebalance;
committed offsets survive."""

from __future__ import annotations

from pathlib import Path

from groupwire.broker.storage.metadata import OFFSETS_TOPIC
from groupwire.client.admin import Admin
from groupwire.client.consumer import Consumer
from groupwire.client.producer import Producer
from groupwire.client.types import TopicPartition
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.hashing import coordinator_partition
from groupwire.protocol.messages import (
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from tests.integration.cluster.harness import (
    LocalCluster,
    consume,
    controller_of,
    image_of,
    leader_of,
)

GROUP = "moving"


def _hosts(c: LocalCluster, node: int, group: str) -> bool:
    hosting = c.brokers[node].started.hosting
    assert hosting is not None
    return hosting.coordinates(group)


async def test_a_group_survives_its_coordinator_leaving_without_a_rebalance(
        tmp_path: Path) -> None:
    c = LocalCluster(tmp_path, offsets_topic_num_partitions=3,
                     group_initial_rebalance_delay_ms=0, replica_fetch_wait_max_ms=20)
    try:
        await c.start(1, 2, 3)
        await c.serving(offsets_partitions=3)
        await c.create_topic("t", 3, 3)
        p = coordinator_partition(GROUP, 3)
        coordinator = leader_of(c, OFFSETS_TOPIC, p)
        await c.until(lambda: _hosts(c, coordinator, GROUP))
        bootstrap = ",".join(f"127.0.0.1:{b.port}" for b in c.brokers.values())
        sent = [b"m%03d" % i for i in range(60)]
        seen: list[bytes] = []
        async with Producer(bootstrap, linger_ms=0) as producer, Consumer(
                bootstrap, group_id=GROUP, auto_offset_reset="earliest",
                session_timeout_ms=6000, heartbeat_interval_ms=100,
                enable_auto_commit=False) as consumer:
            consumer.subscribe(["t"])
            for value in sent[:30]:
                await producer.send("t", value, key=value)
            await producer.flush()
            await consume(consumer, 30, seen)
            await consumer.commit()
            member, generation = consumer.member_id, consumer.generation_id
            committed = {tp: await consumer.committed(tp) for tp in consumer.assignment()}

            await c.stop(coordinator)
            new = leader_of(c, OFFSETS_TOPIC, p)
            await c.until(lambda: leader_of(c, OFFSETS_TOPIC, p) != coordinator
                          and _hosts(c, leader_of(c, OFFSETS_TOPIC, p), GROUP))
            new = leader_of(c, OFFSETS_TOPIC, p)
            for value in sent[30:]:
                await producer.send("t", value, key=value)
            await producer.flush()
            await consume(consumer, 60, seen)
            assert sorted(seen) == sent  # nothing lost, nothing read twice
            # The same member in the same generation: no rebalance happened.
            assert (consumer.member_id, consumer.generation_id) == (member, generation)
            described = await c.send(new, DescribeGroupsRequest(groups=[GROUP]),
                                     DescribeGroupsResponse)
            group = described.groups[0]
            assert group.error_code == ErrorCode.NONE
            assert (group.group_state, group.generation_id) == ("Stable", generation)
            assert [m.member_id for m in group.members] == [member]
            # The offsets committed through the old coordinator are there.
            fetched = await c.send(new, OffsetFetchRequest(group_id=GROUP),
                                   OffsetFetchResponse)
            got = {(t.name, q.partition_index): q.committed_offset
                   for t in fetched.topics for q in t.partitions}
            for tp, offset in committed.items():
                assert offset is not None
                assert got[(tp.topic, tp.partition)] >= offset.offset
        # Other brokers refuse the group: NOT_COORDINATOR, per group in DescribeGroups.
        other = next(n for n in c.brokers if n != new)
        elsewhere = await c.send(other, DescribeGroupsRequest(groups=[GROUP]),
                                 DescribeGroupsResponse)
        assert elsewhere.groups[0].error_code == ErrorCode.NOT_COORDINATOR
    finally:
        await c.close()


async def test_a_deleted_topics_offsets_go_on_a_coordinator_without_a_replica(
        tmp_path: Path) -> None:
    c = LocalCluster(tmp_path, offsets_topic_num_partitions=3)
    try:
        await c.start(1, 2, 3)
        await c.serving(offsets_partitions=3)
        await c.create_topic("t", 1, 1)
        holder = leader_of(c, "t", 0)
        group = next(g for g in (f"g{i}" for i in range(100))
                     if leader_of(c, OFFSETS_TOPIC, coordinator_partition(g, 3)) != holder)
        coordinator = leader_of(c, OFFSETS_TOPIC, coordinator_partition(group, 3))
        await c.until(lambda: _hosts(c, coordinator, group))
        committed = await c.send(coordinator, OffsetCommitRequest(group_id=group, topics=[
            OffsetCommitRequestTopic(name="t", partitions=[OffsetCommitRequestPartition(
                partition_index=0, committed_offset=7)])]), OffsetCommitResponse)
        assert committed.topics[0].partitions[0].error_code == ErrorCode.NONE
        store = c.brokers[coordinator].store
        assert store is not None and store.partition_count("t") is None  # no replica here
        # The admin, bootstrapped elsewhere, finds the group where it is coordinated.
        elsewhere = next(n for n in c.brokers if n != coordinator)
        async with Admin(f"127.0.0.1:{c.brokers[elsewhere].port}") as admin:
            offsets = await admin.list_consumer_group_offsets(group)
            assert {tp: o.offset for tp, o in offsets.items()} == {TopicPartition("t", 0): 7}
            assert group in [g.group_id for g in await admin.list_groups()]
            [described] = await admin.describe_groups(group)
            assert described.group_id == group and described.state == "Empty"
        deleted = await c.send(controller_of(c), DeleteTopicsRequest(topic_names=["t"]),
                               DeleteTopicsResponse)
        assert deleted.responses[0].error_code == ErrorCode.NONE
        # The coordinator drops them as its watch sees the topic go.
        await c.until(lambda: "t" not in image_of(c, coordinator).topics)
        got = await c.send(coordinator, OffsetFetchRequest(group_id=group),
                           OffsetFetchResponse)
        assert [(t.name, q.partition_index) for t in got.topics for q in t.partitions] == []
    finally:
        await c.close()
