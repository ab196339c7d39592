"""Fetch: slices of the log served as stored, and the long poll that waits for appends.

No fetch holds the event loop for more than a slice (``broker.pacing``): a read is a
generator with a step per partition. The first read of a fetch holds its connection
while it runs on (the connection's later requests take effect after it); one that finds
fewer than ``min_bytes`` parks and lets the connection go on.

A parked fetch is what Kafka calls a DelayedFetch. It waits on every partition it names
and counts the bytes each holds for it; an append that moves one of them re-reads only
that partition for it and updates the count. It is completed (one full read, in slices)
once the count reaches ``min_bytes``, a re-read shows an error, or ``max_wait_ms`` has
passed since it arrived. Ownership fencing is checked when the fetch arrives, on each
re-read, and again at completion.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

from groupwire.broker.coordinator import ANONYMOUS, Coordinator
from groupwire.broker.logs import get_logger
from groupwire.broker.pacing import finish_in_slices, run_slice, sliced
from groupwire.broker.partition_roles import NO_LEADER_EPOCH, Leadership, SingleBroker
from groupwire.broker.storage import PartitionLog, TopicStore
from groupwire.broker.storage.errors import StorageError
from groupwire.protocol.batches import CorruptBatchError
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.kafka.records import kafka_to_msgpack
from groupwire.protocol.messages import (
    AbortedTransaction,
    FetchPartitionData,
    FetchRequest,
    FetchResponse,
    FetchTopicResponse,
)
from groupwire.protocol.steps import Steps, run_steps

log = get_logger("groupwire.fetch")

TopicPartition = tuple[str, int]
class Reply(Protocol):
    """Sends a fetch's answer; ``long``: its work spanned slices, so the answer is as
    large and is encoded off the loop (``Peer.answer_is_long``)."""

    def __call__(self, response: FetchResponse, *, long: bool = False) -> None: ...
Defer = Callable[[Coroutine[Any, Any, None]], None]
"""Runs the rest of a first read as a task that holds the connection
(``RequestRunner.defer_long``)."""

_clock = time.perf_counter
_UNPARK_CHUNK = 256
"""Waiter entries removed per step when a fetch stops waiting."""


class _State(enum.Enum):
    READING = enum.auto()
    """First read under way (in the broker's task that holds the connection)."""
    PARKED = enum.auto()
    COMPLETING = enum.auto()
    """Its full read is under way."""
    DONE = enum.auto()
    """Answered, or its connection closed: nothing more is sent."""


@dataclass(eq=False, slots=True)
class _Fetch:
    conn_id: int
    request: FetchRequest
    reply: Reply
    may_park: bool
    principal: str = ANONYMOUS
    """Who its connection authenticated as: it may name only that principal's members
    (docs/protocol.md §7.5)."""
    superuser: bool = False
    kafka: bool = False
    """It came through the Kafka door: its answer is converted there, not here."""
    arrived: float = 0.0
    """Loop time of arrival: ``max_wait_ms`` counts from here."""
    state: _State = _State.READING
    waiting_on: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)
    """Partitions it is registered on: fetch offset and partition_max_bytes."""
    have: dict[TopicPartition, int] = field(default_factory=dict)
    """Bytes each partition had for it when last read."""
    ready: int = 0
    """``sum(have.values())``."""
    error: bool = False
    """A re-read found an error: complete it so that the client learns it."""
    timer: asyncio.TimerHandle | None = None
    task: asyncio.Task[None] | None = None
    steps: Steps[FetchResponse | None] | None = None
    """The full read a ``task`` runs."""


class FetchManager:
    def __init__(self, store: TopicStore, coordinator: Coordinator, *, max_response_bytes: int,
                 ownership_fencing: bool, slice_s: float,
                 leadership: Leadership | None = None,
                 replica_fetched: Callable[[TopicPartition, int, int], None] | None = None,
                 replica_epoch: Callable[[int], int | None] | None = None,
                 superuser: Callable[[str], bool] | bool = False,
                 ) -> None:
        """``replica_fetched(tp, node, fetch_offset)``: in a cluster, a follower's fetch
        tells the leader how far its log reaches (None: a single broker refuses them).
        ``replica_epoch(node)``: that broker's epoch while it is registered, else None;
        a follower's fetch carrying any other is refused before it counts (KIP-903).
        ``superuser(principal)``: whether a principal may name any principal's member in
        a fenced fetch (docs/protocol.md §7.5); a bool answers the same for all."""
        self._store = store
        self._leadership: Leadership = (SingleBroker(store.partition_count)
                                        if leadership is None else leadership)
        self._replica_fetched = replica_fetched
        self._replica_epoch = replica_epoch
        self._coordinator = coordinator
        self._max_response_bytes = max_response_bytes
        self._fencing = ownership_fencing
        self.superuser: Callable[[str], bool] = (
            superuser if callable(superuser) else (lambda _principal: superuser))
        """Settable later, as ``coordinates`` (the authorizer's super users)."""
        self.coordinates: Callable[[str], bool] = lambda _group: True
        """Whether this broker coordinates a group: only then can it check a fetch's
        ownership (in a cluster, other leaders serve it unchecked; commits stay fenced
        by the coordinator)."""
        self._slice_s = slice_s
        self._waiters: dict[TopicPartition, set[_Fetch]] = {}
        self._by_conn: dict[int, set[_Fetch]] = {}
        self._dirty: set[TopicPartition] = set()
        self._unsettled: set[TopicPartition] = set()
        """Appended past the high watermark when last looked at (fsync ``always``: the
        high watermark moves once the fsync is done): looked at again at the next wake."""
        self._waking: asyncio.Task[None] | None = None
        self._in_wake = False
        self._wake_deadline = 0.0
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False

    # --- arrival ------------------------------------------------------------------------

    def handle(self, conn_id: int, request: FetchRequest, reply: Reply, defer: Defer, *,
               principal: str = ANONYMOUS, kafka: bool = False) -> None:
        """Read, then answer or park. A read longer than a slice goes on in ``defer``.
        ``principal``: the connection's (``Peer.principal``), for member ownership."""
        fetch = _Fetch(conn_id, request, reply,
                       may_park=request.max_wait_ms > 0 and request.min_bytes > 0,
                       principal=principal, kafka=kafka,
                       superuser=request.group is not None and self.superuser(principal))
        if self._closing:  # shutting down: answer with what is there
            fetch.may_park = False
            self._send(fetch, run_steps(self._arrival(fetch)))
            return
        fetch.arrived = asyncio.get_running_loop().time()
        self._by_conn.setdefault(conn_id, set()).add(fetch)
        sliced(self._arrival(fetch), self._slice_s,
               lambda response: self._send(fetch, response), defer)

    def _arrival(self, fetch: _Fetch) -> Steps[FetchResponse | None]:
        """The first read; the answer, or None once parked (or its connection closed)."""
        result = yield from self._read(fetch, register=fetch.may_park)
        if result is None:
            return None
        response, ready, has_error = result
        request = fetch.request
        if (has_error or ready >= request.min_bytes or not fetch.may_park
                or not fetch.waiting_on):
            yield from self._unpark(fetch)
            if fetch.state is _State.DONE:
                return None
            self._forget(fetch)
            return response
        if fetch.error or fetch.ready >= request.min_bytes or self._closing:
            # a partition read early on moved while the rest was read: read it all again
            return (yield from self._completion(fetch))
        fetch.state = _State.PARKED
        loop = asyncio.get_running_loop()
        fetch.timer = loop.call_at(fetch.arrived + request.max_wait_ms / 1000,
                                   self._timed_out, fetch)
        return None

    # --- parked fetches -----------------------------------------------------------------

    def appended(self, topic: str, partition: int) -> None:
        """Note that a partition's high watermark may have moved; see :meth:`wake`."""
        if (topic, partition) in self._waiters:
            self._dirty.add((topic, partition))

    def wake(self) -> None:
        """Re-read, for the fetches waiting on them, the partitions that moved since the
        last wake; complete those that now have enough. Sliced: a pass longer than a
        slice goes on in a task, which also takes the partitions that move meanwhile."""
        if self._unsettled:
            self._dirty |= self._unsettled
            self._unsettled = set()
        if not self._dirty or self._closing or self._waking is not None or self._in_wake:
            return  # a pass under way takes the new ones too
        steps = self._wake_steps()
        self._wake_deadline = _clock() + self._slice_s
        self._in_wake = True  # an answer sent may lead to an append, and to wake() again
        try:
            done, _ = run_slice(steps, self._slice_s)
        finally:
            self._in_wake = False
        if not done:
            self._waking = self._spawn(self._wake_later(steps))

    async def _wake_later(self, steps: Steps[None]) -> None:
        try:
            while True:
                await asyncio.sleep(0)
                self._wake_deadline = _clock() + self._slice_s
                done, _ = run_slice(steps, self._slice_s)
                if done:
                    return
        except Exception:  # a bug: parked fetches still complete at max_wait
            log.exception("fetch_wake_failed")
        finally:
            self._waking = None

    def _wake_steps(self) -> Steps[None]:
        while self._dirty:
            dirty, self._dirty = self._dirty, set()
            for tp in dirty:
                waiters = self._waiters.get(tp)
                if not waiters:
                    continue
                self._note_unsettled(tp)
                for fetch in list(waiters):
                    if fetch.state in (_State.PARKED, _State.READING) and tp in fetch.waiting_on:
                        self._recheck(fetch, tp)
                        yield

    def _note_unsettled(self, tp: TopicPartition) -> None:
        try:
            plog = self._store.log(*tp)
        except (KeyError, StorageError):
            return
        # A replicated log's high watermark moves when followers fetch, and the broker
        # says so (``appended``): looking at it again at every wake would be wasted.
        if plog.high_watermark < plog.log_end_offset and not plog.replicated:
            self._unsettled.add(tp)

    def _recheck(self, fetch: _Fetch, tp: TopicPartition) -> None:
        """Re-read one moved partition for ``fetch``; complete it if it now has enough."""
        request = fetch.request
        if request.group is not None and self._fencing \
                and self.coordinates(request.group.group_id):
            check = self._coordinator.check_fetch(request.group, (tp,), fetch.principal,
                                                  fetch.superuser)
            if check.error_code != ErrorCode.NONE or check.not_owned:
                fetch.error = True
        if not fetch.error and self._epoch_error(tp, NO_LEADER_EPOCH) is not None:
            fetch.error = True
        if not fetch.error:
            offset, partition_max = fetch.waiting_on[tp]
            budget = min(request.max_bytes, self._max_response_bytes)
            answer, size = self._read_partition(tp, offset, min(partition_max, budget),
                                                first_batch_always=True,
                                                replica=request.replica_id >= 0,
                                                kafka=fetch.kafka,
                                                committed=_committed(request))
            if answer.error_code != ErrorCode.NONE:
                fetch.error = True
            fetch.ready += size - fetch.have.get(tp, 0)
            fetch.have[tp] = size
        if fetch.state is _State.PARKED and (fetch.error or fetch.ready >= request.min_bytes):
            self._start_completion(fetch, self._wake_deadline)

    def _stale_replica(self, request: FetchRequest) -> FetchResponse | None:
        """STALE_BROKER_EPOCH unless ``replica_epoch`` is the registered epoch of broker
        ``replica_id``: a fetch posing as a follower, or one from a registration that is
        gone, must not move the ISR or the high watermark (KIP-903)."""
        if self._replica_epoch is None:
            return None
        registered = self._replica_epoch(request.replica_id)
        if registered is not None and request.replica_epoch == registered:
            return None
        log.warning("replica_fetch_refused", replica_id=request.replica_id,
                    replica_epoch=request.replica_epoch, registered=registered is not None)
        # The registered epoch is not told: the answer must not help a guess.
        return FetchResponse(
            error_code=ErrorCode.STALE_BROKER_EPOCH,
            error_message=f"replica_epoch: not the epoch of broker {request.replica_id}'s "
                          f"current registration" if registered is not None
            else f"replica_id: broker {request.replica_id} is not registered")

    def _timed_out(self, fetch: _Fetch) -> None:
        fetch.timer = None
        if fetch.state is _State.PARKED:
            self._start_completion(fetch, _clock() + self._slice_s)

    def _start_completion(self, fetch: _Fetch, deadline: float) -> None:
        """Complete ``fetch``: until ``deadline`` here, the rest in a task of ours (no hold:
        a parked fetch's answer may overtake its connection's later requests)."""
        fetch.state = _State.COMPLETING
        steps = self._completion(fetch)
        remaining = deadline - _clock()
        if remaining > 0:
            done, response = run_slice(steps, remaining)
            if done:
                self._send(fetch, response)
                return
        fetch.steps = steps
        fetch.task = self._spawn(self._complete_later(fetch, steps))

    async def _complete_later(self, fetch: _Fetch, steps: Steps[FetchResponse | None]) -> None:
        try:
            response = await finish_in_slices(steps, self._slice_s)
        except Exception as exc:  # a bug: answer rather than leave the client waiting
            log.exception("fetch_failed", conn=fetch.conn_id)
            response = None
            if fetch.state is not _State.DONE:
                fetch.state = _State.DONE
                self._forget(fetch)
                response = FetchResponse(error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
                                         error_message=f"{type(exc).__name__}: {exc}")
        self._send(fetch, response, long=True)

    def _completion(self, fetch: _Fetch) -> Steps[FetchResponse | None]:
        """Stop waiting, then the full read, fenced again: the answer (None if closed)."""
        fetch.state = _State.COMPLETING
        if fetch.timer is not None:
            fetch.timer.cancel()
            fetch.timer = None
        yield from self._unpark(fetch)
        result = yield from self._read(fetch, register=False)
        if result is None:
            return None
        self._forget(fetch)
        return result[0]

    @staticmethod
    def _send(fetch: _Fetch, response: FetchResponse | None, *, long: bool = False) -> None:
        if response is not None:
            fetch.reply(response, long=long)

    # --- connections and shutdown --------------------------------------------------------

    def connection_closed(self, conn_id: int) -> None:
        """Its fetches stop where they are and send nothing."""
        for fetch in self._by_conn.pop(conn_id, set()):
            fetch.state = _State.DONE
            if fetch.timer is not None:
                fetch.timer.cancel()
                fetch.timer = None
            if fetch.task is not None:
                fetch.task.cancel()
            fetch.steps = None
            run_steps(self._unpark(fetch))

    def complete_all(self) -> None:
        """Answer every parked fetch now with what is there (shutdown): synchronously, so
        that no task of ours reads storage after this; later fetches are answered at once.

        First reads still under way belong to the broker's tasks, which it awaits first.
        """
        self._closing = True
        if self._waking is not None:
            self._waking.cancel()
        self._dirty.clear()
        self._unsettled.clear()
        for fetch in [f for fs in self._by_conn.values() for f in fs]:
            if fetch.state is _State.PARKED:
                self._send(fetch, run_steps(self._completion(fetch)))
            elif fetch.state is _State.COMPLETING and fetch.task is not None:
                fetch.task.cancel()
                steps, fetch.steps = fetch.steps, None
                assert steps is not None
                self._send(fetch, run_steps(steps))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _forget(self, fetch: _Fetch) -> None:
        """``fetch`` is answered: it is no longer its connection's."""
        fetch.state = _State.DONE
        fetch.steps = None
        conns = self._by_conn.get(fetch.conn_id)
        if conns is not None:
            conns.discard(fetch)
            if not conns:
                del self._by_conn[fetch.conn_id]

    def _register(self, fetch: _Fetch, tp: TopicPartition, offset: int, max_bytes: int,
                  ) -> None:
        fetch.waiting_on[tp] = (offset, max_bytes)
        self._waiters.setdefault(tp, set()).add(fetch)

    def _unpark(self, fetch: _Fetch) -> Steps[None]:
        """Take ``fetch`` off the partitions it waits on, a chunk a step."""
        waiting_on = fetch.waiting_on
        n = 0
        while waiting_on:
            tp, _ = waiting_on.popitem()
            waiters = self._waiters.get(tp)
            if waiters is not None:
                waiters.discard(fetch)
                if not waiters:
                    del self._waiters[tp]
            n += 1
            if n % _UNPARK_CHUNK == 0:
                yield

    # --- reading ------------------------------------------------------------------------

    def _read(self, fetch: _Fetch, *, register: bool,
              ) -> Steps[tuple[FetchResponse, int, bool] | None]:
        """Read every partition ``fetch`` names, a step each: the response, its bytes and
        whether a partition failed; None if its connection closed meanwhile.

        With ``register`` each partition is waited on just before it is read, so an
        append made while the rest is read is not missed (:meth:`_recheck`)."""
        request = fetch.request
        if fetch.state is _State.DONE:
            return None
        replica = request.replica_id >= 0
        if replica and self._replica_fetched is None:  # no followers without a cluster
            return FetchResponse(error_code=ErrorCode.INVALID_REQUEST,
                                 error_message="replica_id: replica fetches need cluster mode",
                                 ), 0, True
        if replica and (stale := self._stale_replica(request)) is not None:
            return stale, 0, True
        not_owned: frozenset[TopicPartition] = frozenset()
        if request.group is not None and self._fencing \
                and self.coordinates(request.group.group_id):
            check = self._coordinator.check_fetch(
                request.group,
                [(t.topic, p.partition) for t in request.topics for p in t.partitions],
                fetch.principal, fetch.superuser)
            if check.error_code != ErrorCode.NONE:
                return FetchResponse(error_code=check.error_code,
                                     error_message=check.error_message), 0, True
            not_owned = check.not_owned
        budget = min(request.max_bytes, self._max_response_bytes)
        total = 0
        has_error = False
        topics: list[FetchTopicResponse] = []
        for topic_req in request.topics:
            answers: list[FetchPartitionData] = []
            for part in topic_req.partitions:
                if fetch.state is _State.DONE:
                    return None
                tp = (topic_req.topic, part.partition)
                if tp in not_owned:
                    answers.append(FetchPartitionData(
                        partition_index=part.partition,
                        error_code=ErrorCode.PARTITION_NOT_OWNED,
                        error_message="partition not owned by this member in this generation",
                    ))
                    has_error = True
                    continue
                if (fenced := self._epoch_error(tp, part.current_leader_epoch)) is not None:
                    answers.append(fenced)
                    has_error = True
                    continue
                if replica and self._replica_fetched is not None:
                    # Its log may be gone here (deleted): the read below answers for it.
                    with contextlib.suppress(StorageError):
                        self._replica_fetched(tp, request.replica_id, part.fetch_offset)
                committed = not replica and _committed(request)
                if committed:  # the last stable offset needs the producers' state
                    with contextlib.suppress(KeyError, StorageError):
                        yield from self._store.log(*tp).producer_states_steps()
                if register:
                    self._register(fetch, tp, part.fetch_offset, part.partition_max_bytes)
                answer, size = self._read_partition(
                    tp, part.fetch_offset, min(part.partition_max_bytes, budget - total),
                    first_batch_always=total == 0, replica=replica, kafka=fetch.kafka,
                    committed=committed,
                )
                if answer.error_code != ErrorCode.NONE:
                    has_error = True
                if register:
                    fetch.ready += size - fetch.have.get(tp, 0)
                    fetch.have[tp] = size
                total += size
                answers.append(answer)
                yield
            topics.append(FetchTopicResponse(topic=topic_req.topic, partitions=answers))
        if fetch.state is _State.DONE:
            return None
        return FetchResponse(responses=topics), total, has_error

    def _epoch_error(self, tp: TopicPartition, epoch: int) -> FetchPartitionData | None:
        """Whether this broker leads the partition in the client's epoch (KIP-320; -1
        skips the epoch check). Re-reads of a parked fetch check again: leadership may
        have moved meanwhile."""
        refusal = self._leadership.check(tp[0], tp[1], epoch)
        if refusal is None:
            return None
        return FetchPartitionData(partition_index=tp[1], error_code=refusal.code,
                                  error_message=refusal.message)

    def _read_partition(self, tp: TopicPartition, offset: int, limit: int, *,
                        first_batch_always: bool, replica: bool = False, kafka: bool = False,
                        committed: bool = False) -> tuple[FetchPartitionData, int]:
        """``replica``: a follower reads up to the log end, consumers below the high
        watermark, read_committed ones (``committed``) below the last stable offset,
        told the aborted transactions there (docs/protocol.md §5.5). A msgpack consumer
        (neither a replica nor ``kafka``) of a log that holds Kafka batches gets them
        converted (§13.4); the size counted is what was read."""
        topic, partition = tp
        try:
            plog = self._store.log(topic, partition)
        except (KeyError, StorageError):
            return FetchPartitionData(
                partition_index=partition, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                error_message=f"unknown topic or partition {topic}-{partition}",
            ), 0
        try:
            aborted_spans: list[tuple[int, int]] = []
            if committed:
                data, aborted_spans = plog.read_committed(offset, max(limit, 0),
                                                          first_batch_always)
            else:
                data = plog.read(offset, max(limit, 0), first_batch_always=first_batch_always,
                                 to_log_end=replica)
        except StorageError as exc:
            if exc.code == ErrorCode.CORRUPT_MESSAGE:
                log.error("corrupt_batch", topic=topic, partition=partition,
                          fetch_offset=offset, error=str(exc))
            return FetchPartitionData(
                partition_index=partition, error_code=exc.code, error_message=str(exc),
                high_watermark=plog.high_watermark,
                last_stable_offset=_stable_offset(plog, committed),
                log_start_offset=plog.log_start_offset,
            ), 0
        size = len(data)
        if plog.holds_kafka and not replica and not kafka and data:
            try:
                data = kafka_to_msgpack(data)
            except CorruptBatchError as exc:
                log.error("corrupt_batch", topic=topic, partition=partition,
                          fetch_offset=offset, error=str(exc))
                return FetchPartitionData(
                    partition_index=partition, error_code=ErrorCode.CORRUPT_MESSAGE,
                    error_message=str(exc), high_watermark=plog.high_watermark,
                    log_start_offset=plog.log_start_offset), 0
        lso = _stable_offset(plog, committed)
        aborted = [AbortedTransaction(producer_id=pid, first_offset=first)
                   for pid, first in aborted_spans] if committed else None
        return FetchPartitionData(
            partition_index=partition, high_watermark=plog.high_watermark,
            last_stable_offset=lso, log_start_offset=plog.log_start_offset,
            aborted_transactions=aborted, records=data,
        ), size


def _committed(request: FetchRequest) -> bool:
    """A read_committed consumer's fetch (``isolation_level`` 1)."""
    return request.isolation_level == 1


def _stable_offset(plog: PartitionLog, committed: bool) -> int:
    """The last stable offset a fetch is told. A read_committed fetch built the
    producers' state first; a read_uncommitted one does not wait for that build (which
    reads every batch header since the last snapshot) and, until some other request has
    made it, is told the high watermark."""
    if committed or plog.producer_states_built:
        return plog.last_stable_offset
    return plog.high_watermark
