"""Admin over a real broker: topics, groups, offsets, lag and offset resets."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from groupwire.broker.server import Broker
from groupwire.client.admin import Admin, PartitionLag, TopicDescription, TopicSpec
from groupwire.client.cluster import Cluster
from groupwire.client.connection import Connection
from groupwire.client.errors import (
    BrokerNotAvailableError,
    ClientClosedError,
    GroupIdNotFoundError,
    InvalidPartitionsError,
    NonEmptyGroupError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from groupwire.client.producer import Producer
from groupwire.client.types import OffsetAndMetadata, TopicPartition

from ..rawgroup import RawMember

CreateTopic = Callable[..., Awaitable[str]]


async def produce_n(bootstrap: str, topic: str, partition: int, n: int,
                    first_ts: int = 1_000) -> None:
    async with Producer(bootstrap) as p:
        for i in range(n):
            await p.send(topic, b"v", partition=partition, timestamp_ms=first_ts + i)


async def stable_member(broker: Broker, group: str, topic: str, partitions: int) -> RawMember:
    conn = await Connection.open("127.0.0.1", broker.port, client_id="member")
    m = RawMember(conn, group, [topic])
    assert (await m.join_group()).error_code == 0
    assert (await m.sync({m.member_id: [(topic, list(range(partitions)))]})).error_code == 0
    return m


async def test_create_list_describe_and_grow_topics(admin: Admin) -> None:
    created = await admin.create_topics(["a", TopicSpec("b", 3)], num_partitions=2)
    assert created == {"a": 2, "b": 3}
    with pytest.raises(TopicAlreadyExistsError):
        await admin.create_topics("a", 1)
    assert await admin.create_topics("a", 1, exist_ok=True) == {}
    assert await admin.list_topics() == {"a": 2, "b": 3}
    everything = await admin.list_topics(include_internal=True)
    assert everything["__consumer_offsets"] == 50 and everything["a"] == 2
    await admin.create_partitions("a", 5)
    with pytest.raises(InvalidPartitionsError):
        await admin.create_partitions("a", 4)
    assert await admin.describe_topics(["a", "__group_events"]) == [
        TopicDescription("a", 5, False), TopicDescription("__group_events", 1, True)]
    with pytest.raises(UnknownTopicOrPartitionError):
        await admin.describe_topics(["missing"])


async def test_groups_listed_described_with_decoded_assignment_and_deleted(
        broker: Broker, admin: Admin, create_topic: CreateTopic) -> None:
    await create_topic("orders", 2)
    m = await stable_member(broker, "billing", "orders", 2)
    try:
        listed = await admin.list_groups()
        assert [(g.group_id, g.protocol_type, g.state) for g in listed] == [
            ("billing", "consumer", "Stable")]
        assert await admin.list_groups(states=["empty"]) == []
        (desc,) = await admin.describe_groups("billing")
        assert (desc.state, desc.protocol, desc.generation_id, desc.leader_id) == (
            "Stable", "range", m.generation_id, m.member_id)
        (member,) = desc.members
        assert member.member_id == m.member_id
        assert member.assignment == [TopicPartition("orders", 0), TopicPartition("orders", 1)]
        assert member.topics == ["orders"]
        assert desc.rebalances and desc.rebalances[-1].reason == "member-joined"
        errors = await admin.delete_groups(["billing", "nobody"])
        assert isinstance(errors["billing"], Exception) and "NON_EMPTY_GROUP" in str(
            errors["billing"])
        assert isinstance(errors["nobody"], GroupIdNotFoundError)
        assert (await m.leave()).error_code == 0
        assert await admin.delete_groups("billing") == {"billing": None}
        (gone,) = await admin.describe_groups("billing")
        assert gone.state == "Dead" and gone.members == []
    finally:
        await m.conn.close()


async def test_offsets_lag_and_reset_of_an_empty_group(
        bootstrap: str, admin: Admin, create_topic: CreateTopic) -> None:
    await create_topic("events", 2)
    await produce_n(bootstrap, "events", 0, 5, first_ts=1_000)
    await produce_n(bootstrap, "events", 1, 3, first_ts=2_000)
    await admin.reset_group_offsets("g", to=1, topics=["events"])
    assert await admin.list_consumer_group_offsets("g") == {
        TopicPartition("events", 0): OffsetAndMetadata(1, ""),
        TopicPartition("events", 1): OffsetAndMetadata(1, "")}
    assert await admin.group_lag("g") == {
        TopicPartition("events", 0): PartitionLag(1, 5, 4),
        TopicPartition("events", 1): PartitionLag(1, 3, 2)}
    assert await admin.reset_group_offsets("g", to="latest") == {
        TopicPartition("events", 0): 5, TopicPartition("events", 1): 3}
    assert await admin.reset_group_offsets("g", to="earliest") == {
        TopicPartition("events", 0): 0, TopicPartition("events", 1): 0}
    assert await admin.reset_group_offsets("g", to=99) == {  # clamped to the log end
        TopicPartition("events", 0): 5, TopicPartition("events", 1): 3}
    # first record at or after 1_003 is offset 3 in p0; none in p1's range -> its first
    assert await admin.reset_group_offsets("g", timestamp_ms=1_003) == {
        TopicPartition("events", 0): 3, TopicPartition("events", 1): 0}
    assert await admin.reset_group_offsets("g", timestamp_ms=9_999) == {
        TopicPartition("events", 0): 5, TopicPartition("events", 1): 3}
    with pytest.raises(ValueError):
        await admin.reset_group_offsets("g")


async def test_reset_refused_while_the_group_has_members(
        broker: Broker, admin: Admin, create_topic: CreateTopic) -> None:
    await create_topic("busy", 1)
    m = await stable_member(broker, "busy-group", "busy", 1)
    try:
        assert (await m.commit({("busy", 0): 0})).topics[0].partitions[0].error_code == 0
        with pytest.raises(NonEmptyGroupError, match="is Stable"):
            await admin.reset_group_offsets("busy-group", to="latest")
        lag = await admin.group_lag("busy-group")
        assert lag == {TopicPartition("busy", 0): PartitionLag(0, 0, 0)}
    finally:
        await m.conn.close()


# --- the shared Cluster underneath (connection handling) ----------------------------------


async def test_cluster_skips_dead_bootstrap_addresses_and_reconnects(broker: Broker) -> None:
    cluster = Cluster(["127.0.0.1:1", f"127.0.0.1:{broker.port}"], request_timeout_ms=5000,
                      retry_backoff_ms=1, retry_backoff_max_ms=5)
    try:
        first = await cluster.connection()
        assert first.peer.endswith(f":{broker.port}") and cluster.api_versions
        await first.close()  # lost: the next idempotent request reconnects
        md = await cluster.metadata(None)
        assert md.partitions["__group_events"] == 1 and "__group_events" in md.internal
        assert (await cluster.connection()) is not first
        assert await cluster.find_coordinator("g") == ("127.0.0.1", broker.port)
        other = await cluster.new_connection()
        assert other is not await cluster.connection()
        await other.close()
    finally:
        await cluster.close()


async def test_cluster_gives_up_when_no_broker_answers() -> None:
    cluster = Cluster("127.0.0.1:1,127.0.0.1:2", request_timeout_ms=100, retry_backoff_ms=5)
    with pytest.raises(BrokerNotAvailableError,
                       match=r"127\.0\.0\.1:1, 127\.0\.0\.1:2: connection refused$"):
        await cluster.connection()
    await cluster.close()
    with pytest.raises(ClientClosedError):
        await cluster.connection()


async def test_producer_resends_after_losing_its_connection(
        broker: Broker, bootstrap: str, create_topic: CreateTopic) -> None:
    await create_topic("resend", 1)
    async with Producer(bootstrap, retry_backoff_ms=1) as p:
        assert (await p.send_and_wait("resend", b"a")).offset == 0
        conn = await p.cluster.connection()
        await conn.close()
        assert (await p.send_and_wait("resend", b"b")).offset == 1
