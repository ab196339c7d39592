"""The asyncio Producer: the sender around a pure record accumulator.

``send`` only appends to a per-partition batch of the
:class:`~groupwire.client.accumulator.Accumulator` (which decides batching, lingering and
the sticky partition) and returns a future; one sender task drains every ready batch into
one Produce per partition leader (sent concurrently), resolves the futures from the
answers, and puts batches that met a retriable error back at the head of their
partition's queue; an answer saying the leader moved also marks the metadata stale, so
the retry goes to the new leader. A partition has one request in flight at a time, so
retries never reorder its records.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from groupwire.client.accumulator import Accumulator, Batch, record_size
from groupwire.client.cluster import (
    API_VERSION_REQUEST_TIMEOUT_MS,
    STALE_METADATA_ERRORS,
    Cluster,
    backoff_s,
)
from groupwire.client.errors import (
    BrokerNotAvailableError,
    BrokerResponseError,
    ClientClosedError,
    ConnectionClosedError,
    GroupwireError,
    IllegalStateError,
    LeaderNotAvailableError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
    error_for,
)
from groupwire.client.security import DEFAULT_SASL_MECHANISM, SecurityConfig
from groupwire.client.supervisor import cancel_and_wait
from groupwire.client.types import RecordMetadata, TopicPartition, choose_bootstrap
from groupwire.protocol.batches import BatchRecord, encode_batch
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.hashing import partition_for_key
from groupwire.protocol.messages import (
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)

Headers = list[tuple[str, bytes | None]]
Serializer = Callable[[Any], bytes | None]

_FRAME_HEADROOM = 65536
DELIVERY_TIMEOUT_MS: Final = 120000
"""Kafka's ``delivery.timeout.ms`` default: how long a record may take, retries included."""

UNKNOWN_TOPIC_ATTEMPTS: Final = 3
"""Metadata requests answered UNKNOWN_TOPIC_OR_PARTITION before ``send`` gives up."""

_Batch = Batch["asyncio.Future[RecordMetadata]"]


class Producer:
    """Publishes records; an async context manager (``close`` flushes).

    ``acks``: ``"all"`` (or -1, the default) waits for every in-sync replica, 1 for the
    leader alone (a single broker answers both once stored); 0 is refused, as every
    groupwire request is answered.

    ``request_timeout_ms`` bounds one attempt; ``delivery_timeout_ms`` (Kafka's, default
    120 s or one attempt plus the linger if that is longer) bounds a record's retries, so
    a leader that stalls without closing its connections costs one attempt, after which
    the record goes to whoever leads then.

    ``bootstrap`` (positional or keyword) or aiokafka's ``bootstrap_servers`` (one of
    them; ``"host:port,host:port"`` or a list, a host without a port meaning 9092)
    defaults to ``127.0.0.1:9092``. ``key_serializer`` / ``value_serializer`` are
    aiokafka's too, called with every key and value given (None included).

    ``security_protocol``, ``ssl_context``, ``sasl_mechanism`` (default SCRAM-SHA-256,
    :data:`~groupwire.client.security.DEFAULT_SASL_MECHANISM`), ``sasl_plain_username``
    and ``sasl_plain_password`` are aiokafka's (or pass one ``security``). A topic the
    broker's ACLs do not let this client write fails its sends with
    :class:`TopicAuthorizationFailedError`, never retried.
    """

    def __init__(self, bootstrap: str | Sequence[str] | None = None, *,
                 bootstrap_servers: str | Sequence[str] | None = None,
                 client_id: str = "groupwire-producer", acks: int | str = "all",
                 linger_ms: int = 5, max_batch_bytes: int = 1048576,
                 max_buffer_bytes: int = 33554432, request_timeout_ms: int = 30000,
                 delivery_timeout_ms: int | None = None,
                 retry_backoff_ms: int = 100, retry_backoff_max_ms: int = 1000,
                 allow_auto_create_topics: bool = True, metadata_max_age_ms: int = 300000,
                 key_serializer: Serializer | None = None,
                 value_serializer: Serializer | None = None,
                 security_protocol: str = "PLAINTEXT", ssl_context: ssl.SSLContext | None = None,
                 sasl_mechanism: str = DEFAULT_SASL_MECHANISM,
                 sasl_plain_username: str | None = None,
                 sasl_plain_password: str | None = None,
                 api_version_request_timeout_ms: int = API_VERSION_REQUEST_TIMEOUT_MS,
                 security: SecurityConfig | None = None) -> None:
        if acks == 0 and not isinstance(acks, bool):
            raise ValueError("acks=0 is not supported: the broker answers every Produce; "
                             "use acks=1 (leader) or 'all' (every in-sync replica)")
        if isinstance(acks, bool) or acks not in (1, -1, "all"):
            raise ValueError(f"acks must be 1, -1 or 'all', got {acks!r}")
        if linger_ms < 0 or max_batch_bytes <= 0 or request_timeout_ms <= 0:
            raise ValueError("linger_ms >= 0, max_batch_bytes > 0, request_timeout_ms > 0")
        if delivery_timeout_ms is None:
            delivery_timeout_ms = max(DELIVERY_TIMEOUT_MS, request_timeout_ms + linger_ms)
        if delivery_timeout_ms < request_timeout_ms + linger_ms:
            raise ValueError(
                f"delivery_timeout_ms ({delivery_timeout_ms}) must be at least "
                f"request_timeout_ms + linger_ms ({request_timeout_ms + linger_ms}), as in "
                f"Kafka: a send needs time for at least one whole attempt")
        self.acks = -1 if acks == "all" else int(acks)
        """As sent in each Produce: 1 or -1 (``"all"``)."""
        self.linger_ms = linger_ms
        self.max_batch_bytes = max_batch_bytes
        self.max_buffer_bytes = max(max_buffer_bytes, max_batch_bytes)
        self.request_timeout_ms = request_timeout_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.allow_auto_create_topics = allow_auto_create_topics
        self.metadata_max_age_ms = metadata_max_age_ms
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self._cluster = Cluster(choose_bootstrap("Producer", bootstrap, bootstrap_servers),
                                client_id=client_id,
                                request_timeout_ms=request_timeout_ms,
                                retry_backoff_ms=retry_backoff_ms,
                                retry_backoff_max_ms=retry_backoff_max_ms,
                                api_version_request_timeout_ms=api_version_request_timeout_ms,
                                security=security or SecurityConfig.from_options(
                                    security_protocol=security_protocol,
                                    ssl_context=ssl_context, sasl_mechanism=sasl_mechanism,
                                    sasl_plain_username=sasl_plain_username,
                                    sasl_plain_password=sasl_plain_password))
        self._acc: Accumulator[asyncio.Future[RecordMetadata]] = Accumulator(
            max_batch_bytes=max_batch_bytes, max_buffer_bytes=max_buffer_bytes,
            linger=linger_ms / 1000)
        self._partitions = self._acc.partition_counts
        self._partitions_at: dict[str, float] = {}  # loop time of each topic's metadata
        self._in_flight: list[_Batch] = []
        self._space: asyncio.Event | None = None
        self._wakeup: asyncio.Event | None = None
        self._sender: asyncio.Task[None] | None = None
        self._flushing = 0
        self._started = False
        self._closing = False
        self._closed = False

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect (ApiVersions checked) and start the sender task."""
        if self._closed:
            raise ClientClosedError("the producer is closed")
        if self._started:
            return
        await self._cluster.connection()
        self._wakeup = asyncio.Event()
        self._space = asyncio.Event()
        self._space.set()
        self._sender = asyncio.get_running_loop().create_task(self._run_sender(),
                                                              name="groupwire-producer")
        self._started = True

    async def close(self) -> None:
        """Flush what was sent, stop the sender, close the connection. Idempotent.

        The flush is bounded by ``request_timeout_ms``: records still unsettled then (a
        broker gone or paused) fail with ClientClosedError rather than holding close up.
        """
        if self._closed:
            return
        self._closing = True
        try:
            if self._started:
                flushing = asyncio.ensure_future(self.flush())
                try:
                    await asyncio.wait({flushing}, timeout=self.request_timeout_ms / 1000)
                finally:
                    await cancel_and_wait([flushing], self.request_timeout_ms / 1000)
        finally:
            self._closed = True
            if self._sender is not None:
                self._wake()
                await cancel_and_wait([self._sender], self.request_timeout_ms / 1000)
            self._fail_all(ClientClosedError("the producer was closed"))
            await self._cluster.close()

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- sending --------------------------------------------------------------------------

    async def send(self, topic: str, value: Any = None, key: Any = None,
                   partition: int | None = None, headers: Headers | None = None,
                   timestamp_ms: int | None = None) -> asyncio.Future[RecordMetadata]:
        """Queue one record; the returned future resolves to where it landed.

        Waits only for the topic's metadata (raises if the topic stays unknown for the
        request timeout) and for buffer space when ``max_buffer_bytes`` are queued.
        """
        if self._closing or self._closed or not self._started:
            self._check_usable()
        kb = self._key_serializer(key) if self._key_serializer else key
        vb = self._value_serializer(value) if self._value_serializer else value
        if kb is not None and type(kb) is not bytes:
            kb = _as_bytes("key", kb)
        if vb is not None and type(vb) is not bytes:
            vb = _as_bytes("value", vb)
        count = self._fresh_count(topic)
        if count is None:
            count = await self._partition_count(topic)
        sticky = partition is None and kb is None
        if partition is None:
            partition = (partition_for_key(kb, count) if kb is not None
                         else self._acc.sticky_partition(topic, count))
        elif not 0 <= partition < count:
            count = await self._partition_count(topic, refresh=True)
            if not 0 <= partition < count:
                raise UnknownTopicOrPartitionError(
                    f"{topic!r} has {count} partitions, no partition {partition}")
        if headers:
            hdrs = list(headers)
            for h, hv in hdrs:
                if not isinstance(h, str) or not (hv is None or isinstance(hv, bytes)):
                    raise TypeError("headers must be (str, bytes | None) pairs")
        else:
            hdrs = []
        size = record_size(kb, vb, hdrs)
        if self._space is not None and not self._space.is_set():
            await self._wait_for_space()
            self._check_usable()
        ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        future: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        self._append(TopicPartition(topic, partition), BatchRecord(vb, kb, hdrs, ts), size,
                     future, sticky=sticky)
        return future

    async def send_and_wait(self, topic: str, value: Any = None, key: Any = None,
                            partition: int | None = None, headers: Headers | None = None,
                            timestamp_ms: int | None = None) -> RecordMetadata:
        """``send`` and wait for the broker's acknowledgement."""
        future = await self.send(topic, value, key, partition, headers, timestamp_ms)
        return await future

    async def flush(self) -> None:
        """Send everything queued now, at once, and wait until each record is settled."""
        if not self._started:
            return
        # one future per batch, not per record: waiting on each record's future costs
        # a callback per record
        loop = asyncio.get_running_loop()
        pending: list[asyncio.Future[None]] = []
        for batch in [*self._acc.queued(), *self._in_flight]:
            if batch.done:
                continue
            if batch.settled is None:
                batch.settled = loop.create_future()
            assert isinstance(batch.settled, asyncio.Future)
            pending.append(batch.settled)
        if not pending:
            return
        self._flushing += 1
        self._wake()
        try:
            await asyncio.wait(pending)
        finally:
            self._flushing -= 1

    @property
    def cluster(self) -> Cluster:
        """The connection shell this producer sends through (connecting, retries,
        metadata): read-only, for tools and tests that look underneath."""
        return self._cluster

    async def partitions_for(self, topic: str) -> set[int]:
        """The topic's partitions (metadata fetched if not known yet)."""
        return set(range(await self._partition_count(topic)))

    # --- internals: accumulating ----------------------------------------------------------

    def _check_usable(self) -> None:
        if self._closing or self._closed:
            raise ClientClosedError("the producer is closed")
        if not self._started:
            raise IllegalStateError("start() the producer before sending")

    def _fresh_count(self, topic: str) -> int | None:
        """The cached partition count while younger than metadata_max_age_ms: the common
        case of ``send`` answered without a coroutine."""
        count = self._partitions.get(topic)
        if count is not None and (asyncio.get_running_loop().time() - self._partitions_at[topic]
                                  < self.metadata_max_age_ms / 1000):
            return count
        return None

    async def _partition_count(self, topic: str, *, refresh: bool = False) -> int:
        loop = asyncio.get_running_loop()
        if not refresh and (count := self._fresh_count(topic)) is not None:
            return count
        deadline = loop.time() + self.request_timeout_ms / 1000
        attempt = 0
        while True:
            md = await self._cluster.metadata(
                [topic], allow_auto_topic_creation=self.allow_auto_create_topics)
            count = md.partitions_for(topic)
            if count:
                self._partitions[topic] = count
                self._partitions_at[topic] = loop.time()
                return count
            code = md.errors.get(topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            unknown = code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            err = error_for(code, f"topic {topic!r} does not exist" if unknown
                            else f"topic {topic!r}", topic=topic)
            delay = backoff_s(attempt, self._cluster.retry_backoff_ms,
                              self._cluster.retry_backoff_max_ms)
            # an unknown topic is asked about a few times (it may be being created), not
            # for the whole request timeout
            if (not err.retriable or loop.time() + delay >= deadline
                    or (unknown and attempt + 1 >= UNKNOWN_TOPIC_ATTEMPTS)):
                raise err
            attempt += 1
            await asyncio.sleep(delay)

    def _append(self, tp: TopicPartition, record: BatchRecord, size: int,
                future: asyncio.Future[RecordMetadata], *, sticky: bool) -> None:
        _, changed = self._acc.append(tp, record, size, future, sticky=sticky,
                                      now=asyncio.get_running_loop().time())
        if changed:
            self._wake()
        if self._acc.full and self._space is not None:
            self._space.clear()

    async def _wait_for_space(self) -> None:
        space = self._space
        while space is not None and not space.is_set():
            await space.wait()
            self._check_usable()

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    # --- internals: the sender ------------------------------------------------------------

    async def _run_sender(self) -> None:
        assert self._wakeup is not None
        loop = asyncio.get_running_loop()
        while not self._closed:
            ready, next_at = self._ready_batches(loop.time())
            if ready:
                try:
                    await self._send_round(ready)
                except Exception as exc:  # a bug must fail the records, not hang them
                    for batch in ready:
                        self._complete(batch, exc)
                continue
            self._wakeup.clear()
            timeout = None if next_at is None else max(next_at - loop.time(), 0.0)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wakeup.wait()

    def _ready_batches(self, now: float) -> tuple[list[_Batch], float | None]:
        """The head batch of every partition that may go now, and when the next may."""
        limit = max(self._cluster.max_frame_bytes - _FRAME_HEADROOM, 1)
        return self._acc.ready(now, limit=limit,
                               flushing=bool(self._flushing) or self._closing)

    async def _send_round(self, batches: list[_Batch]) -> None:
        """Every ready batch, one Produce per leader, the leaders' requests at once."""
        loop = asyncio.get_running_loop()
        self._acc.take(batches, loop.time(), self.delivery_timeout_ms / 1000)
        self._in_flight = batches
        try:
            by_node = await self._route(batches)
            await asyncio.gather(*(self._send_to_leader(node, group)
                                   for node, group in by_node.items()))
        finally:
            self._in_flight = []

    async def _route(self, batches: list[_Batch]) -> dict[int, list[_Batch]]:
        """Batches by their partition's leader; those without one are put back (retried
        once fresh metadata names it)."""
        cluster = self._cluster
        try:
            await cluster.ensure_leaders({b.tp.topic for b in batches})
        except (GroupwireError, ConnectionError) as exc:
            for batch in batches:
                self._retry_or_fail(batch, exc, retriable=_retriable(exc))
            return {}
        by_node: dict[int, list[_Batch]] = {}
        for batch in batches:
            leader = cluster.leader(batch.tp)
            if leader is None:
                cluster.mark_stale()
                self._retry_or_fail(batch, LeaderNotAvailableError(
                    f"{batch.tp.topic}[{batch.tp.partition}]: no leader known"),
                    retriable=True)
                continue
            by_node.setdefault(leader.node_id, []).append(batch)
        return by_node

    async def _send_to_leader(self, node: int, batches: list[_Batch]) -> None:
        by_topic: dict[str, list[PartitionProduceData]] = {}
        for batch in batches:
            by_topic.setdefault(batch.tp.topic, []).append(
                PartitionProduceData(index=batch.tp.partition,
                                     records=encode_batch(batch.records)))
        request = ProduceRequest(acks=self.acks, timeout_ms=self.request_timeout_ms,
                                 topic_data=[TopicProduceData(name=t, partition_data=parts)
                                             for t, parts in by_topic.items()])
        try:
            resp = await self._cluster.send_to(node, request, response_type=ProduceResponse)
        except (ConnectionClosedError, RequestTimedOutError, BrokerNotAvailableError) as exc:
            for batch in batches:
                self._retry_or_fail(batch, exc, retriable=True)
            return
        except GroupwireError as exc:
            for batch in batches:
                self._complete(batch, exc)
            return
        if resp.error_code != ErrorCode.NONE:
            err = error_for(resp.error_code, resp.error_message or "Produce")
            for batch in batches:
                self._retry_or_fail(batch, err, retriable=err.retriable)
            return
        answers: dict[TopicPartition, tuple[int, int, str | None]] = {}
        for topic in resp.responses:
            for p in topic.partition_responses:
                answers[TopicPartition(topic.name, p.index)] = (
                    p.error_code, p.base_offset, p.error_message)
        for batch in batches:
            code, base, msg = answers.get(batch.tp, (ErrorCode.UNKNOWN_SERVER_ERROR, -1,
                                                     "partition missing from the answer"))
            if code == ErrorCode.NONE:
                self._complete(batch, None, base)
                continue
            err = error_for(code, msg or f"{batch.tp.topic}[{batch.tp.partition}]",
                            topic=batch.tp.topic)
            if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                self._partitions.pop(batch.tp.topic, None)
            if code in STALE_METADATA_ERRORS:
                self._cluster.mark_stale()
            self._retry_or_fail(batch, err, retriable=err.retriable)

    def _retry_or_fail(self, batch: _Batch, exc: BaseException, *, retriable: bool) -> None:
        loop = asyncio.get_running_loop()
        delay = backoff_s(batch.attempts - 1, self._cluster.retry_backoff_ms,
                          self._cluster.retry_backoff_max_ms)
        if not retriable or self._closed or loop.time() + delay >= batch.deadline:
            if not isinstance(exc, GroupwireError):
                exc = RequestTimedOutError(f"{batch.tp.topic}[{batch.tp.partition}]: {exc}")
            self._complete(batch, exc)
            return
        self._acc.retry(batch, exc, loop.time() + delay)
        self._wake()

    def _complete(self, batch: _Batch, exc: BaseException | None, base: int = -1) -> None:
        if not self._acc.complete(batch):
            return
        settled = batch.settled
        if isinstance(settled, asyncio.Future) and not settled.done():
            settled.set_result(None)
        if self._space is not None and not self._acc.full:
            self._space.set()
        topic, partition = batch.tp
        for i, (record, future) in enumerate(zip(batch.records, batch.handles, strict=True)):
            if future.done():
                continue
            if exc is not None:
                future.set_exception(exc)
            else:
                future.set_result(RecordMetadata(topic, partition, base + i,
                                                 record.timestamp_ms))

    def _fail_all(self, exc: BaseException) -> None:
        for batch in self._acc.pop_all():
            self._complete(batch, exc)
        for batch in self._in_flight:
            self._complete(batch, exc)
        self._in_flight = []
        if self._space is not None:
            self._space.set()


def _retriable(exc: BaseException) -> bool:
    """A metadata read that failed: retried unless the broker's answer says it is final."""
    return exc.retriable if isinstance(exc, BrokerResponseError) else isinstance(
        exc, ConnectionError | RequestTimedOutError)


def _as_bytes(name: str, v: object) -> bytes:
    if isinstance(v, bytearray | memoryview):
        return bytes(v)
    raise TypeError(f"{name} must be bytes or None (or pass a {name}_serializer),"
                    f" got {type(v).__name__}")


__all__ = ["Producer"]
