"""Failover on a real etcd: a broker stops keeping its lease alive, etcd drops its key,
and the controller moves its leadership within a bounded wait."""

from __future__ import annotations

import asyncio
import time
import uuid

from groupwire.broker.cluster.keys import BrokerInfo
from groupwire.broker.clustering import ControllerTask, ImageWatcher, Registration
from groupwire.broker.etcd import EtcdClient

BOUND_S = 10.0
"""Lease TTL 1 s (etcd's minimum here) plus expiry, watch and one controller round."""


async def test_a_dead_leaders_partition_moves_to_the_other_isr_replica(
        etcd_endpoint: str) -> None:
    cluster = f"failover-{uuid.uuid4().hex[:8]}"
    store = EtcdClient([etcd_endpoint], timeout_s=2.0)
    nodes: dict[int, tuple[Registration, ImageWatcher, ControllerTask]] = {}
    try:
        for node_id in (1, 2):
            m = Registration(store, cluster,
                           BrokerInfo(node_id, "127.0.0.1", 9000 + node_id, None, "x"), 1)
            await m.start()
            w = ImageWatcher(store, cluster)
            w.start()
            c = ControllerTask(store, cluster, m, w, node_id)
            c.start()
            nodes[node_id] = (m, w, c)
        async with asyncio.timeout(BOUND_S):
            image = await nodes[1][1].until(
                lambda im: len(im.brokers) == 2 and im.controller is not None)
            controller = nodes[image.controller_id or 0][2]
            await controller.wait_elected()
            topic = await controller.create_topic("t", 1, 2)
            image = await nodes[1][1].until(lambda im: ("t", 0) in im.partitions)
        before = image.partitions[("t", 0)]
        assert set(before.isr) == {1, 2} and topic.replicas[0][0] == before.leader
        leader = before.leader
        survivor = 3 - leader

        # The leader dies: no more keep-alives, no revoke.
        m, w, c = nodes.pop(leader)
        m.stop_keep_alive()
        await c.close()
        await w.close()
        stopped = time.monotonic()
        watcher = nodes[survivor][1]
        async with asyncio.timeout(BOUND_S):
            await watcher.until(lambda im: leader not in im.brokers)
            expired = time.monotonic()
            image = await watcher.until(lambda im: im.partitions[("t", 0)].leader != leader)
            moved = time.monotonic()
        after = image.partitions[("t", 0)]
        assert after.leader == survivor and after.leader in before.isr
        assert after.leader_epoch == before.leader_epoch + 1
        print(f"\nleader {leader} stopped (it was {'' if controller.node_id == leader else 'not '}"
              f"the controller); its key gone after {expired - stopped:.3f} s; new leader "
              f"seen {moved - expired:.3f} s after that")
    finally:
        for m, w, c in nodes.values():
            await c.close()
            await w.close()
            await m.close()
        await store.close()
