"""A replica whose disk fails (issue 24, 0d: "a broker with a full disk kept its
leaderships while refusing writes"). A failed write takes a replicated log offline; its
leader hands the leadership to another in-sync replica and leaves the ISR, so acks=all
produces succeed again on the new leader with nothing acknowledged lost; a follower
whose log went offline stops fetching it and leaves the ISR. Once the disk takes writes
again the replica catches up and rejoins.

Three in-process brokers on one in-memory etcd, each on a disk the test can fail."""

from __future__ import annotations

import errno
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import structlog.testing

from groupwire.broker.clustering.node import ClusterNode
from groupwire.broker.server import Broker
from groupwire.broker.storage.fileops import FileOps
from groupwire.protocol.batches import BatchRecord, decode_records, encode_batch
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)
from tests.integration.cluster.harness import LocalCluster, image_of, leader_of

NODES = (1, 2, 3)
TP = ("t", 0)


class FaultyDisk(FileOps):
    """Every pwrite and fsync fails with ENOSPC while ``failing`` (a full disk)."""

    def __init__(self) -> None:
        self.failing = False

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        if self.failing:
            raise OSError(errno.ENOSPC, "injected: no space left on device")
        return super().pwrite(fd, data, offset)

    def fsync(self, fd: int) -> None:
        if self.failing:
            raise OSError(errno.ENOSPC, "injected: no space left on device")
        super().fsync(fd)


@pytest.fixture
async def cluster(tmp_path: Path, request: pytest.FixtureRequest,
                  ) -> AsyncIterator[tuple[LocalCluster, dict[int, FaultyDisk]]]:
    """``request.param``: ``--log-offline-retry-ms`` (0 unless a test says)."""
    c = LocalCluster(tmp_path, offsets_topic_num_partitions=1, replica_fetch_wait_max_ms=50,
                     log_offline_retry_ms=getattr(request, "param", 0),
                     min_insync_replicas=2)
    disks = {n: FaultyDisk() for n in NODES}
    try:
        for n in NODES:
            broker = Broker(c.settings(n), metadata_store=c.store, file_ops=disks[n])
            await broker.start()
            c.brokers[n] = broker
        await c.until(lambda: all(image_of(c, n).controller_id is not None for n in NODES))
        await c.create_topic("t", 1, 3)
        yield c, disks
    finally:
        await c.close()


def _node(c: LocalCluster, node_id: int) -> ClusterNode:
    node = c.brokers[node_id].cluster
    assert node is not None
    return node


async def _produce(c: LocalCluster, value: bytes, tp: tuple[str, int] = TP,
                   acks: int = -1) -> int:
    answer = await c.send(leader_of(c, *tp), ProduceRequest(
        acks=acks, timeout_ms=5000, topic_data=[TopicProduceData(name=tp[0], partition_data=[
            PartitionProduceData(index=tp[1], records=encode_batch(
                [BatchRecord(value, timestamp_ms=1)]))])]), ProduceResponse)
    return answer.responses[0].partition_responses[0].error_code


async def _values(c: LocalCluster) -> list[bytes]:
    answer = await c.send(leader_of(c, *TP), FetchRequest(max_wait_ms=0, topics=[FetchTopic(
        topic=TP[0], partitions=[FetchPartition(partition=TP[1], fetch_offset=0)])]),
        FetchResponse)
    data = answer.responses[0].partitions[0]
    assert data.error_code == ErrorCode.NONE, data
    return [r.value or b"" for r in decode_records(data.records)]


def _isr(c: LocalCluster) -> tuple[int, ...]:
    return image_of(c, 1).partitions[TP].isr


def _full_isr_led(c: LocalCluster) -> bool:
    state = image_of(c, 1).partitions[TP]
    return (set(state.isr) == set(NODES)
            and _node(c, state.leader).leadership.led.get(TP) == state.leader_epoch)


async def test_a_leader_whose_disk_fills_hands_its_leadership_over(
        cluster: tuple[LocalCluster, dict[int, FaultyDisk]]) -> None:
    c, disks = cluster
    await c.until(lambda: _full_isr_led(c))
    acked = []
    for i in range(5):
        value = b"before-%d" % i
        assert await _produce(c, value) == ErrorCode.NONE
        acked.append(value)
    old = leader_of(c, *TP)

    disks[old].failing = True
    with structlog.testing.capture_logs() as logs:
        assert await _produce(c, b"refused") == ErrorCode.KAFKA_STORAGE_ERROR
        await c.until(lambda: leader_of(c, *TP) != old
                      and old not in _isr(c)
                      and _node(c, leader_of(c, *TP)).leadership.led.get(TP)
                      == image_of(c, 1).partitions[TP].leader_epoch)
    assert any(e["event"] == "leadership_handed_over" and e["new_leader"] != old
               for e in logs)
    new = leader_of(c, *TP)
    assert new in NODES and new != old

    for i in range(5):
        value = b"after-%d" % i
        assert await _produce(c, value) == ErrorCode.NONE
        acked.append(value)
    got = await _values(c)
    assert [v for v in got if v in acked] == acked  # nothing acknowledged lost

    # the disk has room again: the old leader's log comes back, catches up and rejoins
    disks[old].failing = False
    await c.until(lambda: old in _isr(c))
    assert (await _values(c))[-len(acked):] == got[-len(acked):]


# Long enough that the log is not tried again (which would fetch once) between the checks.
@pytest.mark.parametrize("cluster", [1000], indirect=True)
async def test_a_follower_whose_disk_fills_leaves_the_isr(
        cluster: tuple[LocalCluster, dict[int, FaultyDisk]]) -> None:
    c, disks = cluster
    await c.until(lambda: _full_isr_led(c))
    leader = leader_of(c, *TP)
    follower = next(n for n in NODES if n != leader)
    disks[follower].failing = True

    # its next append fails: it stops fetching and takes itself out of the ISR, long
    # before the leader's lag rule would (--replica-lag-time-max-ms, 30 s by default)
    assert await _produce(c, b"one") == ErrorCode.NONE
    await c.until(lambda: follower not in _isr(c))
    replicas = _node(c, follower).replicas
    assert replicas is not None
    assert all(TP not in f.partitions for f in replicas.fetchers.values())
    assert await _produce(c, b"two") == ErrorCode.NONE  # 2 in-sync replicas left

    disks[follower].failing = False
    await c.until(lambda: follower in _isr(c))
    assert leader_of(c, *TP) == leader


async def test_a_sole_in_sync_replica_keeps_its_leadership_and_says_so(
        cluster: tuple[LocalCluster, dict[int, FaultyDisk]]) -> None:
    c, disks = cluster
    await c.create_topic("solo", 1, 1)
    solo = ("solo", 0)
    leader = leader_of(c, *solo)
    epoch = image_of(c, 1).partitions[solo].leader_epoch
    assert await _produce(c, b"a", solo, acks=1) == ErrorCode.NONE
    disks[leader].failing = True
    with structlog.testing.capture_logs() as logs:
        assert await _produce(c, b"refused", solo, acks=1) == ErrorCode.KAFKA_STORAGE_ERROR
        await c.until(lambda: _node(c, leader).cluster_gauges()[
            "offline_leader_partitions"] == 1)
    assert [e["partition"] for e in logs if e["event"] == "leadership_kept_offline"
            and e["topic"] == "solo"] == [0]
    state = image_of(c, 1).partitions[solo]
    assert (state.leader, state.leader_epoch) == (leader, epoch)

    disks[leader].failing = False
    assert await _produce(c, b"b", solo, acks=1) == ErrorCode.NONE
