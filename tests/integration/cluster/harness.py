"""Brokers of one cluster in this process, sharing an in-memory etcd, for the tests of
cluster mode: real listeners and storage, the metadata store the only stand-in."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from groupwire.broker.cluster.image import ClusterImage
from groupwire.broker.config import BrokerSettings
from groupwire.broker.etcd import MemoryStore
from groupwire.broker.server import Broker
from groupwire.broker.storage.metadata import OFFSETS_TOPIC
from groupwire.client.connection import Connection
from groupwire.client.consumer import Consumer
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    CreatableTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    Request,
    Response,
)

R = TypeVar("R", bound=Response)
BOUND_S = 10.0
"""Longest any wait in these tests may take before it fails."""


class LocalCluster:
    def __init__(self, root: Path, **overrides: object) -> None:
        self.root = root
        self.store = MemoryStore()
        self.overrides = overrides
        self.brokers: dict[int, Broker] = {}
        self._conns: dict[int, Connection] = {}

    def settings(self, node_id: int) -> BrokerSettings:
        values: dict[str, object] = {
            "port": 0, "metrics_port": -1, "data_dir": self.root / f"b{node_id}",
            "node_id": node_id, "etcd_endpoints": "http://memory.invalid:2379",
            "cluster_name": "test", "etcd_lease_ttl_ms": 1000, "fsync": "never",
            "log_format": "json", "log_level": "warning",
        }
        values.update(self.overrides)
        return BrokerSettings(**values)  # type: ignore[arg-type]

    async def start(self, *node_ids: int) -> None:
        for node_id in node_ids:
            broker = Broker(self.settings(node_id), metadata_store=self.store)
            await broker.start()
            self.brokers[node_id] = broker

    async def serving(self, offsets_partitions: int) -> None:
        """Wait until ``__consumer_offsets`` exists and each partition has a leader that
        took it on."""
        await self.until(lambda: OFFSETS_TOPIC in image_of(self, next(iter(self.brokers))).topics
                         and led_everywhere(self, OFFSETS_TOPIC, offsets_partitions))

    async def create_topic(self, name: str, partitions: int, replication_factor: int) -> None:
        """Create through the controller and wait until every partition is led."""
        created = await self.send(controller_of(self), CreateTopicsRequest(topics=[
            CreatableTopic(name=name, num_partitions=partitions,
                           replication_factor=replication_factor)]), CreateTopicsResponse)
        assert created.topics[0].error_code == ErrorCode.NONE, created.topics[0]
        await self.until(lambda: led_everywhere(self, name, partitions))

    async def stop(self, node_id: int) -> None:
        conn = self._conns.pop(node_id, None)
        if conn is not None:
            await conn.close()
        await self.brokers.pop(node_id).close()

    async def close(self) -> None:
        for node_id in list(self.brokers):
            await self.stop(node_id)

    async def send(self, node_id: int, request: Request, response_type: type[R]) -> R:
        conn = self._conns.get(node_id)
        if conn is None or conn.closed:
            broker = self.brokers[node_id]
            conn = await Connection.open("127.0.0.1", broker.port)
            self._conns[node_id] = conn
        return await conn.send(request, timeout=BOUND_S, response_type=response_type)

    async def until(self, check: Callable[[], bool]) -> None:
        """Wait for a state the brokers reach by themselves: ``check`` is looked at
        again after every image change, pass of a replica manager and high watermark
        move."""
        changed = asyncio.Event()
        listeners = []
        for broker in self.brokers.values():
            node = broker.cluster
            assert node is not None and node.replicas is not None
            node.watcher.listeners.append(listener := lambda _c: changed.set())
            node.replicas.passes.append(changed.set)
            node.leaders.listeners.append(changed.set)
            listeners.append((node, listener))
        try:
            async with asyncio.timeout(BOUND_S):
                while not check():
                    await changed.wait()
                    changed.clear()
        finally:
            for node, listener in listeners:
                node.watcher.listeners.remove(listener)
                assert node.replicas is not None
                node.replicas.passes.remove(changed.set)
                node.leaders.listeners.remove(changed.set)


def image_of(c: LocalCluster, node_id: int) -> ClusterImage:
    """Broker ``node_id``'s copy of the cluster metadata."""
    node = c.brokers[node_id].cluster
    assert node is not None
    return node.image


def controller_of(c: LocalCluster) -> int:
    found = image_of(c, next(iter(c.brokers))).controller_id
    assert found is not None
    return found


def leader_of(c: LocalCluster, topic: str, p: int) -> int:
    return image_of(c, next(iter(c.brokers))).partitions[(topic, p)].leader


def led_everywhere(c: LocalCluster, topic: str, partitions: int) -> bool:
    """Every broker's image has each partition's leader, and that leader took it on."""
    for node_id in c.brokers:
        seen = image_of(c, node_id)
        for p in range(partitions):
            state = seen.partitions.get((topic, p))
            if state is None or state.leader not in c.brokers:
                return False
            leader = c.brokers[state.leader].cluster
            assert leader is not None
            if leader.leadership.led.get((topic, p)) != state.leader_epoch:
                return False
    return True


async def consume(consumer: Consumer, want: int, seen: list[bytes]) -> None:
    """Poll until ``seen`` holds ``want`` values; fails if the records stop coming."""
    while len(seen) < want:
        batches = await consumer.getmany(timeout_ms=int(BOUND_S * 1000))
        assert batches, f"nothing more after {len(seen)} records"
        for records in batches.values():
            seen.extend(r.value or b"" for r in records)
