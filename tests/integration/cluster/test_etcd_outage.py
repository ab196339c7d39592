"""An etcd outage longer than the lease TTL (issue 24, 0d): every broker fences itself,
etcd drops their leases, and the first broker to reach etcd again registers, becomes
the controller and is elected leader of everything (the others are not live). Once the
others are back and caught up, the controller's automatic leader rebalance gives each
partition back to its preferred replica; before it, every leadership stayed on that
one broker.

Three in-process brokers, each reaching one in-memory etcd through its own link that
the test cuts and restores, so which broker comes back first is the test's choice."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from groupwire.broker.cluster.image import TopicPartition
from groupwire.broker.cluster.txn import KeyValue, Txn, TxnResult, WatchEvent
from groupwire.broker.clustering.node import ClusterNode
from groupwire.broker.etcd import MemoryStore
from groupwire.broker.etcd.store import EtcdUnavailableError
from groupwire.broker.server import Broker
from groupwire.broker.storage.metadata import OFFSETS_TOPIC
from tests.integration.cluster.harness import LocalCluster, image_of, led_everywhere

NODES = (1, 2, 3)
REBALANCE_S = 0.2


class EtcdLink:
    """One broker's way to etcd: everything refused while ``down`` (its open watches
    break at their next batch, as a connection to a dead etcd does)."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise EtcdUnavailableError("etcd unavailable (the test cut the link)")

    async def get(self, key: str) -> KeyValue | None:
        self._check()
        return await self.store.get(key)

    async def get_prefix(self, prefix: str) -> tuple[list[KeyValue], int]:
        self._check()
        return await self.store.get_prefix(prefix)

    async def txn(self, txn: Txn) -> TxnResult:
        self._check()
        return await self.store.txn(txn)

    async def grant_lease(self, ttl_s: int) -> int:
        self._check()
        return await self.store.grant_lease(ttl_s)

    async def keep_alive(self, lease: int) -> int:
        self._check()
        return await self.store.keep_alive(lease)

    async def revoke(self, lease: int) -> None:
        self._check()
        await self.store.revoke(lease)

    async def watch(self, prefix: str, start_revision: int) -> AsyncIterator[list[WatchEvent]]:
        self._check()
        async for batch in self.store.watch(prefix, start_revision):
            self._check()
            yield batch

    async def close(self) -> None:
        return None


def _node(c: LocalCluster, node_id: int) -> ClusterNode:
    node = c.brokers[node_id].cluster
    assert node is not None
    return node


def _partitions(c: LocalCluster) -> list[TopicPartition]:
    image = image_of(c, 1)
    return [(name, p) for name in ("t", OFFSETS_TOPIC)
            for p in range(len(image.topics[name].replicas))]


def _preferred(c: LocalCluster, tp: TopicPartition) -> int:
    return image_of(c, 1).topics[tp[0]].replicas[tp[1]][0]


def _leads(c: LocalCluster, node_id: int, tp: TopicPartition) -> bool:
    state = image_of(c, node_id).partitions.get(tp)
    return (state is not None and state.leader == node_id
            and _node(c, node_id).leadership.led.get(tp) == state.leader_epoch)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[LocalCluster, dict[int, EtcdLink]]]:
    c = LocalCluster(tmp_path, offsets_topic_num_partitions=3, replica_fetch_wait_max_ms=50)
    links = {n: EtcdLink(c.store) for n in NODES}
    try:
        for n in NODES:
            broker = Broker(c.settings(n), metadata_store=links[n])
            await broker.start()
            c.brokers[n] = broker
            controller = _node(c, n).controller
            assert controller is not None
            controller.rebalance_interval_s = REBALANCE_S
        await c.until(lambda: OFFSETS_TOPIC in image_of(c, 1).topics
                      and led_everywhere(c, OFFSETS_TOPIC, 3))
        await c.create_topic("t", 6, 3)
        yield c, links
    finally:
        await c.close()


async def test_leaderships_return_to_their_preferred_replicas_after_an_etcd_outage(
        cluster: tuple[LocalCluster, dict[int, EtcdLink]]) -> None:
    c, links = cluster
    store = c.store
    everything = _partitions(c)
    await c.until(lambda: all(_leads(c, _preferred(c, tp), tp) for tp in everything))

    # etcd goes away for longer than the lease: every broker fences itself ...
    for link in links.values():
        link.down = True
    await c.until(lambda: all(_node(c, n).fenced for n in NODES))
    assert all(not _node(c, n).leadership.led for n in NODES)
    # ... and etcd, its clock past the TTL, drops every lease (brokers, controller)
    store.advance(5.0)

    # broker 1 reaches etcd first: it registers, controls and is elected for everything
    links[1].down = False
    await c.until(lambda: all(_leads(c, 1, tp) for tp in everything))
    assert all(image_of(c, 1).partitions[tp].isr == (1,) for tp in everything)

    # the others come back, catch up, rejoin the ISRs, and get their leaderships back
    links[2].down = links[3].down = False
    await c.until(lambda: all(_leads(c, _preferred(c, tp), tp) for tp in everything)
                  and all(not _node(c, n).fenced for n in NODES))
    assert any(_preferred(c, tp) != 1 for tp in everything)  # something really moved
    # the controller's automatic rebalance moved them, not the elections of the outage
    assert sum(task.rebalanced for n in NODES
               if (task := _node(c, n).controller) is not None) > 0
