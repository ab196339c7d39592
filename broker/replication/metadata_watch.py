"""The broker's copy of the cluster metadata: one read of the prefix, then its watch;
a compacted or lost watch is answered by reading everything again."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from groupwire.broker.cluster.image import ClusterImage, ImageChange
from groupwire.broker.cluster.keys import prefix
from groupwire.broker.etcd.store import EtcdError, MetadataStore, WatchCompactedError
from groupwire.broker.logs import get_logger
from groupwire.broker.replication.membership import close_stream

log = get_logger("groupwire.cluster")

RETRY_S = 0.2
"""Pause before reading again after an error, so a down etcd is not hammered."""

ChangeListener = Callable[[ImageChange], None]


K = TypeVar("K")
V = TypeVar("V")


def _diff(a: dict[K, V], b: dict[K, V]) -> tuple[frozenset[K], frozenset[K], frozenset[K]]:
    """Added, removed, updated from ``a`` to ``b``."""
    return (frozenset(b.keys() - a.keys()), frozenset(a.keys() - b.keys()),
            frozenset(k for k in a.keys() & b.keys() if a[k] != b[k]))


def rebuilt_change(old: ClusterImage, new: ClusterImage) -> ImageChange:
    """What a re-read changed, as if the missed events had been watched."""
    b_add, b_rem, b_upd = _diff(old.brokers, new.brokers)
    t_add, t_rem, t_upd = _diff(old.topics, new.topics)
    p_add, p_rem, p_upd = _diff(old.partitions, new.partitions)
    return ImageChange(
        brokers_added=b_add, brokers_removed=b_rem, brokers_updated=b_upd,
        controller_changed=(old.controller, old.controller_epoch)
        != (new.controller, new.controller_epoch),
        topics_changed=t_add | t_upd, topics_removed=t_rem,
        partitions_changed=p_add | p_upd, partitions_removed=p_rem)


class MetadataWatcher:
    def __init__(self, store: MetadataStore, cluster: str) -> None:
        self.store = store
        self.cluster = cluster
        self.image = ClusterImage(cluster)
        self.listeners: list[ChangeListener] = []
        self._ready = asyncio.Event()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def ready(self) -> asyncio.Future[bool]:
        """Done once the first read is in the image."""
        return asyncio.ensure_future(self._ready.wait())

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"metadata-watch-{self.cluster}")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def until(self, predicate: Callable[[ClusterImage], bool]) -> ClusterImage:
        """Wait until the image satisfies ``predicate`` (the caller bounds the wait)."""
        while not (self._ready.is_set() and predicate(self.image)):
            await self._changed.wait()
        return self.image

    async def _run(self) -> None:
        while True:
            try:
                await self._follow()
            except WatchCompactedError as exc:
                log.info("metadata_watch_compacted", error=str(exc))
                continue
            except EtcdError as exc:
                log.warning("metadata_watch_lost", error=str(exc))
            await asyncio.sleep(RETRY_S)

    async def _follow(self) -> None:
        kvs, revision = await self.store.get_prefix(prefix(self.cluster))
        new = ClusterImage.from_kvs(self.cluster, kvs, revision)
        old, self.image = self.image, new
        self._ready.set()
        self._wake()
        self._notify(rebuilt_change(old, new))
        stream = self.store.watch(prefix(self.cluster), revision + 1)
        try:
            async for events in stream:
                self._notify(self.image.apply(events))
        finally:
            await close_stream(stream)

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _notify(self, change: ImageChange) -> None:
        if change.empty:
            return
        self._wake()
        for listener in list(self.listeners):
            listener(change)
