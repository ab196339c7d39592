"""A wiped disk never erases a partition (issue 24, 0b; Kafka's KIP-858).

Three in-process brokers on one in-memory etcd. The other two are stopped, so the third
is the only ISR member; then it is stopped, its data dir wiped (moved aside, so the
"right replica" can come back later), it is started on the empty dir, then the others.
Before storage identities it led with an empty log and the others truncated to it: every
acknowledged record was lost. Now the partition stays offline, saying why, until the
replica with the log returns, or an operator runs an unclean election."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from groupwire.broker.cluster.controller import Offline, decide
from groupwire.broker.cluster.keys import NO_LEADER
from groupwire.broker.storage.storage_id import STORAGE_ID_FILE
from groupwire.protocol.batches import BatchRecord, decode_records, encode_batch
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    ElectLeadersRequest,
    ElectLeadersResponse,
    ElectLeadersTopic,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    MetadataRequest,
    MetadataResponse,
    MetadataTopic,
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
TP = ("t", 0)
BATCHES, PER_BATCH = 16, 100
ACKED = [b"r%d" % i for i in range(BATCHES * PER_BATCH)]


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


async def _produce(c: LocalCluster, node: int, values: list[bytes]) -> ProduceResponse:
    batch = encode_batch([BatchRecord(v, timestamp_ms=1) for v in values])
    return await c.send(node, ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[
        TopicProduceData(name="t", partition_data=[PartitionProduceData(index=0,
                                                                        records=batch)])]),
        ProduceResponse)


async def _read_all(c: LocalCluster, node: int) -> list[bytes]:
    values: list[bytes] = []
    while True:
        got = await c.send(node, FetchRequest(max_wait_ms=0, topics=[FetchTopic(
            topic="t", partitions=[FetchPartition(partition=0, fetch_offset=len(values))])]),
            FetchResponse)
        part = got.responses[0].partitions[0]
        assert part.error_code == ErrorCode.NONE, part.error_message
        more = [r.value or b"" for r in decode_records(bytes(part.records))]
        if not more:
            return values
        values.extend(more)


def _storage_id(c: LocalCluster, node: int) -> str:
    return (c.root / f"b{node}" / STORAGE_ID_FILE).read_text().strip()


async def _wipe_the_last_isr_member(c: LocalCluster) -> tuple[int, Path]:
    """The scenario up to the wiped broker and the others back: returns that broker and
    where its old data dir was moved."""
    last = leader_of(c, *TP)
    for i in range(BATCHES):
        answer = await _produce(c, last, ACKED[i * PER_BATCH:(i + 1) * PER_BATCH])
        assert answer.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    old_id = _storage_id(c, last)
    others = [n for n in NODES if n != last]
    for n in others:
        await c.stop(n)
    await c.until(lambda: image_of(c, last).partitions[TP].isr == (last,))
    assert image_of(c, last).partitions[TP].storage_of(last) == old_id
    await c.stop(last)
    disk = c.root / f"disk-of-{last}"
    shutil.move(c.root / f"b{last}", disk)  # the wipe: it starts on an empty dir
    await c.start(last)
    assert _storage_id(c, last) != old_id
    await c.start(*others)

    def offline_everywhere() -> bool:
        if any(len(image_of(c, n).brokers) < 3 for n in NODES):
            return False
        controller = c.brokers[controller_of(c)].cluster
        assert controller is not None and controller.controller is not None
        return controller.controller.offline.get(TP) == Offline(
            "isr_storage_lost", (last,), ())

    await c.until(offline_everywhere)
    return last, disk


async def _check_offline(c: LocalCluster, last: int) -> None:
    controller = controller_of(c)
    image = image_of(c, controller)
    state = image.partitions[TP]
    assert state.leader == NO_LEADER and state.isr == (last,)
    # Level-triggered: with everyone back, the controller has nothing more to write,
    # so the wiped broker is not elected, nor the others outside the ISR.
    node = c.brokers[controller].cluster
    assert node is not None and node.controller is not None
    assert decide(image, node.controller.epoch) == []
    # Counted (the internal topics' partitions, one replica each, may be among them).
    lost = [tp for tp, why in node.controller.offline.items()
            if why.reason == "isr_storage_lost"]
    assert TP in lost
    assert c.brokers[controller].metrics.registry.get_sample_value(
        "groupwire_cluster_offline_partitions_storage_lost") == len(lost)
    for n in NODES:
        answer = await _produce(c, n, [b"lost?"])
        part = answer.responses[0].partition_responses[0]
        assert part.error_code == ErrorCode.LEADER_NOT_AVAILABLE
        assert "came back without their logs" in (part.error_message or "")
    meta = await c.send(last, MetadataRequest(topics=[MetadataTopic(name="t")]),
                        MetadataResponse)
    assert meta.topics[0].partitions[0].error_code == ErrorCode.LEADER_NOT_AVAILABLE
    # The wiped broker took nothing on, and nobody truncated to its empty log.
    for n in NODES:
        store = c.brokers[n].store
        assert store is not None
        if n == last and store.partition_count(TP[0]) is None:
            continue  # its replica is not even made yet (its manager runs on its own)
        assert store.log(*TP).log_end_offset == (0 if n == last else len(ACKED))


async def test_a_wiped_last_isr_member_waits_for_its_disk(cluster: LocalCluster) -> None:
    last, disk = await _wipe_the_last_isr_member(cluster)
    await _check_offline(cluster, last)
    # The disk with the log comes back (a mount that had failed): it leads again.
    await cluster.stop(last)
    shutil.rmtree(cluster.root / f"b{last}")
    shutil.move(disk, cluster.root / f"b{last}")
    await cluster.start(last)
    await cluster.until(lambda: led_everywhere(cluster, "t", 1))
    assert leader_of(cluster, *TP) == last
    assert await _read_all(cluster, last) == ACKED  # 0 of 1,600 acknowledged lost


async def test_an_unclean_election_takes_a_replica_that_kept_its_log(
        cluster: LocalCluster) -> None:
    last, _disk = await _wipe_the_last_isr_member(cluster)
    await _check_offline(cluster, last)
    controller = controller_of(cluster)
    other = next(n for n in NODES if n != controller)
    refused = await cluster.send(other, ElectLeadersRequest(election_type=1),
                                 ElectLeadersResponse)
    assert refused.error_code == ErrorCode.NOT_CONTROLLER
    answer = await cluster.send(controller, ElectLeadersRequest(
        election_type=1, topic_partitions=[ElectLeadersTopic(topic="t", partitions=[0])],
        timeout_ms=5000), ElectLeadersResponse)
    assert answer.error_code == ErrorCode.NONE
    assert [(p.partition_id, p.error_code)
            for p in answer.replica_election_results[0].partition_result] == [
        (0, ErrorCode.NONE)]
    await cluster.until(lambda: led_everywhere(cluster, "t", 1))
    leader = leader_of(cluster, *TP)
    assert leader != last  # a replica with the log, not the wiped one
    assert await _read_all(cluster, leader) == ACKED
    # The wiped broker catches up as a follower and rejoins under its new storage id.
    await cluster.until(lambda: set(image_of(cluster, leader).partitions[TP].isr) == set(NODES))
    state = image_of(cluster, leader).partitions[TP]
    assert state.storage_of(last) == _storage_id(cluster, last)
    store = cluster.brokers[last].store
    assert store is not None and store.log(*TP).log_end_offset == len(ACKED)
    # Asked again, through the CLI: nothing to lose data for, and a loud warning.
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "groupwire", "cluster", "elect-leaders",
                         "--unclean", "--topic", "t", "--partition", "0", "--bootstrap",
                         f"127.0.0.1:{cluster.brokers[other].port}"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    assert "WARNING: an unclean election loses" in done.stderr
    assert done.stdout.splitlines()[0] == "unclean leader elections"
    assert done.stdout.splitlines()[2].startswith("t\t0\tELECTION_NOT_NEEDED\t")
