"""The group coordinator's runtime shell: does what the pure coordinator decided.

The coordinator (``broker.coordinator``) returns results: timers to arm, events to
emit, records to write, replies to send. This module carries them out in the order
"write, make durable (in a cluster, replicated), then answer", keeps the one loop timer
that wakes the coordinator, and reads the clocks it is told the time by.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any, Final

import msgpack

from groupwire.broker.clustering.node import ClusterNode
from groupwire.broker.coordinator import (
    CancelTimer,
    Coordinator,
    Reply,
    Result,
    SetTimer,
    TimerQueue,
)
from groupwire.broker.coordinator.events import GroupEvent
from groupwire.broker.durability import Durability
from groupwire.broker.fetch import FetchManager
from groupwire.broker.host import Peer
from groupwire.broker.logs import get_logger
from groupwire.broker.metrics import BrokerMetrics
from groupwire.broker.offsets_log import OFFSETS_TOPIC, OffsetsLog, PreparedWrite
from groupwire.broker.pacing import finish_in_slices
from groupwire.broker.storage import TopicStore
from groupwire.broker.storage.errors import StorageError
from groupwire.broker.topic_apis import TopicApis
from groupwire.protocol.errors import ErrorCode

log = get_logger("groupwire.broker")

EVENTS_TOPIC = "__group_events"

GROUP_WRITE_TIMEOUT_MS: Final = 5000
"""How long a group write waits for its ISR (Kafka's offsets.commit.timeout.ms)."""


class GroupRuntime:
    """Executes coordinator results; built once the services it writes through exist."""

    def __init__(self, coordinator: Coordinator, *, offsets_log: OffsetsLog,
                 store: TopicStore, durability: Durability, fetches: FetchManager,
                 topics: TopicApis, cluster: ClusterNode | None, metrics: BrokerMetrics,
                 connection: Callable[[int], Peer | None],
                 spawn: Callable[[Coroutine[Any, Any, None]], None],
                 clock: Callable[[], int], monotonic: Callable[[], int], slice_s: float,
                 closing: Callable[[], bool]) -> None:
        """``connection``: an open connection by id (replies to closed ones are
        dropped); ``spawn``: runs a task awaited at close (``RequestRunner.spawn``);
        ``clock``: the wall clock, for timestamps; ``monotonic``: the clock of deadlines;
        ``closing``: whether the broker is closing (no new background work then)."""
        self.coordinator = coordinator
        self.offsets_log = offsets_log
        self._store = store
        self._durability = durability
        self._fetches = fetches
        self._topics = topics
        self._cluster = cluster
        self._metrics = metrics
        self._connection = connection
        self._spawn = spawn
        self._clock = clock
        self._monotonic = monotonic
        self._slice_s = slice_s
        self._closing = closing
        self._timers = TimerQueue()
        self._timer_handle: asyncio.TimerHandle | None = None
        self._timer_deadline: int | None = None
        self.compactions: dict[int, asyncio.Task[None]] = {}
        """``__consumer_offsets`` partitions being compacted: abandoned at close."""

    def now(self) -> int:
        """The time of a coordinator input (``monotonic``); the coordinator is told the
        wall clock beside it, for the timestamps users read."""
        now = self._monotonic()
        self.coordinator.set_wall_clock(self._clock(), now)
        return now

    async def close(self) -> None:
        """Abandon compactions (the log stays correct with half a snapshot, OffsetsLog)."""
        for task in list(self.compactions.values()):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def stop_timer(self) -> None:
        if self._timer_handle is not None:
            self._timer_handle.cancel()

    # --- executing coordinator results --------------------------------------------------

    def execute(self, result: Result, prepared: PreparedWrite | None = None,
                collect: Callable[[Reply], bool] | None = None,
                on_settled: Callable[[ErrorCode | None], None] | None = None) -> None:
        """Do what the coordinator decided: arm timers, emit events, persist, answer.

        A result with a write (``result.write``) has its records written (``prepared``:
        records already encoded, a large OffsetCommit's, written after them); once they
        are durable, and in a cluster in the ISR, the coordinator is told the outcome
        (``stored``, or ``failed`` with Kafka's code for it), and the result of that,
        which carries the replies it held, is executed in turn. ``collect`` sees each
        reply first and takes those it returns True for (a sliced DeleteGroups gathers
        its chunks' answers); the others are sent. ``on_settled`` hears the write's
        outcome after that (None: stored; at once if the result writes nothing): a
        transaction's offsets marker waits for it.
        """
        if result.timers:
            self._apply_timers(result.timers)
        if result.events:
            self._emit(result.events)
        token = result.write
        if token is not None:
            failed, ends = self._persist(result, prepared)
            coordinator = self.coordinator

            def settled(failure: ErrorCode | None) -> None:
                now = self.now()
                self.execute(coordinator.stored(token, now) if failure is None
                             else coordinator.failed(token, failure, now), collect=collect)
                if on_settled is not None:
                    on_settled(failure)

            def written(err: StorageError | None) -> None:
                if failed or err is not None:
                    settled(ErrorCode.KAFKA_STORAGE_ERROR)
                elif self._cluster is not None and ends:
                    # Settled once the ISR has the records: a commit outlives its
                    # coordinator (the offsets topic is written with acks=all).
                    self._spawn(self._group_writes_replicated(self._cluster, ends, settled))
                else:
                    settled(None)

            self._durability.after_write(written)
            return
        if result.replies:
            self._send_replies(result.replies, collect)
        if on_settled is not None:
            on_settled(None)

    async def _group_writes_replicated(self, cluster: ClusterNode, ends: dict[int, int],
                                       settled: Callable[[ErrorCode | None], None]) -> None:
        """Wait for the offsets partitions written to be replicated up to ``ends``, then
        settle the replies: Kafka's mapping of a failed offsets append, NOT_COORDINATOR
        if this broker stopped leading, COORDINATOR_NOT_AVAILABLE otherwise."""
        leaders = cluster.leaders
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
        offsets_log = self.offsets_log
        try:
            partitions = (offsets_log.write(result.records, self._clock())
                          if result.records else [])
            if prepared is not None:
                partitions.append(offsets_log.write_prepared(prepared))
        except StorageError as exc:
            self._metrics.storage_errors.inc()
            count = len(result.records) + (
                prepared.header.record_count if prepared is not None else 0)
            log.error("group_records_not_written", error=str(exc), records=count)
            return True, {}
        ends = {}
        for p in partitions:
            ends[p] = self._store.log(OFFSETS_TOPIC, p).log_end_offset
            self._fetches.appended(OFFSETS_TOPIC, p)
            if self._cluster is not None:
                self._cluster.leaders.appended((OFFSETS_TOPIC, p))
            if p not in self.compactions and offsets_log.needs_compaction(p):
                self._compact(p)
        return False, ends

    def _compact(self, partition: int) -> None:
        """Compact a ``__consumer_offsets`` partition in the background, a snapshot batch
        a step (``OffsetsLog.compact_steps``); one at a time per partition."""
        durability = self._durability
        if self._closing():
            return
        def dropped(drop: Callable[[], None]) -> None:
            def written(err: StorageError | None) -> None:
                if err is None:
                    drop()
                    self._purge_soon()
            durability.after_write(written)

        steps = self.offsets_log.compact_steps(partition, dropped)

        async def run() -> None:
            try:
                await finish_in_slices(steps, self._slice_s)
            except Exception:
                log.exception("compaction_failed", partition=partition)
            finally:
                steps.close()
                self.compactions.pop(partition, None)

        self.compactions[partition] = asyncio.get_running_loop().create_task(run())

    def _purge_soon(self) -> None:
        """Remove the files of segments just dropped, now and off the loop: until then a
        crash would load them again at the next start."""
        if not self._closing():
            self._spawn(self._topics.purge())

    def _send_replies(self, replies: tuple[Reply, ...],
                      collect: Callable[[Reply], bool] | None = None) -> None:
        for reply in replies:
            if collect is not None and collect(reply):
                continue
            conn = self._connection(reply.conn_id)
            if conn is None:
                continue
            conn.reply(reply.correlation_id, reply.response)

    def _emit(self, events: tuple[GroupEvent, ...]) -> None:
        items = []
        for event in events:
            value = event.to_value()
            log.info("group_event", **{k: v for k, v in value.items() if v is not None})
            self._count_event(event)
            items.append((event.group_id.encode(), msgpack.packb(value, use_bin_type=True),
                          event.ts_ms))
        if self._cluster is not None and self._cluster.events is not None:
            self._cluster.events.submit(items)
            return
        self.append_events(items)

    def append_events(self, items: list[tuple[bytes, bytes, int]]) -> bool:
        """Append group events to this broker's ``__group_events`` (in a cluster, only
        while it leads that partition); False if they could not be written."""
        try:
            self._store.append_kv(EVENTS_TOPIC, 0, items)
        except StorageError as exc:
            log.error("group_events_not_written", error=str(exc), events=len(items))
            return False
        self._fetches.appended(EVENTS_TOPIC, 0)
        if self._cluster is not None:
            self._cluster.leaders.appended((EVENTS_TOPIC, 0))
        return True

    def _count_event(self, event: GroupEvent) -> None:
        m = self._metrics
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
        now = self.now()
        if armed_for is not None and armed_for > now:
            now = armed_for
        for key in self._timers.pop_due(now):
            self.execute(self.coordinator.expire(key, now))
        self._wake_at(self._timers.next_deadline())
