"""The Consumer: aiokafka's shape, Kafka Java's membership (docs/design/kafka.md §15).

A thin facade over the parts that each hold one idea:

* :mod:`~groupwire.client.rebalance` — session checks, lost partitions, joins and their
  listener callbacks, leaving; driven from polls, so callbacks run on the app's loop,
  inside its poll. The JoinGroup/SyncGroup exchange (:mod:`~groupwire.client.joiner`)
  runs as a task and its outcome is applied by a later poll.
* :mod:`~groupwire.client.commits` — commits, their retries and auto-commit.
* :mod:`~groupwire.client.metadata_watch` — the periodic check that asks for a rebalance
  when subscribed metadata changed.
* :mod:`~groupwire.client.fetcher` — positions and one prefetch in flight.
* The heartbeat thread (:mod:`~groupwire.client.heartbeat`) runs its own loop and
  connection, reports poll age, and leaves the group when the app stops polling.

:class:`~groupwire.client.membership.Membership` (pure) is shared by the app's loop and
the heartbeat thread under a lock; both read time from one injected
:data:`~groupwire.client.clock.Clock`. Tasks on the app's loop belong to one
:class:`~groupwire.client.supervisor.TaskSupervisor`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, Self

from groupwire.client.assignors import (
    PartitionAssignor,
    get_assignor,
    rebalance_protocol_for,
)
from groupwire.client.clock import Clock, monotonic_ms
from groupwire.client.cluster import API_VERSION_REQUEST_TIMEOUT_MS
from groupwire.client.commits import Committer
from groupwire.client.errors import (
    BackgroundTaskError,
    BrokerResponseError,
    ClientClosedError,
    GroupwireError,
    IllegalStateError,
    error_for,
)
from groupwire.client.fetcher import EARLIEST, LATEST, READ_COMMITTED, READ_UNCOMMITTED, Fetcher
from groupwire.client.heartbeat import HeartbeatThread
from groupwire.client.joiner import Joiner
from groupwire.client.link import CoordinatorLink
from groupwire.client.listener import RebalanceListener
from groupwire.client.membership import Membership, MemberState
from groupwire.client.metadata_watch import MetadataWatch, MissingTopics
from groupwire.client.rebalance import Rebalancer
from groupwire.client.security import DEFAULT_SASL_MECHANISM, SecurityConfig
from groupwire.client.subscription import SubscriptionState
from groupwire.client.supervisor import TaskSupervisor
from groupwire.client.transactions import ConsumerGroupMetadata
from groupwire.client.types import (
    KeyT,
    OffsetAndMetadata,
    Record,
    TopicPartition,
    ValueT,
    choose_bootstrap,
    is_topic_name,
    parse_bootstrap,
)
from groupwire.protocol.errors import ProtocolError
from groupwire.protocol.messages import FetchGroup

__all__ = ["Consumer"]

log = logging.getLogger("groupwire.consumer")


class Consumer(Generic[KeyT, ValueT]):
    """An async consumer; ``async with Consumer(...) as c:`` starts and closes it.

    Takes aiokafka's ``AIOKafkaConsumer`` arguments under their names
    (docs/how-to/aiokafka.md): ``Consumer("orders", bootstrap_servers="kafka:9092",
    group_id="billing")`` subscribes the group to ``orders``, as does
    ``Consumer("kafka:9092", group_id="billing")`` followed by ``subscribe(["orders"])``.

    Positional arguments are topics, except a first one that contains ``:`` (or is a
    list), which is the bootstrap address, as groupwire has always taken it: no topic
    name holds a ``:``. The address may instead be ``bootstrap=`` or aiokafka's
    ``bootstrap_servers=`` (``"host:port,host:port"`` or a list; a host without a port
    means 9092); one of the three, ``127.0.0.1:9092`` without any, as Producer and
    Admin. Topics given here need a ``group_id`` (aiokafka would read every partition
    without one: ``assign()`` does that here).

    ``key_deserializer`` / ``value_deserializer`` turn each record's key and value bytes
    into the application's values (a None, a record without a key or value, is kept
    None), so records are ``Record[K | None, V | None]``; one that raises stops that
    partition at the record with a :class:`RecordDeserializationError` naming topic,
    partition and offset, raised from the poll once the records before it were returned.

    ``missing_topics``: a subscribed topic that does not exist is logged at warning once
    (naming it and the group) after the subscription's metadata is read; ``"wait"``
    (default) then waits for it to be created, ``"fail"`` raises
    :class:`UnknownTopicOrPartitionError` from every poll (``getmany``, ``getone``,
    ``async for``) while it is missing, as ``groupwire consume`` refuses one.

    ``isolation_level`` (Kafka's): ``"read_uncommitted"`` (the default, as in Kafka) hands
    out every record stored, those of open and aborted transactions included;
    ``"read_committed"`` hands out records below the last stable offset only (no open
    transaction's) and drops those of aborted transactions, so a transactional
    producer's records are seen once its transaction commits, or never. Transaction
    markers are never handed out, at either level, but positions move past them.

    ``clock`` (monotonic milliseconds; default the process's monotonic clock) is the one
    source of time for the consumer and its heartbeat thread: tests pass their own.
    ``security_protocol``, ``ssl_context``, ``sasl_mechanism`` (default
    :data:`~groupwire.client.security.DEFAULT_SASL_MECHANISM`, SCRAM-SHA-256, which a
    broker enables by default), ``sasl_plain_username`` and ``sasl_plain_password`` are
    aiokafka's (or pass one ``security``); refused credentials raise
    :class:`AuthenticationFailedError` from ``start``.
    """

    def __init__(self, *topics: str | Sequence[str], bootstrap: str | Sequence[str] | None = None,
                 bootstrap_servers: str | Sequence[str] | None = None,
                 group_id: str | None = None,
                 key_deserializer: Callable[[bytes], KeyT] | None = None,
                 value_deserializer: Callable[[bytes], ValueT] | None = None,
                 missing_topics: MissingTopics = "wait",
                 client_id: str = "groupwire", group_instance_id: str | None = None,
                 session_timeout_ms: int = 45000, heartbeat_interval_ms: int = 3000,
                 max_poll_interval_ms: int = 300000, rebalance_timeout_ms: int | None = None,
                 partition_assignment_strategy: Iterable[str | PartitionAssignor] = ("range",),
                 enable_auto_commit: bool = True, auto_commit_interval_ms: int = 5000,
                 auto_offset_reset: str = "latest", max_poll_records: int = 500,
                 fetch_max_wait_ms: int = 500, fetch_min_bytes: int = 1,
                 fetch_max_bytes: int = 52428800, max_partition_fetch_bytes: int = 1048576,
                 request_timeout_ms: int = 30000, retry_backoff_ms: int = 100,
                 metadata_max_age_ms: int = 30000, close_timeout_ms: int = 5000,
                 clock: Clock = monotonic_ms, security_protocol: str = "PLAINTEXT",
                 ssl_context: ssl.SSLContext | None = None,
                 sasl_mechanism: str = DEFAULT_SASL_MECHANISM,
                 sasl_plain_username: str | None = None,
                 sasl_plain_password: str | None = None,
                 api_version_request_timeout_ms: int = API_VERSION_REQUEST_TIMEOUT_MS,
                 security: SecurityConfig | None = None,
                 isolation_level: str = READ_UNCOMMITTED) -> None:
        given, subscribe_to = _split_positional(topics)
        if given is not None and bootstrap is not None:
            raise TypeError(f"Consumer() got the bootstrap address twice, positionally "
                            f"({given!r}) and as bootstrap={bootstrap!r}: give one")
        if subscribe_to and group_id is None:
            raise ValueError(f"Consumer({', '.join(map(repr, subscribe_to))}): subscribing "
                             f"to topics needs a group_id; without a group, assign() "
                             f"partitions (aiokafka reads every partition then)")
        self._bootstrap = parse_bootstrap(choose_bootstrap(
            "Consumer", given if given is not None else bootstrap, bootstrap_servers,
            given_as="bootstrap=" if given is None else "the first argument "))
        if heartbeat_interval_ms >= session_timeout_ms:
            raise ValueError("heartbeat_interval_ms must be lower than session_timeout_ms")
        if max_poll_records < 1:
            raise ValueError("max_poll_records must be >= 1")
        # one value for every connection, the heartbeat thread's included
        self._security = security or SecurityConfig.from_options(
            security_protocol=security_protocol, ssl_context=ssl_context,
            sasl_mechanism=sasl_mechanism, sasl_plain_username=sasl_plain_username,
            sasl_plain_password=sasl_plain_password)
        self.group_id = group_id
        self.client_id = client_id
        self.group_instance_id = group_instance_id
        self._clock = clock
        self._session_ms = session_timeout_ms
        self._heartbeat_ms = heartbeat_interval_ms
        self._request_timeout_ms = request_timeout_ms
        self._backoff_ms = retry_backoff_ms
        self._max_poll_records = max_poll_records
        self._close_timeout = close_timeout_ms / 1000
        self._fetch_max_wait_ms = fetch_max_wait_ms
        rebalance_ms = rebalance_timeout_ms or max_poll_interval_ms
        assignors = [get_assignor(a) for a in partition_assignment_strategy]
        protocol = rebalance_protocol_for(assignors)
        self._lock = threading.Lock()
        self._m = Membership(group_instance_id=group_instance_id,
                             max_poll_interval_ms=max_poll_interval_ms, now_ms=clock())
        self._subs = SubscriptionState()
        self._tasks = TaskSupervisor("groupwire-consumer", on_crash=self._wake)
        self._link = CoordinatorLink(
            self._bootstrap, group_id=group_id, client_id=client_id,
            request_timeout_ms=request_timeout_ms, retry_backoff_ms=retry_backoff_ms,
            api_version_request_timeout_ms=api_version_request_timeout_ms,
            security=self._security)
        self._fetcher = Fetcher(
            self._subs, self._link.send, auto_offset_reset=auto_offset_reset,
            fetch_max_wait_ms=fetch_max_wait_ms, fetch_min_bytes=fetch_min_bytes,
            fetch_max_bytes=fetch_max_bytes, max_partition_fetch_bytes=max_partition_fetch_bytes,
            retry_backoff_ms=retry_backoff_ms,
            spawn=lambda coro, name: self._tasks.spawn(coro, name=name),
            router=self._link.cluster, key_deserializer=key_deserializer,
            value_deserializer=value_deserializer, isolation_level=isolation_level)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wakeup: asyncio.Event | None = None
        self._changed: asyncio.Event | None = None
        self._hb: HeartbeatThread | None = None
        self._hb_error: BackgroundTaskError | None = None
        self._started = False
        self._closing = False   # close() running: listeners may still commit
        self._closed = False
        self._joiner = Joiner(
            link=self._link, membership=self._m, lock=self._lock, subs=self._subs,
            group_id=group_id or "", group_instance_id=group_instance_id,
            assignors=assignors, protocol=protocol,
            session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=rebalance_ms,
            request_timeout_ms=request_timeout_ms, retry_backoff_ms=retry_backoff_ms,
            wake_heartbeat=self._wake_heartbeat, is_closed=lambda: self._closed, clock=clock)
        self._commits = Committer(
            group_id=group_id, group_instance_id=group_instance_id, membership=self._m,
            lock=self._lock, subs=self._subs, link=self._link, clock=clock,
            auto_commit=enable_auto_commit and group_id is not None,
            auto_commit_interval_ms=auto_commit_interval_ms,
            request_timeout_ms=request_timeout_ms, retry_backoff_ms=retry_backoff_ms,
            check_open=self._check_open, wake=self._wake)
        self._metadata = MetadataWatch(
            joiner=self._joiner, membership=self._m, lock=self._lock, subs=self._subs,
            clock=clock, max_age_ms=metadata_max_age_ms,
            is_joining=lambda: self._rebalance.joining, cluster=self._link.cluster,
            group_id=group_id, missing_topics=missing_topics,
            retry_backoff_ms=retry_backoff_ms,
            spawn=lambda coro, name: self._tasks.spawn(coro, name=name), wake=self._wake)
        self._rebalance = Rebalancer(
            group_id=group_id, group_instance_id=group_instance_id, membership=self._m,
            lock=self._lock, subs=self._subs, link=self._link, joiner=self._joiner,
            committer=self._commits, protocol=protocol, clock=clock,
            session_timeout_ms=session_timeout_ms, tasks=self._tasks, wake=self._wake,
            on_assigned=self._on_assigned)
        if subscribe_to:
            self.subscribe(subscribe_to)

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        if self._closed:
            raise ClientClosedError("consumer is closed")
        if self._started:
            return
        self._loop = asyncio.get_running_loop()
        self._wakeup = asyncio.Event()
        self._changed = asyncio.Event()
        self._fetcher.on_done = self._wake
        await self._link.connection()
        await self._tasks.start()
        if self.group_id is not None:
            self._hb = HeartbeatThread(
                membership=self._m, lock=self._lock, group_id=self.group_id,
                address=lambda: self._link.coordinator, client_id=self.client_id,
                heartbeat_interval_ms=self._heartbeat_ms, session_timeout_ms=self._session_ms,
                request_timeout_ms=self._request_timeout_ms,
                retry_backoff_ms=self._backoff_ms, notify=self._notify_threadsafe,
                clock=self._clock, bootstrap=self._bootstrap, security=self._security)
            self._hb.start()
        self._commits.start()
        self._metadata.postpone()
        self._started = True

    async def close(self) -> None:
        """Commit (auto-commit), revoke, leave (dynamic members), stop; bounded in time."""
        if self._closed or self._closing:
            return
        self._closing = True
        if not self._started:
            self._closed = True
            return
        try:
            async with asyncio.timeout(self._close_timeout):
                await self._rebalance.close_group(self._stop_heartbeat)
        except TimeoutError:
            log.warning("consumer close: committing and leaving the group did not finish "
                        "within close_timeout_ms=%d; closed without them",
                        self._close_timeout * 1000)
        except (GroupwireError, ProtocolError, OSError) as exc:  # the broker's, the network's
            log.warning("consumer close: %s", str(exc) or repr(exc))
        # anything else (a bug) is raised once the consumer has stopped, as aiokafka raises
        finally:
            self._closed = True
            self._fetcher.cancel()
            leave = self._rebalance.leave_task  # let an unsubscribe's LeaveGroup finish
            await self._tasks.close(self._close_timeout,
                                    keep=[leave] if leave is not None else [])
            await self._stop_heartbeat()
            await self._link.close()
            with self._lock:
                self._m.close()

    async def _stop_heartbeat(self) -> None:
        if self._hb is not None:
            await asyncio.to_thread(self._hb.stop, self._close_timeout)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- subscription ----------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str] | None = None, pattern: str | None = None,
                  listener: RebalanceListener | None = None) -> None:
        if self.group_id is None:
            raise IllegalStateError("subscribe() needs a group_id; use assign() without one")
        if isinstance(topics, str):
            topics = [topics]
        self._subs.subscribe(topics, pattern)
        self._metadata.subscribed()
        self._rebalance.listener = listener
        with self._lock:
            self._m.request_rejoin()
        self._wake()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._subs.assign_manual(TopicPartition(*tp) for tp in partitions)

    def unsubscribe(self) -> None:
        """Stop consuming; a group member revokes its partitions and leaves the group
        (LeaveGroup for dynamic members) in the background, on this loop."""
        owned = self._subs.assigned()
        was_member = self._subs.subscribed and self.group_id is not None
        self._subs.unsubscribe()
        self._metadata.subscribed()
        if not was_member or not self._started:
            return
        self._rebalance.unsubscribe(owned)

    async def wait_for_leave(self, timeout_ms: int | None = None) -> bool:
        """Wait, at most ``timeout_ms`` (default: the close timeout), until the
        revoke-and-leave started by ``unsubscribe()`` has finished; False if it is still
        running (a slow ``on_partitions_revoked``, a broker that does not answer), which
        ``close()`` then bounds in turn. True at once when none is pending."""
        task = self._rebalance.leave_task
        if task is None:
            return True
        timeout = self._close_timeout if timeout_ms is None else timeout_ms / 1000
        done, _ = await asyncio.wait({task}, timeout=timeout)
        return bool(done)

    def assignment(self) -> set[TopicPartition]:
        return self._subs.assigned()

    def subscription(self) -> frozenset[str]:
        return self._subs.topics

    @property
    def member_id(self) -> str:
        return self._m.member_id

    @property
    def generation_id(self) -> int:
        return self._m.generation_id

    @property
    def isolation_level(self) -> str:
        """``"read_uncommitted"`` or ``"read_committed"``, as given."""
        return self._fetcher.isolation_level

    def group_metadata(self) -> ConsumerGroupMetadata:
        """This consumer's group id, generation, member id and instance id now (Kafka's
        ``groupMetadata()``), for ``Producer.send_offsets_to_transaction``: the group
        coordinator then refuses the transaction's offsets if this member has left the
        generation meanwhile (a zombie, KIP-447). Needs a ``group_id``."""
        if self.group_id is None:
            raise IllegalStateError("group_metadata() needs a group_id")
        with self._lock:
            return ConsumerGroupMetadata(self.group_id, self._m.generation_id,
                                         self._m.member_id, self.group_instance_id)

    # --- positions ---------------------------------------------------------------------

    def seek(self, tp: TopicPartition, offset: int) -> None:
        if offset < 0:
            raise ValueError("offset must be >= 0")
        self._subs.state(tp).seek(offset)

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        await self._seek_to(partitions, EARLIEST)

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        await self._seek_to(partitions, LATEST)

    async def _seek_to(self, partitions: tuple[TopicPartition, ...], ts: int) -> None:
        tps = list(partitions) or list(self._subs.partitions)
        for tp in tps:
            self._subs.state(tp)
        offsets = await self._fetcher.list_offsets(tps, ts)
        for tp, off in offsets.items():
            if tp in self._subs.partitions and off >= 0:
                self._subs.partitions[tp].seek(off)

    async def position(self, tp: TopicPartition) -> int:
        st = self._subs.state(tp)
        if st.position is None or st.reset_needed:
            await self._fetcher.update_positions(self.group_id)
        if st.position is None:
            raise IllegalStateError(f"no position for {tp}")
        return st.position

    async def committed(self, tp: TopicPartition) -> OffsetAndMetadata | None:
        if self.group_id is None:
            raise IllegalStateError("committed() needs a group_id")
        got = await self._fetcher.fetch_committed(self.group_id, [tp])
        off = got.get(tp, -1)
        return OffsetAndMetadata(off) if off >= 0 else None

    def highwater(self, tp: TopicPartition) -> int | None:
        return self._subs.state(tp).highwater

    def last_stable_offset(self, tp: TopicPartition) -> int | None:
        """The offset below which no transaction is open, as the latest Fetch answer gave
        it (the high watermark from a broker that sends none)."""
        st = self._subs.state(tp)
        return self._fetcher.last_stable.get(tp, st.highwater)

    def lag(self, tp: TopicPartition) -> int | None:
        """Records between the position and the end a poll can reach: the high
        watermark, or under read_committed the last stable offset (as Kafka counts it)."""
        st = self._subs.state(tp)
        end = (self.last_stable_offset(tp) if self._fetcher.isolation_level == READ_COMMITTED
               else st.highwater)
        if end is None or st.position is None:
            return None
        return max(0, end - st.position)

    def pause(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._subs.state(tp).paused = True

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._subs.state(tp).paused = False
        self._wake()

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, st in self._subs.partitions.items() if st.paused}

    # --- polling ---------------------------------------------------------------------------

    async def getmany(self, *partitions: TopicPartition, timeout_ms: int = 0,
                      max_records: int | None = None,
                      ) -> dict[TopicPartition, list[Record[KeyT | None, ValueT | None]]]:
        """Records by partition, waiting up to ``timeout_ms`` for some (a poll).

        A record that cannot be read raises :class:`CorruptRecordError` (partition and
        offset) once the records before it have been returned, at every poll until a
        ``seek`` moves that partition on (``seek(err.topic_partition, err.offset + 1)``);
        so does one a deserializer raised for, with :class:`RecordDeserializationError`.
        With ``missing_topics="fail"``, a subscribed topic that does not exist raises
        :class:`UnknownTopicOrPartitionError`.
        A fetch failure no retry mends (an answer that cannot be decoded, an error code
        that is not retriable) is raised once, as aiokafka raises its fetcher's errors;
        lost connections and retriable codes are retried in the background.
        """
        self._check_open()
        with self._lock:
            self._m.poll_started(self._clock())
        try:
            return await self._poll(timeout_ms, max_records or self._max_poll_records,
                                    set(partitions))
        finally:
            with self._lock:
                self._m.poll_ended(self._clock())

    async def getone(self, *partitions: TopicPartition) -> Record[KeyT | None, ValueT | None]:
        while True:
            got = await self.getmany(*partitions, timeout_ms=self._fetch_max_wait_ms,
                                     max_records=1)
            for records in got.values():
                return records[0]

    def __aiter__(self) -> AsyncIterator[Record[KeyT | None, ValueT | None]]:
        return self

    async def __anext__(self) -> Record[KeyT | None, ValueT | None]:
        if self._closed or self._closing:
            raise StopAsyncIteration
        try:
            return await self.getone()
        except ClientClosedError:
            raise StopAsyncIteration from None

    async def _poll(self, timeout_ms: int, max_records: int, only: set[TopicPartition],
                    ) -> dict[TopicPartition, list[Record[Any, Any]]]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        assert self._wakeup is not None
        while True:
            self._wakeup.clear()
            self._raise_pending()
            await self._coordinator_poll()
            self._raise_pending()
            self._metadata.poll()
            if self._subs.missing_positions():
                await self._fetcher.update_positions(self.group_id)
            failure = self._fetcher.take_error()
            if failure is not None:
                raise failure
            bad = self._fetcher.record_error(only)
            if bad is not None:
                raise bad
            records = self._drain(max_records, only)
            self._fetcher.maybe_fetch(self._fetch_group())
            if records:
                return records
            remaining = deadline - loop.time()
            if remaining <= 0 or self._closed:
                return {}
            if not self._wakeup.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):
                        await self._wakeup.wait()

    def _drain(self, max_records: int, only: set[TopicPartition],
               ) -> dict[TopicPartition, list[Record[Any, Any]]]:
        if not only:
            return self._fetcher.drain(max_records)
        paused = [tp for tp in self._subs.partitions if tp not in only
                  and not self._subs.partitions[tp].paused]
        for tp in paused:
            self._subs.partitions[tp].paused = True
        try:
            return self._fetcher.drain(max_records)
        finally:
            for tp in paused:
                if tp in self._subs.partitions:
                    self._subs.partitions[tp].paused = False

    def _fetch_group(self) -> FetchGroup | None:
        if self.group_id is None or self._subs.manual:
            return None
        with self._lock:
            return FetchGroup(group_id=self.group_id, member_id=self._m.member_id,
                              generation_id=self._m.generation_id,
                              group_instance_id=self.group_instance_id)

    def _raise_pending(self) -> None:
        if self._closed or self._closing:
            raise ClientClosedError("consumer is closed")
        if self._tasks.error is not None:
            raise self._tasks.error
        self._check_heartbeat_thread()
        err = self._rebalance.take_listener_error()
        if err is not None:
            raise err
        if self._m.fatal_code is not None:
            raise error_for(self._m.fatal_code, "this member was fenced or cannot join",
                            group_id=self.group_id)

    def _check_heartbeat_thread(self) -> None:
        if self._hb_error is None and self._hb is not None and isinstance(
                self._hb.error, BrokerResponseError):
            raise self._hb.error  # the broker refused its credentials or ACLs: as it said
        if self._hb_error is None and self._hb is not None and self._hb.error is not None:
            err = BackgroundTaskError(f"the heartbeat thread crashed: {self._hb.error!r}")
            err.__cause__ = self._hb.error
            self._hb_error = err
        if self._hb_error is not None:
            raise self._hb_error

    async def _coordinator_poll(self) -> None:
        """Membership first (lost, joins, assignments), then commits and metadata."""
        if self.group_id is None or not self._subs.subscribed:
            await self._commits.maybe_autocommit()
            return
        if await self._rebalance.poll():
            return  # a join started
        await self._commits.maybe_autocommit()
        await self._metadata.maybe_check()

    def _on_assigned(self) -> None:
        self._metadata.postpone()
        self._wake_heartbeat()

    # --- commits -----------------------------------------------------------------------

    async def commit(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata]
                     | None = None) -> None:
        """Commit ``offsets`` (default: positions of every assigned partition)."""
        await self._commits.commit(offsets)

    # --- observability -----------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        now = self._clock()
        with self._lock:
            m = self._m
            if self._closed:
                state = "closed"
            elif m.state == MemberState.STABLE and not m.rejoin_needed:
                state = "stable"
            elif m.lost_pending or m.state == MemberState.FATAL:
                state = "lost"
            else:
                state = "rebalancing"
            last_hb = m.last_heartbeat_answer_ms
            return {
                "state": state, "member_state": m.state.value,
                "generation_id": m.generation_id, "member_id": m.member_id,
                "assignment": sorted(self._subs.assigned()),
                "ms_since_heartbeat_answer": None if last_hb is None else now - last_hb,
                "ms_since_poll": m.poll_age_ms(now),
            }

    def metrics(self) -> dict[str, Any]:
        lag = {tp: self.lag(tp) for tp in self._subs.partitions}
        return {"lag": lag, "rebalance_count": self._m.rebalance_count,
                "last_rebalance_duration_ms": self._m.last_rebalance_duration_ms,
                "poll_expired_count": self._m.poll_expired_count}

    async def wait_for_change(self) -> None:
        """Wait until the heartbeat thread reports a membership change (a rebalance, the
        member removed or its poll interval expired); ``health()`` then shows it."""
        if self._changed is None:
            raise IllegalStateError("call start() (or use `async with`) first")
        self._changed.clear()
        await self._changed.wait()

    # --- wiring ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("consumer is closed")
        if not self._started:
            raise IllegalStateError("call start() (or use `async with`) first")

    def _wake_heartbeat(self) -> None:
        if self._hb is not None:
            self._hb.wake()

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    def _notify_threadsafe(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._on_notify)

    def _on_notify(self) -> None:
        self._wake()
        if self._changed is not None:
            self._changed.set()


def _split_positional(args: tuple[str | Sequence[str], ...],
                      ) -> tuple[str | Sequence[str] | None, list[str]]:
    """``Consumer(*args)``: (the bootstrap address given first, or None; the topics).

    A first argument with a ``:`` (or a list) is the bootstrap, as before aiokafka's
    ``*topics`` were taken: topic names hold no ``:``, so nothing else reads so."""
    bootstrap: str | Sequence[str] | None = None
    topics: list[str] = []
    for i, arg in enumerate(args):
        if i == 0 and (not isinstance(arg, str) or ":" in arg):
            bootstrap = arg
            continue
        if not isinstance(arg, str):
            raise TypeError(f"Consumer(): topics are strings, got {arg!r} (a list of "
                            f"bootstrap addresses comes first, or as bootstrap_servers=)")
        if is_topic_name(arg):
            if arg not in topics:
                topics.append(arg)
        elif ":" in arg:
            raise ValueError(f"Consumer(): {arg!r} is not a topic name (those hold no ':'); "
                             f"a bootstrap address comes first, or as bootstrap_servers=")
        else:
            raise ValueError(f"Consumer(): {arg!r} is neither a topic name (1 to 249 "
                             f"letters, digits, '.', '_' or '-') nor a bootstrap HOST:PORT")
    return bootstrap, topics
