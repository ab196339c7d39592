"""The replica manager's fetcher sync against an image the watch mutates while it awaits
(issue 24, item 1): a fetcher's ``close()`` yields, a watch event removes the broker the
pass was about to fetch from, and the pass must not index the image with it (it raised
``KeyError`` and the manager's loop died, leaving a broker that took on nothing more)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from groupwire.broker.cluster.image import ClusterImage
from groupwire.broker.cluster.keys import BrokerInfo, PartitionState, TopicAssignment
from groupwire.broker.clustering.replica_manager import ReplicaManager

ME = 1


def _info(node_id: int, incarnation: str = "a") -> BrokerInfo:
    return BrokerInfo(node_id, "127.0.0.1", 9000 + node_id, None, incarnation)


class FakeFetcher:
    def __init__(self, leader: BrokerInfo, on_close: asyncio.Event | None = None) -> None:
        self.leader = leader
        self.partitions: dict[tuple[str, int], int] = {}
        self.started = False
        self.closed = False
        self._on_close = on_close

    def start(self) -> None:
        self.started = True

    async def close(self) -> None:
        self.closed = True
        if self._on_close is not None:
            self._on_close.set()
        await asyncio.sleep(0)  # yields: the watch runs meanwhile

    def follow(self, tp: tuple[str, int], epoch: int) -> None:
        self.partitions[tp] = epoch

    def unfollow(self, tp: tuple[str, int]) -> None:
        self.partitions.pop(tp, None)


def _image() -> ClusterImage:
    image = ClusterImage("c")
    image.brokers = {1: _info(1), 2: _info(2), 3: _info(3)}
    image.topics = {"t": TopicAssignment("t", "id-t", False, ((2, 1),))}
    image.partitions = {("t", 0): PartitionState(leader=2, leader_epoch=4, isr=(2, 1),
                                                 partition_epoch=7)}
    return image


def _manager(image: ClusterImage, made: list[FakeFetcher]) -> ReplicaManager:
    watcher = SimpleNamespace(image=image, listeners=[])
    membership = SimpleNamespace(on_fenced=[], on_unfenced=[])
    store = SimpleNamespace(partition_count=lambda name: 1 if name == "t" else None,
                            offline_partitions=list, offline_listeners=[])

    def new_fetcher(leader: BrokerInfo) -> Any:
        made.append(FakeFetcher(leader))
        return made[-1]

    async def ensure_local(_name: str, _count: int) -> None:
        return None

    return ReplicaManager(
        ME, cast(Any, store), cast(Any, watcher), cast(Any, membership),
        cast(Any, SimpleNamespace()), cast(Any, SimpleNamespace()),
        ensure_local=ensure_local, new_fetcher=new_fetcher,
        delete_local=lambda _names: None, on_roles=lambda _tps: None)


async def test_a_leader_removed_while_a_fetcher_closes_is_not_indexed() -> None:
    image = _image()
    made: list[FakeFetcher] = []
    manager = _manager(image, made)
    closing = asyncio.Event()
    stale = FakeFetcher(_info(3), on_close=closing)  # broker 3 leads nothing now
    manager.fetchers[3] = cast(Any, stale)

    async def watch_removes_leader() -> None:
        await closing.wait()
        del image.brokers[2]  # the watch applies a delete, in place

    watch = asyncio.ensure_future(watch_removes_leader())
    await manager._sync_fetchers(image)  # raised KeyError: 2
    await watch
    assert stale.closed and 3 not in manager.fetchers
    assert made == [] and manager.fetchers == {}  # nothing from a broker that is gone

    # Broker 2 registers again: the next pass (its change wakes one) follows it.
    image.brokers[2] = _info(2, "b")
    await manager._sync_fetchers(image)
    [fetcher] = made
    assert fetcher.started and fetcher.leader == _info(2, "b")
    assert fetcher.partitions == {("t", 0): 4}
