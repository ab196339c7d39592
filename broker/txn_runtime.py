"""The transaction coordinator's runtime shell: the transactional APIs in, the pure
coordinator's results carried out.

The coordinator (``broker.transactions``) decides; this module stores its records in
``__transaction_state`` and tells it when they are durable, answers the requests it
answers, writes its commit / abort markers into the data partitions (and, for
``__consumer_offsets`` partitions, has the group coordinator complete the transaction's
offsets), and keeps the one loop timer that wakes it for timeouts and expiries.

``__transaction_state`` is made when the first transactional producer looks for its
coordinator, as Kafka makes it: until it exists FindCoordinator and InitProducerId answer
COORDINATOR_NOT_AVAILABLE (retriable). A single broker makes it off the loop and hosts
every partition of it, loaded at start. In a cluster any broker proposes it (replicated
as ``__consumer_offsets`` is), and a broker coordinates the transactional ids of the
partitions it leads: it loads one as it comes to lead it (its leader epoch is the
coordinator epoch its markers carry) and forgets it as it stops; a record counts as
stored once the partition's ISR has it. Markers for partitions another broker leads go
there as WriteTxnMarkers; that broker writes them (and, for a ``__consumer_offsets``
partition, has its group coordinator complete the offsets) and answers once they are
replicated.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import itertools
import random
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final

from groupwire.broker.cluster.controller import propose_topic_txn
from groupwire.broker.cluster.keys import BrokerInfo
from groupwire.broker.cluster.placement import InvalidReplicationFactor
from groupwire.broker.clustering.node import ClusterNode
from groupwire.broker.config import BrokerSettings
from groupwire.broker.dispatch import Handlers
from groupwire.broker.durability import Durability
from groupwire.broker.fetch import FetchManager
from groupwire.broker.group_runtime import GroupRuntime
from groupwire.broker.host import Peer
from groupwire.broker.logs import get_logger
from groupwire.broker.metrics import BrokerMetrics
from groupwire.broker.pacing import finish_in_slices
from groupwire.broker.replication.peer import PeerError, PeerLink
from groupwire.broker.storage import OFFSETS_TOPIC, TRANSACTIONS_TOPIC, TopicStore
from groupwire.broker.storage.errors import StorageError
from groupwire.broker.storage.producer_log import ProducerRefused
from groupwire.broker.transactions import (
    MarkerWork,
    Reply,
    Result,
    TransactionConfig,
    TransactionCoordinator,
    write_error_code,
)
from groupwire.broker.txn_state_log import TxnStateLog
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    EndTxnRequest,
    EndTxnResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListedTransaction,
    ListTransactionsRequest,
    ListTransactionsResponse,
    Request,
    Response,
    TransactionState,
    TransactionTopic,
    TxnMarker,
    TxnMarkerResult,
    TxnPartitionResult,
    TxnTopic,
    TxnTopicResult,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)

log = get_logger("groupwire.transactions")

TRANSACTION_KEY: Final = 1
"""FindCoordinator's ``key_type`` for a transactional id."""
MAX_EPOCH: Final = 32767
"""Producer epochs are int16 in Kafka's batches."""
WRITE_TIMEOUT_MS: Final = 5000
"""How long a record or marker waits for its partition's ISR (Kafka's
transaction.state.log / offsets commit timeout)."""
PEER_TIMEOUT_S: Final = 10.0


@dataclass(slots=True)
class _Waiting:
    """A request the coordinator will answer, found again by its token."""

    conn_id: int
    cid: int
    request: Request


class TransactionRuntime:
    """Executes transaction coordinator results; one per broker."""

    def __init__(self, settings: BrokerSettings, *, store: TopicStore,
                 durability: Durability, fetches: FetchManager, groups: GroupRuntime,
                 metrics: BrokerMetrics, producer_id: Callable[[], int | None],
                 connection: Callable[[int], Peer | None],
                 spawn: Callable[[Coroutine[Any, Any, None]], None],
                 clock: Callable[[], int], monotonic: Callable[[], int], slice_s: float,
                 closing: Callable[[], bool], advertised: Callable[[str | None],
                                                                   tuple[str, int]],
                 node_id: int = 0, cluster: ClusterNode | None = None,
                 hosts_groups: Callable[[int], bool] = lambda _p: True) -> None:
        """``producer_id``: a producer id never handed out (``broker.storage.producer_ids``);
        ``advertised``: this broker's address for a listener name (FindCoordinator);
        ``hosts_groups``: whether the groups of a ``__consumer_offsets`` partition are
        loaded here (cluster mode: ``GroupHosting``)."""
        self._settings = settings
        self._store = store
        self._durability = durability
        self._fetches = fetches
        self._groups = groups
        self._metrics = metrics
        self._producer_id = producer_id
        self._connection = connection
        self._spawn = spawn
        self._clock = clock
        self._monotonic = monotonic
        self._slice_s = slice_s
        self._closing = closing
        self._advertised = advertised
        self._node_id = node_id
        self._cluster = cluster
        self._hosts_groups = hosts_groups
        self._link: PeerLink | None = None
        self._log = TxnStateLog(store)
        self._compactions: dict[int, asyncio.Task[None]] = {}
        self._proposing: asyncio.Task[None] | None = None
        existing = store.partition_count(TRANSACTIONS_TOPIC)
        self.core = TransactionCoordinator(TransactionConfig(
            transaction_max_timeout_ms=settings.transaction_max_timeout_ms,
            transactional_id_expiration_ms=settings.transactional_id_expiration_ms,
            partitions=existing or settings.transaction_state_partitions,
            offsets_partitions=store.offsets_partitions))
        self._tokens = itertools.count(1)
        self._waiting: dict[int, _Waiting] = {}
        self._creating: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_deadline: int | None = None
        self._marker_tasks: set[asyncio.Task[None]] = set()

    # --- start and stop -----------------------------------------------------------------

    def now(self) -> int:
        now = self._monotonic()
        self.core.set_wall_clock(self._clock(), now)
        return now

    def start(self) -> None:
        """A single broker loads every partition of ``__transaction_state`` if it exists
        (at start, before it listens: transactions left prepared get their markers); a
        cluster's broker loads those it comes to lead (:meth:`roles_changed`)."""
        if self._cluster is not None:
            return
        count = self._store.partition_count(TRANSACTIONS_TOPIC)
        if count is not None:
            for p in range(count):
                self._load(p, 0)

    def _load(self, partition: int, coordinator_epoch: int) -> None:
        try:
            records = list(self._log.replay_partition(partition))
        except (KeyError, StorageError) as exc:
            log.error("transaction_state_not_loaded", partition=partition, error=str(exc))
            return
        self.execute(self.core.load_partition(partition, records, coordinator_epoch,
                                              self.now()))

    def roles_changed(self, partitions: set[tuple[str, int]]) -> None:
        """Cluster mode: load the ``__transaction_state`` partitions this broker came to
        lead, forget those it stopped leading (their waiting requests answer
        NOT_COORDINATOR; the new leader carries on from the records)."""
        if self._cluster is None:
            return
        led = self._cluster.leadership.led
        core = self.core
        for topic, p in sorted(partitions):
            if topic != TRANSACTIONS_TOPIC or p >= core.config.partitions:
                continue
            epoch = led.get((topic, p))
            if epoch is not None and core.coordinator_epoch(p) != epoch:
                self._load(p, epoch)
                log.info("transactions_loaded", partition=p, coordinator_epoch=epoch)
            elif epoch is None and core.hosts(p):
                self.execute(core.unload_partition(p, self.now()))
                log.info("transactions_unloaded", partition=p)

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        tasks = [t for t in (self._creating, self._proposing, *self._marker_tasks,
                             *self._compactions.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._link is not None:
            await self._link.close()

    def _unavailable(self) -> tuple[ErrorCode, str] | None:
        """Why no transactional request can be served yet (``__transaction_state`` does
        not exist: its making is started), or None."""
        cluster = self._cluster
        if cluster is not None:
            if TRANSACTIONS_TOPIC in cluster.image.topics:
                return None
            if self._proposing is None and not self._closing():
                self._proposing = asyncio.get_running_loop().create_task(self._propose())
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{TRANSACTIONS_TOPIC} is being created"
        if self.core.hosted_partitions():
            return None
        if self._creating is None and not self._closing():
            self._creating = asyncio.get_running_loop().create_task(self._create_topic())
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{TRANSACTIONS_TOPIC} is being created"

    async def _propose(self) -> None:
        """Cluster mode: propose ``__transaction_state`` (any broker may; put if absent,
        the controller writes its partition states), replicated as the offsets topic."""
        cluster = self._cluster
        assert cluster is not None
        image = cluster.image
        rf = self._settings.offsets_topic_replication_factor
        try:
            txn = propose_topic_txn(image, TRANSACTIONS_TOPIC, self.core.config.partitions,
                                    rf, random.randrange(max(len(image.brokers), 1)),
                                    str(uuid.uuid4()), internal=True)
            await cluster.etcd.txn(txn)
            log.info("topic_proposed", topic=TRANSACTIONS_TOPIC,
                     partitions=self.core.config.partitions, replication_factor=rf)
        except InvalidReplicationFactor as exc:
            log.warning("transaction_state_not_proposed", error=str(exc))
        except Exception as exc:  # etcd unreachable: proposed again on the next request
            log.warning("transaction_state_not_proposed", error=repr(exc))
        finally:
            self._proposing = None

    async def _create_topic(self) -> None:
        store = self._store
        count = self.core.config.partitions
        try:
            creation = store.begin_create_internal(TRANSACTIONS_TOPIC, count)
        except StorageError as exc:
            log.error("transaction_state_not_created", error=str(exc))
            self._creating = None
            return
        try:
            await asyncio.to_thread(store.build, creation)
        except StorageError as exc:
            log.error("transaction_state_not_created", error=str(exc))
        finally:
            store.finish(creation)
            self._creating = None
        if store.partition_count(TRANSACTIONS_TOPIC) == count:
            log.info("transaction_state_created", partitions=count)
            for p in range(count):
                self._load(p, 0)

    # --- requests -----------------------------------------------------------------------

    def register(self, handlers: Handlers) -> None:
        """The transactional APIs; FindCoordinator's key type 1 (other key types go to
        the handler registered before)."""
        groups_find = handlers.get(FindCoordinatorRequest)

        def find_coordinator(conn: Peer, cid: int, request: FindCoordinatorRequest) -> None:
            if request.key_type != TRANSACTION_KEY:
                if groups_find is not None:
                    groups_find(conn, cid, request)
                return
            conn.reply(cid, self.find_coordinator(request, conn.listener.name))

        handlers.add(FindCoordinatorRequest, find_coordinator)
        handlers.add(InitProducerIdRequest, self._init_producer_id_handler(
            handlers.get(InitProducerIdRequest)))
        handlers.add(AddPartitionsToTxnRequest, self.add_partitions)
        handlers.add(AddOffsetsToTxnRequest, self.add_offsets)
        handlers.add(EndTxnRequest, self.end_txn)
        handlers.add(DescribeTransactionsRequest, lambda conn, cid, request: conn.reply(
            cid, self.describe(request)))
        handlers.add(ListTransactionsRequest, lambda conn, cid, request: conn.reply(
            cid, self.list_transactions(request)))
        handlers.add(WriteTxnMarkersRequest, self.write_txn_markers)

    def find_coordinator(self, request: FindCoordinatorRequest,
                         listener: str | None) -> FindCoordinatorResponse:
        """This broker (alone), or the leader of the id's ``__transaction_state``
        partition, at its address for ``listener``."""
        if (why := self._unavailable()) is not None:
            return FindCoordinatorResponse(error_code=why[0], error_message=why[1])
        if self._cluster is None:
            host, port = self._advertised(listener)
            return FindCoordinatorResponse(node_id=self._node_id, host=host, port=port)
        p = self.core.partition_of(request.key)
        broker = self._leader_of((TRANSACTIONS_TOPIC, p))
        address = None if broker is None else (
            (broker.host, broker.port) if listener is None else broker.address(listener))
        if broker is None or address is None:
            return FindCoordinatorResponse(
                error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                error_message=f"{TRANSACTIONS_TOPIC}-{p}, the coordinator's partition of "
                              f"{request.key!r}, has no leader now")
        return FindCoordinatorResponse(node_id=broker.node_id, host=address[0],
                                       port=address[1])

    def _partitions(self, topic: str) -> int:
        """A topic's partition count: the cluster's (a coordinator need not hold a
        replica of the partitions a transaction writes), else the store's."""
        if self._cluster is not None:
            assignment = self._cluster.image.topics.get(topic)
            return 0 if assignment is None else len(assignment.replicas)
        return self._store.partition_count(topic) or 0

    def _leader_of(self, tp: tuple[str, int]) -> BrokerInfo | None:
        assert self._cluster is not None
        image = self._cluster.image
        state = image.partitions.get(tp)
        return None if state is None else image.brokers.get(state.leader)

    def _init_producer_id_handler(self, plain: Callable[[Peer, int, Request], None] | None,
                                  ) -> Callable[[Peer, int, InitProducerIdRequest], None]:
        def init_producer_id(conn: Peer, cid: int, request: InitProducerIdRequest) -> None:
            if request.transactional_id is None:
                if plain is not None:
                    plain(conn, cid, request)
                return
            if (why := self._unavailable()) is not None:
                conn.reply(cid, InitProducerIdResponse(error_code=why[0], error_message=why[1]))
                return
            fresh = self._producer_id()
            if fresh is None:
                conn.reply(cid, InitProducerIdResponse(
                    error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                    error_message="no producer id in hand yet (reserved in the data dir, or "
                                  "claimed from the cluster)"))
                return
            token = self._wait(conn, cid, request)
            self.execute(self.core.init_producer_id(
                token, request.transactional_id, request.transaction_timeout_ms,
                request.producer_id, request.producer_epoch, fresh, self.now()))

        return init_producer_id

    def add_partitions(self, conn: Peer, cid: int, request: AddPartitionsToTxnRequest) -> None:
        if (why := self._unavailable()) is not None:
            code, message = why
            conn.reply(cid, _partitions_answer(request, lambda _t, _p: code, message))
            return
        unknown = {(t.name, p) for t in request.topics for p in t.partitions
                   if t.name == TRANSACTIONS_TOPIC or not 0 <= p < self._partitions(t.name)}
        if unknown:  # Kafka's answer: those unknown, the rest not attempted
            conn.reply(cid, _partitions_answer(
                request, lambda t, p: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                if (t, p) in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED,
                f"unknown partitions: {', '.join(f'{t}-{p}' for t, p in sorted(unknown))}"))
            return
        if (refusal := _epoch_refusal(request.producer_epoch)) is not None:
            conn.reply(cid, _partitions_answer(request, lambda _t, _p: refusal, None))
            return
        token = self._wait(conn, cid, request)
        self.execute(self.core.add_partitions(
            token, request.transactional_id, request.producer_id, request.producer_epoch,
            [(t.name, p) for t in request.topics for p in t.partitions], self.now()))

    def add_offsets(self, conn: Peer, cid: int, request: AddOffsetsToTxnRequest) -> None:
        if (why := self._unavailable()) is not None:
            conn.reply(cid, AddOffsetsToTxnResponse(error_code=why[0], error_message=why[1]))
            return
        token = self._wait(conn, cid, request)
        self.execute(self.core.add_offsets(
            token, request.transactional_id, request.producer_id, request.producer_epoch,
            request.group_id, self.now()))

    def end_txn(self, conn: Peer, cid: int, request: EndTxnRequest) -> None:
        if (why := self._unavailable()) is not None:
            conn.reply(cid, EndTxnResponse(error_code=why[0], error_message=why[1]))
            return
        token = self._wait(conn, cid, request)
        self.execute(self.core.end_txn(
            token, request.transactional_id, request.producer_id, request.producer_epoch,
            request.committed, self.now()))

    def describe(self, request: DescribeTransactionsRequest) -> DescribeTransactionsResponse:
        states = []
        for d in self.core.describe(request.transactional_ids):
            by_topic: dict[str, list[int]] = {}
            for topic, p in sorted(d.partitions):
                by_topic.setdefault(topic, []).append(p)
            states.append(TransactionState(
                error_code=d.error_code, transactional_id=d.transactional_id,
                transaction_state=d.state, transaction_timeout_ms=d.timeout_ms,
                transaction_start_time_ms=d.start_ms, producer_id=d.producer_id,
                producer_epoch=d.producer_epoch,
                topics=[TransactionTopic(topic=t, partitions=ps)
                        for t, ps in by_topic.items()]))
        return DescribeTransactionsResponse(transaction_states=states)

    def list_transactions(self, request: ListTransactionsRequest) -> ListTransactionsResponse:
        listing = self.core.list_transactions(request.state_filters,
                                              request.producer_id_filters)
        listed = listing.transactions
        if request.duration_filter_ms >= 0:  # open longer than that, as Kafka filters
            opened_before = self._clock() - request.duration_filter_ms
            started = {d.transactional_id: d.start_ms for d in self.core.describe(
                [t.transactional_id for t in listed])}
            listed = tuple(t for t in listed if 0 <= started.get(t.transactional_id, -1)
                           < opened_before and t.state == "Ongoing")
        return ListTransactionsResponse(
            unknown_state_filters=list(listing.unknown_state_filters),
            transaction_states=[ListedTransaction(
                transactional_id=t.transactional_id, producer_id=t.producer_id,
                transaction_state=t.state) for t in listed])

    def write_txn_markers(self, conn: Peer, cid: int, request: WriteTxnMarkersRequest) -> None:
        """Another coordinator's markers for partitions this broker holds (a single
        broker writes its own directly; tools may send this too)."""
        async def run() -> None:
            results = []
            for marker in request.markers:
                work = MarkerWork(0, "", marker.producer_id, marker.producer_epoch,
                                  marker.transaction_result, marker.coordinator_epoch,
                                  tuple((t.name, p) for t in marker.topics
                                        for p in t.partitions))
                codes = await self._write_marker_work(work, forward=False)
                topics: dict[str, list[TxnPartitionResult]] = {}
                for (topic, p), code in codes.items():
                    topics.setdefault(topic, []).append(
                        TxnPartitionResult(partition_index=p, error_code=code))
                results.append(TxnMarkerResult(producer_id=marker.producer_id, topics=[
                    TxnTopicResult(name=t, results=rs) for t, rs in topics.items()]))
            peer = self._connection(conn.conn_id)
            if peer is not None:
                peer.reply(cid, WriteTxnMarkersResponse(markers=results))
        self._spawn(run())

    def _wait(self, conn: Peer, cid: int, request: Request) -> int:
        token = next(self._tokens)
        self._waiting[token] = _Waiting(conn.conn_id, cid, request)
        return token

    # --- executing results --------------------------------------------------------------

    def execute(self, result: Result) -> None:
        """Store the records (the coordinator hears ``stored`` once they are durable),
        send the replies, start the marker work, re-arm the timer."""
        for reply in result.replies:
            self._answer(reply)
        if result.writes:
            self._persist(result)
        for work in result.markers:
            self._start_markers(work)
        for tid, before, after in result.transitions:
            log.debug("transaction_state", transactional_id=tid, before=before.value,
                     after=after.value)
        self._arm_timer()

    def _persist(self, result: Result) -> None:
        core, store = self.core, self._store
        failed: list[int] = []
        written: list[int] = []
        ends: dict[int, int] = {}
        wall = self._clock()
        led = None if self._cluster is None else self._cluster.leadership.led
        for write in result.writes:
            if led is not None and (TRANSACTIONS_TOPIC, write.partition) not in led:
                self.execute(core.write_failed(write.token, ErrorCode.NOT_COORDINATOR,
                                               self.now()))
                continue
            try:
                self._log.write(write.partition, [write.record], wall)
            except (StorageError, KeyError) as exc:
                log.error("transaction_record_not_written", error=str(exc),
                          transactional_id=write.record.transactional_id)
                failed.append(write.token)
                continue
            self._appended((TRANSACTIONS_TOPIC, write.partition))
            written.append(write.token)
            ends[write.partition] = store.log(TRANSACTIONS_TOPIC, write.partition).log_end_offset
            if write.partition not in self._compactions and self._log.needs_compaction(
                    write.partition):
                self._compact(write.partition)
        for token in failed:
            self.execute(core.write_failed(
                token, write_error_code(ErrorCode.KAFKA_STORAGE_ERROR), self.now()))
        if not written:
            return

        def settle(code: ErrorCode) -> None:
            for token in written:
                now = self.now()
                self.execute(core.stored(token, now) if code == ErrorCode.NONE
                             else core.write_failed(token, write_error_code(code), now))

        def durable(err: StorageError | None) -> None:
            if err is not None:
                settle(ErrorCode.KAFKA_STORAGE_ERROR)
            elif self._cluster is None:
                settle(ErrorCode.NONE)
            else:  # stored once the ISR has it, as Kafka appends with acks=all
                self._spawn(self._replicated(ends, settle))

        self._durability.after_write(durable)

    def _compact(self, partition: int) -> None:
        """Compact a ``__transaction_state`` partition in the background, a snapshot
        batch a step (``CompactedLog.compact_steps``), one at a time per partition: the
        log keeps the latest record of each id, so a restart replays that much."""
        if self._closing():
            return
        durability = self._durability

        def dropped(drop: Callable[[], None]) -> None:
            durability.after_write(lambda err: drop() if err is None else None)

        steps = self._log.compact_steps(partition, dropped)

        async def run() -> None:
            try:
                await finish_in_slices(steps, self._slice_s)
            except Exception:
                log.exception("compaction_failed", topic=TRANSACTIONS_TOPIC,
                              partition=partition)
            finally:
                steps.close()
                self._compactions.pop(partition, None)

        self._compactions[partition] = asyncio.get_running_loop().create_task(run())

    async def _replicated(self, ends: dict[int, int],
                          settle: Callable[[ErrorCode], None]) -> None:
        assert self._cluster is not None
        leaders = self._cluster.leaders
        codes = await asyncio.gather(*(
            leaders.acked((TRANSACTIONS_TOPIC, p), end, WRITE_TIMEOUT_MS)
            for p, end in ends.items()))
        failure = next((ErrorCode(c) for c in codes if c != ErrorCode.NONE), ErrorCode.NONE)
        if failure != ErrorCode.NONE:
            log.warning("transaction_record_not_replicated", error=failure.name,
                        partitions=sorted(ends))
        settle(failure)

    def _appended(self, tp: tuple[str, int]) -> None:
        self._fetches.appended(*tp)
        if self._cluster is not None:
            self._cluster.leaders.appended(tp)

    def _answer(self, reply: Reply) -> None:
        waiting = self._waiting.pop(reply.token, None)
        if waiting is None:
            return
        conn = self._connection(waiting.conn_id)
        if conn is None:
            return
        conn.reply(waiting.cid, _response(waiting.request, reply))

    def _start_markers(self, work: MarkerWork) -> None:
        if self._closing():
            return

        async def run() -> None:
            try:
                codes = await self._write_marker_work(work)
            except Exception:  # a bug must not leave the transaction prepared for good
                log.exception("transaction_markers_failed",
                              transactional_id=work.transactional_id)
                retry = list(work.partitions)
            else:
                retry = [tp for tp, code in codes.items() if code.retriable]
            now = self.now()
            self.execute(self.core.markers_failed(work.token, retry, now) if retry
                         else self.core.markers_written(work.token, now))

        task = asyncio.get_running_loop().create_task(run())
        self._marker_tasks.add(task)
        task.add_done_callback(self._marker_done)

    def _marker_done(self, task: asyncio.Task[None]) -> None:
        self._marker_tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("transaction_markers_not_settled", error=repr(exc))

    async def _write_marker_work(self, work: MarkerWork, *, forward: bool = True,
                                 ) -> dict[tuple[str, int], ErrorCode]:
        """Write ``work``'s markers, each partition's code: NONE written (or not needed:
        the topic is gone, or the partition refused the marker as stale); a retriable code
        to try again. Returns once what was written is durable (in a cluster: in the
        ISR). ``forward``: partitions led elsewhere get their markers through their
        leaders (WriteTxnMarkers); else they answer NOT_LEADER_OR_FOLLOWER."""
        codes: dict[tuple[str, int], ErrorCode] = {}
        group_waits: list[tuple[tuple[str, int], asyncio.Future[ErrorCode | None]]] = []
        elsewhere: dict[int, list[tuple[str, int]]] = {}
        ends: dict[tuple[str, int], int] = {}
        loop = asyncio.get_running_loop()
        wall = self._clock()
        cluster = self._cluster
        for tp in work.partitions:
            topic, p = tp
            here = (self._hosts_groups(p) if topic == OFFSETS_TOPIC
                    else cluster is None or tp in cluster.leadership.led)
            if not here:
                leader = None if cluster is None else self._leader_of(tp)
                if not forward or leader is None or leader.node_id == self._node_id:
                    codes[tp] = (ErrorCode.NOT_COORDINATOR if topic == OFFSETS_TOPIC
                                 else ErrorCode.NOT_LEADER_OR_FOLLOWER)
                else:
                    elsewhere.setdefault(leader.node_id, []).append(tp)
                continue
            if topic == OFFSETS_TOPIC:
                done: asyncio.Future[ErrorCode | None] = loop.create_future()
                self._groups.execute(
                    self._groups.coordinator.complete_transaction(
                        p, work.producer_id, work.commit, self._groups.now()),
                    on_settled=functools.partial(_settle, done))
                group_waits.append((tp, done))
                codes[tp] = ErrorCode.NONE
                continue
            codes[tp] = await self._append_marker(tp, work, wall)
            if codes[tp] == ErrorCode.NONE and cluster is not None:
                ends[tp] = self._store.log(topic, p).log_end_offset
        remote = [self._forward_markers(node, tps, work) for node, tps in elsewhere.items()]
        durable: asyncio.Future[ErrorCode | None] = loop.create_future()
        self._durability.after_write(lambda err: _settle(
            durable, None if err is None else ErrorCode.KAFKA_STORAGE_ERROR))
        if (failure := await durable) is not None:
            codes.update({tp: failure for tp in codes if tp[0] != OFFSETS_TOPIC})
        elif cluster is not None and ends:
            acked = await asyncio.gather(*(cluster.leaders.acked(tp, end, WRITE_TIMEOUT_MS)
                                           for tp, end in ends.items()))
            codes.update({tp: ErrorCode(code) for tp, code in zip(ends, acked, strict=True)})
        for tp, wait in group_waits:
            if (failure := await wait) is not None:
                codes[tp] = ErrorCode.COORDINATOR_NOT_AVAILABLE
        for answered in await asyncio.gather(*remote):
            codes.update(answered)
        return codes

    async def _append_marker(self, tp: tuple[str, int], work: MarkerWork,
                             wall: int) -> ErrorCode:
        topic, p = tp
        try:
            plog = self._store.log(topic, p)
            await finish_in_slices(plog.append_marker_steps(
                work.producer_id, work.producer_epoch, work.commit,
                work.coordinator_epoch, wall), self._slice_s)
        except ProducerRefused as exc:
            log.warning("transaction_marker_refused", topic=topic, partition=p,
                        producer_id=work.producer_id, error=exc.message)
            return ErrorCode.NONE  # stale: this coordinator's marker is not needed
        except KeyError:
            return ErrorCode.NONE  # deleted: nothing left to mark
        except StorageError as exc:
            log.error("transaction_marker_not_written", topic=topic, partition=p,
                      error=str(exc))
            return ErrorCode.KAFKA_STORAGE_ERROR
        self._appended(tp)
        return ErrorCode.NONE

    async def _forward_markers(self, node_id: int, partitions: list[tuple[str, int]],
                               work: MarkerWork) -> dict[tuple[str, int], ErrorCode]:
        """WriteTxnMarkers to the broker leading ``partitions``: its codes, or
        NOT_LEADER_OR_FOLLOWER for each when it cannot be reached (tried again)."""
        assert self._cluster is not None
        unreached = dict.fromkeys(partitions, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        broker = self._cluster.image.brokers.get(node_id)
        if broker is None:
            return unreached
        if self._link is None:
            self._link = PeerLink(f"groupwire-broker-{self._node_id}-txn", PEER_TIMEOUT_S,
                                  self._cluster.dialer)
        topics: dict[str, list[int]] = {}
        for topic, p in partitions:
            topics.setdefault(topic, []).append(p)
        request = WriteTxnMarkersRequest(markers=[TxnMarker(
            producer_id=work.producer_id, producer_epoch=work.producer_epoch,
            transaction_result=work.commit, coordinator_epoch=work.coordinator_epoch,
            topics=[TxnTopic(name=t, partitions=ps) for t, ps in topics.items()])])
        try:
            conn = await self._link.to(broker)
            answer = await conn.request(request, WriteTxnMarkersResponse,
                                        timeout_s=PEER_TIMEOUT_S)
        except PeerError as exc:
            log.info("transaction_markers_not_forwarded", leader=node_id, error=str(exc))
            return unreached
        if answer.error_code != ErrorCode.NONE:  # refused as a whole: tried again
            log.warning("transaction_markers_refused", leader=node_id,
                        error=ErrorCode.name_of(answer.error_code),
                        message=answer.error_message)
            return unreached
        out = dict(unreached)
        for marker in answer.markers:
            for topic_result in marker.topics:
                for r in topic_result.results:
                    tp = (topic_result.name, r.partition_index)
                    if tp in out:
                        out[tp] = _known(r.error_code)
        return out

    # --- metrics ------------------------------------------------------------------------

    def transaction_counters(self) -> dict[str, int]:
        counters = dataclasses.asdict(self.core.counters())
        counters["open"] = len(self.core.list_transactions(["Ongoing"]).transactions)
        return counters

    def unstable_records(self) -> dict[str, int]:
        store = self._store
        out: dict[str, int] = {}
        for topic, count in store.topics().items():
            if store.is_internal(topic):
                continue
            behind = 0
            for p in range(count):
                with contextlib.suppress(KeyError):
                    plog = store.log(topic, p)
                    if plog.producer_states_built:  # else nothing is known to be open
                        behind += plog.high_watermark - plog.last_stable_offset
            out[topic] = behind
        return out

    # --- the one timer ------------------------------------------------------------------

    def _arm_timer(self) -> None:
        deadline = self.core.next_deadline()
        if deadline == self._timer_deadline and self._timer is not None:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_deadline = deadline
        if deadline is None or self._closing():
            return
        delay = max(deadline - self._monotonic(), 0) / 1000
        self._timer = asyncio.get_running_loop().call_later(delay, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._timer_deadline = None
        self.execute(self.core.expire(self.now()))


def _known(code: int) -> ErrorCode:
    """A peer's code; one this version does not know counts as retriable."""
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER


def _settle(future: asyncio.Future[ErrorCode | None], outcome: ErrorCode | None) -> None:
    if not future.done():
        future.set_result(outcome)


def _epoch_refusal(epoch: int) -> ErrorCode | None:
    return ErrorCode.INVALID_REQUEST if not 0 <= epoch <= MAX_EPOCH else None


def _partitions_answer(request: AddPartitionsToTxnRequest,
                       code: Callable[[str, int], ErrorCode],
                       message: str | None) -> AddPartitionsToTxnResponse:
    return AddPartitionsToTxnResponse(error_message=message, results=[
        TxnTopicResult(name=t.name, results=[
            TxnPartitionResult(partition_index=p, error_code=code(t.name, p))
            for p in t.partitions]) for t in request.topics])


def _response(request: Request, reply: Reply) -> Response:
    code = reply.code
    if isinstance(request, InitProducerIdRequest):
        return InitProducerIdResponse(error_code=code, producer_id=reply.producer_id,
                                      producer_epoch=reply.producer_epoch)
    if isinstance(request, AddPartitionsToTxnRequest):
        return _partitions_answer(request, lambda _t, _p: code, None)
    if isinstance(request, AddOffsetsToTxnRequest):
        return AddOffsetsToTxnResponse(error_code=code)
    if isinstance(request, EndTxnRequest):
        return EndTxnResponse(error_code=code)
    raise TypeError(f"no transactional answer for {type(request).__name__}")
