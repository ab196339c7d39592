"""Preferred-leader elections in a cluster of three (in process, an in-memory etcd): the
controller moves leadership back to each partition's first replica when it is live and
in the ISR, answers ELECTION_NOT_NEEDED and PREFERRED_LEADER_NOT_AVAILABLE otherwise,
and any other broker answers NOT_CONTROLLER; the SDK and the CLI find the controller."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from groupwire.broker.cluster.keys import PartitionState, encode_partition, partition_key
from groupwire.broker.cluster.txn import Compare, Put, Txn, TxnResult
from groupwire.client.admin import Admin
from groupwire.client.types import TopicPartition
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    CreatableTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    ElectLeadersTopic,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
)
from tests.integration.cluster.harness import (
    LocalCluster,
    controller_of,
    image_of,
    led_everywhere,
)

NODES = (1, 2, 3)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[LocalCluster]:
    c = LocalCluster(tmp_path, offsets_topic_num_partitions=1)
    try:
        await c.start(*NODES)
        await c.until(lambda: all(image_of(c, n).controller_id is not None for n in c.brokers))
        controller = controller_of(c)
        created = await c.send(controller, CreateTopicsRequest(topics=[CreatableTopic(
            name="t", num_partitions=3, replication_factor=3)]), CreateTopicsResponse)
        assert created.topics[0].error_code == ErrorCode.NONE
        await c.until(lambda: led_everywhere(c, "t", 3))
        yield c
    finally:
        await c.close()


def _preferred(c: LocalCluster, p: int) -> int:
    return image_of(c, controller_of(c)).topics["t"].replicas[p][0]


def _state(c: LocalCluster, p: int) -> PartitionState:
    return image_of(c, controller_of(c)).partitions[("t", p)]  # type: ignore[no-any-return]


async def _write_state(c: LocalCluster, p: int, state: PartitionState) -> None:
    """What a controller's election would have written, written by the test instead."""
    controller = controller_of(c)
    image = image_of(c, controller)
    key = partition_key("test", "t", p)
    result = await c.store.txn(Txn(
        (Compare(key, "mod", "==", image.partition_revisions[("t", p)]),),
        (Put(key, encode_partition(state)),)))
    assert result.succeeded
    await c.until(lambda: all(image_of(c, n).partitions[("t", p)] == state for n in c.brokers))


async def _elect(c: LocalCluster, node_id: int, partitions: list[int] | None,
                 timeout_ms: int = 5000) -> ElectLeadersResponse:
    return await c.send(node_id, ElectLeadersRequest(
        topic_partitions=None if partitions is None
        else [ElectLeadersTopic(topic="t", partitions=partitions)],
        timeout_ms=timeout_ms), ElectLeadersResponse)


def _codes(resp: ElectLeadersResponse) -> dict[tuple[str, int], int]:
    return {(r.topic, p.partition_id): p.error_code
            for r in resp.replica_election_results for p in r.partition_result}


async def _metadata_leaders(c: LocalCluster, node_id: int) -> list[tuple[int, int]]:
    md = await c.send(node_id, MetadataRequest(topics=[MetadataRequestTopic(name="t")]),
                      MetadataResponse)
    return [(p.leader_id, p.leader_epoch) for p in md.topics[0].partitions]


async def test_a_leader_moved_off_its_preferred_replica_is_moved_back(
        cluster: LocalCluster) -> None:
    controller = controller_of(cluster)
    fresh = await _elect(cluster, controller, [0, 1, 2, 7])
    assert fresh.error_code == ErrorCode.NONE
    assert _codes(fresh) == {("t", 0): ErrorCode.ELECTION_NOT_NEEDED,
                             ("t", 1): ErrorCode.ELECTION_NOT_NEEDED,
                             ("t", 2): ErrorCode.ELECTION_NOT_NEEDED,
                             ("t", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}

    # Partition 1 led by its second replica, its preferred one still in the ISR.
    before = _state(cluster, 1)
    replicas = image_of(cluster, controller).topics["t"].replicas[1]
    moved = PartitionState(replicas[1], before.leader_epoch + 1, before.isr,
                           before.partition_epoch + 1, before.isr_storage)
    await _write_state(cluster, 1, moved)
    await cluster.until(lambda: led_everywhere(cluster, "t", 3))
    assert (await _metadata_leaders(cluster, controller))[1] == (replicas[1],
                                                                 moved.leader_epoch)

    elected = await _elect(cluster, controller, [1, 0])
    assert elected.error_code == ErrorCode.NONE
    [topic] = elected.replica_election_results
    assert [(r.partition_id, r.error_code) for r in topic.partition_result] == [
        (1, ErrorCode.NONE), (0, ErrorCode.ELECTION_NOT_NEEDED)]  # request order
    assert topic.partition_result[0].error_message is None
    # Once answered, the controller's image already shows the preferred leader, in the
    # next epoch, with the ISR kept; every broker's Metadata comes to say so.
    assert _state(cluster, 1) == PartitionState(replicas[0], moved.leader_epoch + 1,
                                                before.isr, moved.partition_epoch + 1,
                                                before.isr_storage)
    await cluster.until(lambda: led_everywhere(cluster, "t", 3)
                        and all(image_of(cluster, n).partitions[("t", 1)].leader == replicas[0]
                                for n in NODES))
    for n in NODES:
        assert (await _metadata_leaders(cluster, n))[1] == (replicas[0],
                                                            moved.leader_epoch + 1)


async def test_an_election_is_answered_once_its_write_is_seen_even_if_the_watch_was_first(
        cluster: LocalCluster) -> None:
    """etcd may deliver a write to the watch before the txn's own answer (on a real etcd,
    often): the controller answers once its image shows the new leader, not when the
    request's ``timeout_ms`` runs out."""
    controller = controller_of(cluster)
    node = cluster.brokers[controller].cluster
    assert node is not None and node.controller is not None
    runtime = node.controller
    store = runtime.store

    class WatchFirst:
        """The store, its txn answered only once the watch brought the write in."""

        def __getattr__(self, name: str) -> object:
            return getattr(store, name)

        async def txn(self, txn: Txn) -> TxnResult:
            result = await store.txn(txn)
            if result.succeeded:
                await cluster.until(lambda: node.image.revision >= result.revision)
            return result

    before = _state(cluster, 1)
    replicas = image_of(cluster, controller).topics["t"].replicas[1]
    await _write_state(cluster, 1, PartitionState(replicas[1], before.leader_epoch + 1,
                                                  before.isr, before.partition_epoch + 1,
                                                  before.isr_storage))
    runtime.store = WatchFirst()  # type: ignore[assignment]
    # timeout_ms far past the harness's BOUND_S: an answer at the timeout fails the send
    elected = await _elect(cluster, controller, [1], timeout_ms=600_000)
    assert _codes(elected) == {("t", 1): ErrorCode.NONE}
    assert _state(cluster, 1).leader == replicas[0]


async def test_a_dead_preferred_replica_is_not_available(cluster: LocalCluster) -> None:
    """(Out of the ISR but live is the same answer: tests/unit/replication; here the
    leader's replication could bring it back into the ISR at any moment.)"""
    controller = controller_of(cluster)
    victim = next(n for n in NODES if n != controller)
    p = next(q for q in range(3) if _preferred(cluster, q) == victim)
    await cluster.stop(victim)
    await cluster.until(lambda: _state(cluster, p).leader not in (victim, -1)
                        and led_everywhere(cluster, "t", 3))
    before = _state(cluster, p)
    resp = await _elect(cluster, controller, None)
    assert resp.error_code == ErrorCode.NONE
    codes = _codes(resp)
    assert codes[("t", p)] == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    assert {code for (topic, _), code in codes.items() if topic == "t"} == {
        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, ErrorCode.ELECTION_NOT_NEEDED}
    assert ("__consumer_offsets", 0) in codes  # nil: every partition, internal ones too
    assert [r.topic for r in resp.replica_election_results] == [
        "__consumer_offsets", "__group_events", "t"]
    message = next(r.error_message for t in resp.replica_election_results if t.topic == "t"
                   for r in t.partition_result if r.partition_id == p)
    assert message == f"t-{p}: its preferred replica {victim} is not live"
    assert _state(cluster, p) == before  # nothing written


async def test_only_the_controller_elects_and_the_sdk_finds_it(
        cluster: LocalCluster) -> None:
    controller = controller_of(cluster)
    other = next(n for n in NODES if n != controller)
    refused = await _elect(cluster, other, [0])
    assert refused.error_code == ErrorCode.NOT_CONTROLLER
    assert refused.error_message == (f"broker {other} is not the controller: broker "
                                     f"{controller} is")
    assert refused.replica_election_results == []
    unknown = await cluster.send(controller, ElectLeadersRequest(election_type=2),
                                 ElectLeadersResponse)
    assert unknown.error_code == ErrorCode.INVALID_REQUEST
    # Unclean, with every partition led: nothing to lose data for.
    unclean = await cluster.send(controller, ElectLeadersRequest(election_type=1),
                                 ElectLeadersResponse)
    assert unclean.error_code == ErrorCode.NONE
    assert {p.error_code for r in unclean.replica_election_results
            for p in r.partition_result} == {ErrorCode.ELECTION_NOT_NEEDED}

    before = _state(cluster, 2)
    replicas = image_of(cluster, controller).topics["t"].replicas[2]
    await _write_state(cluster, 2, PartitionState(replicas[2], before.leader_epoch + 1,
                                                  before.isr, before.partition_epoch + 1,
                                                  before.isr_storage))
    # Bootstrapped at a broker that is not the controller: routed to it.
    async with Admin(f"127.0.0.1:{cluster.brokers[other].port}",
                     request_timeout_ms=5000) as admin:
        results = await admin.elect_leaders([TopicPartition("t", 2), TopicPartition("t", 0)])
        assert results[TopicPartition("t", 2)] is None
        err = results[TopicPartition("t", 0)]
        assert err is not None and err.code == ErrorCode.ELECTION_NOT_NEEDED
        desc = await admin.describe_cluster()
        assert [b.node_id for b in desc.brokers] == list(NODES)
        assert [b.node_id for b in desc.brokers if b.controller] == [controller]
        parts = await admin.describe_partitions(["t"])
        assert parts[2].leader == replicas[0]
        assert parts[2].leader_epoch == before.leader_epoch + 2


async def test_the_cli_shows_the_cluster_and_elects(cluster: LocalCluster) -> None:
    controller = controller_of(cluster)
    other = next(n for n in NODES if n != controller)
    bootstrap = f"127.0.0.1:{cluster.brokers[other].port}"

    async def run(*argv: str) -> tuple[int, str, str]:
        done = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "groupwire", *argv], capture_output=True,
            text=True, timeout=60, env={**os.environ, "COLUMNS": "200"})
        return done.returncode, done.stdout, done.stderr

    code, out, _ = await run("cluster", "brokers", "--bootstrap", bootstrap, "--json")
    assert code == 0
    brokers = json.loads(out)
    assert brokers["controller_id"] == controller
    assert [(b["node_id"], b["port"], b["controller"]) for b in brokers["brokers"]] == [
        (n, cluster.brokers[n].port, n == controller) for n in NODES]

    victim = next(n for n in NODES if n not in (controller, other))
    p = next(q for q in range(3) if _preferred(cluster, q) == victim)
    await cluster.stop(victim)
    await cluster.until(lambda: _state(cluster, p).leader not in (victim, -1)
                        and victim not in _state(cluster, p).isr)
    code, out, _ = await run("cluster", "partitions", "--topic", "t", "--under-replicated",
                             "--bootstrap", bootstrap, "--json")
    assert code == 0
    shown = json.loads(out)
    assert {d["partition"] for d in shown} == {0, 1, 2}  # the victim was in every ISR
    assert all(d["offline_replicas"] == [victim] and victim not in d["isr"] for d in shown)
    code, out, _ = await run("cluster", "partitions", "--unavailable",
                             "--bootstrap", bootstrap)
    assert code == 0 and out.splitlines() == [
        "partitions", "topic\tpartition\tleader\tepoch\treplicas\tISR\toffline"]

    code, out, _ = await run("cluster", "elect-leaders", "--topic", "t", "--partition",
                             str(p), "--bootstrap", bootstrap)
    assert code == 0
    assert out.splitlines()[:2] == ["preferred leader elections",
                                    "topic\tpartition\tresult\tdetail"]
    assert out.splitlines()[2] == (f"t\t{p}\tPREFERRED_LEADER_NOT_AVAILABLE\t"
                                   f"t-{p}: its preferred replica {victim} is not live")
