"""The broker's copy of the cluster metadata: one read of the prefix, then its watch;
a compacted or lost watch, or a new registration, is answered by reading everything
again. A value it cannot decode is logged and skipped, never the end of the watch."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import TypeVar

from groupwire.broker.cluster.image import ClusterImage, ImageChange
from groupwire.broker.cluster.keys import prefix
from groupwire.broker.clustering.registration import close_stream
from groupwire.broker.etcd.store import EtcdError, MetadataStore, WatchCompactedError
from groupwire.broker.logs import get_logger
from groupwire.broker.supervisor import Service, Supervisor

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


class ImageWatcher:
    """A supervised service (``metadata-watch``): a crash is logged and counted, and the
    service starts again with a full read.

    It records when the image was last known current (``confirmed_at``: a read, an
    event batch, or the store's word that the watch is caught up) and when it was last
    read whole (``read_at``); the membership fences the broker while the image is older
    than the lease TTL or was not read since the broker registered again
    (docs/design/cluster.md, "Liveness and fencing")."""

    def __init__(self, store: MetadataStore, cluster: str, *,
                 supervisor: Supervisor | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.cluster = cluster
        self.image = ClusterImage(cluster)
        self.listeners: list[ChangeListener] = []
        self.on_confirmed: list[Callable[[], None]] = []
        """Called each time the image is confirmed current (the membership re-checks
        whether the broker may act again)."""
        self._supervisor = supervisor if supervisor is not None else Supervisor()
        self._clock = clock
        self.confirmed_at = -math.inf
        self.read_at = -math.inf
        self.reads = 0
        """Full reads of the prefix (the first, and each after a lost watch)."""
        self._ready = asyncio.Event()
        self._changed = asyncio.Event()
        self._resync = asyncio.Event()
        self._service: Service | None = None

    @property
    def ready(self) -> asyncio.Future[bool]:
        """Done once the first read is in the image."""
        return asyncio.ensure_future(self._ready.wait())

    @property
    def service(self) -> Service | None:
        return self._service

    def age(self) -> float:
        """Seconds since the image was last confirmed current."""
        return self._clock() - self.confirmed_at

    def start(self) -> None:
        self._service = self._supervisor.spawn(f"metadata-watch-{self.cluster}", self._run,
                                               kind="metadata-watch")

    async def close(self) -> None:
        if self._service is not None:
            await self._service.stop()
            self._service = None

    def resync(self) -> None:
        """Drop the watch and read everything again (after the broker registered anew:
        what it saw before may be long gone)."""
        self._resync.set()

    async def until(self, predicate: Callable[[ClusterImage], bool]) -> ClusterImage:
        """Wait until the image satisfies ``predicate`` (the caller bounds the wait)."""
        while not (self._ready.is_set() and predicate(self.image)):
            await self._changed.wait()
        return self.image

    async def _run(self) -> None:
        while True:
            self._resync.clear()
            follow = asyncio.ensure_future(self._follow())
            resync = asyncio.ensure_future(self._resync.wait())
            try:
                await asyncio.wait({follow, resync}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (follow, resync):
                    task.cancel()
                await asyncio.gather(follow, resync, return_exceptions=True)
            if not follow.cancelled() and (exc := follow.exception()) is not None:
                if isinstance(exc, WatchCompactedError):
                    log.info("metadata_watch_compacted", error=str(exc))
                    continue
                if not isinstance(exc, EtcdError):
                    raise exc  # a bug: the supervisor logs, counts and restarts
                log.warning("metadata_watch_lost", error=str(exc))
                await asyncio.sleep(RETRY_S)
            elif resync.done():
                log.info("metadata_reread", why="registered again")

    async def _follow(self) -> None:
        sent = self._clock()
        kvs, revision = await self.store.get_prefix(prefix(self.cluster))
        new = ClusterImage.from_kvs(self.cluster, kvs, revision)
        self._log_malformed(new)
        old, self.image = self.image, new
        self.reads += 1
        self.read_at = sent
        self._ready.set()
        self._wake()
        self._notify(rebuilt_change(old, new))
        self._confirm(sent)
        stream = self.store.watch(prefix(self.cluster), revision + 1)
        try:
            async for events in stream:
                received = self._clock()
                if events:
                    change = self.image.apply(events)
                    self._log_malformed(self.image)
                    self._notify(change)
                self._confirm(received)
        finally:
            await close_stream(stream)

    def _confirm(self, at: float) -> None:
        self.confirmed_at = max(self.confirmed_at, at)
        for listener in list(self.on_confirmed):
            listener()

    def _log_malformed(self, image: ClusterImage) -> None:
        for why in image.malformed:
            log.error("metadata_value_skipped", cluster=self.cluster, error=why,
                      why="not a value this broker can read; the key keeps what it had "
                          "until it is written again (fix it with etcdctl)")

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _notify(self, change: ImageChange) -> None:
        if change.empty:
            return
        self._wake()
        for listener in list(self.listeners):
            listener(change)
