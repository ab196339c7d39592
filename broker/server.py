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
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Final, TypeVar

import msgpack
from prometheus_client import start_http_server

from groupwire.broker.budget import Decision, MemoryBudget, Verdict
from groupwire.broker.config import BrokerSettings
from groupwire.broker.connection import ClientConnection
from groupwire.broker.coordinator import (
    CancelTimer,
    Coordinator,
    Renewal,
    RequestContext,
    Result,
    SetTimer,
    TimerQueue,
)
from groupwire.broker.coordinator.events import GroupEvent
from groupwire.broker.coordinator.offsets import CommittedOffset
from groupwire.broker.coordinator.offsets_api import LONG_COMMIT, commit_size
from groupwire.broker.coordinator.records import GroupMetadataRecord
from groupwire.broker.durability import Durability
from groupwire.broker.fetch import FetchManager
from groupwire.broker.heap import HeapSettler
from groupwire.broker.host import Peer
from groupwire.broker.logs import get_logger
from groupwire.broker.loop_monitor import LoopMonitor
from groupwire.broker.metrics import BrokerMetrics, StateViews, StorageHealth
from groupwire.broker.offsets_log import OFFSETS_TOPIC, OffsetsLog, PreparedWrite
from groupwire.broker.pacing import finish_in_slices, sliced
from groupwire.broker.storage import StorageConfig, TopicStore
from groupwire.broker.storage.errors import StorageError
from groupwire.broker.storage.fileops import FileOps
from groupwire.broker.storage.handles import (
    RESERVED_FILES,
    default_max_open_files,
    raise_nofile_limit,
)
from groupwire.broker.topic_apis import BATCH_OVERHEAD, TopicApis
from groupwire.protocol.codec import HeartbeatFields
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeletableGroupResult,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteTopicsRequest,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    ListOffsetsRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
    OffsetsForLeaderEpochRequest,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    Request,
    Response,
    SyncGroupResponse,
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
    return time.time_ns() // 1_000_000


class Broker:
    """One broker process: storage, coordinator, connections, metrics."""

    def __init__(self, settings: BrokerSettings, *,
                 clock: Callable[[], int] = wall_clock_ms,
                 file_ops: FileOps | None = None, settle_heap: bool = False) -> None:
        """``file_ops`` replaces storage's system calls (tests inject disk failures);
        ``settle_heap``: the broker owns its process and freezes long-lived objects
        (``broker.heap``)."""
        self.heap = HeapSettler(settle_heap)
        self.settings = settings
        self._file_ops = file_ops
        self.clock = clock
        self.metrics = BrokerMetrics()
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
        self._server: asyncio.Server | None = None
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
        ``dispatch`` it as usual. Connections pass ``clock()`` read once per batch."""
        self._retention_task: asyncio.Task[None] | None = None
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
        coordinator = Coordinator(settings.coordinator_config(), store.partition_count)
        self.coordinator = coordinator
        self.renew_heartbeat = coordinator.renew
        self._offsets_log = OffsetsLog(
            store, compact_min_records=settings.offsets_compact_min_records)
        records = list(self._offsets_log.replay())
        now = self.clock()
        coordinator.load(records, now)
        self._fetches = FetchManager(
            store, coordinator, max_response_bytes=settings.max_frame_bytes - BATCH_OVERHEAD,
            ownership_fencing=settings.ownership_fencing, slice_s=self._slice_s)
        self._topics = TopicApis(settings, store, port=lambda: self._port,
                                 on_append=self._fetches.appended,
                                 on_created=self.heap.after_growth)
        self._durability = Durability(store, settings.storage_config().fsync,
                                      settings.flush_interval_ms, self._fetches.wake)
        self._durability.start()
        self._handlers = self._topic_handlers(self._topics)
        self._forget_offsets_of_deleted_topics(store.fresh)
        self.execute(coordinator.start(now))
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(
                self._new_connection, settings.host, settings.port, reuse_address=True,
                backlog=1024)
        except OSError as exc:
            raise StartupError(_cannot_listen("--port", settings.host, settings.port,
                                              exc)) from exc
        self._port = self._server.sockets[0].getsockname()[1]
        try:
            self._start_metrics()
        except OSError as exc:
            raise StartupError(_cannot_listen("--metrics-port", settings.host,
                                              settings.metrics_port, exc)) from exc
        self._listening = True
        self.heap.at_start()
        self._retention_task = loop.create_task(self._retention_loop())
        self.loop_monitor.start()
        log.info("open_files_limit", partitions=store.partition_total, **open_files)
        log.info("broker_started", host=settings.host, port=self._port,
                 metrics_port=self.metrics_port, data_dir=str(settings.data_dir),
                 topics=len(store.topics()), group_records=len(records),
                 fsync=settings.fsync, startup_ms=round((time.perf_counter() - t0) * 1000))

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

        def log_ends() -> Iterator[tuple[str, int, int]]:
            for topic, count in store.topics().items():
                if store.is_internal(topic):
                    continue
                for p in range(count):
                    try:  # runs on the metrics thread: the topic may be deleted meanwhile
                        end = store.log(topic, p).high_watermark
                    except KeyError:
                        break
                    yield topic, p, end

        def committed() -> Iterator[tuple[str, str, int, int]]:
            for group in coordinator.group_ids():
                for (topic, p), offset in coordinator.committed(group).items():
                    yield group, topic, p, offset

        def storage() -> StorageHealth:
            evicted, fsynced = store.file_evictions
            return StorageHealth(
                partitions_by_topic=store.topics(),
                offline=[(t, p) for t, p, _why in store.offline_partitions()],
                open_files=store.open_files, evictions_clean=evicted - fsynced,
                evictions_fsynced=fsynced)

        self.metrics.watch(StateViews(
            groups_by_state=coordinator.group_counts_by_state,
            members=coordinator.member_count,
            log_end_offsets=log_ends, committed_offsets=committed, storage=storage))
        server, _thread = start_http_server(self.settings.metrics_port,
                                            addr=self.settings.host,
                                            registry=self.metrics.registry)
        self._metrics_server = server
        self.metrics_port = server.server_port

    async def _retention_loop(self) -> None:
        interval = self.settings.log_retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            self.apply_log_retention()

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

    async def close(self) -> None:
        """Stop accepting, answer what can be answered, flush, close storage."""
        if self._closing:
            return
        self._closing = True
        if self._listening:  # a start that failed says why itself, once
            log.info("broker_stopping")
        if self._server is not None:
            self._server.close()
        if self._retention_task is not None:
            self._retention_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._retention_task
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
        if self._timer_handle is not None:
            self._timer_handle.cancel()
        for conn in list(self._connections.values()):
            conn.close()
        if self._server is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2):
                    await self._server.wait_closed()
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

    def _new_connection(self) -> ClientConnection:
        conn = ClientConnection(self, self._next_conn_id)
        self._next_conn_id += 1
        if len(self._connections) >= self.settings.max_connections or self._closing:
            conn.refuse("max-connections")
        self._connections[conn.conn_id] = conn
        self.metrics.connections_accepted.inc()
        return conn

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
        if self.coordinator is not None and not self._closing:
            self.execute(self.coordinator.connection_closed(conn.conn_id, self.clock()))

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
        ctx = RequestContext(conn.conn_id, cid, client_id, conn.client_host)
        if type(request) is DeleteGroupsRequest and len(request.groups_names) > DELETE_CHUNK:
            self._sliced(conn, cid, request, self._delete_groups_steps(ctx, request),
                         lambda response: self._answer_when_durable(conn, cid, response))
            return
        if type(request) is OffsetCommitRequest:
            if commit_size(request) > LONG_COMMIT:
                self._sliced(conn, cid, request, self._commit_steps(ctx, request),
                             lambda _done: None)
                return
            undo = _CommitUndo(coordinator, request)
            result = coordinator.handle(ctx, request, self.clock())
            undo.applied()
            self.execute(result, on_failure=undo)
            return
        self.execute(coordinator.handle(ctx, request, self.clock()))

    def _commit_steps(self, ctx: RequestContext, request: OffsetCommitRequest,
                      ) -> Steps[None]:
        """A large OffsetCommit: validated on arrival, its answer, cache entries and
        batch built in steps, then applied and appended in one step (the coordinator
        falls back to its plain handler if the group changed meanwhile)."""
        coordinator, offsets_log = self.coordinator, self._offsets_log
        assert coordinator is not None and offsets_log is not None
        now = self.clock()
        prepared = yield from coordinator.offset_commit_steps(ctx, request, now)
        if isinstance(prepared, Result):  # refused as a whole
            self.execute(prepared)
            return
        write: PreparedWrite | None = None
        if prepared.records:
            write = yield from offsets_log.prepare_steps(prepared.group_id,
                                                         prepared.records, now)
            yield
        applied = coordinator.apply_commit(prepared)
        self.execute(applied.result, on_failure=applied.undo,
                     prepared=write if applied.as_prepared else None)
        yield  # what the commit was built from (~50 000 objects) is freed in a step of its own

    def _delete_groups_steps(self, ctx: RequestContext, request: DeleteGroupsRequest,
                             ) -> Steps[DeleteGroupsResponse]:
        """DeleteGroups of many groups, ``DELETE_CHUNK`` at a time: each group is deleted
        on its own, as Kafka's coordinator does (its answer is per group), so a request
        of 10 000 need not hold the loop for the whole of it (~0.3 s, mostly events)."""
        coordinator = self.coordinator
        assert coordinator is not None
        names = request.groups_names
        results: list[DeletableGroupResult] = []
        for at in range(0, len(names), DELETE_CHUNK):
            part = DeleteGroupsRequest(groups_names=names[at:at + DELETE_CHUNK])
            result = coordinator.handle(ctx, part, self.clock())
            for reply in result.replies:
                results.extend(reply.response.results)  # type: ignore[attr-defined]
            self.execute(dataclasses.replace(result, replies=()))
            yield
        return DeleteGroupsResponse(results=results)

    def _answer_when_durable(self, conn: Peer, cid: int, response: Response) -> None:
        """Answer once what was written so far is durable (as ``execute`` would)."""
        assert self._durability is not None
        self._durability.after_write(lambda _err: conn.reply(cid, response))

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
                durability.after_write(
                    lambda err: conn.reply(cid, response if err is None
                                           else _storage_failed_produce(response, err)))
            self._sliced(conn, cid, request, topics.produce_steps(request), produced)

        def fetch(conn: Peer, cid: int, request: FetchRequest) -> None:
            fetches.handle(conn.conn_id, request, functools.partial(_reply_fetch, conn, cid),
                           lambda work: self._defer_long(conn, cid, request, work))

        def delete_topics(conn: Peer, cid: int, request: DeleteTopicsRequest) -> None:
            if topics.creating(request.topic_names):
                # A topic being created is deleted once it exists: as if queued after it.
                async def later() -> None:
                    await topics.settled(request.topic_names)
                    delete_now(conn, cid, request)
                self._defer(conn, cid, request, later())
                return
            delete_now(conn, cid, request)

        def delete_now(conn: Peer, cid: int, request: DeleteTopicsRequest) -> None:
            response, deleted = topics.delete_topics(request)
            if not deleted:
                conn.reply(cid, response)
                return
            for name, count in deleted.items():
                for p in range(count):
                    fetches.appended(name, p)
            fetches.wake()  # parked fetches on them answer UNKNOWN_TOPIC_OR_PARTITION
            self.heap.after_shrink()
            coordinator = self.coordinator
            assert coordinator is not None
            # The topics are gone once meta.json is written; offsets whose tombstones do
            # not make it to disk are dropped again at the next start, so the answer does
            # not depend on them (it waits for them only to be durable when it can).
            self.execute(coordinator.delete_topic_offsets(list(deleted)))
            durability.after_write(lambda _err: conn.reply(cid, response))

        def answer(api: Callable[[Any], Response]) -> Callable[..., None]:
            return lambda conn, cid, request: conn.reply(cid, api(request))

        def answer_later(api: Callable[[Any], Coroutine[Any, Any, Response]],
                         ) -> Callable[..., None]:
            def handle(conn: Peer, cid: int, request: Request) -> None:
                self._defer(conn, cid, request, api(request), reply=True)
            return handle

        def metadata(conn: Peer, cid: int, request: MetadataRequest) -> None:
            if topics.auto_creates(request):
                self._defer(conn, cid, request, topics.metadata_creating(request), reply=True)
            else:
                self._answer_sliced(conn, cid, request, topics.metadata_steps(request))

        def list_offsets(conn: Peer, cid: int, request: ListOffsetsRequest) -> None:
            self._answer_sliced(conn, cid, request, topics.list_offsets_steps(request))

        def offsets_for_leader_epoch(conn: Peer, cid: int,
                                     request: OffsetsForLeaderEpochRequest) -> None:
            self._answer_sliced(conn, cid, request,
                                topics.offsets_for_leader_epoch_steps(request))

        return {
            ProduceRequest: produce,
            FetchRequest: fetch,
            ApiVersionsRequest: answer(lambda _: topics.api_versions()),
            MetadataRequest: metadata,
            FindCoordinatorRequest: answer(topics.find_coordinator),
            ListOffsetsRequest: list_offsets,
            OffsetsForLeaderEpochRequest: offsets_for_leader_epoch,
            CreateTopicsRequest: answer_later(topics.create_topics),
            DeleteTopicsRequest: delete_topics,
            CreatePartitionsRequest: answer_later(topics.create_partitions),
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

        task = asyncio.get_running_loop().create_task(run())
        self._deferred.add(task)
        task.add_done_callback(self._deferred.discard)

    # --- executing coordinator results --------------------------------------------------

    def execute(self, result: Result,
                on_failure: Callable[[], None] | None = None,
                prepared: PreparedWrite | None = None) -> None:
        """Do what the coordinator decided: persist, then answer; arm timers; emit events.

        ``on_failure`` runs if the records could not be written or made durable, before
        the replies (which then say KAFKA_STORAGE_ERROR) go out. ``prepared``: records
        already encoded (a large OffsetCommit's), written after ``result.records``.
        """
        if result.timers:
            self._apply_timers(result.timers)
        if result.events:
            self._emit(result.events)
        if result.records or prepared is not None:
            failed = self._persist(result, prepared)
            assert self._durability is not None
            replies = result.replies

            def written(err: StorageError | None) -> None:
                lost = failed or err is not None
                if lost and on_failure is not None:
                    on_failure()
                self._send_replies(replies, lost)
                if lost:
                    self._group_writes_failed(result)

            self._durability.after_write(written)
        elif result.replies:
            self._send_replies(result.replies, False)

    def _persist(self, result: Result, prepared: PreparedWrite | None = None) -> bool:
        """Write the result's records; True if that failed (the replies must say so)."""
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
            return True
        for p in partitions:
            if self._fetches is not None:
                self._fetches.appended(OFFSETS_TOPIC, p)
            if p not in self._compactions and offsets_log.needs_compaction(p):
                self._compact(p)
        return False

    def _compact(self, partition: int) -> None:
        """Compact a ``__consumer_offsets`` partition in the background, a snapshot batch
        a step (``OffsetsLog.compact_steps``); one at a time per partition."""
        offsets_log, durability = self._offsets_log, self._durability
        assert offsets_log is not None and durability is not None
        if self._closing:
            return
        steps = offsets_log.compact_steps(partition, lambda drop: durability.after_write(
            lambda err: drop() if err is None else None))

        async def run() -> None:
            try:
                await finish_in_slices(steps, self._slice_s)
            except Exception:
                log.exception("compaction_failed", partition=partition)
            finally:
                steps.close()
                self._compactions.pop(partition, None)

        self._compactions[partition] = asyncio.get_running_loop().create_task(run())

    def _send_replies(self, replies: tuple[object, ...], storage_failed: bool) -> None:
        for reply in replies:
            conn = self._connections.get(reply.conn_id)  # type: ignore[attr-defined]
            if conn is None:
                continue
            response: Response = reply.response  # type: ignore[attr-defined]
            if storage_failed:
                if isinstance(response, OffsetCommitResponse):
                    response = _storage_failed_commit(response)
                elif isinstance(response, SyncGroupResponse) and response.error_code == 0:
                    response = _STORAGE_FAILED_SYNC
            conn.reply(reply.correlation_id, response)  # type: ignore[attr-defined]

    def _group_writes_failed(self, result: Result) -> None:
        """Group metadata that did not reach the disk: the coordinator undoes the
        generation it described (its SyncGroup answers already said so)."""
        coordinator = self.coordinator
        if coordinator is None:
            return
        for record in result.records:
            if isinstance(record, GroupMetadataRecord):
                self.execute(coordinator.group_write_failed(
                    record.group_id, record.generation_id, self.clock()))

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
        try:
            store.append_kv(EVENTS_TOPIC, 0, items)
        except StorageError as exc:
            log.error("group_events_not_written", error=str(exc), events=len(items))
            return
        if self._fetches is not None:
            self._fetches.appended(EVENTS_TOPIC, 0)

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
        if self._timer_handle is not None:
            self._timer_handle.cancel()
            self._timer_handle = None
        self._timer_deadline = deadline
        if deadline is not None:
            delay = max(0.0, (deadline - self.clock()) / 1000)
            self._timer_handle = asyncio.get_running_loop().call_later(delay, self._fire_timers)

    def _fire_timers(self) -> None:
        self._timer_handle = None
        self._timer_deadline = None
        coordinator = self.coordinator
        assert coordinator is not None
        now = self.clock()
        for key in self._timers.pop_due(now):
            self.execute(coordinator.expire(key, now))
        self._wake_at(self._timers.next_deadline())


def _cannot_listen(flag: str, host: str, port: int, exc: OSError) -> str:
    """Name the port that failed and the flag that chose it (the client or metrics one)."""
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    if exc.errno == errno.EADDRINUSE:
        reason = "address already in use (another process listens there)"
    return f"cannot listen on {host}:{port} ({flag}): {reason}"


def _not_started(conn_id: int, heartbeat: HeartbeatFields, now_ms: int) -> Renewal | None:
    return None


def _storage_failed_produce(response: ProduceResponse, error: Exception) -> ProduceResponse:
    """Appended but not made durable: the client must not count these as written."""
    return ProduceResponse(responses=[
        TopicProduceResponse(name=t.name, partition_responses=[
            p if p.error_code != ErrorCode.NONE else PartitionProduceResponse(
                index=p.index, error_code=ErrorCode.KAFKA_STORAGE_ERROR,
                error_message=f"not durable: {error}")
            for p in t.partition_responses])
        for t in response.responses])


class _CommitUndo:
    """Reverts an OffsetCommit in the coordinator if its records were not written."""

    __slots__ = ("_coordinator", "_group", "_partitions", "_before", "_after")

    def __init__(self, coordinator: Coordinator, request: OffsetCommitRequest) -> None:
        self._coordinator = coordinator
        self._group = request.group_id
        self._partitions = [(t.name, p.partition_index)
                            for t in request.topics for p in t.partitions]
        self._before = coordinator.offsets_snapshot(self._group, self._partitions)
        self._after: dict[tuple[str, int], CommittedOffset | None] = {}

    def applied(self) -> None:
        """Remember what the commit set, so a later commit over it is left alone."""
        self._after = self._coordinator.offsets_snapshot(self._group, self._partitions)

    def __call__(self) -> None:
        self._coordinator.revert_offsets(self._group, self._before, self._after)


_STORAGE_FAILED_SYNC: Final = SyncGroupResponse(
    error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, assignment=b"")


def _reply_fetch(conn: Peer, cid: int, response: FetchResponse, *, long: bool = False) -> None:
    if long:
        conn.answer_is_long(cid)
    conn.reply(cid, response)


def _storage_failed_commit(response: OffsetCommitResponse) -> OffsetCommitResponse:
    code = ErrorCode.KAFKA_STORAGE_ERROR
    return OffsetCommitResponse(topics=[
        OffsetCommitResponseTopic(name=t.name, partitions=[
            OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code,
                                          error_message="offset not written: storage error")
            for p in t.partitions])
        for t in response.topics])
