"""The watcher re-reads when its watch cannot resume, and tells its listeners what the
re-read changed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from groupwire.broker.cluster.image import ImageChange
from groupwire.broker.cluster.keys import BrokerInfo, broker_key, encode_broker
from groupwire.broker.cluster.txn import Put, Txn, WatchEvent
from groupwire.broker.clustering import ImageWatcher
from groupwire.broker.etcd import MemoryStore
from groupwire.broker.etcd.store import WatchCompactedError

CLUSTER = "c1"


class CompactedOnce(MemoryStore):
    """Its first watch finds its start revision compacted, after a write the watcher's
    read did not see."""

    def __init__(self) -> None:
        super().__init__()
        self.watches = 0

    async def _failing(self) -> AsyncIterator[list[WatchEvent]]:
        info = BrokerInfo(7, "h", 1, None, "i")
        await self.txn(Txn((), (Put(broker_key(CLUSTER, 7), encode_broker(info)),)))
        raise WatchCompactedError(self.revision)
        yield []  # an async generator, as the real watch is

    def watch(self, prefix: str, start_revision: int) -> AsyncIterator[list[WatchEvent]]:
        self.watches += 1
        if self.watches == 1:
            return self._failing()
        return super().watch(prefix, start_revision)


async def test_a_compacted_watch_is_answered_by_reading_again() -> None:
    store = CompactedOnce()
    watcher = ImageWatcher(store, CLUSTER)
    changes: list[ImageChange] = []
    watcher.listeners.append(changes.append)
    watcher.start()
    async with asyncio.timeout(5):
        await watcher.ready
        image = await watcher.until(lambda im: 7 in im.brokers)
    assert store.watches >= 2
    assert any(7 in c.brokers_added for c in changes)
    # And it follows the new watch from the re-read's revision on.
    await store.txn(Txn((), (Put(broker_key(CLUSTER, 8), encode_broker(
        BrokerInfo(8, "h", 2, None, "j"))),)))
    async with asyncio.timeout(5):
        await watcher.until(lambda im: 8 in im.brokers)
    assert image.revision > 0
    await watcher.close()
    await store.close()
