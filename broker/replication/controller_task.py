"""The controller shell: campaign for ``controller``, and while holding it run the
core's decisions after every image change (docs/design/cluster.md, "The controller")."""

from __future__ import annotations

import asyncio
import logging
import random
import uuid

from groupwire.broker.cluster.controller import create_topic_txns, decide
from groupwire.broker.cluster.image import ImageChange
from groupwire.broker.cluster.keys import (
    ControllerInfo,
    TopicAssignment,
    controller_key,
    encode_controller,
    topic_key,
)
from groupwire.broker.cluster.placement import InvalidReplicationFactor
from groupwire.broker.cluster.txn import Compare, Put, Txn
from groupwire.broker.etcd.store import EtcdError, MetadataStore
from groupwire.broker.replication.membership import Membership
from groupwire.broker.replication.metadata_watch import MetadataWatcher

log = logging.getLogger(__name__)

RETRY_S = 0.2


class NotControllerError(Exception):
    """The caller answers NOT_CONTROLLER (41)."""


class TopicExistsError(Exception):
    """The caller answers TOPIC_ALREADY_EXISTS (36)."""


class ControllerTask:
    def __init__(self, store: MetadataStore, cluster: str, membership: Membership,
                 watcher: MetadataWatcher, node_id: int) -> None:
        self.store = store
        self.cluster = cluster
        self.membership = membership
        self.watcher = watcher
        self.node_id = node_id
        self.key = controller_key(cluster)
        self._epoch = 0
        self._wake = asyncio.Event()
        self._elected = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        watcher.listeners.append(self._on_change)
        membership.on_fenced.append(self._on_fence)
        membership.on_unfenced.append(self._wake.set)

    @property
    def epoch(self) -> int:
        """The controller key's create_revision while this broker holds it, else 0."""
        return self._epoch if self.is_controller else 0

    @property
    def is_controller(self) -> bool:
        # A fenced broker's key may already be gone: it must not act on an old win.
        return self._epoch > 0 and not self.membership.fenced

    async def wait_elected(self) -> int:
        """The epoch, once this broker wins (the caller bounds the wait)."""
        while not self.is_controller:
            await self._elected.wait()
        return self._epoch

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"controller-{self.node_id}")

    async def close(self) -> None:
        self._epoch = 0
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def _on_change(self, change: ImageChange) -> None:
        self._wake.set()

    def _on_fence(self) -> None:
        if self._epoch:
            log.warning("controller %d: fenced, stepping down (epoch %d)",
                        self.node_id, self._epoch)
        self._epoch = 0
        self._wake.set()

    async def _run(self) -> None:
        await self.watcher.ready
        while True:
            self._wake.clear()
            try:
                await self._step()
            except EtcdError as exc:
                log.warning("controller %d: %s", self.node_id, exc)
                await asyncio.sleep(RETRY_S)
                continue
            await self._wake.wait()

    async def _step(self) -> None:
        """Level-triggered: campaign if nobody holds the key, act if we do."""
        image = self.watcher.image
        if self.membership.fenced:
            self._epoch = 0
            return
        if self._epoch and image.revision >= self._epoch \
                and image.controller_epoch != self._epoch:
            log.info("controller %d: deposed (epoch %d)", self.node_id, self._epoch)
            self._epoch = 0
        if not self._epoch:
            if image.controller is not None:
                return  # wait for its key to go
            await self._campaign()
            if not self._epoch:
                return
        for txn in decide(self.watcher.image, self._epoch):
            if not (await self.store.txn(txn)).succeeded:
                return  # the image was stale: decide again from the next one

    async def _campaign(self) -> None:
        lease = self.membership.lease
        info = ControllerInfo(self.node_id, self.membership.info.incarnation)
        result = await self.store.txn(Txn((Compare(self.key, "create", "==", 0),),
                                          (Put(self.key, encode_controller(info), lease),)))
        if result.succeeded:
            # The put made the revision: it is the key's create_revision.
            self._epoch = result.revision
            self._elected.set()
            self._elected = asyncio.Event()
            log.info("controller %d: elected (epoch %d)", self.node_id, self._epoch)

    async def create_topic(self, name: str, partitions: int,
                           replication_factor: int) -> TopicAssignment:
        """Place and write a new topic over the live brokers (CreateTopics' path)."""
        epoch = self.epoch
        if not epoch:
            raise NotControllerError(f"broker {self.node_id} is not the controller")
        image = self.watcher.image
        live = len(image.brokers)
        if replication_factor > live:
            raise InvalidReplicationFactor(
                f"replication factor {replication_factor} is larger than the {live} live "
                f"brokers")
        txns = create_topic_txns(image, name, partitions, replication_factor,
                                 random.randrange(max(live, 1)), str(uuid.uuid4()), epoch)
        for i, txn in enumerate(txns):
            if (await self.store.txn(txn)).succeeded:
                continue
            if i == 0 and await self.store.get(topic_key(self.cluster, name)) is not None:
                raise TopicExistsError(f"topic {name!r} already exists")
            # Deposed mid-way: the next controller's decide writes the missing states.
            raise NotControllerError(f"broker {self.node_id} lost the controller "
                                     f"(epoch {epoch}) while creating {name!r}")
        created = await self.watcher.until(lambda im: name in im.topics)
        return created.topics[name]
