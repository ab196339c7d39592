"""A plain client cannot pose as a follower (issue 24, 0c; Kafka's KIP-903).

Three in-process brokers on one in-memory etcd, the real followers' fetchers stopped.
An unauthenticated connection sends the leader Fetch requests with ``replica_id`` set
to each follower's node id. Before the broker epoch, the leader counted them as those
followers: the high watermark moved and an acks=all write was acknowledged that no
follower held. Now a replica fetch must carry the follower's current registration's
revision; without it, or with another, it is refused and counts for nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from groupwire.client.connection import Connection
from groupwire.protocol.batches import BatchRecord, encode_batch
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)
from tests.integration.cluster.harness import (
    BOUND_S,
    LocalCluster,
    controller_of,
    image_of,
    leader_of,
)

NODES = (1, 2, 3)
TP = ("t", 0)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[LocalCluster]:
    c = LocalCluster(tmp_path, offsets_topic_num_partitions=1,
                     offsets_topic_replication_factor=1, replica_fetch_wait_max_ms=50)
    try:
        await c.start(*NODES)
        await c.until(lambda: all(image_of(c, n).controller_id is not None for n in c.brokers))
        await c.create_topic("t", 1, 3)
        yield c
    finally:
        await c.close()


async def _stop_followers(c: LocalCluster, leader: int) -> list[int]:
    """Stop the real followers' fetchers from ``leader``: only the impostor fetches."""
    followers = [n for n in NODES if n != leader]

    def following() -> bool:
        for n in followers:
            node = c.brokers[n].cluster
            assert node is not None and node.replicas is not None
            fetcher = node.replicas.fetchers.get(leader)
            if fetcher is None or TP not in fetcher.partitions:
                return False
        return True

    await c.until(following)
    for n in followers:
        node = c.brokers[n].cluster
        assert node is not None and node.replicas is not None
        fetcher = node.replicas.fetchers[leader]
        assert fetcher.service is not None
        await fetcher.service.stop()
    return followers


def _pose(follower: int, epoch: int | None, end: int) -> FetchRequest:
    """A fetch claiming that ``follower``'s log reaches ``end``."""
    return FetchRequest(replica_id=follower, replica_epoch=epoch, max_wait_ms=0,
                        topics=[FetchTopic(topic=TP[0], partitions=[
                            FetchPartition(partition=TP[1], fetch_offset=end)])])


def _produce(acks: int, timeout_ms: int) -> ProduceRequest:
    return ProduceRequest(acks=acks, timeout_ms=timeout_ms, topic_data=[TopicProduceData(
        name=TP[0], partition_data=[PartitionProduceData(
            index=TP[1], records=encode_batch([BatchRecord(b"v", timestamp_ms=1)]))])])


@pytest.mark.parametrize("posed_epoch", ["none", "wrong"])
async def test_a_fetch_posing_as_a_follower_is_refused_and_moves_nothing(
        cluster: LocalCluster, posed_epoch: str) -> None:
    c = cluster
    leader = leader_of(c, *TP)
    followers = await _stop_followers(c, leader)
    image = image_of(c, leader)
    epochs = {n: image.broker_epochs[n] for n in followers}
    plog = c.brokers[leader].store.log(*TP)
    hw_before = plog.high_watermark

    # acks=all, waiting for the ISR; its answer comes after the impostor's fetches.
    producer = await Connection.open("127.0.0.1", c.brokers[leader].port)
    impostor = await Connection.open("127.0.0.1", c.brokers[leader].port)
    try:
        acked = asyncio.ensure_future(producer.send(
            _produce(-1, 2000), timeout=BOUND_S, response_type=ProduceResponse))
        # Requests take effect in order per connection: once this is answered, the
        # batch is in the leader's log.
        await producer.send(ListOffsetsRequest(topics=[ListOffsetsTopic(
            name=TP[0], partitions=[ListOffsetsPartition(partition_index=TP[1],
                                                         timestamp=-1)])]),
            timeout=BOUND_S, response_type=ListOffsetsResponse)
        assert plog.log_end_offset == hw_before + 1
        for follower in followers:
            epoch = None if posed_epoch == "none" else epochs[follower] + 1
            answer = await impostor.send(_pose(follower, epoch, hw_before + 1), timeout=BOUND_S,
                                         response_type=FetchResponse)
            assert answer.error_code == ErrorCode.STALE_BROKER_EPOCH, answer
            assert answer.responses == []
        assert plog.high_watermark == hw_before
        # The write no follower holds is not acknowledged.
        produced = await acked
        entry = produced.responses[0].partition_responses[0]
        assert entry.error_code == ErrorCode.REQUEST_TIMED_OUT
        assert plog.high_watermark == hw_before

        # The same fetch with each follower's real epoch is a follower's: it counts.
        # (So what refused the impostor was the epoch, nothing else.)
        for follower in followers:
            answer = await impostor.send(_pose(follower, epochs[follower], hw_before + 1),
                                         timeout=BOUND_S, response_type=FetchResponse)
            assert answer.error_code == ErrorCode.NONE, answer
        assert plog.high_watermark == plog.log_end_offset
    finally:
        await producer.close()
        await impostor.close()


async def test_a_broker_epoch_is_its_registration_and_followers_send_theirs(
        cluster: LocalCluster) -> None:
    """Every broker agrees on each one's epoch, the revision its key was created at, and
    replication runs with it (a follower's fetches are taken)."""
    c = cluster
    epochs = image_of(c, controller_of(c)).broker_epochs
    assert sorted(epochs) == list(NODES)
    for n in NODES:
        assert image_of(c, n).broker_epochs == epochs
        key = await c.store.get(f"/groupwire/test/brokers/{n}")
        assert key is not None and key.create_revision == epochs[n]
    leader = leader_of(c, *TP)
    produced = await c.send(leader, _produce(-1, 5000), ProduceResponse)
    assert produced.responses[0].partition_responses[0].error_code == ErrorCode.NONE
