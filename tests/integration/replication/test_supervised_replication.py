"""Replication that is never silently stopped (issue 24, 0d and item 1).

Three in-process brokers on one in-memory etcd. A follower's fetcher keeps replicating
its other partitions when one partition's log is deleted under it; and a failure
injected into the replica manager, a replica fetcher, the controller or the group
events forwarder is logged, counted and the service restarted with its state rebuilt:
partitions are led again, replication resumes, a controller returns, events arrive."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import structlog.testing

from groupwire.broker.clustering.node import ClusterNode
from groupwire.broker.storage.metadata import EVENTS_TOPIC
from groupwire.protocol.batches import BatchRecord, encode_batch
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
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
)

NODES = (1, 2, 3)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[LocalCluster]:
    c = LocalCluster(tmp_path, offsets_topic_num_partitions=1,
                     replica_fetch_wait_max_ms=50)
    try:
        await c.start(*NODES)
        await c.until(lambda: all(image_of(c, n).controller_id is not None for n in c.brokers))
        await c.create_topic("y", 1, 3)
        yield c
    finally:
        await c.close()


def node_of(c: LocalCluster, node_id: int) -> ClusterNode:
    node = c.brokers[node_id].cluster
    assert node is not None
    return node


def fail_once(monkeypatch: pytest.MonkeyPatch, obj: object, name: str) -> list[str]:
    """Make ``obj.name()`` (a coroutine method) raise once; returns who failed."""
    original: Callable[..., Coroutine[Any, Any, Any]] = getattr(obj, name)
    failed: list[str] = []

    async def failing(*args: Any, **kwargs: Any) -> Any:
        if not failed:
            failed.append(name)
            raise RuntimeError(f"injected into {name}")
        return await original(*args, **kwargs)

    monkeypatch.setattr(obj, name, failing)
    return failed


def counting(c: LocalCluster) -> list[str]:
    """Every broker's supervisor reports its crashes here (as the broker's metric)."""
    counted: list[str] = []
    for n in c.brokers:
        node_of(c, n).supervisor.on_failure = counted.append
    return counted


async def produce_all(c: LocalCluster, topic: str, partition: int, value: bytes) -> int:
    """acks=all to the partition's leader: answered once every ISR member has it."""
    answer = await c.send(leader_of(c, topic, partition), ProduceRequest(
        acks=-1, timeout_ms=5000, topic_data=[TopicProduceData(name=topic, partition_data=[
            PartitionProduceData(index=partition, records=encode_batch(
                [BatchRecord(value, timestamp_ms=1)]))])]), ProduceResponse)
    return answer.responses[0].partition_responses[0].error_code


def failures(logs: list[dict[str, Any]], task_prefix: str) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == "background_task_failed"
            and str(e["task"]).startswith(task_prefix)]


async def following(c: LocalCluster, follower: int, leader: int,
                    partitions: set[tuple[str, int]]) -> None:
    def check() -> bool:
        replicas = node_of(c, follower).replicas
        assert replicas is not None
        fetcher = replicas.fetchers.get(leader)
        return fetcher is not None and partitions <= set(fetcher.partitions)

    await c.until(check)


async def test_a_fetcher_survives_a_topic_deleted_under_it(cluster: LocalCluster) -> None:
    """The follower's copy of ``x`` goes (a delete racing a create); ``y`` from the same
    leader keeps replicating, and ``x`` is taken up again."""
    c = cluster
    leader = leader_of(c, "y", 0)
    await c.create_topic("x", 3, 3)
    [x_led] = [("x", p) for p in range(3) if leader_of(c, "x", p) == leader] or [("x", 0)]
    follower = next(n for n in NODES if n != leader)
    await following(c, follower, leader, {("y", 0), x_led})
    with structlog.testing.capture_logs() as logs:
        c.brokers[follower].store.delete_topic("x")
        for i in range(3):  # each needs the follower's fetch: its fetcher still runs
            assert await produce_all(c, "y", 0, b"y%d" % i) == ErrorCode.NONE
    assert c.brokers[follower].store.log("y", 0).log_end_offset >= 3
    assert not failures(logs, "replica-fetcher")
    # The image still assigns x here: the replica manager's next pass (any image
    # change wakes it) makes it again and follows it.
    await c.create_topic("wake", 1, 1)
    await following(c, follower, leader, {x_led})
    assert await produce_all(c, *x_led, b"x") == ErrorCode.NONE


async def test_a_replica_manager_crash_is_restarted_and_takes_roles_again(
        cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    c = cluster
    counted = counting(c)
    victim = node_of(c, 2)
    assert victim.replicas is not None
    failed = fail_once(monkeypatch, victim.replicas, "reconcile")
    with structlog.testing.capture_logs() as logs:
        await c.create_topic("z", 3, 3)  # the pass it wakes fails; the next takes it on
    assert failed == ["reconcile"]
    assert counted == ["replica-manager"]
    assert failures(logs, "replica-manager-2")
    service = victim.replicas.service
    assert service is not None and service.running and service.failures == 1
    for p in range(3):
        assert await produce_all(c, "z", p, b"z") == ErrorCode.NONE


async def test_a_fetcher_crash_is_restarted_and_replication_resumes(
        cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    c = cluster
    counted = counting(c)
    leader = leader_of(c, "y", 0)
    follower = next(n for n in NODES if n != leader)
    await following(c, follower, leader, {("y", 0)})
    replicas = node_of(c, follower).replicas
    assert replicas is not None
    fetcher = replicas.fetchers[leader]
    with structlog.testing.capture_logs() as logs:
        failed = fail_once(monkeypatch, fetcher, "_fetch")
        for i in range(3):
            assert await produce_all(c, "y", 0, b"v%d" % i) == ErrorCode.NONE
    assert failed == ["_fetch"]
    assert counted == ["replica-fetcher"]
    assert failures(logs, f"replica-fetcher-{follower}-from-{leader}")
    assert fetcher.service is not None and fetcher.service.failures == 1
    assert replicas.fetchers[leader] is fetcher  # the same fetcher, restarted
    assert c.brokers[follower].store.log("y", 0).log_end_offset == \
        c.brokers[leader].store.log("y", 0).log_end_offset


async def test_a_controller_crash_resigns_and_a_controller_returns(
        cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    c = cluster
    counted = counting(c)
    held = controller_of(c)
    old_epoch = image_of(c, held).controller_epoch
    controller = node_of(c, held).controller
    assert controller is not None
    failed = fail_once(monkeypatch, controller, "_step")
    with structlog.testing.capture_logs() as logs:
        # Any image change runs a step; the topic is written before it.
        await c.create_topic("w", 1, 3)
        await c.until(lambda: all(image_of(c, n).controller_id is not None
                                  and image_of(c, n).controller_epoch > old_epoch
                                  for n in NODES))
    assert failed == ["_step"]
    assert counted == ["controller"]
    assert failures(logs, f"controller-{held}")
    assert [e for e in logs if e["event"] == "controller_resigned"]
    # Whoever holds it now acts as the controller: it creates and elects.
    await c.create_topic("after", 2, 3)


async def test_an_event_forwarder_crash_is_restarted_and_events_arrive(
        cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    c = cluster
    counted = counting(c)
    await c.until(lambda: (EVENTS_TOPIC, 0) in image_of(c, 1).partitions
                  and image_of(c, 1).partitions[(EVENTS_TOPIC, 0)].leader in c.brokers)
    leader = leader_of(c, EVENTS_TOPIC, 0)
    sender = next(n for n in NODES if n != leader)
    events = node_of(c, sender).events
    assert events is not None
    target = c.brokers[leader].store.log(EVENTS_TOPIC, 0)
    before = target.log_end_offset
    failed = fail_once(monkeypatch, events, "_forward")
    with structlog.testing.capture_logs() as logs:
        events.submit([(b"k", b"v", 1)])
        await c.until(lambda: target.log_end_offset > before)
    assert failed == ["_forward"]
    assert counted == ["group-events-forwarder"]
    assert failures(logs, f"group-events-forwarder-{sender}")


async def test_an_isr_shrink_loop_crash_is_restarted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = LocalCluster(tmp_path, offsets_topic_num_partitions=1, replica_lag_time_max_ms=100)
    try:
        await c.start(1)
        counted = counting(c)
        leaders = node_of(c, 1).leaders
        original = leaders.shrink_now
        calls: list[int] = []
        again = asyncio.Event()

        def shrink_now() -> None:
            calls.append(len(calls))
            if len(calls) == 1:
                raise RuntimeError("injected into shrink_now")
            again.set()
            original()

        monkeypatch.setattr(leaders, "shrink_now", shrink_now)
        with structlog.testing.capture_logs() as logs:
            await asyncio.wait_for(again.wait(), 10)
        assert counted == ["isr-shrink"]
        assert failures(logs, "isr-shrink-1")
    finally:
        await c.close()
