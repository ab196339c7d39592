"""The broker's asyncio shell: listen, route requests, run what the coordinator returns.

Everything that decides lives elsewhere: group semantics in ``broker.coordinator`` (pure,
time passed in), bytes on disk in ``broker.storage``. This module reads the clock, owns
the sockets, the one timer that wakes the coordinator, and the order "write, make
durable, then answer".
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
from typing import Any, Final, TypeVar

import msgpack

from groupwire.broker.budget import Decision, MemoryBudget, Verdict
from groupwire.broker.clustering.controller_apis import ClusterApis
from groupwire.broker.clustering.node import FIRST_READ_S, ClusterNode, ClusterStartError
from groupwire.broker.config import BrokerSettings, SettingsError, validate_security
from groupwire.broker.connection import ClientConnection
from groupwire.broker.coordinator import (
    CancelTimer,
    Coordinator,
    Renewal,
    Reply,
    RequestContext,
    Result,
    SetTimer,
    TimerQueue,
)
from groupwire.broker.coordinator.events import GroupEvent
from groupwire.broker.coordinator.offsets_api import LONG_COMMIT, commit_size
from groupwire.broker.durability import Durability
from groupwire.broker.etcd.store import MetadataStore
from groupwire.broker.fetch import FetchManager
from groupwire.broker.heap import HeapSettler
from groupwire.broker.host import Peer
from groupwire.broker.logs import get_logger
from groupwire.broker.loop_monitor import LoopMonitor
from groupwire.broker.metrics import BrokerMetrics, StateViews, StorageHealth, watch_cluster
from groupwire.broker.metrics_endpoint import MetricsEndpoint
from groupwire.broker.offsets_log import OFFSETS_TOPIC, OffsetsLog, PreparedWrite
from groupwire.broker.pacing import finish_in_slices, sliced
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
from groupwire.broker.storage import StorageConfig, TopicStore
from groupwire.broker.storage.errors import StorageError
from groupwire.broker.storage.fileops import FileOps
from groupwire.broker.storage.handles import (
    RESERVED_FILES,
    default_max_open_files,
    raise_nofile_limit,
)
from groupwire.broker.supervisor import DEFAULT_RESTART, Restart, Service, Supervisor
from groupwire.broker.topic_apis import BATCH_OVERHEAD, TopicApis
from groupwire.protocol.acls import AclOperation, ResourceType
from groupwire.protocol.batches import MIN_BATCH_SIZE, read_header
from groupwire.protocol.codec import HeartbeatFields
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.hashing import coordinator_partition
from groupwire.protocol.messages import (
    AlterUserScramCredentialsRequest,
    ApiVersionsRequest,
    ApiVersionsResponse,
    CreateAclsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeletableGroupResult,
    DeleteAclsRequest,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteTopicsRequest,
    DescribeAclsRequest,
    DescribeUserScramCredentialsRequest,
    ElectLeadersRequest,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    ListOffsetsRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetsForLeaderEpochRequest,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    Request,
    Response,
    TopicProduceResponse,
    response_type_for,
)
from groupwire.protocol.steps import Steps

log = get_logger("groupwire.broker")

T = TypeVar("T")

EVENTS_TOPIC = "__group_events"
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
    armed on it exactly (``Broker._wake_at``)."""
    return int(asyncio.get_running_loop().time() * 1000)


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
        self.cluster: ClusterNode | None = None
        """This broker's part in a cluster (``--etcd-endpoints``); None when alone."""
        self._offsets_partitions = 1
        self._hosted: set[int] = set()
        """Cluster mode: offsets partitions whose groups are loaded here."""
        self._loads: dict[int, Service] = {}
        """Cluster mode: offsets partitions being loaded (COORDINATOR_LOAD_IN_PROGRESS)."""
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
        self.fatal_error: str | None = None
        """Why the broker stopped on its own: a background task that could not go on."""
        self.loop_monitor = LoopMonitor(self.metrics.loop_stalls.observe)
        self.metrics.longest_loop_stall.set_function(lambda: self.loop_monitor.max_stall_s)
        self._slice_s = settings.loop_slice_ms / 1000
        """How long one request's work runs before others get the loop (``_sliced``)."""
        self.memory = MemoryBudget(settings.queued_max_request_bytes)
        """Request bytes held across connections (docs/protocol.md §2, rule 5)."""
        self.metrics.memory_budget.set(self.memory.total)
        self.metrics.memory_reserved.set_function(lambda: self.memory.reserved)
        self.metrics.memory_waiting.set_function(lambda: len(self.memory.waiting))
        self.store: TopicStore | None = None
        self.coordinator: Coordinator | None = None
        self._timers = TimerQueue()
        self._timer_handle: asyncio.TimerHandle | None = None
        self._timer_deadline: int | None = None
        self._connections: dict[int, ClientConnection] = {}
        self._connection_closed = asyncio.Event()
        self._next_conn_id = 1
        self._servers: list[asyncio.Server] = []
        """One per listener (``--listeners``), in their order."""
        self.listener_ports: dict[str, int] = {}
        """The port each listener is bound to, by name (``PLAINTEXT``, ``SASL_SSL``...)."""
        self._advertised: dict[str, tuple[str, int]] = {}
        """The host and port Metadata names to a client of each listener."""
        self._tls: ServerTls | None = None
        self.security = SecurityState((), CredentialTable(), (), ())
        """ACLs, users and SASL mechanisms: loaded from the data dir at start."""
        """OffsetCommits applied but not yet stored: hidden from OffsetFetch."""
        self._access: AccessControl | None = None
        self.cluster_security: ClusterSecurity | None = None
        """Cluster mode: the ACLs and users kept in etcd, followed by a watch."""
        """The ACL check (``--authorizer acl``); None: every request is allowed."""
        self._metrics_server: object | None = None
        self._port = settings.port
        self.metrics_port: int | None = None
        self._durability: Durability | None = None
        self._offsets_log: OffsetsLog | None = None
        self._fetches: FetchManager | None = None
        self._topics: TopicApis | None = None
        self._handlers: dict[type, Callable[..., None]] = {}
        self._deferred: set[asyncio.Task[None]] = set()
        """Requests answered by a coroutine (topic creation): awaited at close."""
        self._compactions: dict[int, asyncio.Task[None]] = {}
        """``__consumer_offsets`` partitions being compacted: abandoned at close."""
        self.renew_heartbeat: Callable[[int, HeartbeatFields, int], Renewal | None] = (
            _not_started)
        """The heartbeat fast path, ``Coordinator.renew`` once started: a Renewal when the
        heartbeat is settled with a plain NONE answer and nothing to execute; None:
        ``dispatch`` it as usual. Connections pass ``monotonic()`` read once per batch."""
        self._retention: Service | None = None
        self._stopped = asyncio.Event()
        self._closing = False
        self._listening = False

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

    async def _start(self) -> None:
        settings = self.settings
        t0 = time.perf_counter()
        storage_config, open_files = self._open_files_config()
        try:
            store = TopicStore(settings.data_dir, storage_config,
                               file_ops=self._file_ops)
        except (StorageError, OSError) as exc:
            raise StartupError(str(exc)) from exc
        self.store = store
        for report in store.recovery_reports():
            log.warning("log_recovered", **report)
        if store.strays_removed:
            log.warning("stray_partitions_removed", directories=store.strays_removed)
        coordinator = Coordinator(settings.coordinator_config(), self._partition_count,
                                  offsets_partitions=store.offsets_partitions)
        self._offsets_partitions = store.offsets_partitions
        self.coordinator = coordinator
        self.renew_heartbeat = coordinator.renew

        self._offsets_log = OffsetsLog(
            store, compact_min_records=settings.offsets_compact_min_records)
        # In a cluster, groups are loaded per offsets partition as this broker comes to
        # lead it (``_offsets_roles``); a single broker loads them all now.
        records = [] if settings.clustered else list(self._offsets_log.replay())
        now = self._now()
        coordinator.load(records, now)
        leadership: Leadership = SingleBroker(store.partition_count)
        if settings.clustered:
            try:
                self.cluster = ClusterNode(
                    settings, store, metadata_store=self._metadata_store,
                    on_high_watermark=lambda tp: self._roles_changed({tp}),
                    supervisor=self.supervisor)
            except ClusterStartError as exc:  # etcd's TLS files
                raise StartupError(str(exc)) from exc
            leadership = self.cluster.leadership
        leaders = None if self.cluster is None else self.cluster.leaders
        self._fetches = FetchManager(
            store, coordinator, max_response_bytes=settings.max_frame_bytes - BATCH_OVERHEAD,
            ownership_fencing=settings.ownership_fencing, slice_s=self._slice_s,
            leadership=leadership,
            replica_fetched=None if leaders is None else leaders.follower_fetched,
            replica_epoch=None if self.cluster is None else self.cluster.broker_epoch,
            superuser=lambda principal: self.security.authorizer.is_super_user(principal))
        fetches = self._fetches

        def appended(topic: str, partition: int) -> None:
            fetches.appended(topic, partition)
            if leaders is not None:
                leaders.appended((topic, partition))
        self._topics = TopicApis(settings, store, port=lambda: self._port,
                                 on_append=appended,
                                 on_created=self.heap.after_growth, leadership=leadership,
                                 address=self._advertised.__getitem__)
        self._durability = Durability(store, settings.storage_config().fsync,
                                      settings.flush_interval_ms, self._fetches.wake,
                                      supervisor=self.supervisor)
        self._durability.start()
        self._handlers = self._topic_handlers(self._topics)
        self._forget_offsets_of_deleted_topics(store.fresh)
        self.execute(coordinator.start(now))
        try:
            validate_security(settings)  # settings may not have come through resolve()
            bindings, credentials = (load_security(settings.data_dir) if self.cluster is None
                                     else ([], CredentialTable()))  # etcd's, just below
        except (SettingsError, SecurityStoreError) as exc:
            raise StartupError(str(exc)) from exc
        self.security = SecurityState(bindings, credentials, settings.super_user_list(),
                                      settings.sasl_mechanisms())
        if self.cluster is not None:  # before listening: the first request sees them
            try:
                self.cluster_security = await follow_cluster_security(
                    self.cluster.etcd, self.cluster.cluster, self.security,
                    data_dir=settings.data_dir, where=settings.etcd_endpoints,
                    timeout_s=FIRST_READ_S, supervisor=self.supervisor)
            except SecurityStoreError as exc:
                raise StartupError(str(exc)) from exc
        self._start_security()
        await self._listen()
        try:
            self._start_metrics()
        except OSError as exc:
            raise StartupError(_cannot_listen("--metrics-port", settings.host,
                                              settings.metrics_port, exc)) from exc
        if self.cluster is not None:
            coordinator.set_hosting(self._coordinates, self._loading_group)
            watch_cluster(self.metrics, self.cluster)
            self._fetches.coordinates = self._coordinates
            try:
                await self.cluster.start(self._advertised,
                                         ensure_local=self._topics.ensure_local,
                                         delete_local=self._delete_local,
                                         on_roles=self._roles_changed,
                                         append_events=self._append_events,
                                         on_topics_removed=self._cluster_topics_removed)
            except ClusterStartError as exc:
                raise StartupError(str(exc)) from exc
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
                 topics=len(store.topics()), group_records=len(records),
                 fsync=settings.fsync, startup_ms=round((time.perf_counter() - t0) * 1000))

    def _start_security(self) -> None:
        """The ACL and credential APIs, and with ``--authorizer acl`` the check every
        request passes first (``broker.authorization``)."""
        settings, security = self.settings, self.security
        on = settings.authorizer == "acl"
        if on:
            self._access = AccessControl(security.authorizer, self.metrics)
            self.renew_heartbeat = self._renew_if_allowed
        apis = SecurityApis(security, authorizer_on=on, persist=self._persist_security,
                            persist_applies=self.cluster_security is not None)

        def answer_later(api: Callable[[Any, str], Coroutine[Any, Any, Response]],
                         ) -> Callable[..., None]:
            def handle(conn: Peer, cid: int, request: Request) -> None:
                self._defer(conn, cid, request, api(request, conn.principal), reply=True)
            return handle

        self._handlers.update({
            DescribeAclsRequest: lambda conn, cid, request: conn.reply(
                cid, apis.describe_acls(request)),
            CreateAclsRequest: answer_later(apis.create_acls),
            DeleteAclsRequest: answer_later(apis.delete_acls),
            DescribeUserScramCredentialsRequest: lambda conn, cid, request: conn.reply(
                cid, apis.describe_credentials(request)),
            AlterUserScramCredentialsRequest: answer_later(apis.alter_credentials),
        })

    async def _persist_security(self, bindings: list[AclBinding],
                                credentials: CredentialTable) -> None:
        """Durable before it is answered (``broker.security.apis``): in a cluster, in
        etcd (and applied); alone, in the data dir, off the loop, as it fsyncs."""
        if self.cluster_security is not None:
            await self.cluster_security.persist(bindings, credentials)
            return
        await asyncio.get_running_loop().run_in_executor(
            None, save_security, self.settings.data_dir, bindings, credentials)

    def _now(self) -> int:
        """The time of a coordinator input (``monotonic``); the coordinator is told the
        wall clock beside it, for the timestamps users read."""
        now = self.monotonic()
        coordinator = self.coordinator
        if coordinator is not None:
            coordinator.set_wall_clock(self.clock(), now)
        return now

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
        except SettingsError as exc:
            raise StartupError(str(exc)) from exc
        if any(listener.uses_tls for listener in listeners):
            try:
                self._tls = ServerTls(TlsFiles(settings.ssl_certfile, settings.ssl_keyfile,
                                               settings.ssl_cafile, settings.ssl_client_auth))
            except TlsError as exc:
                raise StartupError(str(exc)) from exc
        loop = asyncio.get_running_loop()
        for listener in listeners:
            ssl_context = self._tls.context if self._tls and listener.uses_tls else None
            try:
                server = await loop.create_server(
                    functools.partial(self._new_connection, listener),
                    listener.host or None, listener.port, reuse_address=True, backlog=1024,
                    start_serving=False, ssl=ssl_context, ssl_handshake_timeout=(
                        settings.ssl_handshake_timeout_ms / 1000 if ssl_context else None))
            except OSError as exc:
                flag = f"--listeners {listener}" if settings.listeners.strip() else "--port"
                raise StartupError(_cannot_listen(flag, listener.host, listener.port,
                                                  exc)) from exc
            self._servers.append(server)
            self.listener_ports[listener.name] = server.sockets[0].getsockname()[1]
        self._port = self.listener_ports[listeners[0].name]
        self._advertised.update(advertised_addresses(
            listeners, advertised, settings.advertised_host, self.listener_ports))
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

    def _forget_offsets_of_deleted_topics(self, fresh: bool) -> None:
        """Tombstone committed offsets of topics that no longer exist: a deletion whose
        tombstones a crash lost (OffsetCommit refuses unknown topics, so there is no other
        way to have them). Not for a new data dir: nothing says what existed then."""
        store, coordinator = self.store, self.coordinator
        assert store is not None and coordinator is not None
        gone = sorted(t for t in coordinator.committed_topics()
                      if store.partition_count(t) is None)
        if gone and not fresh:
            log.warning("offsets_of_deleted_topics_removed", topics=gone)
            self.execute(coordinator.delete_topic_offsets(gone))

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

    def _start_metrics(self) -> None:
        if self.settings.metrics_port < 0:
            return
        assert self.coordinator is not None and self.store is not None
        coordinator, store = self.coordinator, self.store
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
            assert self._topics is not None  # the dropped segments' files, off the loop
            await self._topics.purge()

    def apply_log_retention(self) -> None:
        store = self.store
        assert store is not None
        now = self.clock()
        for topic, count in store.topics().items():
            if topic == OFFSETS_TOPIC:
                continue
            for p in range(count):
                deleted = store.log(topic, p).apply_retention(
                    now, self.settings.log_retention_ms, self.settings.log_retention_bytes)
                if deleted:
                    log.info("log_retention", topic=topic, partition=p, segments=deleted)

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
        if self._listening:  # a start that failed says why itself, once
            log.info("broker_stopping")
        for server in self._servers:
            server.close()
        if self.cluster_security is not None:  # its watch uses the cluster's etcd client
            await self.cluster_security.close()
        if self.cluster is not None:  # leave first: others take over our partitions
            with contextlib.suppress(Exception):
                await self.cluster.close()
        for load in list(self._loads.values()):
            await load.stop()
        if self._retention is not None:
            await self._retention.stop()
        await self.loop_monitor.close()
        if self._topics is not None:  # creations on worker threads finish first
            await self._topics.drain()
        for task in list(self._deferred):
            with contextlib.suppress(Exception):
                await task
        for task in list(self._compactions.values()):
            task.cancel()  # the log stays correct with half a snapshot (OffsetsLog)
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._fetches is not None:
            self._fetches.complete_all()
        if self._durability is not None:
            await self._durability.close()
        await self.supervisor.close()  # whatever is still running (none, normally)
        if self._timer_handle is not None:
            self._timer_handle.cancel()
        for conn in list(self._connections.values()):
            conn.close()
        for server in self._servers:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2):
                    await server.wait_closed()
        if self._metrics_server is not None:
            shutdown = getattr(self._metrics_server, "shutdown", None)
            if shutdown is not None:
                await asyncio.get_running_loop().run_in_executor(None, shutdown)
        if self.store is not None:
            self.store.close()
        self._stopped.set()
        if self._listening:
            log.info("broker_stopped")

    # --- connections --------------------------------------------------------------------

    def _new_connection(self, listener: Listener) -> ClientConnection:
        """The protocol of an accepted socket; it counts once open (``connection_made``)."""
        conn = ClientConnection(self, self._next_conn_id, listener)
        self._next_conn_id += 1
        return conn

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
        if self._fetches is not None:
            self._fetches.connection_closed(conn.conn_id)
        if self._access is not None:
            self._access.forget(conn.conn_id)
        if self.coordinator is not None and not self._closing:
            self.execute(self.coordinator.connection_closed(conn.conn_id, self._now()))

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
        assert self._topics is not None
        full = self._topics.api_versions()
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
        handler = self._handlers.get(type(request))
        if handler is not None:
            handler(conn, cid, request)
            return
        coordinator = self.coordinator
        assert coordinator is not None
        steps = coordinator.answer_steps(request)
        if steps is not None:  # read-only and maybe long: DescribeGroups, ListGroups, ...
            self._answer_sliced(conn, cid, request, steps)
            return
        principal = conn.principal
        ctx = RequestContext(conn.conn_id, cid, client_id, conn.client_host, principal,
                             self.security.authorizer.is_super_user(principal))
        if type(request) is DeleteGroupsRequest and len(request.groups_names) > DELETE_CHUNK:
            self._sliced(conn, cid, request, self._delete_groups_steps(
                ctx, request, lambda response: conn.reply(cid, response)), lambda _done: None)
            return
        if type(request) is OffsetCommitRequest and commit_size(request) > LONG_COMMIT:
            self._sliced(conn, cid, request, self._commit_steps(ctx, request),
                         lambda _done: None)
            return
        self.execute(coordinator.handle(ctx, request, self._now()))

    def _commit_steps(self, ctx: RequestContext, request: OffsetCommitRequest,
                      ) -> Steps[None]:
        """A large OffsetCommit: validated on arrival, its answer, cache entries and
        batch built in steps, then applied and appended in one step (the coordinator
        falls back to its plain handler if the group changed meanwhile)."""
        coordinator, offsets_log = self.coordinator, self._offsets_log
        assert coordinator is not None and offsets_log is not None
        now, wall = self._now(), self.clock()
        prepared = yield from coordinator.offset_commit_steps(ctx, request, now)
        if isinstance(prepared, Result):  # refused as a whole
            self.execute(prepared)
            return
        write: PreparedWrite | None = None
        if prepared.records:
            write = yield from offsets_log.prepare_steps(prepared.group_id,
                                                         prepared.records, wall)
            yield
        applied = coordinator.apply_commit(prepared)
        self.execute(applied.result, prepared=write if applied.as_prepared else None)
        yield  # what the commit was built from (~50 000 objects) is freed in a step of its own

    def _delete_groups_steps(self, ctx: RequestContext, request: DeleteGroupsRequest,
                             answer: Callable[[DeleteGroupsResponse], None]) -> Steps[None]:
        """DeleteGroups of many groups, ``DELETE_CHUNK`` at a time: each group is deleted
        on its own, as Kafka's coordinator does (its answer is per group), so a request
        of 10 000 need not hold the loop for the whole of it (~0.3 s, mostly events).
        Each chunk's answer is collected once its write settled; ``answer`` gets the
        whole once every chunk's has."""
        coordinator = self.coordinator
        assert coordinator is not None
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
            self.execute(coordinator.handle(ctx, part, self._now()), collect=collector(index))
            yield

    def _topic_handlers(self, topics: TopicApis) -> dict[type, Callable[..., None]]:
        """Non-group APIs by request type; everything else goes to the coordinator."""
        durability, fetches = self._durability, self._fetches
        assert durability is not None and fetches is not None

        def produce(conn: Peer, cid: int, request: ProduceRequest) -> None:
            def produced(result: tuple[ProduceResponse, bool]) -> None:
                response, wrote = result
                if not wrote:
                    conn.reply(cid, response)
                    return
                durability.after_write(lambda err: written(response, err))

            def written(response: ProduceResponse, err: StorageError | None) -> None:
                if err is not None:
                    conn.reply(cid, _storage_failed_produce(response, err))
                elif self.cluster is not None and request.acks == -1:
                    # Answered once the ISR has it; later requests go on meanwhile.
                    self._spawn(self._replicated(conn, cid, request, response))
                else:
                    conn.reply(cid, response)
            self._sliced(conn, cid, request, topics.produce_steps(request), produced)

        def fetch(conn: Peer, cid: int, request: FetchRequest) -> None:
            fetches.handle(conn.conn_id, request, functools.partial(_reply_fetch, conn, cid),
                           lambda work: self._defer_long(conn, cid, request, work),
                           principal=conn.principal)

        def delete_topics(conn: Peer, cid: int, request: DeleteTopicsRequest) -> None:
            async def deleting() -> None:
                # A topic being created is deleted once it exists: as if queued after it.
                await topics.settled(request.topic_names)
                await delete_now(conn, cid, request)
            self._defer(conn, cid, request, deleting())

        async def delete_now(conn: Peer, cid: int, request: DeleteTopicsRequest) -> None:
            # meta.json is written off the loop; the directories go after the answer
            response, deleted = await topics.delete_topics_counted(request)
            if not deleted:
                conn.reply(cid, response)
                return
            self._topics_deleted(deleted)

            async def purged() -> None:  # the directories go before the answer, off the loop
                try:
                    await topics.purge()
                finally:
                    conn.reply(cid, response)
            durability.after_write(lambda _err: self._spawn(purged()))

        def answer(api: Callable[[Any], Response]) -> Callable[..., None]:
            return lambda conn, cid, request: conn.reply(cid, api(request))

        def answer_later(api: Callable[[Any], Coroutine[Any, Any, Response]],
                         ) -> Callable[..., None]:
            def handle(conn: Peer, cid: int, request: Request) -> None:
                self._defer(conn, cid, request, api(request), reply=True)
            return handle

        def metadata(conn: Peer, cid: int, request: MetadataRequest) -> None:
            listener = conn.listener.name  # its advertised address is the one answered
            if topics.auto_creates(request):
                self._defer(conn, cid, request, topics.metadata_creating(request, listener),
                            reply=True)
            else:
                self._answer_sliced(conn, cid, request,
                                    topics.metadata_steps(request, listener=listener))

        def list_offsets(conn: Peer, cid: int, request: ListOffsetsRequest) -> None:
            self._answer_sliced(conn, cid, request, topics.list_offsets_steps(request))

        def offsets_for_leader_epoch(conn: Peer, cid: int,
                                     request: OffsetsForLeaderEpochRequest) -> None:
            self._answer_sliced(conn, cid, request,
                                topics.offsets_for_leader_epoch_steps(request))

        if self.cluster is not None:
            return self._cluster_handlers(ClusterApis(self.settings, self.cluster), {
                ProduceRequest: produce,
                FetchRequest: fetch,
                ApiVersionsRequest: answer(lambda _: topics.api_versions()),
                ListOffsetsRequest: list_offsets,
                OffsetsForLeaderEpochRequest: offsets_for_leader_epoch,
            })
        return {
            ProduceRequest: produce,
            FetchRequest: fetch,
            ApiVersionsRequest: answer(lambda _: topics.api_versions()),
            MetadataRequest: metadata,
            FindCoordinatorRequest: lambda conn, cid, request: conn.reply(
                cid, topics.find_coordinator(request, conn.listener.name)),
            ListOffsetsRequest: list_offsets,
            OffsetsForLeaderEpochRequest: offsets_for_leader_epoch,
            CreateTopicsRequest: answer_later(topics.create_topics),
            DeleteTopicsRequest: delete_topics,
            CreatePartitionsRequest: answer_later(topics.create_partitions),
            ElectLeadersRequest: answer(topics.elect_leaders),
        }

    async def _replicated(self, conn: Peer, cid: int, request: ProduceRequest,
                          response: ProduceResponse) -> None:
        """An acks=all answer: each appended batch waits for the high watermark to pass
        it, at most the request's ``timeout_ms`` (REQUEST_TIMED_OUT then; the records
        may still become visible)."""
        assert self.cluster is not None
        leaders = self.cluster.leaders
        counts = {(t.name, p.index): read_header(p.records).record_count
                  for t in request.topic_data for p in t.partition_data
                  if len(p.records) >= MIN_BATCH_SIZE}
        waits: list[tuple[PartitionProduceResponse, Coroutine[Any, Any, ErrorCode]]] = []
        for topic in response.responses:
            for part in topic.partition_responses:
                if part.error_code == ErrorCode.NONE:
                    end = part.base_offset + counts.get((topic.name, part.index), 1)
                    waits.append((part, leaders.acked((topic.name, part.index), end,
                                                      max(request.timeout_ms, 0))))
        codes = await asyncio.gather(*(w for _, w in waits))
        failed = {id(part): code for (part, _), code in zip(waits, codes, strict=True)
                  if code != ErrorCode.NONE}
        if failed:
            response = dataclasses.replace(response, responses=[
                dataclasses.replace(topic, partition_responses=[
                    part if id(part) not in failed else dataclasses.replace(
                        part, error_code=failed[id(part)], base_offset=-1,
                        error_message=_ack_failure(failed[id(part)], request.timeout_ms))
                    for part in topic.partition_responses])
                for topic in response.responses])
        conn.reply(cid, response)

    def _partition_count(self, topic: str) -> int | None:
        """A topic's partitions as OffsetCommit checks them: in a cluster, the cluster's
        (a coordinator need not hold a replica of the topics its groups commit)."""
        if self.cluster is not None:
            assignment = self.cluster.image.topics.get(topic)
            return None if assignment is None else len(assignment.replicas)
        assert self.store is not None
        return self.store.partition_count(topic)

    def _coordinates(self, group_id: str) -> bool:
        """Cluster mode: whether this broker serves the group (leads its offsets
        partition, and has loaded it)."""
        return coordinator_partition(group_id, self._offsets_partitions) in self._hosted

    def _loading_group(self, group_id: str) -> bool:
        return coordinator_partition(group_id, self._offsets_partitions) in self._loads

    def _offsets_roles(self, partitions: set[tuple[str, int]]) -> None:
        """Cluster mode: load the groups of offsets partitions this broker came to lead
        (answering COORDINATOR_LOAD_IN_PROGRESS meanwhile), unload those it lost (their
        parked requests answer NOT_COORDINATOR), as Kafka's coordinator does."""
        assert self.cluster is not None
        coordinator = self.coordinator
        assert coordinator is not None
        led = self.cluster.leadership.led
        for topic, p in sorted(partitions):
            if topic != OFFSETS_TOPIC:
                continue
            leads = (topic, p) in led
            if leads and p not in self._hosted and p not in self._loads:
                self._loads[p] = self.supervisor.spawn(
                    f"group-load-{p}", functools.partial(self._load_offsets_partition, p,
                                                         led[(topic, p)]),
                    kind="group-load")
            elif not leads and (p in self._hosted or p in self._loads):
                self._hosted.discard(p)
                load = self._loads.pop(p, None)
                if load is not None:
                    self._spawn(load.stop())
                self.execute(coordinator.unload_partition(p, self._now()))
                log.info("groups_unloaded", partition=p)

    async def _load_offsets_partition(self, p: int, leader_epoch: int) -> None:
        """Read the partition's records a slice at a time, then load them in one step.

        A supervised service (``group-load``): a load that fails is logged and tried
        again with backoff, its groups answering COORDINATOR_LOAD_IN_PROGRESS meanwhile;
        one that keeps failing stops the broker rather than leave them so forever."""
        offsets_log, coordinator = self._offsets_log, self.coordinator
        assert offsets_log is not None and coordinator is not None and self.cluster is not None
        t0 = time.perf_counter()
        records = []
        deadline = time.perf_counter() + self._slice_s
        for record in offsets_log.replay_partition(p):
            records.append(record)
            if time.perf_counter() >= deadline:
                await asyncio.sleep(0)
                deadline = time.perf_counter() + self._slice_s
        if self.cluster.leadership.led.get((OFFSETS_TOPIC, p)) != leader_epoch:
            self._loads.pop(p, None)
            return  # lost it meanwhile: _offsets_roles unloaded it
        self.execute(coordinator.load_partition(p, records, self._now()))
        self._loads.pop(p, None)
        self._hosted.add(p)
        log.info("groups_loaded", partition=p, records=len(records), leader_epoch=leader_epoch,
                 load_ms=round((time.perf_counter() - t0) * 1000, 1))

    def _topics_deleted(self, deleted: dict[str, int]) -> None:
        """After topics left the store: their parked fetches answer
        UNKNOWN_TOPIC_OR_PARTITION, their committed offsets are tombstoned."""
        fetches = self._fetches
        assert fetches is not None
        for name, count in deleted.items():
            for p in range(count):
                fetches.appended(name, p)
        fetches.wake()
        self.heap.after_shrink()
        coordinator = self.coordinator
        assert coordinator is not None
        # The topics are gone once meta.json is written; offsets whose tombstones do
        # not make it to disk are dropped again at the next start, so the answer does
        # not depend on them (it waits for them only to be durable when it can).
        self.execute(coordinator.delete_topic_offsets(list(deleted)))

    def _delete_local(self, names: list[str]) -> None:
        """A cluster topic is gone from etcd: drop this broker's replicas of it (the
        committed offsets go in ``_cluster_topics_removed``, on every broker)."""
        topics, fetches = self._topics, self._fetches
        assert topics is not None and fetches is not None
        deleted, finishing = topics.delete_local(names)  # durable and removed off the loop
        self._spawn(finishing)
        for name, count in deleted.items():
            for p in range(count):
                fetches.appended(name, p)
        fetches.wake()
        self.heap.after_shrink()

    def _cluster_topics_removed(self, names: list[str]) -> None:
        """Every broker tombstones its coordinated groups' offsets of deleted topics,
        whether or not it held a replica of them."""
        coordinator = self.coordinator
        assert coordinator is not None
        self.execute(coordinator.delete_topic_offsets(names))

    def _roles_changed(self, partitions: set[tuple[str, int]]) -> None:
        """Leadership here moved: parked fetches on those partitions look again, and
        offsets partitions' groups are loaded or unloaded."""
        fetches = self._fetches
        assert fetches is not None
        if self.cluster is not None and self.coordinator is not None:
            self._offsets_roles(partitions)
        for topic, p in partitions:
            fetches.appended(topic, p)
        fetches.wake()

    def _cluster_handlers(self, apis: ClusterApis, local: dict[type, Callable[..., None]],
                          ) -> dict[type, Callable[..., None]]:
        """Cluster mode: topics, brokers and coordinators come from etcd's metadata."""
        def metadata(conn: Peer, cid: int, request: MetadataRequest) -> None:
            listener = conn.listener.name  # each broker's address for it is answered
            if apis.auto_creates(request):
                self._defer(conn, cid, request, apis.metadata_creating(request, listener),
                            reply=True)
            else:
                self._answer_sliced(conn, cid, request,
                                    apis.metadata_steps(request, listener=listener))

        def later(api: Callable[[Any], Coroutine[Any, Any, Response]]) -> Callable[..., None]:
            def handle(conn: Peer, cid: int, request: Request) -> None:
                self._defer(conn, cid, request, api(request), reply=True)
            return handle

        return {
            **local,
            MetadataRequest: metadata,
            FindCoordinatorRequest: lambda conn, cid, request: conn.reply(
                cid, apis.find_coordinator(request, conn.listener.name)),
            CreateTopicsRequest: later(apis.create_topics),
            CreatePartitionsRequest: later(apis.create_partitions),
            DeleteTopicsRequest: later(apis.delete_topics),
            ElectLeadersRequest: later(apis.elect_leaders),
        }

    def _sliced(self, conn: Peer, cid: int, request: Request, steps: Steps[T],
                finish: Callable[[T], None]) -> None:
        """Run a request's steps a slice at a time (``broker.pacing``); ``finish`` gets the
        result, at once or, for long work, from a task that holds the connection."""
        sliced(steps, self._slice_s, finish,
               lambda work: self._defer_long(conn, cid, request, work))

    def _defer_long(self, conn: Peer, cid: int, request: Request,
                    work: Coroutine[Any, Any, None]) -> None:
        """``_defer`` for work that spans slices: its answer is as large, so it is encoded
        off the loop too."""
        conn.answer_is_long(cid)
        self._defer(conn, cid, request, work)

    def _answer_sliced(self, conn: Peer, cid: int, request: Request,
                       steps: Steps[Response]) -> None:
        self._sliced(conn, cid, request, steps, lambda response: conn.reply(cid, response))

    def _defer(self, conn: Peer, cid: int, request: Request,
               work: Coroutine[Any, Any, Any], *, reply: bool = False) -> None:
        """Run ``work`` as a task, holding the connection's later requests until it is
        done (they take effect in arrival order, docs/protocol.md §2 rule 4); with
        ``reply``, what it returns is the answer. Other connections go on meanwhile."""
        release = conn.hold()

        async def run() -> None:
            response: Response | None = None
            try:
                response = await work
            except Exception as exc:
                log.exception("request_failed", api=type(request).__name__,
                              conn=conn.conn_id)
                response = response_type_for(request)(
                    error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
                    error_message=f"{type(exc).__name__}: {exc}")
                reply_now = True
            else:
                reply_now = reply
            try:
                if reply_now and response is not None:
                    conn.reply(cid, response)
            finally:
                release()

        self._spawn(run())

    # --- executing coordinator results --------------------------------------------------

    def execute(self, result: Result, prepared: PreparedWrite | None = None,
                collect: Callable[[Reply], bool] | None = None) -> None:
        """Do what the coordinator decided: arm timers, emit events, persist, answer.

        A result with a write (``result.write``) has its records written (``prepared``:
        records already encoded, a large OffsetCommit's, written after them); once they
        are durable, and in a cluster in the ISR, the coordinator is told the outcome
        (``stored``, or ``failed`` with Kafka's code for it), and the result of that,
        which carries the replies it held, is executed in turn. ``collect`` sees each
        reply first and takes those it returns True for (a sliced DeleteGroups gathers
        its chunks' answers); the others are sent.
        """
        if result.timers:
            self._apply_timers(result.timers)
        if result.events:
            self._emit(result.events)
        token = result.write
        if token is not None:
            failed, ends = self._persist(result, prepared)
            assert self._durability is not None

            def settled(failure: ErrorCode | None) -> None:
                coordinator = self.coordinator
                if coordinator is None:
                    return
                now = self._now()
                self.execute(coordinator.stored(token, now) if failure is None
                             else coordinator.failed(token, failure, now), collect=collect)

            def written(err: StorageError | None) -> None:
                if failed or err is not None:
                    settled(ErrorCode.KAFKA_STORAGE_ERROR)
                elif self.cluster is not None and ends:
                    # Settled once the ISR has the records: a commit outlives its
                    # coordinator (the offsets topic is written with acks=all).
                    self._spawn(self._group_writes_replicated(ends, settled))
                else:
                    settled(None)

            self._durability.after_write(written)
            return
        if result.replies:
            self._send_replies(result.replies, collect)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """A task answering a request later: awaited at close (``_deferred``)."""
        task = asyncio.get_running_loop().create_task(work)
        self._deferred.add(task)
        task.add_done_callback(self._deferred.discard)

    async def _group_writes_replicated(self, ends: dict[int, int],
                                       settled: Callable[[ErrorCode | None], None]) -> None:
        """Wait for the offsets partitions written to be replicated up to ``ends``, then
        settle the replies: Kafka's mapping of a failed offsets append, NOT_COORDINATOR
        if this broker stopped leading, COORDINATOR_NOT_AVAILABLE otherwise."""
        assert self.cluster is not None
        leaders = self.cluster.leaders
        codes = await asyncio.gather(*(
            leaders.acked((OFFSETS_TOPIC, p), end, GROUP_WRITE_TIMEOUT_MS)
            for p, end in ends.items()))
        failure = None
        for code in codes:
            if code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                failure = ErrorCode.NOT_COORDINATOR
            elif code != ErrorCode.NONE and failure is None:
                failure = ErrorCode.COORDINATOR_NOT_AVAILABLE
        settled(failure)

    def _persist(self, result: Result, prepared: PreparedWrite | None = None,
                 ) -> tuple[bool, dict[int, int]]:
        """Write the result's records: whether that failed (the replies must say so),
        and the log end of each offsets partition written."""
        offsets_log = self._offsets_log
        assert offsets_log is not None
        try:
            partitions = (offsets_log.write(result.records, self.clock())
                          if result.records else [])
            if prepared is not None:
                partitions.append(offsets_log.write_prepared(prepared))
        except StorageError as exc:
            self.metrics.storage_errors.inc()
            count = len(result.records) + (
                prepared.header.record_count if prepared is not None else 0)
            log.error("group_records_not_written", error=str(exc), records=count)
            return True, {}
        store = self.store
        assert store is not None
        ends = {}
        for p in partitions:
            ends[p] = store.log(OFFSETS_TOPIC, p).log_end_offset
            if self._fetches is not None:
                self._fetches.appended(OFFSETS_TOPIC, p)
            if self.cluster is not None:
                self.cluster.leaders.appended((OFFSETS_TOPIC, p))
            if p not in self._compactions and offsets_log.needs_compaction(p):
                self._compact(p)
        return False, ends

    def _compact(self, partition: int) -> None:
        """Compact a ``__consumer_offsets`` partition in the background, a snapshot batch
        a step (``OffsetsLog.compact_steps``); one at a time per partition."""
        offsets_log, durability = self._offsets_log, self._durability
        assert offsets_log is not None and durability is not None
        if self._closing:
            return
        def dropped(drop: Callable[[], None]) -> None:
            def written(err: StorageError | None) -> None:
                if err is None:
                    drop()
                    self._purge_soon()
            durability.after_write(written)

        steps = offsets_log.compact_steps(partition, dropped)

        async def run() -> None:
            try:
                await finish_in_slices(steps, self._slice_s)
            except Exception:
                log.exception("compaction_failed", partition=partition)
            finally:
                steps.close()
                self._compactions.pop(partition, None)

        self._compactions[partition] = asyncio.get_running_loop().create_task(run())

    def _purge_soon(self) -> None:
        """Remove the files of segments just dropped, now and off the loop: until then a
        crash would load them again at the next start."""
        if self._topics is not None and not self._closing:
            self._spawn(self._topics.purge())

    def _send_replies(self, replies: tuple[Reply, ...],
                      collect: Callable[[Reply], bool] | None = None) -> None:
        for reply in replies:
            if collect is not None and collect(reply):
                continue
            conn = self._connections.get(reply.conn_id)
            if conn is None:
                continue
            conn.reply(reply.correlation_id, reply.response)

    def _emit(self, events: tuple[GroupEvent, ...]) -> None:
        store = self.store
        assert store is not None
        items = []
        for event in events:
            value = event.to_value()
            log.info("group_event", **{k: v for k, v in value.items() if v is not None})
            self._count_event(event)
            items.append((event.group_id.encode(), msgpack.packb(value, use_bin_type=True),
                          event.ts_ms))
        if self.cluster is not None and self.cluster.events is not None:
            self.cluster.events.submit(items)
            return
        self._append_events(items)

    def _append_events(self, items: list[tuple[bytes, bytes, int]]) -> bool:
        """Append group events to this broker's ``__group_events`` (in a cluster, only
        while it leads that partition); False if they could not be written."""
        store = self.store
        assert store is not None
        try:
            store.append_kv(EVENTS_TOPIC, 0, items)
        except StorageError as exc:
            log.error("group_events_not_written", error=str(exc), events=len(items))
            return False
        if self._fetches is not None:
            self._fetches.appended(EVENTS_TOPIC, 0)
        if self.cluster is not None:
            self.cluster.leaders.appended((EVENTS_TOPIC, 0))
        return True

    def _count_event(self, event: GroupEvent) -> None:
        m = self.metrics
        if event.type == "rebalance_started":
            m.rebalances.labels(event.reason or "unknown").inc()
        elif event.type == "rebalance_completed" and event.duration_ms is not None:
            m.rebalance_duration.observe(event.duration_ms / 1000)
        elif event.type in ("member_expired", "poll_interval_expired"):
            m.expirations.labels(event.reason or event.type).inc()
        elif event.type == "commit_fenced":
            m.commits_fenced.inc()

    # --- the one timer ------------------------------------------------------------------

    def _apply_timers(self, ops: tuple[SetTimer | CancelTimer, ...]) -> None:
        """Queue the coordinator's timer operations; wake earlier only if one needs it.

        A cancelled or pushed-back deadline leaves the wake-up where it is: waking for
        nothing is harmless, and a pushed-back timer then costs a heap push and no
        event-loop timer churn.
        """
        earliest = self._timer_deadline
        for op in ops:
            if type(op) is SetTimer:
                self._timers.set(op.key, op.deadline_ms)
                if earliest is None or op.deadline_ms < earliest:
                    earliest = op.deadline_ms
            else:
                self._timers.cancel(op.key)
        if earliest != self._timer_deadline:
            self._wake_at(earliest)

    def _wake_at(self, deadline: int | None) -> None:
        """Arm the one loop timer for ``deadline`` exactly: deadlines are on the loop's
        own clock (``loop_clock_ms``), so no delay is computed from another clock and no
        millisecond is lost to rounding."""
        if self._timer_handle is not None:
            self._timer_handle.cancel()
            self._timer_handle = None
        self._timer_deadline = deadline
        if deadline is not None:
            self._timer_handle = asyncio.get_running_loop().call_at(deadline / 1000,
                                                                    self._fire_timers)

    def _fire_timers(self) -> None:
        # The loop runs this once its clock reached the deadline it was armed for (it may
        # run a hair early, within the clock's resolution): that deadline is due.
        armed_for = self._timer_deadline
        self._timer_handle = None
        self._timer_deadline = None
        coordinator = self.coordinator
        assert coordinator is not None
        now = self._now()
        if armed_for is not None and armed_for > now:
            now = armed_for
        for key in self._timers.pop_due(now):
            self.execute(coordinator.expire(key, now))
        self._wake_at(self._timers.next_deadline())


GROUP_WRITE_TIMEOUT_MS: Final = 5000
"""How long a group write waits for its ISR (Kafka's offsets.commit.timeout.ms)."""


def _cannot_listen(flag: str, host: str, port: int, exc: OSError) -> str:
    """Name the port that failed and the flag that chose it (the client or metrics one)."""
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    if exc.errno == errno.EADDRINUSE:
        reason = "address already in use (another process listens there)"
    return f"cannot listen on {host}:{port} ({flag}): {reason}"


def _not_started(conn_id: int, heartbeat: HeartbeatFields, now_ms: int) -> Renewal | None:
    return None


def _ack_failure(code: ErrorCode, timeout_ms: int) -> str:
    if code == ErrorCode.REQUEST_TIMED_OUT:
        return (f"the in-sync replicas did not all have the batch within timeout_ms "
                f"({timeout_ms}); it may still become visible")
    if code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND:
        return "appended, but the ISR shrank below --min-insync-replicas before it was copied"
    return "this broker stopped leading the partition before the batch was copied"


def _storage_failed_produce(response: ProduceResponse, error: Exception) -> ProduceResponse:
    """Appended but not made durable: the client must not count these as written."""
    return ProduceResponse(responses=[
        TopicProduceResponse(name=t.name, partition_responses=[
            p if p.error_code != ErrorCode.NONE else PartitionProduceResponse(
                index=p.index, error_code=ErrorCode.KAFKA_STORAGE_ERROR,
                error_message=f"not durable: {error}")
            for p in t.partition_responses])
        for t in response.responses])


def _reply_fetch(conn: Peer, cid: int, response: FetchResponse, *, long: bool = False) -> None:
    if long:
        conn.answer_is_long(cid)
    conn.reply(cid, response)


