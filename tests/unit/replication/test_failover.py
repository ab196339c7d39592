"""The cluster shells on the in-memory etcd twin: time moves only when the test says,
keep-alives run only when the test ticks them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest

from groupwire.broker.cluster.controller import decide
from groupwire.broker.cluster.image import ClusterImage
from groupwire.broker.cluster.keys import (
    BrokerInfo,
    PartitionState,
    broker_key,
    controller_key,
)
from groupwire.broker.clustering import (
    ControllerTask,
    FenceRule,
    ImageWatcher,
    NotControllerError,
    Registration,
    RegistrationError,
)
from groupwire.broker.etcd import MemoryStore
from groupwire.broker.etcd.store import EtcdUnavailableError

CLUSTER = "c1"
TTL = 3
BOUND_S = 5.0


def info(node_id: int, incarnation: str = "a") -> BrokerInfo:
    return BrokerInfo(node_id, "127.0.0.1", 9000 + node_id, None, incarnation)


@dataclass
class Node:
    membership: Registration
    watcher: ImageWatcher
    controller: ControllerTask


@dataclass
class Cluster:
    store: MemoryStore
    nodes: dict[int, Node]

    async def pass_time(self, seconds: int, alive: set[int]) -> None:
        """A second at a time, the ``alive`` nodes keeping their leases alive."""
        for _ in range(seconds):
            self.store.advance(1)
            for node_id in sorted(alive):
                await self.nodes[node_id].membership.tick()

    async def until(self, predicate: Callable[[ClusterImage], bool], node: int) -> ClusterImage:
        async with asyncio.timeout(BOUND_S):
            return await self.nodes[node].watcher.until(predicate)

    def controller(self) -> int:
        [held] = [i for i, n in self.nodes.items() if n.controller.is_controller]
        return held


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    store = MemoryStore()
    nodes: dict[int, Node] = {}
    for node_id in (1, 2, 3):
        m = Registration(store, CLUSTER, info(node_id), TTL, clock=store.now)
        await m.start()
        m.stop_keep_alive()  # the test ticks
        w = ImageWatcher(store, CLUSTER)
        w.start()
        c = ControllerTask(store, CLUSTER, m, w, node_id)
        c.start()
        nodes[node_id] = Node(m, w, c)
    c = Cluster(store, nodes)
    await c.until(lambda im: len(im.brokers) == 3 and im.controller is not None, 1)
    yield c
    for n in nodes.values():
        await n.controller.close()
        await n.watcher.close()
    await store.close()


def test_fence_rule_counts_from_when_the_answered_keep_alive_was_sent() -> None:
    rule = FenceRule(ttl_s=3.0, last_answered_sent=10.0)
    assert not rule.fenced(12.9)
    assert rule.fenced(13.0)
    rule.answered(12.0)  # sent at 12, answered late: still counts from 12
    assert not rule.fenced(14.9)
    assert rule.fenced(15.0)
    rule.answered(11.0)  # an older answer arriving out of order moves nothing back
    assert rule.fenced(15.0)
    rule.lost = True  # etcd said the lease is gone
    assert rule.fenced(12.1)
    rule.renew(20.0)
    assert not rule.fenced(22.0)


async def test_a_dead_brokers_partitions_get_a_new_leader(cluster: Cluster) -> None:
    ctl = cluster.controller()
    topic = await cluster.nodes[ctl].controller.create_topic("t", 3, 3)
    # Each broker leads one of the three partitions; kill one that is not the controller.
    victim = next(r[0] for r in topic.replicas if r[0] != ctl)
    p = next(i for i, r in enumerate(topic.replicas) if r[0] == victim)
    before = (await cluster.until(lambda im: ("t", p) in im.partitions, ctl)).partitions[("t", p)]
    fenced: list[bool] = []
    cluster.nodes[victim].membership.on_fenced.append(lambda: fenced.append(True))

    await cluster.pass_time(TTL, alive=set(cluster.nodes) - {victim})

    assert await cluster.store.get(broker_key(CLUSTER, victim)) is None
    assert cluster.nodes[victim].membership.fenced
    image = await cluster.until(lambda im: im.partitions[("t", p)].leader != victim, ctl)
    after = image.partitions[("t", p)]
    assert after.leader in before.isr and after.leader != victim
    assert after.leader_epoch == before.leader_epoch + 1
    assert victim not in after.isr
    # Its next keep-alive round finds the lease gone and registers it again.
    await cluster.nodes[victim].membership.tick()
    assert fenced == [True] and not cluster.nodes[victim].membership.fenced
    await cluster.until(lambda im: victim in im.brokers, ctl)


async def test_the_controllers_lease_expiring_elects_another(cluster: Cluster) -> None:
    old = cluster.controller()
    old_epoch = cluster.nodes[old].controller.epoch
    await cluster.nodes[old].controller.create_topic("t", 3, 2)
    await cluster.until(lambda im: len(im.partitions) == 3, old)

    await cluster.pass_time(TTL, alive=set(cluster.nodes) - {old})

    others = set(cluster.nodes) - {old}
    image = await cluster.until(
        lambda im: im.controller_id in others and im.controller_epoch > old_epoch,
        min(others))
    assert not cluster.nodes[old].controller.is_controller
    # The new controller has moved the dead one's leaderships...
    image = await cluster.until(
        lambda im: all(s.leader != old for s in im.partitions.values()), min(others))
    # ...and whatever the deposed one still decides is refused by etcd.
    stale = ClusterImage.from_kvs(CLUSTER, *await cluster.store.get_prefix("/groupwire/c1/"))
    stale.partitions[("t", 0)] = PartitionState(old, 99, (old,), 99)
    txns = decide(stale, old_epoch)
    assert txns
    for txn in txns:
        assert not (await cluster.store.txn(txn)).succeeded
    assert cluster.nodes[min(others)].watcher.image.partitions == image.partitions


async def test_a_restart_waits_for_its_old_registration_to_expire() -> None:
    store = MemoryStore()
    old = Registration(store, CLUSTER, info(1, "old"), TTL, clock=store.now)
    await old.start()
    old.stop_keep_alive()  # crashed: its lease lives on for a TTL
    new = Registration(store, CLUSTER, info(1, "new"), TTL, clock=store.now)
    starting = asyncio.create_task(new.start())
    for _ in range(10):  # counted steps: let it find the old key and watch it
        await asyncio.sleep(0)
    assert not starting.done()
    held = await store.get(broker_key(CLUSTER, 1))
    assert held is not None and b'"old"' in held.value  # not overwritten
    store.advance(TTL)
    async with asyncio.timeout(BOUND_S):
        await starting
    held = await store.get(broker_key(CLUSTER, 1))
    assert held is not None and b'"new"' in held.value and held.lease == new.lease
    await new.close()
    assert await store.get(broker_key(CLUSTER, 1)) is None
    await store.close()


async def test_a_live_duplicate_node_id_is_refused() -> None:
    store = MemoryStore()
    first = Registration(store, CLUSTER, info(1, "first"), TTL, clock=store.now)
    await first.start()
    second = Registration(store, CLUSTER, info(1, "second"), TTL, clock=store.now,
                        register_wait_s=0.05)
    with pytest.raises(RegistrationError, match="another broker running with this node id"):
        await second.start()
    await first.close()
    await store.close()


class AnswersLost(MemoryStore):
    """etcd refreshes the lease but the answer never reaches the broker."""

    async def keep_alive(self, lease: int) -> int:
        await super().keep_alive(lease)
        raise EtcdUnavailableError("connection lost after the request was sent")


async def test_a_fenced_controller_stops_acting_before_etcd_drops_its_key() -> None:
    store = AnswersLost()
    m = Registration(store, CLUSTER, info(1), TTL, clock=store.now)
    await m.start()
    m.stop_keep_alive()
    w = ImageWatcher(store, CLUSTER)
    w.start()
    c = ControllerTask(store, CLUSTER, m, w, 1)
    c.start()
    fenced: list[bool] = []
    m.on_fenced.append(lambda: fenced.append(True))
    async with asyncio.timeout(BOUND_S):
        await c.wait_elected()
    store.advance(1)
    await m.tick()  # etcd's lease now runs to 1 + TTL; the broker counts from 0
    store.advance(TTL - 1.5)
    assert c.is_controller and not m.fenced
    store.advance(0.5)
    assert await store.get(controller_key(CLUSTER)) is not None  # etcd still has it
    assert m.fenced and not c.is_controller
    with pytest.raises(NotControllerError):
        await c.create_topic("t", 1, 1)
    old_lease = m.lease
    await m.tick()  # told; it drops the old lease (and the controller key) and registers anew
    assert fenced == [True] and not m.fenced and m.lease != old_lease
    assert await store.get(controller_key(CLUSTER)) is None
    await c.close()
    await w.close()
    await store.close()


class SlowAnswers(MemoryStore):
    """Each keep-alive takes a second to be answered."""

    async def keep_alive(self, lease: int) -> int:
        self.advance(1)
        return await super().keep_alive(lease)


async def test_fencing_counts_from_when_the_keep_alive_was_sent() -> None:
    store = SlowAnswers()
    m = Registration(store, CLUSTER, info(1), TTL, clock=store.now)
    await m.start()
    m.stop_keep_alive()
    store.advance(1)
    await m.tick()  # sent at 1, answered at 2
    store.advance(TTL - 1 - 0.1)
    assert not m.fenced
    store.advance(0.1)  # a whole TTL since it was sent, though not since it was answered
    assert m.fenced
    await store.close()
