"""The controller shell: campaign for ``controller``, and while holding it run the
core's decisions after every image change (docs/design/cluster.md, "The controller").

The loop is a supervised service (``controller``). Its key is bound to the broker's
lease, so a loop that died holding it would block every successor while the broker
lives: a crash first resigns (deletes the key it created), and the restarted loop
resigns whatever it still holds before it campaigns afresh.

Every ``leader_rebalance_interval_s`` the controller also moves leadership back to
preferred replicas where a broker leads too few of the partitions it is preferred for
(Kafka's ``auto.leader.rebalance.enable``): after brokers return (a restart, or an etcd
outage that fenced them all and left the first to register leading everything) the
leaderships spread out again once the returning replicas have caught up."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import uuid
from dataclasses import dataclass

from groupwire.broker.cluster.controller import (
    Offline,
    create_partitions_txns,
    create_topic_txns,
    decide,
    delete_topic_txn,
    imbalanced_partitions,
    needs_unclean_election,
    offline_partitions,
    preferred_leader_txns,
    unclean_candidate,
    unclean_leader_txns,
)
from groupwire.broker.cluster.image import ClusterImage, ImageChange, TopicPartition
from groupwire.broker.cluster.keys import (
    ControllerInfo,
    TopicAssignment,
    controller_key,
    encode_controller,
    topic_key,
)
from groupwire.broker.cluster.placement import InvalidReplicationFactor
from groupwire.broker.cluster.txn import Compare, Delete, Put, Txn
from groupwire.broker.clustering.image_watch import ImageWatcher
from groupwire.broker.clustering.registration import Registration
from groupwire.broker.etcd.store import EtcdError, MetadataStore
from groupwire.broker.logs import get_logger
from groupwire.broker.supervisor import Service, Supervisor
from groupwire.protocol.errors import ErrorCode

log = get_logger("groupwire.cluster")

RETRY_S = 0.2
RESIGN_TIMEOUT_S = 2.0
"""How long a crashed controller tries to delete its key before the restart does."""
LEADER_REBALANCE_INTERVAL_S = 300.0
"""Kafka's ``leader.imbalance.check.interval.seconds``: how often the controller looks
for leaderships to move back to their preferred replicas."""
LEADER_IMBALANCE_RATIO = 0.1
"""Kafka's ``leader.imbalance.per.broker.percentage`` (10): a broker leading fewer of its
preferred partitions than this leaves them where they are."""


class NotControllerError(Exception):
    """The caller answers NOT_CONTROLLER (41)."""


class TopicExistsError(Exception):
    """The caller answers TOPIC_ALREADY_EXISTS (36)."""


class UnknownTopicError(Exception):
    """The caller answers UNKNOWN_TOPIC_OR_PARTITION (3)."""


class InvalidPartitionsError(Exception):
    """The caller answers INVALID_PARTITIONS (37)."""


@dataclass(frozen=True, slots=True)
class InternalTopic:
    """A topic the controller creates by itself once enough brokers are live."""

    name: str
    partitions: int
    replication_factor: int


class ControllerTask:
    def __init__(self, store: MetadataStore, cluster: str, membership: Registration,
                 watcher: ImageWatcher, node_id: int, *,
                 supervisor: Supervisor | None = None,
                 leader_rebalance_interval_s: float | None = LEADER_REBALANCE_INTERVAL_S,
                 leader_imbalance_ratio: float = LEADER_IMBALANCE_RATIO) -> None:
        """``leader_rebalance_interval_s``: None or 0 turns the automatic preferred-leader
        rebalance off (``groupwire cluster elect-leaders`` still moves them)."""
        self.store = store
        self.cluster = cluster
        self.membership = membership
        self.watcher = watcher
        self.node_id = node_id
        self.key = controller_key(cluster)
        self._epoch = 0
        self._wake = asyncio.Event()
        self._elected = asyncio.Event()
        self._supervisor = supervisor if supervisor is not None else Supervisor()
        self._service: Service | None = None
        self.elections = 0
        """Times this broker became the controller (metrics)."""
        self.rebalance_interval_s = leader_rebalance_interval_s
        self.imbalance_ratio = leader_imbalance_ratio
        self._rebalance_due = 0.0
        self.rebalanced = 0
        """Leaderships the automatic rebalance moved back to preferred replicas."""
        self.internal_topics: list[InternalTopic] = []
        """Created by the controller when missing and the live brokers are enough."""
        self.offline: dict[TopicPartition, Offline] = {}
        """Partitions without a leader and why, as of the last decision (logged once
        per change)."""
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

    @property
    def service(self) -> Service | None:
        return self._service

    def start(self) -> None:
        self._service = self._supervisor.spawn(f"controller-{self.node_id}", self._run,
                                               kind="controller")

    async def close(self) -> None:
        self._epoch = 0
        if self._service is not None:
            await self._service.stop()
            self._service = None

    def _on_change(self, change: ImageChange) -> None:
        self._wake.set()

    def _on_fence(self) -> None:
        if self._epoch:
            log.warning("controller_fenced", node_id=self.node_id, epoch=self._epoch)
        self._epoch = 0
        self._wake.set()

    async def _run(self) -> None:
        await self.watcher.ready
        await self._resign()  # a restart: what the crashed loop held goes first
        try:
            await self._loop()
        except Exception:
            with contextlib.suppress(EtcdError, TimeoutError):
                async with asyncio.timeout(RESIGN_TIMEOUT_S):
                    await self._resign()
            raise

    async def _resign(self) -> None:
        """Delete the controller key if this registration created it (the epoch it
        knows, or one the image shows as its own), so another broker may win."""
        held = self.watcher.image.controller
        epoch = self._epoch or (
            self.watcher.image.controller_epoch
            if held is not None and held.node_id == self.node_id
            and held.incarnation == self.membership.info.incarnation else 0)
        self._epoch = 0
        if not epoch:
            return
        deleted = await self.store.txn(Txn((Compare(self.key, "create", "==", epoch),),
                                           (Delete(self.key),)))
        if deleted.succeeded:
            log.warning("controller_resigned", node_id=self.node_id, epoch=epoch,
                        why="its loop failed; a broker campaigns afresh")

    async def _loop(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self._step()
            except EtcdError as exc:
                log.warning("controller_etcd_error", node_id=self.node_id, error=str(exc))
                await asyncio.sleep(RETRY_S)
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._until_rebalance()):
                    await self._wake.wait()

    def _until_rebalance(self) -> float | None:
        """Seconds to the next rebalance check while controller; None: no timer."""
        if not self._epoch or not self.rebalance_interval_s:
            return None
        return max(0.0, self._rebalance_due - asyncio.get_running_loop().time())

    async def _step(self) -> None:
        """Level-triggered: campaign if nobody holds the key, act if we do."""
        image = self.watcher.image
        if self.membership.fenced:
            self._epoch = 0
            return
        if self._epoch and image.revision >= self._epoch \
                and image.controller_epoch != self._epoch:
            log.info("controller_deposed", node_id=self.node_id, epoch=self._epoch)
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
        self._report_offline(self.watcher.image)
        await self._create_internal_topics()
        await self._rebalance_leaders()

    async def _rebalance_leaders(self) -> None:
        """Preferred replicas back to leading where a broker's share is off by more than
        the imbalance ratio (:func:`imbalanced_partitions`), once an interval."""
        interval = self.rebalance_interval_s
        now = asyncio.get_running_loop().time()
        if not interval or now < self._rebalance_due:
            return
        self._rebalance_due = now + interval
        image = self.watcher.image
        targets = imbalanced_partitions(image, self.imbalance_ratio)
        if not targets:
            return
        moved = 0
        for txn in preferred_leader_txns(image, self._epoch, targets):
            if not (await self.store.txn(txn)).succeeded:
                self._rebalance_due = now  # a stale image: again from the next one
                break
            moved += len(txn.success)
        if moved:
            self.rebalanced += moved
            log.info("leaders_rebalanced", node_id=self.node_id, partitions=moved,
                     why="brokers led too few of the partitions they are preferred for")

    def _report_offline(self, image: ClusterImage) -> None:
        """Log each partition that went offline, or changed why, and each that came back:
        an operator must learn that a partition waits for a replica with its log."""
        now = offline_partitions(image)
        for tp, why in sorted(now.items()):
            if self.offline.get(tp) == why:
                continue
            if why.reason == "isr_storage_lost":
                log.error("partition_offline", topic=tp[0], partition=tp[1],
                          reason=why.reason, lost_storage=list(why.lost_storage),
                          dead=list(why.dead),
                          detail="its live in-sync replicas came back without their logs "
                                 "(a new storage id); it stays offline until a replica "
                                 "with the data returns, or an operator accepts data loss "
                                 "with `groupwire cluster elect-leaders --unclean`")
            else:
                log.warning("partition_offline", topic=tp[0], partition=tp[1],
                            reason=why.reason, dead=list(why.dead))
        for tp in sorted(set(self.offline) - set(now)):
            log.info("partition_online", topic=tp[0], partition=tp[1])
        self.offline = now

    async def _create_internal_topics(self) -> None:
        image = self.watcher.image
        for topic in self.internal_topics:
            if topic.name in image.topics or len(image.brokers) < topic.replication_factor:
                continue
            txns = create_topic_txns(image, topic.name, topic.partitions,
                                     topic.replication_factor,
                                     random.randrange(len(image.brokers)),
                                     str(uuid.uuid4()), self._epoch, internal=True)
            for txn in txns:
                if not (await self.store.txn(txn)).succeeded:
                    return  # exists after all, or deposed: the next image says which
            log.info("internal_topic_created", node_id=self.node_id, topic=topic.name,
                     partitions=topic.partitions,
                     replication_factor=topic.replication_factor)

    async def _campaign(self) -> None:
        lease = self.membership.lease
        info = ControllerInfo(self.node_id, self.membership.info.incarnation)
        result = await self.store.txn(Txn((Compare(self.key, "create", "==", 0),),
                                          (Put(self.key, encode_controller(info), lease),)))
        if result.succeeded:
            # The put made the revision: it is the key's create_revision.
            self._epoch = result.revision
            self.elections += 1
            if self.rebalance_interval_s:
                self._rebalance_due = (asyncio.get_running_loop().time()
                                       + self.rebalance_interval_s)
            self._elected.set()
            self._elected = asyncio.Event()
            log.info("controller_elected", node_id=self.node_id, epoch=self._epoch)

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

    async def delete_topic(self, name: str) -> None:
        """Delete the topic's metadata; each broker's watch then deletes its replicas."""
        epoch = self._require_epoch()
        image = self.watcher.image
        if name not in image.topics:
            raise UnknownTopicError(f"unknown topic {name!r}")
        if (await self.store.txn(delete_topic_txn(image, name, epoch))).succeeded:
            await self.watcher.until(lambda im: name not in im.topics)
            return
        if await self.store.get(topic_key(self.cluster, name)) is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        raise NotControllerError(f"broker {self.node_id} lost the controller (epoch "
                                 f"{epoch}) while deleting {name!r}")

    async def create_partitions(self, name: str, total: int) -> TopicAssignment:
        """Grow the topic to ``total`` partitions, placed over the live brokers."""
        epoch = self._require_epoch()
        image = self.watcher.image
        topic = image.topics.get(name)
        if topic is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        if total <= len(topic.replicas):
            raise InvalidPartitionsError(
                f"topic {name!r} has {len(topic.replicas)} partitions; the new count "
                f"must be larger, got {total}")
        live = len(image.brokers)
        txns = create_partitions_txns(image, name, total, random.randrange(max(live, 1)),
                                      epoch)
        for txn in txns:
            if not (await self.store.txn(txn)).succeeded:
                raise NotControllerError(
                    f"the partitions of {name!r} changed meanwhile, or broker "
                    f"{self.node_id} lost the controller: try again")
        grown = await self.watcher.until(
            lambda im: name in im.topics and len(im.topics[name].replicas) >= total)
        return grown.topics[name]

    def _require_epoch(self) -> int:
        epoch = self.epoch
        if not epoch:
            raise NotControllerError(f"broker {self.node_id} is not the controller")
        return epoch

    async def elect_preferred_leaders(self, partitions: set[TopicPartition] | None, *,
                                      timeout_s: float = 60.0,
                                      ) -> dict[TopicPartition, ErrorCode]:
        """Leadership back to each partition's first replica (ElectLeaders' path; None:
        every partition). NONE once the image shows it leading; ELECTION_NOT_NEEDED if
        it already did, PREFERRED_LEADER_NOT_AVAILABLE if it is not live, not in the
        ISR or lost its log, UNKNOWN_TOPIC_OR_PARTITION; REQUEST_TIMED_OUT for those
        still waiting after ``timeout_s``. A write that lost to a newer one is decided
        again from the image the watch brings, as the controller's own decisions are.

        Raises NotControllerError off the controller, or when deposed meanwhile."""
        return await self.elect_leaders(partitions, unclean=False, timeout_s=timeout_s)

    async def elect_leaders(self, partitions: set[TopicPartition] | None, *,
                            unclean: bool, timeout_s: float = 60.0,
                            ) -> dict[TopicPartition, ErrorCode]:
        """A preferred election (see :meth:`elect_preferred_leaders`), or with
        ``unclean`` an unclean one: each partition without an eligible leader gets
        any live replica as its leader, and the records it lacks are lost (the
        operator's explicit choice). Unclean answers: NONE once the image shows a
        leader; ELECTION_NOT_NEEDED if it has an eligible leader or the controller can
        elect one by itself; ELIGIBLE_LEADERS_NOT_AVAILABLE if no replica is live;
        UNKNOWN_TOPIC_OR_PARTITION; REQUEST_TIMED_OUT."""
        outcome = unclean_election_outcome if unclean else preferred_election_outcome
        txns_for = unclean_leader_txns if unclean else preferred_leader_txns
        self._require_epoch()
        image = self.watcher.image
        wanted = (set(partitions) if partitions is not None
                  else {(name, p) for name, topic in image.topics.items()
                        for p in range(len(topic.replicas))})
        results: dict[TopicPartition, ErrorCode] = {}
        pending: set[TopicPartition] = set()
        for tp in wanted:
            code = outcome(image, tp)
            if code is None:
                pending.add(tp)
            else:
                results[tp] = code

        def settle(image: ClusterImage) -> None:
            for tp in list(pending):
                code = outcome(image, tp)
                if code is not None:  # moved (by us, in an earlier pass) or not movable
                    results[tp] = (ErrorCode.NONE if code == ErrorCode.ELECTION_NOT_NEEDED
                                   else code)
                    pending.discard(tp)

        # Only the waits are bounded: a txn cut off mid-way would leave its outcome
        # unknown, and the etcd client's connection in an unknown state.
        deadline = asyncio.get_running_loop().time() + timeout_s
        while pending:
            epoch = self._require_epoch()
            image = self.watcher.image
            # Read before the writes: the watch updates this image in place, and etcd may
            # deliver our own write to it before the txn's answer arrives; a revision read
            # after the await would already include it, and the wait below would then
            # last until some unrelated change or the whole timeout.
            seen = image.revision
            for txn in txns_for(image, epoch, pending):
                if not (await self.store.txn(txn)).succeeded:
                    break  # the image was stale: decide again from the next one
                if unclean:
                    log.warning("unclean_leaders_elected", node_id=self.node_id,
                                partitions=len(txn.success),
                                detail="an operator chose data loss: the new leaders' "
                                       "logs may lack acknowledged records")
            try:
                async with asyncio.timeout_at(deadline):
                    await self.watcher.until(functools.partial(_newer, seen))
            except TimeoutError:
                break
            finally:
                settle(self.watcher.image)
        results.update(dict.fromkeys(pending, ErrorCode.REQUEST_TIMED_OUT))
        return results


def _newer(revision: int, image: ClusterImage) -> bool:
    return image.revision > revision


def preferred_election_outcome(image: ClusterImage, tp: TopicPartition) -> ErrorCode | None:
    """What a preferred election of ``tp`` would answer from ``image``, or None if it
    needs a write."""
    topic = image.topics.get(tp[0])
    if topic is None or not 0 <= tp[1] < len(topic.replicas):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    state = image.partitions.get(tp)
    replicas = topic.replicas[tp[1]]
    if not replicas or state is None:
        return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    preferred = replicas[0]
    if state.leader == preferred:
        return ErrorCode.ELECTION_NOT_NEEDED
    if preferred not in image.brokers or preferred not in state.isr \
            or state.lost_storage(preferred, image.brokers):
        return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    return None


def unclean_election_outcome(image: ClusterImage, tp: TopicPartition) -> ErrorCode | None:
    """What an unclean election of ``tp`` would answer from ``image``, or None if it
    needs a write."""
    topic = image.topics.get(tp[0])
    if topic is None or not 0 <= tp[1] < len(topic.replicas):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if tp not in image.partitions:
        return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    if not needs_unclean_election(image, tp):
        return ErrorCode.ELECTION_NOT_NEEDED
    if unclean_candidate(image, tp) is None:
        return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    return None
