"""The replica manager: makes this broker's storage and roles agree with the image.

After every image change (level-triggered, like the controller) it creates the local
replicas of topics assigned here, deletes those of topics gone from etcd, and for each
partition takes leadership (the log stamps the new leader epoch from then on) or gives
it up. Followers' fetchers hang off the same decisions (``on_follow``).

The loop is a supervised service (``replica-manager``): a crash is logged, counted and
the loop started again, and since every pass is decided afresh from the image, the
restarted loop rebuilds whatever the failed pass left half-done. The image is mutated in
place by the watch, so nothing read from it is used after an await without being read
again: a broker or topic may have vanished meanwhile.

A local log that went offline (a failed write or fsync: a full or failing disk) neither
leads nor follows: each pass (and storage's report, which wakes one) hands its
leadership to another eligible ISR member and takes this broker out of the ISRs it is
in (``controller.offline_replicas``), and stops fetching it until the log takes writes
again; the leader then adds it back once it has caught up. A partition with no other
eligible replica stays led here, refusing writes, and says so
(``leadership_kept_offline``, ``groupwire_cluster_offline_leader_partitions``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from groupwire.broker.cluster.controller import offline_replicas
from groupwire.broker.cluster.image import ClusterImage, ImageChange, TopicPartition
from groupwire.broker.cluster.keys import NO_LEADER, BrokerInfo
from groupwire.broker.clustering.image_watch import ImageWatcher
from groupwire.broker.clustering.leadership import ClusterLeadership
from groupwire.broker.clustering.registration import Registration
from groupwire.broker.etcd.store import EtcdError, MetadataStore
from groupwire.broker.logs import get_logger
from groupwire.broker.replication.fetcher import ReplicaFetcher
from groupwire.broker.replication.leader import LeaderStates
from groupwire.broker.storage import TopicStore
from groupwire.broker.storage.errors import StorageError
from groupwire.broker.supervisor import Service, Supervisor

log = get_logger("groupwire.cluster")

RETRY_S = 1.0
"""Pause before reconciling again after a local replica could not be created."""

EnsureLocal = Callable[[str, int], Awaitable[StorageError | None]]
"""Create the topic here, or grow it, to the given partition count (off the loop)."""


class ReplicaManager:
    def __init__(self, node_id: int, store: TopicStore, watcher: ImageWatcher,
                 membership: Registration, leadership: ClusterLeadership,
                 leaders: LeaderStates, *, ensure_local: EnsureLocal,
                 new_fetcher: Callable[[BrokerInfo], ReplicaFetcher],
                 delete_local: Callable[[list[str]], None],
                 on_roles: Callable[[set[TopicPartition]], None],
                 on_topics_removed: Callable[[list[str]], None] = lambda _names: None,
                 supervisor: Supervisor | None = None,
                 etcd: MetadataStore | None = None,
                 ) -> None:
        """``on_roles``: partitions whose role here changed (parked fetches on them
        look again); ``on_topics_removed``: topics deleted from the cluster (every
        broker drops the committed offsets of the groups it coordinates for them);
        ``etcd``: where partition states are written when a local log goes offline
        (None: the leader states' store)."""
        self.node_id = node_id
        self.store = store
        self.watcher = watcher
        self.membership = membership
        self.leadership = leadership
        self.leaders = leaders
        self._new_fetcher = new_fetcher
        self.fetchers: dict[int, ReplicaFetcher] = {}
        """One per leader this broker follows partitions of."""
        self._ensure_local = ensure_local
        self._delete_local = delete_local
        self._on_roles = on_roles
        self._on_topics_removed = on_topics_removed
        self._etcd = etcd
        self._wake = asyncio.Event()
        self._supervisor = supervisor if supervisor is not None else Supervisor()
        self._service: Service | None = None
        self.elections = 0
        """Partitions this broker took leadership of (metrics)."""
        self.passes: list[Callable[[], None]] = []
        """Called after each pass (tests wait on them)."""
        self.offline_led: set[TopicPartition] = set()
        """Led here on an offline log with no other eligible replica (metrics)."""
        self.offline_handovers = 0
        """Leaderships this broker handed over because its log went offline."""
        watcher.listeners.append(self._on_change)
        store.offline_listeners.append(self._on_log_offline)
        membership.on_fenced.append(self._on_fenced)
        membership.on_unfenced.append(self._wake.set)

    @property
    def service(self) -> Service | None:
        return self._service

    def start(self) -> None:
        self._service = self._supervisor.spawn(f"replica-manager-{self.node_id}", self._run,
                                               kind="replica-manager")

    async def close(self) -> None:
        if self._service is not None:
            await self._service.stop()
            self._service = None
        fetchers, self.fetchers = list(self.fetchers.values()), {}
        for fetcher in fetchers:
            await fetcher.close()

    def _on_change(self, change: ImageChange) -> None:
        if change.topics_removed:
            self._on_topics_removed(sorted(change.topics_removed))
        self._wake.set()

    def _on_log_offline(self, _topic: str, _partition: int) -> None:
        self._wake.set()

    def _on_fenced(self) -> None:
        dropped = set(self.leadership.led)
        self.leadership.led.clear()
        for tp in dropped:
            self.leaders.stop(tp)
        if dropped:
            log.warning("leaderships_dropped", node_id=self.node_id,
                        partitions=len(dropped), why="fenced")
            self._on_roles(dropped)
        self._wake.set()

    async def _run(self) -> None:
        await self.watcher.ready
        while True:
            self._wake.clear()
            done = await self.reconcile()
            for listener in list(self.passes):
                listener()
            if done:
                await self._wake.wait()
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(RETRY_S):
                        await self._wake.wait()

    async def reconcile(self) -> bool:
        """One pass; False if something could not be done (tried again later)."""
        image = self.watcher.image
        done = await self._sync_topics(image)
        image = self.watcher.image
        done = self._sync_roles(image) and done
        self.leaders.image_changed(image)
        done = await self._sync_fetchers(image) and done
        return await self._step_off_offline_logs() and done

    def _hosts(self, image: ClusterImage, name: str) -> int:
        """How many partitions of ``name`` this broker must hold (0: none). A topic
        with a replica here is kept whole locally: its other partitions stay empty."""
        topic = image.topics.get(name)
        if topic is None or not any(self.node_id in r for r in topic.replicas):
            return 0
        return len(topic.replicas)

    async def _sync_topics(self, image: ClusterImage) -> bool:
        local = self.store.topics()
        gone = [name for name in local
                if name not in image.topics and not self.store.is_internal(name)]
        if gone:
            log.info("replicas_deleted", node_id=self.node_id, topics=sorted(gone))
            self._delete_local(gone)
        done = True
        for name in sorted(image.topics):
            wanted = self._hosts(image, name)
            have = self.store.partition_count(name) or 0
            if wanted <= have or self.store.creation_in_flight(name) is not None:
                continue
            error = await self._ensure_local(name, wanted)
            if error is not None:
                log.error("replicas_not_created", node_id=self.node_id, topic=name,
                          error=str(error))
                done = False
        return done

    def _sync_roles(self, image: ClusterImage) -> bool:
        """False if a partition could not be taken on yet (tried again later)."""
        complete = True
        led = self.leadership.led
        changed: set[TopicPartition] = set()
        fenced = self.membership.fenced
        for tp in list(led):
            state = image.partitions.get(tp)
            if fenced or state is None or state.leader != self.node_id \
                    or state.leader_epoch != led[tp]:
                del led[tp]
                self.leaders.stop(tp)
                changed.add(tp)
        if not fenced:
            for tp, state in image.partitions.items():
                if state.leader != self.node_id or led.get(tp) == state.leader_epoch:
                    continue
                recorded = state.storage_of(self.node_id)
                if recorded is not None and recorded != self.membership.info.storage_id:
                    continue  # not the log the ISR recorded: the controller moves it on
                count = self.store.partition_count(tp[0])
                if count is None or tp[1] >= count:
                    continue  # not created here yet: the next pass takes it
                assignment = image.topics.get(tp[0])
                if assignment is None or tp[1] >= len(assignment.replicas):
                    continue
                try:
                    self.store.log(*tp).become_leader(state.leader_epoch)
                except (StorageError, ValueError) as exc:
                    # A stepped append still under way (next pass), or an epoch older
                    # than the log's (a newer image is on its way): not led yet.
                    log.warning("leadership_deferred", topic=tp[0], partition=tp[1],
                                leader_epoch=state.leader_epoch, error=str(exc))
                    complete = False
                    continue
                self.leaders.lead(tp, assignment.replicas[tp[1]], state)
                led[tp] = state.leader_epoch
                self.elections += 1
                changed.add(tp)
                log.info("became_leader", node_id=self.node_id, topic=tp[0],
                         partition=tp[1], leader_epoch=state.leader_epoch)
        if changed:
            self._on_roles(changed)
        return complete

    def _offline_here(self) -> set[TopicPartition]:
        return {(topic, p) for topic, p, _why in self.store.offline_partitions()}

    async def _step_off_offline_logs(self) -> bool:
        """Hand over the leaderships, and leave the ISRs, of partitions whose local log
        is offline; False while any such write is still to make (tried again later)."""
        offline = self._offline_here()
        if not offline or self.membership.fenced:
            self.offline_led = set()
            return True
        image = self.watcher.image
        plan = offline_replicas(image, self.node_id, offline)
        kept = set(plan.kept)
        for tp in sorted(kept - self.offline_led):
            log.error("leadership_kept_offline", node_id=self.node_id, topic=tp[0],
                      partition=tp[1], isr=list(image.partitions[tp].isr),
                      detail="its log here is offline and no other in-sync replica is "
                             "live with its log: writes are refused until the disk "
                             "takes them again")
        self.offline_led = kept
        # A kept one is looked at again each RETRY_S: its log may come back (an append
        # brings it), or another replica become eligible.
        done = not kept
        for txn in plan.txns:
            try:
                etcd = self._etcd if self._etcd is not None else self.leaders.etcd
                ok = (await etcd.txn(txn)).succeeded
            except EtcdError as exc:
                log.warning("offline_replica_write_failed", node_id=self.node_id,
                            error=str(exc))
                ok = False
            if not ok:
                done = False  # a newer state won: decided again from it
                break
        else:
            for tp, nxt in sorted(plan.handed_over.items()):
                self.offline_handovers += 1
                log.warning("leadership_handed_over", node_id=self.node_id, topic=tp[0],
                            partition=tp[1], new_leader=nxt,
                            why="its log here is offline (a failed write or fsync)")
            for tp in plan.left_isr:
                log.warning("isr_left", node_id=self.node_id, topic=tp[0],
                            partition=tp[1],
                            why="its log here is offline (a failed write or fsync)")
        return done

    async def _sync_fetchers(self, image: ClusterImage) -> bool:
        """Each partition with a replica here and a live leader elsewhere is fetched
        from that leader, in its current epoch; everything else is not, nor is a
        partition whose log here is offline and does not come back when asked (False:
        ask again later).

        What is wanted is read from the image once, before the first await (closing a
        fetcher); after it each leader is looked up again, as the watch may have
        removed it meanwhile (the next pass, which that change wakes, settles it)."""
        wanted: dict[int, dict[TopicPartition, int]] = {}
        leaders: dict[int, BrokerInfo] = {}
        offline = self._offline_here()
        waiting = False
        for tp, state in list(image.partitions.items()):
            info = image.brokers.get(state.leader)
            if state.leader in (self.node_id, NO_LEADER) or info is None:
                continue
            assignment = image.topics.get(tp[0])
            if assignment is None or tp[1] >= len(assignment.replicas) \
                    or self.node_id not in assignment.replicas[tp[1]]:
                continue
            count = self.store.partition_count(tp[0])
            if count is None or tp[1] >= count:
                continue
            if tp in offline and not self.store.log(*tp).bring_online():
                waiting = True
                continue
            wanted.setdefault(state.leader, {})[tp] = state.leader_epoch
            leaders[state.leader] = info
        stale = [(leader_id, fetcher) for leader_id, fetcher in self.fetchers.items()
                 if leader_id not in wanted or leaders[leader_id] != fetcher.leader]
        for leader_id, fetcher in stale:
            if self.fetchers.get(leader_id) is fetcher:
                del self.fetchers[leader_id]
        for _leader_id, fetcher in stale:
            await fetcher.close()
        for leader_id, partitions in wanted.items():
            info = self.watcher.image.brokers.get(leader_id)
            if info is None or info != leaders[leader_id]:
                continue  # gone or re-registered during the closes: the next pass
            if leader_id not in self.fetchers:
                self.fetchers[leader_id] = self._new_fetcher(info)
                self.fetchers[leader_id].start()
            fetcher = self.fetchers[leader_id]
            for tp in list(fetcher.partitions):
                if tp not in partitions:
                    fetcher.unfollow(tp)
            for tp, epoch in partitions.items():
                fetcher.follow(tp, epoch)
        return not waiting
