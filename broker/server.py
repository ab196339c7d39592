"""The broker's asyncio shell: wiring and life cycle, connections, request dispatch.

Everything that decides lives elsewhere: group semantics in ``broker.coordinator`` (pure,
time passed in), bytes on disk in ``broker.storage``. What runs the coordinator's
results (the order "write, make durable, then answer", the one timer) is
``broker.group_runtime``; the non-group APIs are ``broker.topic_handlers``; cluster
mode's group hosting is ``broker.clustering.group_hosting``. This module builds them
once storage is open (``Started``), listens, routes each request, and stops them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import functools
import os
import time
from collections.abc import Callable, Coroutine
from typing import Any

from groupwire.broker.budget import Decision, MemoryBudget, Verdict
from groupwire.broker.clustering.group_hosting import GroupHosting
from groupwire.broker.clustering.node import FIRST_READ_S, ClusterNode, ClusterStartError
from groupwire.broker.clustering.producer_ids import ClusterProducerIds
from groupwire.broker.config import BrokerSettings, SettingsError, validate_security
from groupwire.broker.connection import ClientConnection
from groupwire.broker.coordinator import (
    Coordinator,
    Renewal,
    Reply,
    RequestContext,
    Result,
)
from groupwire.broker.coordinator.offsets_api import LONG_COMMIT, commit_size
from groupwire.broker.dispatch import Handlers, RequestRunner
from groupwire.broker.durability import Durability
from groupwire.broker.etcd.store import MetadataStore
from groupwire.broker.fetch import FetchManager
from groupwire.broker.group_runtime import GroupRuntime
from groupwire.broker.heap import HeapSettler
from groupwire.broker.host import Peer
from groupwire.broker.kafka.apis import TRANSLATORS
from groupwire.broker.kafka.apis.configs import BrokerConfigs
from groupwire.broker.kafka.connection import KafkaConnection
from groupwire.broker.kafka.door import KafkaDoor, kafka_named
from groupwire.broker.kafka.translate import KafkaAddress
from groupwire.broker.logs import get_logger
from groupwire.broker.loop_monitor import LoopMonitor
from groupwire.broker.metrics import (
    BrokerMetrics,
    StateViews,
    StorageHealth,
    watch_cluster,
    watch_transactions,
)
from groupwire.broker.metrics_endpoint import MetricsEndpoint
from groupwire.broker.offsets_log import OFFSETS_TOPIC, OffsetsLog, PreparedWrite
from groupwire.broker.partition_roles import Leadership, SingleBroker
from groupwire.broker.security import (
    CredentialTable,
    SecurityState,
    SecurityStoreError,
    load_security,
)
from groupwire.broker.security.access import AccessControl
from groupwire.broker.security.acls import AclBinding
from groupwire.broker.security.apis import SecurityApis
from groupwire.broker.security.authorization import guard
from groupwire.broker.security.cluster_store import ClusterSecurity, follow_cluster_security
from groupwire.broker.security.listeners import Listener, advertised_addresses
from groupwire.broker.security.store import save_security
from groupwire.broker.security.tls import ServerTls, TlsError, TlsFiles
from groupwire.broker.storage import TRANSACTIONS_TOPIC, StorageConfig, TopicStore
from groupwire.broker.storage.errors import StorageError
from groupwire.broker.storage.fileops import FileOps
from groupwire.broker.storage.handles import (
    RESERVED_FILES,
    default_max_open_files,
    raise_nofile_limit,
)
from groupwire.broker.storage.producer_ids import LocalProducerIds, ProducerIds
from groupwire.broker.supervisor import DEFAULT_RESTART, Restart, Service, Supervisor
from groupwire.broker.topic_apis import BATCH_OVERHEAD, TopicApis
from groupwire.broker.topic_handlers import TopicHandlers
from groupwire.broker.txn_runtime import TransactionRuntime
from groupwire.protocol.acls import AclOperation, ResourceType
from groupwire.protocol.codec import HeartbeatFields
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    AlterUserScramCredentialsRequest,
    ApiVersionsResponse,
    CreateAclsRequest,
    DeletableGroupResult,
    DeleteAclsRequest,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeAclsRequest,
    DescribeUserScramCredentialsRequest,
    InitProducerIdRequest,
    InitProducerIdResponse,
    OffsetCommitRequest,
    Request,
    Response,
    response_type_for,
)
from groupwire.protocol.steps import Steps

log = get_logger("groupwire.broker")

DELETE_CHUNK = 16
"""Groups one step of a large DeleteGroups deletes (~1 ms: tombstones and events)."""


class StartupError(Exception):
    """The broker could not start (data dir, a port): one line that names the cause."""


def wall_clock_ms() -> int:
    """The wall clock: for timestamps users read (records, events), never a deadline."""
    return time.time_ns() // 1_000_000


def loop_clock_ms() -> int:
    """The running event loop's clock, monotonic, in ms: every deadline is on it (an NTP
    step of the wall clock expires nothing and stalls nothing), and the one timer is
    armed on it exactly (``GroupRuntime._wake_at``)."""
    return int(asyncio.get_running_loop().time() * 1000)


@dataclasses.dataclass(frozen=True)
class Started:
    """The services a started broker runs, built together once storage is open: none of
    them exists before, all of them after (no half-built broker to check for)."""

    store: TopicStore
    coordinator: Coordinator
    offsets_log: OffsetsLog
    fetches: FetchManager
    topics: TopicApis
    durability: Durability
    runtime: GroupRuntime
    """Runs the coordinator's results (``execute``) and its one timer."""
    topic_handlers: TopicHandlers
    cluster: ClusterNode | None
    """This broker's part in a cluster (``--etcd-endpoints``); None when alone."""
    hosting: GroupHosting | None
    """Cluster mode: the offsets partitions whose groups are loaded here."""


class NotStartedError(RuntimeError):
    """A started broker's service was asked for before ``start`` built it."""


class Broker:
    """One broker process: storage, coordinator, connections, metrics."""

    def __init__(self, settings: BrokerSettings, *,
                 clock: Callable[[], int] = wall_clock_ms,
                 file_ops: FileOps | None = None, settle_heap: bool = False,
                 metadata_store: MetadataStore | None = None,
                 restart: Restart = DEFAULT_RESTART) -> None:
        """``restart``: how background tasks come back after a crash (tests shorten it);
        ``file_ops`` replaces storage's system calls (tests inject disk failures);
        ``settle_heap``: the broker owns its process and freezes long-lived objects
        (``broker.heap``); ``metadata_store``: in cluster mode, what stands in for etcd
        (tests pass an in-memory one shared by their brokers)."""
        self._metadata_store = metadata_store
        self._started: Started | None = None
        self.heap = HeapSettler(settle_heap)
        self.settings = settings
        self._file_ops = file_ops
        self.clock = clock
        """The wall clock (tests step a fake one): record and event timestamps only."""
        self.monotonic: Callable[[], int] = loop_clock_ms
        """The clock of deadlines: the event loop's (``loop_clock_ms``)."""
        self.metrics = BrokerMetrics()
        self.supervisor = Supervisor(
            on_failure=lambda kind: self.metrics.background_task_failures.labels(kind).inc(),
            on_fatal=self._service_fatal, restart=restart)
        """Owns every long-lived task (``broker.supervisor``): a crash is logged, counted
        and restarted; one that keeps crashing stops the broker (``fatal_error``)."""
        self.cluster_producer_ids: ClusterProducerIds | None = None
        self.transactions: TransactionRuntime | None = None
        """The transaction coordinator's shell, once started."""
        self.fatal_error: str | None = None
        """Why the broker stopped on its own: a background task that could not go on."""
        self.loop_monitor = LoopMonitor(self.metrics.loop_stalls.observe)
        self.metrics.longest_loop_stall.set_function(lambda: self.loop_monitor.max_stall_s)
        self._slice_s = settings.loop_slice_ms / 1000
        """How long one request's work runs before others get the loop (``dispatch``)."""
        self.runner = RequestRunner(self._slice_s)
        """Runs requests' sliced and deferred work; its tasks are awaited at close."""
        self.handlers = Handlers()
        """The non-group APIs by request type (``broker.topic_handlers``, security)."""
        self.memory = MemoryBudget(settings.queued_max_request_bytes)
        """Request bytes held across connections (docs/protocol.md §2, rule 5)."""
        self.metrics.memory_budget.set(self.memory.total)
        self.metrics.memory_reserved.set_function(lambda: self.memory.reserved)
        self.metrics.memory_waiting.set_function(lambda: len(self.memory.waiting))
        self._connections: dict[int, ClientConnection] = {}
        self._connection_closed = asyncio.Event()
        self._next_conn_id = 1
        self._servers: list[asyncio.Server] = []
        """One per listener (``--listeners``), in their order."""
        self._bound: list[Listener] = []
        """Every listener with the port it is bound to, client listeners first."""
        self.listener_ports: dict[str, int] = {}
        """The port each listener is bound to, by name (``PLAINTEXT``, ``SASL_SSL``...)."""
        self._advertised: dict[str, tuple[str, int]] = {}
        """The host and port Metadata names to a client of each listener."""
        self._tls: ServerTls | None = None
        self.kafka_door = KafkaDoor(TRANSLATORS)
        """What the Kafka door's connections share (``broker.kafka``)."""
        self.security = SecurityState((), CredentialTable(), (), ())
        """ACLs, users and SASL mechanisms: loaded from the data dir at start."""
        self._access: AccessControl | None = None
        """The ACL check (``--authorizer acl``); None: every request is allowed."""
        self.cluster_security: ClusterSecurity | None = None
        """Cluster mode: the ACLs and users kept in etcd, followed by a watch."""
        self._metrics_server: MetricsEndpoint | None = None
        self._port = settings.port
        self.metrics_port: int | None = None
        self.renew_heartbeat: Callable[[int, HeartbeatFields, int], Renewal | None] = (
            _not_started)
        """The heartbeat fast path, ``Coordinator.renew`` once started: a Renewal when the
        heartbeat is settled with a plain NONE answer and nothing to execute; None:
        ``dispatch`` it as usual. Connections pass ``monotonic()`` read once per batch."""
        self._retention: Service | None = None
        self._stopped = asyncio.Event()
        self._closing = False
        self._listening = False

    # --- the started services -----------------------------------------------------------

    @property
    def started(self) -> Started:
        """The services built by ``start``; raises :class:`NotStartedError` before."""
        started = self._started
        if started is None:
            raise NotStartedError("the broker has not been started (await Broker.start())")
        return started

    @property
    def store(self) -> TopicStore | None:
        return None if self._started is None else self._started.store

    @property
    def coordinator(self) -> Coordinator | None:
        return None if self._started is None else self._started.coordinator

    @property
    def cluster(self) -> ClusterNode | None:
        """This broker's part in a cluster (``--etcd-endpoints``); None when alone."""
        return None if self._started is None else self._started.cluster

    @property
    def _hosted(self) -> set[int]:
        """Cluster mode: offsets partitions whose groups are loaded here."""
        hosting = None if self._started is None else self._started.hosting
        return set() if hosting is None else hosting.hosted

    def execute(self, result: Result, prepared: PreparedWrite | None = None,
                collect: Callable[[Reply], bool] | None = None) -> None:
        """Do what the coordinator decided (``GroupRuntime.execute``)."""
        self.started.runtime.execute(result, prepared, collect)

    # --- life cycle ---------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._port

    async def start(self) -> None:
        """Recover storage and groups, then listen: never answers before it is loaded.

        Raises :class:`StartupError` if the data dir or a port cannot be used; what was
        opened by then is closed again.
        """
        try:
            await self._start()
        except StartupError:
            await self.close()
            raise

    def _build(self, store: TopicStore) -> tuple[Started, int, int]:
        """Every service over the open store, wired to each other, with the group records
        loaded (alone: all of them; in a cluster, per partition as it comes to be led):
        the services, how many records, and the time they were loaded at."""
        settings = self.settings
        cluster: ClusterNode | None = None

        def partition_count(topic: str) -> int | None:
            """A topic's partitions as OffsetCommit checks them: in a cluster, the
            cluster's (a coordinator need not hold a replica of the topics its groups
            commit)."""
            if cluster is not None:
                assignment = cluster.image.topics.get(topic)
                return None if assignment is None else len(assignment.replicas)
            return store.partition_count(topic)

        coordinator = Coordinator(settings.coordinator_config(), partition_count,
                                  offsets_partitions=store.offsets_partitions)
        offsets_log = OffsetsLog(store,
                                 compact_min_records=settings.offsets_compact_min_records)
        # In a cluster, groups are loaded per offsets partition as this broker comes to
        # lead it (``GroupHosting``); a single broker loads them all now.
        records = [] if settings.clustered else list(offsets_log.replay())
        now = self.monotonic()
        coordinator.set_wall_clock(self.clock(), now)
        coordinator.load(records, now)
        leadership: Leadership = SingleBroker(store.partition_count)
        if settings.clustered:
            try:
                cluster = ClusterNode(
                    settings, store, metadata_store=self._metadata_store,
                    on_high_watermark=lambda tp: self._roles_changed({tp}),
                    supervisor=self.supervisor)
            except ClusterStartError as exc:  # etcd's TLS files
                store.close()
                raise StartupError(str(exc)) from exc
            leadership = cluster.leadership
        leaders = None if cluster is None else cluster.leaders
        fetches = FetchManager(
            store, coordinator, max_response_bytes=settings.max_frame_bytes - BATCH_OVERHEAD,
            ownership_fencing=settings.ownership_fencing, slice_s=self._slice_s,
            leadership=leadership,
            replica_fetched=None if leaders is None else leaders.follower_fetched,
            replica_epoch=None if cluster is None else cluster.broker_epoch,
            superuser=lambda principal: self.security.authorizer.is_super_user(principal))

        def appended(topic: str, partition: int) -> None:
            fetches.appended(topic, partition)
            if leaders is not None:
                leaders.appended((topic, partition))
        topics = TopicApis(settings, store, port=lambda: self._port, on_append=appended,
                           on_created=self.heap.after_growth, leadership=leadership,
                           address=self._advertised.__getitem__)
        durability = Durability(store, settings.storage_config().fsync,
                                settings.flush_interval_ms, fetches.wake,
                                supervisor=self.supervisor)
        runtime = GroupRuntime(
            coordinator, offsets_log=offsets_log, store=store, durability=durability,
            fetches=fetches, topics=topics, cluster=cluster, metrics=self.metrics,
            connection=self._connections.get, spawn=self.runner.spawn,
            clock=lambda: self.clock(), monotonic=lambda: self.monotonic(),
            slice_s=self._slice_s, closing=lambda: self._closing)
        hosting = None if cluster is None else GroupHosting(
            cluster, coordinator, offsets_log=offsets_log,
            offsets_partitions=store.offsets_partitions, supervisor=self.supervisor,
            execute=runtime.execute, now=runtime.now, spawn=self.runner.spawn,
            slice_s=self._slice_s)
        topic_handlers = TopicHandlers(
            settings, topics, durability=durability, fetches=fetches, cluster=cluster,
            runner=self.runner, coordinator=coordinator, execute=runtime.execute,
            heap=self.heap)
        return Started(store=store, coordinator=coordinator, offsets_log=offsets_log,
                       fetches=fetches, topics=topics, durability=durability,
                       runtime=runtime, topic_handlers=topic_handlers, cluster=cluster,
                       hosting=hosting), len(records), now

    async def _start(self) -> None:
        settings = self.settings
        t0 = time.perf_counter()
        storage_config, open_files = self._open_files_config()
        try:
            store = TopicStore(settings.data_dir, storage_config,
                               file_ops=self._file_ops)
        except (StorageError, OSError) as exc:
            raise StartupError(str(exc)) from exc
        for report in store.recovery_reports():
            log.warning("log_recovered", **report)
        if store.strays_removed:
            log.warning("stray_partitions_removed", directories=store.strays_removed)
        started, group_records, now = self._build(store)
        self._started = started
        coordinator, cluster, runtime = started.coordinator, started.cluster, started.runtime
        self.renew_heartbeat = coordinator.renew
        started.durability.start()
        started.topic_handlers.register(self.handlers)
        self._forget_offsets_of_deleted_topics(started, store.fresh)
        runtime.execute(coordinator.start(now))
        try:
            validate_security(settings)  # settings may not have come through resolve()
            bindings, credentials = (load_security(settings.data_dir) if cluster is None
                                     else ([], CredentialTable()))  # etcd's, just below
        except (SettingsError, SecurityStoreError) as exc:
            raise StartupError(str(exc)) from exc
        self.security = SecurityState(bindings, credentials, settings.super_user_list(),
                                      settings.sasl_mechanisms())
        if cluster is not None:  # before listening: the first request sees them
            try:
                self.cluster_security = await follow_cluster_security(
                    cluster.etcd, cluster.cluster, self.security,
                    data_dir=settings.data_dir, where=settings.etcd_endpoints,
                    timeout_s=FIRST_READ_S, supervisor=self.supervisor)
            except SecurityStoreError as exc:
                raise StartupError(str(exc)) from exc
        self._start_security()
        try:
            next_producer_id = self._start_producer_ids()
        except StorageError as exc:
            raise StartupError(str(exc)) from exc
        self._start_transactions(started, next_producer_id)
        await self._listen()
        try:  # after _listen: DescribeConfigs names the bound listeners
            self._start_kafka_door(store)
        except StorageError as exc:
            raise StartupError(str(exc)) from exc
        try:
            self._start_metrics(started)
        except OSError as exc:
            raise StartupError(_cannot_listen("--metrics-port", settings.host,
                                              settings.metrics_port, exc)) from exc
        if cluster is not None and started.hosting is not None:
            hosting, handlers = started.hosting, started.topic_handlers
            coordinator.set_hosting(hosting.coordinates, hosting.loading_group)
            watch_cluster(self.metrics, cluster)
            started.fetches.coordinates = hosting.coordinates
            try:
                await cluster.start(self._advertised,
                                    ensure_local=started.topics.ensure_local,
                                    delete_local=handlers.delete_local,
                                    on_roles=self._roles_changed,
                                    append_events=runtime.append_events,
                                    on_topics_removed=handlers.cluster_topics_removed)
            except ClusterStartError as exc:
                raise StartupError(str(exc)) from exc
            if self.cluster_producer_ids is not None:
                self.cluster_producer_ids.start()
        self._listening = True
        self.heap.at_start()
        self._retention = self.supervisor.spawn("log-retention", self._retention_loop)
        self.loop_monitor.start(self.supervisor)
        log.info("open_files_limit", partitions=store.partition_total, **open_files)
        log.info("security_loaded", authorizer=settings.authorizer or "none",
                 acls=len(self.security.authorizer), users=len(self.security.credentials),
                 super_users=settings.super_user_list())
        for server in self._servers:  # bound in _listen (a cluster registers the ports);
            await server.start_serving()  # accepting only now that all of the above is done
        log.info("broker_started", host=settings.host, port=self._port,
                 listeners={name: port for name, port in self.listener_ports.items()},
                 metrics_port=self.metrics_port, data_dir=str(settings.data_dir),
                 topics=len(store.topics()), group_records=group_records,
                 fsync=settings.fsync, startup_ms=round((time.perf_counter() - t0) * 1000))

    def _start_security(self) -> None:
        """The ACL and credential APIs, and with ``--authorizer acl`` the check every
        request passes first (``broker.authorization``)."""
        settings, security, runner = self.settings, self.security, self.runner
        on = settings.authorizer == "acl"
        if on:
            self._access = AccessControl(security.authorizer, self.metrics)
            self.renew_heartbeat = self._renew_if_allowed
        apis = SecurityApis(security, authorizer_on=on, persist=self._persist_security,
                            persist_applies=self.cluster_security is not None)

        def answer_later(api: Callable[[Any, str], Coroutine[Any, Any, Response]],
                         ) -> Callable[[Peer, int, Request], None]:
            def handle(conn: Peer, cid: int, request: Request) -> None:
                runner.defer(conn, cid, request, api(request, conn.principal), reply=True)
            return handle

        handlers = self.handlers
        handlers.add(DescribeAclsRequest, lambda conn, cid, request: conn.reply(
            cid, apis.describe_acls(request)))
        handlers.add(CreateAclsRequest, answer_later(apis.create_acls))
        handlers.add(DeleteAclsRequest, answer_later(apis.delete_acls))
        handlers.add(DescribeUserScramCredentialsRequest, lambda conn, cid, request: conn.reply(
            cid, apis.describe_credentials(request)))
        handlers.add(AlterUserScramCredentialsRequest, answer_later(apis.alter_credentials))

    def _start_transactions(self, started: Started,
                            next_producer_id: Callable[[], int | None]) -> None:
        """The transaction coordinator (``broker.txn_runtime``) and its APIs."""
        settings = self.settings
        txns = TransactionRuntime(
            settings, store=started.store, durability=started.durability,
            fetches=started.fetches, groups=started.runtime, metrics=self.metrics,
            producer_id=next_producer_id, connection=self._connections.get,
            spawn=self.runner.spawn, clock=lambda: self.clock(),
            monotonic=lambda: self.monotonic(), slice_s=self._slice_s,
            closing=lambda: self._closing,
            advertised=started.topics.advertised, node_id=settings.node_id,
            cluster=started.cluster,
            hosts_groups=(lambda _p: True) if started.hosting is None
            else started.hosting.hosted.__contains__)
        txns.register(self.handlers)
        txns.start()
        self.transactions = txns

    def _start_producer_ids(self) -> Callable[[], int | None]:
        """InitProducerId, through either door: ids never handed out before
        (``broker.storage.producer_ids``)."""
        settings, cluster = self.settings, self.started.cluster
        ids: ProducerIds
        if cluster is not None:  # blocks the cluster hands out in etcd
            ids = self.cluster_producer_ids = ClusterProducerIds(
                lambda: cluster.etcd, settings.cluster_name)
            why = "no block of producer ids is claimed from etcd yet"
        else:
            ids = LocalProducerIds(settings.data_dir)
            why = "no producer id could be reserved in the data dir"
        next_id = ids.next_id

        def init_producer_id(conn: Peer, cid: int, request: Request) -> None:
            assert isinstance(request, InitProducerIdRequest)  # with no transactional_id
            pid = next_id()
            conn.reply(cid, InitProducerIdResponse(producer_id=pid, producer_epoch=0)
                       if pid is not None else InitProducerIdResponse(
                           error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                           error_message=why))

        self.handlers.add(InitProducerIdRequest, init_producer_id)
        return next_id

    def _start_kafka_door(self, store: TopicStore) -> None:
        """What the Kafka door answers itself: configs, producer ids, the ACL check."""
        settings, door = self.settings, self.kafka_door
        bound = self._bound
        door.configs = BrokerConfigs(
            settings, topic_exists=lambda name: store.partition_count(name) is not None,
            listeners=[str(listener) for listener in bound],
            advertised=[f"{listener.name}://{host}:{port}" for listener in bound
                        for host, port in [self._advertised[listener.name]]])
        door.access = self._access
        door.heartbeat_hold_ms = settings.kafka_heartbeat_hold_ms
        if not settings.clustered:
            advertised = self._advertised  # filled in by _listen, before any connection
            door.addresses = lambda name: (
                {0: KafkaAddress(0, *advertised[name])} if name in advertised else {})

    async def _persist_security(self, bindings: list[AclBinding],
                                credentials: CredentialTable) -> None:
        """Durable before it is answered (``broker.security.apis``): in a cluster, in
        etcd (and applied); alone, in the data dir, off the loop, as it fsyncs."""
        if self.cluster_security is not None:
            await self.cluster_security.persist(bindings, credentials)
            return
        await asyncio.get_running_loop().run_in_executor(
            None, save_security, self.settings.data_dir, bindings, credentials)

    def _renew_if_allowed(self, conn_id: int, heartbeat: HeartbeatFields, now_ms: int,
                          ) -> Renewal | None:
        """The heartbeat fast path with the authorizer on: only for a connection allowed
        to READ the group (a cached decision); otherwise the full path refuses it."""
        conn, access, coordinator = self._connections.get(conn_id), self._access, \
            self.coordinator
        if conn is None or access is None or coordinator is None or not access.check(
                conn, AclOperation.READ, ResourceType.GROUP, heartbeat[1], audit=False):
            return None
        return coordinator.renew(conn_id, heartbeat, now_ms)

    async def _listen(self) -> Listener:
        """A server per listener, TLS ones sharing one context; the first listener's port
        is ``port``. Bound, not yet accepting: ``_start`` starts serving once the broker
        can answer (a connection made earlier is refused, so a health check that passes
        means ready). In a cluster every listener's address is registered, the
        inter-broker listener's as the broker's own (``ClusterNode.start``)."""
        settings = self.settings
        try:
            listeners = settings.listener_list()
            advertised = settings.advertised_listener_list()
            kafka = [kafka_named(entry) for entry in settings.kafka_listener_list()]
            kafka_advertised = [kafka_named(entry)
                                for entry in settings.kafka_advertised_listener_list()]
        except SettingsError as exc:
            raise StartupError(str(exc)) from exc
        if any(listener.uses_tls for listener in listeners + kafka):
            try:
                self._tls = ServerTls(TlsFiles(settings.ssl_certfile, settings.ssl_keyfile,
                                               settings.ssl_cafile, settings.ssl_client_auth))
            except TlsError as exc:
                raise StartupError(str(exc)) from exc
        loop = asyncio.get_running_loop()
        for listener in listeners + kafka:
            ssl_context = self._tls.context if self._tls and listener.uses_tls else None
            if listener in kafka:
                factory: Callable[[], asyncio.Protocol] = functools.partial(
                    self._new_kafka_connection, listener)
            elif settings.kafka_on_listeners:
                factory = functools.partial(self._either_door, listener)
            else:
                factory = functools.partial(self._new_connection, listener)
            try:
                server = await loop.create_server(
                    factory,
                    listener.host or None, listener.port, reuse_address=True, backlog=1024,
                    start_serving=False, ssl=ssl_context, ssl_handshake_timeout=(
                        settings.ssl_handshake_timeout_ms / 1000 if ssl_context else None))
            except OSError as exc:
                flag = (f"--kafka-listeners {listener}" if listener in kafka
                        else f"--listeners {listener}" if settings.listeners.strip()
                        else "--port")
                raise StartupError(_cannot_listen(flag, listener.host, listener.port,
                                                  exc)) from exc
            self._servers.append(server)
            self.listener_ports[listener.name] = port = server.sockets[0].getsockname()[1]
            self._bound.append(dataclasses.replace(listener, port=port))
        self._port = self.listener_ports[listeners[0].name]
        self._advertised.update(advertised_addresses(
            listeners + kafka, advertised + kafka_advertised, settings.advertised_host,
            self.listener_ports))
        return listeners[0]

    def reload_tls(self) -> None:
        """SIGHUP: new TLS handshakes use the certificate and CA files as they are now;
        open connections keep theirs. Files that do not load leave the old ones."""
        if self._tls is None:
            log.info("tls_reload_skipped", reason="no SSL or SASL_SSL listener")
            return
        if self._tls.reload():
            log.info("tls_reloaded", certfile=self.settings.ssl_certfile,
                     cafile=self.settings.ssl_cafile)

    def _forget_offsets_of_deleted_topics(self, started: Started, fresh: bool) -> None:
        """Tombstone committed offsets of topics that no longer exist: a deletion whose
        tombstones a crash lost (OffsetCommit refuses unknown topics, so there is no other
        way to have them). Not for a new data dir: nothing says what existed then."""
        store, coordinator = started.store, started.coordinator
        gone = sorted(t for t in coordinator.committed_topics()
                      if store.partition_count(t) is None)
        if gone and not fresh:
            log.warning("offsets_of_deleted_topics_removed", topics=gone)
            started.runtime.execute(coordinator.delete_topic_offsets(gone))

    def _open_files_config(self) -> tuple[StorageConfig, dict[str, int]]:
        """Raise the soft RLIMIT_NOFILE to the hard limit and size the log file pool
        from it (``--max-open-files``, 0: derived); the figures to log once started (a
        start that fails prints one line, its reason)."""
        settings = self.settings
        before, limit = raise_nofile_limit()
        pool = settings.max_open_files or default_max_open_files(limit)
        room = limit - RESERVED_FILES - pool
        if room < 0:
            raise StartupError(
                f"--max-open-files {pool} does not fit the process's open files limit "
                f"(RLIMIT_NOFILE {limit}, of which {RESERVED_FILES} are kept for the broker "
                f"itself): lower it, or raise the limit (ulimit -n)")
        figures = {"limit": limit, "raised_from": before, "max_open_files": pool,
                   "left_for_connections": room, "max_partitions": settings.max_partitions}
        return dataclasses.replace(settings.storage_config(), max_open_files=pool), figures

    def _start_metrics(self, started: Started) -> None:
        if self.settings.metrics_port < 0:
            return
        coordinator, store = started.coordinator, started.store
        self.metrics.connections.set_function(lambda: len(self._connections))

        def topics() -> dict[str, int]:
            return {t: n for t, n in store.topics().items() if not store.is_internal(t)}

        def log_end(topic: str, p: int) -> int | None:
            if store.is_internal(topic):
                return None
            try:  # a snapshot takes several turns: the topic may be deleted meanwhile
                return store.log(topic, p).high_watermark
            except KeyError:
                return None

        def storage() -> StorageHealth:
            evicted, fsynced = store.file_evictions
            return StorageHealth(
                partitions_by_topic=store.topics(),
                offline=[(t, p) for t, p, _why in store.offline_partitions()],
                open_files=store.open_files, evictions_clean=evicted - fsynced,
                evictions_fsynced=fsynced)

        self.metrics.watch(StateViews(
            groups_by_state=coordinator.group_counts_by_state,
            members=coordinator.member_count, topics=topics, log_end=log_end,
            group_ids=coordinator.group_ids, committed=coordinator.committed,
            storage=storage), partition_series=self.settings.metrics_partition_series)
        if self.transactions is not None:
            watch_transactions(self.metrics, self.transactions)
        # served from a thread, read on the loop: a scrape asks the loop for a snapshot
        server = MetricsEndpoint(functools.partial(self.metrics.snapshot, self._slice_s),
                                 asyncio.get_running_loop())
        self.metrics_port = server.start(self.settings.host, self.settings.metrics_port)
        self._metrics_server = server

    async def _retention_loop(self) -> None:
        interval = self.settings.log_retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            self.apply_log_retention()
            await self.started.topics.purge()  # the dropped segments' files, off the loop

    def apply_log_retention(self) -> None:
        store = self.started.store
        now = self.clock()
        for topic, count in store.topics().items():
            if topic in (OFFSETS_TOPIC, TRANSACTIONS_TOPIC):  # compacted, never aged out
                continue
            for p in range(count):
                plog = store.log(topic, p)
                deleted = plog.apply_retention(
                    now, self.settings.log_retention_ms, self.settings.log_retention_bytes)
                if deleted:
                    log.info("log_retention", topic=topic, partition=p, segments=deleted)
                expired = plog.expire_producers(now, self.settings.producer_id_expiration_ms)
                if expired:
                    log.info("producers_expired", topic=topic, partition=p, producers=expired)

    async def serve_until_stopped(self) -> None:
        await self._stopped.wait()

    def request_stop(self) -> None:
        self._stopped.set()

    def _service_fatal(self, name: str, error: BaseException) -> None:
        """A background task cannot go on: stop serving (in a cluster, leaving fences
        this broker: its lease is revoked and others take over) and let the process exit
        non-zero, so that its orchestrator starts a clean one."""
        if self.fatal_error is None:
            self.fatal_error = f"background task {name} failed: {type(error).__name__}: {error}"
        self.request_stop()

    async def close(self) -> None:
        """Stop accepting, answer what can be answered, flush, close storage."""
        if self._closing:
            return
        self._closing = True
        started = self._started
        if self._listening:  # a start that failed says why itself, once
            log.info("broker_stopping")
        for server in self._servers:
            server.close()
        if self.cluster_security is not None:  # its watch uses the cluster's etcd client
            await self.cluster_security.close()
        if started is not None and started.cluster is not None:
            with contextlib.suppress(Exception):  # leave first: others take over
                await started.cluster.close()
        if started is not None and started.hosting is not None:
            await started.hosting.close()
        if self._retention is not None:
            await self._retention.stop()
        await self.loop_monitor.close()
        if started is not None:  # creations on worker threads finish first
            await started.topics.drain()
        await self.runner.close()
        if self.transactions is not None:
            await self.transactions.close()
        if self.cluster_producer_ids is not None:
            await self.cluster_producer_ids.close()
        if started is not None:
            await started.runtime.close()
            started.fetches.complete_all()
            await started.durability.close()
        await self.supervisor.close()  # whatever is still running (none, normally)
        if started is not None:
            started.runtime.stop_timer()
        for conn in list(self._connections.values()):
            conn.close()
        for server in self._servers:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2):
                    await server.wait_closed()
        if self._metrics_server is not None:
            await asyncio.get_running_loop().run_in_executor(
                None, self._metrics_server.shutdown)
        if started is not None:
            started.store.close()
        self._stopped.set()
        if self._listening:
            log.info("broker_stopped")

    # --- connections --------------------------------------------------------------------

    def _new_connection(self, listener: Listener) -> ClientConnection:
        """The protocol of an accepted socket; it counts once open (``connection_made``)."""
        conn = ClientConnection(self, self._next_conn_id, listener)
        self._next_conn_id += 1
        return conn

    def _new_kafka_connection(self, listener: Listener) -> KafkaConnection:
        conn = KafkaConnection(self, self._next_conn_id, listener, self.kafka_door)
        self._next_conn_id += 1
        return conn

    def _either_door(self, listener: Listener) -> ClientConnection:
        """A client listener's connection, handed to the Kafka door if its first frame
        is Kafka's (docs/protocol.md §13.1)."""
        conn_id = self._next_conn_id
        self._next_conn_id += 1
        return ClientConnection(self, conn_id, listener, other_door=functools.partial(
            KafkaConnection, self, conn_id, listener, self.kafka_door))

    def connection_switched(self, old: Peer, new: Peer) -> None:
        """``new`` serves ``old``'s socket from now on, under the same number."""
        assert isinstance(new, ClientConnection)
        if self._connections.get(old.conn_id) is old:
            self._connections[new.conn_id] = new

    def connection_made(self, conn: Peer) -> None:
        """Open, after its TLS handshake if any: a handshake that fails never gets here,
        and its socket leaves nothing behind (asyncio and uvloop then never call
        ``connection_lost`` either)."""
        assert isinstance(conn, ClientConnection)
        if len(self._connections) >= self.settings.max_connections or self._closing:
            conn.refuse("max-connections")
        self._connections[conn.conn_id] = conn
        self.metrics.connections_accepted.inc()

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def wait_connections(self, at_most: int) -> None:
        """Return once no more than ``at_most`` connections are open (operators, tests)."""
        while len(self._connections) > at_most:
            self._connection_closed.clear()
            await self._connection_closed.wait()

    def connection_lost(self, conn: Peer) -> None:
        if self._connections.pop(conn.conn_id, None) is None:
            return
        self._connection_closed.set()
        self.metrics.connections_closed.labels(conn.close_reason).inc()
        self._carry_out(self.memory.release(conn.conn_id))
        started = self._started
        if started is not None:
            started.fetches.connection_closed(conn.conn_id)
        if self._access is not None:
            self._access.forget(conn.conn_id)
        if started is not None and not self._closing:
            runtime = started.runtime
            runtime.execute(started.coordinator.connection_closed(conn.conn_id,
                                                                  runtime.now()))

    def request_memory(self, conn_id: int, held: int, wanted: int) -> Verdict:
        decision = self.memory.request(conn_id, held, wanted)
        self._carry_out(decision)
        return decision.verdict

    def _carry_out(self, decision: Decision) -> None:
        """Close the connections the budget gave up on, read again those it now serves."""
        for conn_id in decision.close:
            conn = self._connections.get(conn_id)
            if conn is not None:
                conn.abort("memory-pressure",
                           "request memory exhausted: closed, as the newest waiting, to "
                           "make room for an older connection")
        for conn_id in decision.resume:
            conn = self._connections.get(conn_id)
            if conn is not None:
                conn.memory_granted()

    # --- dispatch -----------------------------------------------------------------------

    def dispatch(self, conn: Peer, correlation_id: int, client_id: str,
                 request: Request) -> None:
        try:
            self._dispatch(conn, correlation_id, client_id, request)
        except Exception as exc:
            log.exception("request_failed", api=type(request).__name__, conn=conn.conn_id)
            conn.reply(correlation_id, response_type_for(request)(
                error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
                error_message=f"{type(exc).__name__}: {exc}"))

    def unsupported_api_versions(self, version: int) -> ApiVersionsResponse:
        full = self.started.topics.api_versions()
        return ApiVersionsResponse(
            error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=full.api_keys,
            max_frame_bytes=full.max_frame_bytes,
            error_message=f"ApiVersions v{version} is not supported; answered in v0")

    def _dispatch(self, conn: Peer, cid: int, client_id: str,
                  request: Request) -> None:
        if self._access is not None:
            guarded = guard(request, self._access.allowed_for(conn))
            if guarded.answer is not None:
                conn.reply(cid, guarded.answer)
                return
            assert guarded.request is not None
            request = guarded.request
            if guarded.finish is not None:
                conn.finish_answer(cid, guarded.finish)
        handler = self.handlers.get(type(request))
        if handler is not None:
            handler(conn, cid, request)
            return
        started = self.started
        coordinator, runtime, runner = started.coordinator, started.runtime, self.runner
        steps = coordinator.answer_steps(request)
        if steps is not None:  # read-only and maybe long: DescribeGroups, ListGroups, ...
            runner.answer_sliced(conn, cid, request, steps)
            return
        principal = conn.principal
        ctx = RequestContext(conn.conn_id, cid, client_id, conn.client_host, principal,
                             self.security.authorizer.is_super_user(principal))
        if type(request) is DeleteGroupsRequest and len(request.groups_names) > DELETE_CHUNK:
            runner.sliced(conn, cid, request, self._delete_groups_steps(
                ctx, request, lambda response: conn.reply(cid, response)), lambda _done: None)
            return
        if type(request) is OffsetCommitRequest and commit_size(request) > LONG_COMMIT:
            runner.sliced(conn, cid, request, self._commit_steps(ctx, request),
                          lambda _done: None)
            return
        runtime.execute(coordinator.handle(ctx, request, runtime.now()))

    def _commit_steps(self, ctx: RequestContext, request: OffsetCommitRequest,
                      ) -> Steps[None]:
        """A large OffsetCommit: validated on arrival, its answer, cache entries and
        batch built in steps, then applied and appended in one step (the coordinator
        falls back to its plain handler if the group changed meanwhile)."""
        started = self.started
        coordinator, offsets_log, runtime = (started.coordinator, started.offsets_log,
                                             started.runtime)
        now, wall = runtime.now(), self.clock()
        prepared = yield from coordinator.offset_commit_steps(ctx, request, now)
        if isinstance(prepared, Result):  # refused as a whole
            runtime.execute(prepared)
            return
        write: PreparedWrite | None = None
        if prepared.records:
            write = yield from offsets_log.prepare_steps(prepared.group_id,
                                                         prepared.records, wall)
            yield
        applied = coordinator.apply_commit(prepared)
        runtime.execute(applied.result, prepared=write if applied.as_prepared else None)
        yield  # what the commit was built from (~50 000 objects) is freed in a step of its own

    def _delete_groups_steps(self, ctx: RequestContext, request: DeleteGroupsRequest,
                             answer: Callable[[DeleteGroupsResponse], None]) -> Steps[None]:
        """DeleteGroups of many groups, ``DELETE_CHUNK`` at a time: each group is deleted
        on its own, as Kafka's coordinator does (its answer is per group), so a request
        of 10 000 need not hold the loop for the whole of it (~0.3 s, mostly events).
        Each chunk's answer is collected once its write settled; ``answer`` gets the
        whole once every chunk's has."""
        coordinator, runtime = self.started.coordinator, self.started.runtime
        names = request.groups_names
        starts = range(0, len(names), DELETE_CHUNK)
        parts: list[list[DeletableGroupResult]] = [[] for _ in starts]
        left = len(parts)

        def collector(index: int) -> Callable[[Reply], bool]:
            def collect(reply: Reply) -> bool:
                nonlocal left
                if (reply.conn_id, reply.correlation_id) != (ctx.conn_id, ctx.correlation_id):
                    return False
                response = reply.response
                assert isinstance(response, DeleteGroupsResponse)
                parts[index] = response.results
                left -= 1
                if left == 0:
                    answer(DeleteGroupsResponse(results=[r for part in parts for r in part]))
                return True
            return collect

        for index, at in enumerate(starts):
            part = DeleteGroupsRequest(groups_names=names[at:at + DELETE_CHUNK])
            runtime.execute(coordinator.handle(ctx, part, runtime.now()),
                            collect=collector(index))
            yield

    def _roles_changed(self, partitions: set[tuple[str, int]]) -> None:
        """Cluster mode: leadership here moved: parked fetches on those partitions look
        again, and offsets partitions' groups are loaded or unloaded."""
        started = self.started
        if started.hosting is not None:
            started.hosting.roles_changed(partitions)
        if self.transactions is not None:
            self.transactions.roles_changed(partitions)
        for topic, p in partitions:
            started.fetches.appended(topic, p)
        started.fetches.wake()


def _cannot_listen(flag: str, host: str, port: int, exc: OSError) -> str:
    """Name the port that failed and the flag that chose it (the client or metrics one)."""
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    if exc.errno == errno.EADDRINUSE:
        reason = "address already in use (another process listens there)"
    return f"cannot listen on {host}:{port} ({flag}): {reason}"


def _not_started(conn_id: int, heartbeat: HeartbeatFields, now_ms: int) -> Renewal | None:
    return None
