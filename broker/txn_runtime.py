"""The transaction coordinator's runtime shell: the transactional APIs in, the pure
coordinator's results carried out.

The coordinator (``broker.transactions``) decides; this module stores its records in
``__transaction_state`` and tells it when they are durable, answers the requests it
answers, writes its commit / abort markers into the data partitions (and, for
``__consumer_offsets`` partitions, has the group coordinator complete the transaction's
offsets), and keeps the one loop timer that wakes it for timeouts and expiries.

``__transaction_state`` is made when the first transactional producer looks for its
coordinator, as Kafka makes it: until it exists FindCoordinator and InitProducerId answer
COORDINATOR_NOT_AVAILABLE (retriable) and the topic is created off the loop. A single
broker hosts every partition of it, loaded at start. Cluster mode does not serve
transactions yet: those requests answer COORDINATOR_NOT_AVAILABLE with a message.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import itertools
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final

from groupwire.broker.config import BrokerSettings
from groupwire.broker.dispatch import Handlers
from groupwire.broker.durability import Durability
from groupwire.broker.fetch import FetchManager
from groupwire.broker.group_runtime import GroupRuntime
from groupwire.broker.host import Peer
from groupwire.broker.logs import get_logger
from groupwire.broker.metrics import BrokerMetrics
from groupwire.broker.pacing import finish_in_slices
from groupwire.broker.storage import OFFSETS_TOPIC, TRANSACTIONS_TOPIC, TopicStore
from groupwire.broker.storage.errors import StorageError
from groupwire.broker.storage.producer_log import ProducerRefused
from groupwire.broker.transactions import (
    MarkerWork,
    Reply,
    Result,
    TransactionConfig,
    TransactionCoordinator,
    record_from_kv,
    write_error_code,
)
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
    TxnMarkerResult,
    TxnPartitionResult,
    TxnTopicResult,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)

log = get_logger("groupwire.transactions")

TRANSACTION_KEY: Final = 1
"""FindCoordinator's ``key_type`` for a transactional id."""
MAX_EPOCH: Final = 32767
"""Producer epochs are int16 in Kafka's batches."""


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
                 node_id: int = 0) -> None:
        """``producer_id``: a producer id never handed out (``broker.storage.producer_ids``);
        ``advertised``: this broker's address for a listener name (FindCoordinator)."""
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
        self._clustered = settings.clustered
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

    @property
    def ready(self) -> bool:
        """``__transaction_state`` exists and its partitions are loaded."""
        return bool(self.core.hosted_partitions())

    def start(self) -> None:
        """A single broker loads every partition of ``__transaction_state`` if it exists
        (at start, before it listens: transactions left prepared get their markers)."""
        if self._clustered:
            return
        count = self._store.partition_count(TRANSACTIONS_TOPIC)
        if count is not None:
            self._load_all(count)

    def _load_all(self, count: int) -> None:
        now = self.now()
        for p in range(count):
            records = [record_from_kv(r.key, r.value)
                       for r in self._store.scan(TRANSACTIONS_TOPIC, p) if r.key is not None]
            self.execute(self.core.load_partition(p, records, 0, now))

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        tasks = [t for t in (self._creating, *self._marker_tasks) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _not_ready(self) -> tuple[ErrorCode, str]:
        """Why a transactional request cannot be served now (and start making the topic
        if that is why)."""
        if self._clustered:
            return (ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    "transactions are not served in cluster mode yet")
        if self._creating is None and not self._closing():
            self._creating = asyncio.get_running_loop().create_task(self._create_topic())
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{TRANSACTIONS_TOPIC} is being created"

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
            self._load_all(count)

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
        if not self.ready:
            code, message = self._not_ready()
            return FindCoordinatorResponse(error_code=code, error_message=message)
        host, port = self._advertised(listener)
        return FindCoordinatorResponse(node_id=self._node_id, host=host, port=port)

    def _init_producer_id_handler(self, plain: Callable[[Peer, int, Request], None] | None,
                                  ) -> Callable[[Peer, int, InitProducerIdRequest], None]:
        def init_producer_id(conn: Peer, cid: int, request: InitProducerIdRequest) -> None:
            if request.transactional_id is None:
                if plain is not None:
                    plain(conn, cid, request)
                return
            if not self.ready:
                code, message = self._not_ready()
                conn.reply(cid, InitProducerIdResponse(error_code=code, error_message=message))
                return
            fresh = self._producer_id()
            if fresh is None:
                conn.reply(cid, InitProducerIdResponse(
                    error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                    error_message="no producer id could be reserved in the data dir"))
                return
            token = self._wait(conn, cid, request)
            self.execute(self.core.init_producer_id(
                token, request.transactional_id, request.transaction_timeout_ms,
                request.producer_id, request.producer_epoch, fresh, self.now()))

        return init_producer_id

    def add_partitions(self, conn: Peer, cid: int, request: AddPartitionsToTxnRequest) -> None:
        if not self.ready:
            code, message = self._not_ready()
            conn.reply(cid, _partitions_answer(request, lambda _t, _p: code, message))
            return
        store = self._store
        unknown = {(t.name, p) for t in request.topics for p in t.partitions
                   if t.name == TRANSACTIONS_TOPIC or not 0 <= p < (
                       store.partition_count(t.name) or 0)}
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
        if not self.ready:
            code, message = self._not_ready()
            conn.reply(cid, AddOffsetsToTxnResponse(error_code=code, error_message=message))
            return
        token = self._wait(conn, cid, request)
        self.execute(self.core.add_offsets(
            token, request.transactional_id, request.producer_id, request.producer_epoch,
            request.group_id, self.now()))

    def end_txn(self, conn: Peer, cid: int, request: EndTxnRequest) -> None:
        if not self.ready:
            code, message = self._not_ready()
            conn.reply(cid, EndTxnResponse(error_code=code, error_message=message))
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
        return ListTransactionsResponse(
            unknown_state_filters=list(listing.unknown_state_filters),
            transaction_states=[ListedTransaction(
                transactional_id=t.transactional_id, producer_id=t.producer_id,
                transaction_state=t.state) for t in listing.transactions])

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
                codes = await self._write_marker_work(work)
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
        wall = self._clock()
        for write in result.writes:
            key, value = write.record.to_kv()
            try:
                store.append_kv(TRANSACTIONS_TOPIC, write.partition, [(key, value, wall)])
            except (StorageError, KeyError) as exc:
                log.error("transaction_record_not_written", error=str(exc),
                          transactional_id=write.record.transactional_id)
                failed.append(write.token)
                continue
            self._fetches.appended(TRANSACTIONS_TOPIC, write.partition)
            written.append(write.token)
        for token in failed:
            self.execute(core.write_failed(
                token, write_error_code(ErrorCode.KAFKA_STORAGE_ERROR), self.now()))
        if not written:
            return

        def durable(err: StorageError | None) -> None:
            for token in written:
                now = self.now()
                self.execute(core.stored(token, now) if err is None else core.write_failed(
                    token, write_error_code(ErrorCode.KAFKA_STORAGE_ERROR), now))

        self._durability.after_write(durable)

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
            codes = await self._write_marker_work(work)
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
            log.error("transaction_markers_failed", error=repr(exc))

    async def _write_marker_work(self, work: MarkerWork) -> dict[tuple[str, int], ErrorCode]:
        """Write ``work``'s markers, each partition's code: NONE written (or not needed:
        the topic is gone, or the partition refused the marker as stale); a retriable code
        to try again. Returns once what was written is durable."""
        codes: dict[tuple[str, int], ErrorCode] = {}
        waits: list[asyncio.Future[ErrorCode | None]] = []
        loop = asyncio.get_running_loop()
        wall = self._clock()
        for tp in work.partitions:
            topic, p = tp
            if topic == OFFSETS_TOPIC:
                done: asyncio.Future[ErrorCode | None] = loop.create_future()
                self._groups.execute(
                    self._groups.coordinator.complete_transaction(
                        p, work.producer_id, work.commit, self._groups.now()),
                    on_settled=functools.partial(_settle, done))
                waits.append(done)
                codes[tp] = ErrorCode.NONE
                continue
            try:
                plog = self._store.log(topic, p)
            except KeyError:
                codes[tp] = ErrorCode.NONE  # deleted: nothing left to mark
                continue
            try:
                await finish_in_slices(plog.append_marker_steps(
                    work.producer_id, work.producer_epoch, work.commit,
                    work.coordinator_epoch, wall), self._slice_s)
            except ProducerRefused as exc:
                log.warning("transaction_marker_refused", topic=topic, partition=p,
                            producer_id=work.producer_id, error=exc.message)
                codes[tp] = ErrorCode.NONE
                continue
            except StorageError as exc:
                log.error("transaction_marker_not_written", topic=topic, partition=p,
                          error=str(exc))
                codes[tp] = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            except KeyError:
                codes[tp] = ErrorCode.NONE
                continue
            codes[tp] = ErrorCode.NONE
            self._fetches.appended(topic, p)
        durable: asyncio.Future[ErrorCode | None] = loop.create_future()
        self._durability.after_write(lambda err: _settle(
            durable, None if err is None else ErrorCode.KAFKA_STORAGE_ERROR))
        if await durable is not None:
            return {tp: ErrorCode.KAFKA_STORAGE_ERROR for tp in codes}
        group_failures = await asyncio.gather(*waits)
        if any(f is not None for f in group_failures):
            for tp in codes:
                if tp[0] == OFFSETS_TOPIC:
                    codes[tp] = ErrorCode.COORDINATOR_NOT_AVAILABLE
        return codes

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
