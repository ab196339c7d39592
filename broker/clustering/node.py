"""A broker's part in a cluster: its etcd client, registration, metadata watch,
controller candidacy and replica manager, started and stopped together."""

from __future__ import annotations

import asyncio
import math
import ssl
import uuid
from collections.abc import Callable, Mapping

from groupwire.broker.cluster.controller import offline_partitions
from groupwire.broker.cluster.image import ClusterImage, TopicPartition
from groupwire.broker.cluster.keys import NO_LEADER, BrokerInfo, Endpoint
from groupwire.broker.clustering.controller_runtime import ControllerTask, InternalTopic
from groupwire.broker.clustering.event_forwarding import Event, EventForwarder
from groupwire.broker.clustering.image_watch import ImageWatcher
from groupwire.broker.clustering.leadership import ClusterLeadership
from groupwire.broker.clustering.registration import Registration, RegistrationError
from groupwire.broker.clustering.replica_manager import EnsureLocal, ReplicaManager
from groupwire.broker.config import BrokerSettings, etcd_urls
from groupwire.broker.etcd.client import EtcdClient, EtcdTlsError, tls_context
from groupwire.broker.etcd.store import EtcdError, MetadataStore
from groupwire.broker.logs import get_logger
from groupwire.broker.replication.fetcher import ReplicaFetcher
from groupwire.broker.replication.leader import LeaderStates
from groupwire.broker.replication.peer import PeerDialer
from groupwire.broker.replication.peer_auth import PeerSecurity
from groupwire.broker.storage import TopicStore
from groupwire.broker.storage.errors import StorageError
from groupwire.broker.storage.metadata import EVENTS_TOPIC, OFFSETS_TOPIC
from groupwire.broker.storage.storage_id import load_or_create_storage_id
from groupwire.broker.supervisor import Supervisor

log = get_logger("groupwire.cluster")

REPLICA_REQUEST_TIMEOUT_S = 10.0
"""How long a follower waits for a leader's answer (beyond a fetch's own wait)."""
FIRST_READ_S = 10.0
"""How long a starting broker waits for etcd before it gives up (a wrong URL)."""


class ClusterStartError(Exception):
    """etcd cannot be reached, or the node id is taken: one line for the operator."""


def etcd_tls(settings: BrokerSettings) -> ssl.SSLContext | None:
    """The context for https:// endpoints from ``--etcd-cafile/certfile/keyfile``; None
    without them (the system's CAs, no client certificate)."""
    if not (settings.etcd_cafile or settings.etcd_certfile or settings.etcd_keyfile):
        return None
    try:
        return tls_context(settings.etcd_cafile, settings.etcd_certfile,
                           settings.etcd_keyfile)
    except EtcdTlsError as exc:
        raise ClusterStartError(str(exc)) from None


def lease_ttl_s(settings: BrokerSettings) -> int:
    """The lease TTL etcd is asked for: whole seconds, at least one."""
    return max(1, math.ceil(settings.etcd_lease_ttl_ms / 1000))


def watch_timeout_s(settings: BrokerSettings) -> float:
    """How long a watch may be silent before it is checked: ``--etcd-watch-timeout-ms``,
    else a third of the lease TTL, so an idle image is confirmed current a few times
    per TTL and a stalled one fences the broker within about one TTL."""
    if settings.etcd_watch_timeout_ms > 0:
        return settings.etcd_watch_timeout_ms / 1000
    return lease_ttl_s(settings) / 3


class ClusterNode:
    def __init__(self, settings: BrokerSettings, store: TopicStore, *,
                 metadata_store: MetadataStore | None = None,
                 on_high_watermark: Callable[[TopicPartition], None] = lambda _tp: None,
                 supervisor: Supervisor | None = None,
                 ) -> None:
        """``metadata_store``: tests pass an in-memory one; else an etcd client;
        ``on_high_watermark``: a led partition's high watermark moved; ``supervisor``:
        runs the long-lived tasks (the broker's one; a private one without it)."""
        self.settings = settings
        self.node_id = settings.node_id
        self.cluster = settings.cluster_name
        self.supervisor = supervisor if supervisor is not None else Supervisor()
        self._owns_store = metadata_store is None
        self.etcd: MetadataStore = (
            EtcdClient(etcd_urls(settings), tls=etcd_tls(settings),
                       watch_timeout_s=watch_timeout_s(settings))
            if metadata_store is None else metadata_store)
        self.watcher = ImageWatcher(self.etcd, self.cluster, supervisor=self.supervisor)
        self.store = store
        self._membership: Registration | None = None
        self.controller: ControllerTask | None = None
        self.replicas: ReplicaManager | None = None
        self.events: EventForwarder | None = None
        self.dialer = PeerDialer()
        """How this broker reaches the others' inter-broker listener (set at start)."""
        self.leadership = ClusterLeadership(
            self.node_id, lambda: self.watcher.image, lambda: self.fenced,
            min_insync_replicas=settings.min_insync_replicas,
            why_fenced=lambda: None if self._membership is None
            else self._membership.fence_reason())
        self.leaders = LeaderStates(
            self.node_id, store, self.etcd, self.cluster, lambda: self.watcher.image,
            replica_lag_time_max_ms=settings.replica_lag_time_max_ms,
            min_insync_replicas=settings.min_insync_replicas,
            on_high_watermark=on_high_watermark, trusted=lambda: not self.fenced,
            supervisor=self.supervisor)

    @property
    def image(self) -> ClusterImage:
        return self.watcher.image

    def broker_epoch(self, node_id: int) -> int | None:
        """Broker ``node_id``'s epoch (its registration's revision) while it is live."""
        return self.watcher.image.broker_epochs.get(node_id)

    @property
    def fenced(self) -> bool:
        return self._membership is None or self._membership.fenced

    @property
    def membership(self) -> Registration:
        assert self._membership is not None, "start() first"
        return self._membership

    async def start(self, endpoints: Mapping[str, tuple[str, int]], *,
                    ensure_local: EnsureLocal,
                    delete_local: Callable[[list[str]], None],
                    on_roles: Callable[[set[TopicPartition]], None],
                    append_events: Callable[[list[Event]], bool],
                    on_topics_removed: Callable[[list[str]], None]) -> None:
        """Register with every listener's advertised ``endpoints`` (the listeners are
        up), the inter-broker one's as the broker's address; read the metadata, then run.

        Raises :class:`ClusterStartError` if etcd does not answer in time or another
        live broker holds this node id."""
        s = self.settings
        self.dialer = PeerDialer(PeerSecurity.of(s))
        host, port = endpoints[s.inter_broker_listener().name]
        try:
            storage_id = load_or_create_storage_id(self.store.data_dir)
        except StorageError as exc:
            raise ClusterStartError(str(exc)) from None
        info = BrokerInfo(self.node_id, host, port, s.rack or None, uuid.uuid4().hex,
                          endpoints=tuple(Endpoint(name, h, p)
                                          for name, (h, p) in endpoints.items()),
                          storage_id=storage_id)
        membership = Registration(self.etcd, self.cluster, info, ttl_s=lease_ttl_s(s),
                                image=self.watcher, supervisor=self.supervisor)
        # A new registration re-reads the image before the broker acts again; each
        # confirmation lets it act again at once (docs/design/cluster.md, "Liveness").
        membership.on_registered.append(self.watcher.resync)
        self.watcher.on_confirmed.append(membership.image_confirmed)
        self._membership = membership
        try:
            async with asyncio.timeout(FIRST_READ_S + membership.ttl_s):
                await membership.start()
                self.watcher.start()
                await self.watcher.ready
        except TimeoutError:
            raise ClusterStartError(
                f"etcd at {s.etcd_endpoints} did not answer within "
                f"{FIRST_READ_S + membership.ttl_s:.0f} s") from None
        except EtcdError as exc:
            raise ClusterStartError(f"etcd at {s.etcd_endpoints}: {exc}") from None
        except RegistrationError as exc:
            raise ClusterStartError(str(exc)) from None
        controller = ControllerTask(
            self.etcd, self.cluster, membership, self.watcher, self.node_id,
            supervisor=self.supervisor,
            leader_rebalance_interval_s=s.leader_imbalance_check_interval_ms / 1000 or None,
            leader_imbalance_ratio=s.leader_imbalance_per_broker_percentage / 100)
        controller.internal_topics += [
            InternalTopic(OFFSETS_TOPIC, self.store.offsets_partitions,
                          s.offsets_topic_replication_factor),
            InternalTopic(EVENTS_TOPIC, 1, s.offsets_topic_replication_factor)]
        self.controller = controller
        self.replicas = ReplicaManager(
            self.node_id, self.store, self.watcher, membership, self.leadership,
            self.leaders, ensure_local=ensure_local, new_fetcher=self._fetcher,
            delete_local=delete_local, on_roles=on_roles,
            on_topics_removed=on_topics_removed, supervisor=self.supervisor)
        self.events = EventForwarder(
            self.node_id, lambda: self.watcher.image,
            lambda: self.leadership.check(EVENTS_TOPIC, 0) is None, append_events,
            dialer=self.dialer, supervisor=self.supervisor)
        self.leaders.start()
        self.replicas.start()
        self.events.start()
        controller.start()
        log.info("cluster_joined", node_id=self.node_id, cluster=self.cluster,
                 brokers=sorted(self.image.brokers), controller=self.image.controller_id,
                 lease_ttl_s=membership.ttl_s)

    def cluster_counters(self) -> dict[str, int]:
        return {
            "isr_shrinks": self.leaders.isr_shrinks,
            "isr_expands": self.leaders.isr_expands,
            "leader_elections": 0 if self.replicas is None else self.replicas.elections,
            "controller_elections": 0 if self.controller is None else self.controller.elections,
            "group_events_dropped": 0 if self.events is None else self.events.dropped,
        }

    def cluster_gauges(self) -> dict[str, int]:
        image = self.image
        controller = self.controller is not None and self.controller.is_controller
        return {
            "leader_partitions": len(self.leadership.led),
            "under_replicated_partitions": self.leaders.under_replicated(),
            "offline_partitions": sum(1 for s in image.partitions.values()
                                      if s.leader == NO_LEADER) if controller else 0,
            "offline_partitions_storage_lost": sum(
                1 for o in offline_partitions(image).values()
                if o.reason == "isr_storage_lost") if controller else 0,
            "offline_leader_partitions": (0 if self.replicas is None
                                          else len(self.replicas.offline_led)),
            "is_controller": int(controller),
            "fenced": int(self.fenced),
            "live_brokers": len(image.brokers),
        }

    def _fetcher(self, leader: BrokerInfo) -> ReplicaFetcher:
        s = self.settings
        return ReplicaFetcher(self.node_id, leader, self.store,
                              wait_max_ms=s.replica_fetch_wait_max_ms,
                              max_bytes=s.replica_fetch_max_bytes,
                              request_timeout_s=REPLICA_REQUEST_TIMEOUT_S,
                              on_appended=lambda _tp: None, dialer=self.dialer,
                              broker_epoch=lambda: self.broker_epoch(self.node_id),
                              supervisor=self.supervisor)

    async def close(self) -> None:
        """Step down and leave: the lease is revoked, so others take over at once."""
        if self.controller is not None:
            await self.controller.close()
        if self.replicas is not None:
            await self.replicas.close()
        await self.leaders.close()
        if self.events is not None:
            await self.events.close()
        await self.watcher.close()
        if self._membership is not None:
            await self._membership.close()
        if self._owns_store:
            await self.etcd.close()
