"""The asyncio Producer: the sender around a pure record accumulator.

``send`` only appends to a per-partition batch of the
:class:`~groupwire.client.accumulator.Accumulator` (which decides batching, lingering and
the sticky partition, and packs the record into the batch's bytes there and then) and
returns a future; ``send_batch`` queues a batch the application filled itself (a
:class:`~groupwire.client.batch.BatchBuilder`) with one future for all of it. One sender
task drains every ready batch into one Produce per partition leader (sent concurrently),
resolves the futures from the answers, and puts batches that met a retriable error back
at the head of their partition's queue; an answer saying the leader moved also marks the
metadata stale, so the retry goes to the new leader. A partition has one request in
flight at a time, so retries never reorder its records.

With idempotence on (the default), the sender first gets a producer id (InitProducerId)
and numbers each batch when it first sends it, per partition
(:class:`~groupwire.client.sequences.ProducerSequences`); a retry resends the same bytes,
so the broker recognises a batch it stored already whose answer was lost, and answers it
with the offsets it got then instead of storing it twice (docs/protocol.md §5.4).

With a ``transactional_id`` the producer is transactional (Kafka's KIP-98, in aiokafka's
shape): ``start`` gets its producer id and epoch from the transaction coordinator, and
records are sent only inside a transaction, committed or aborted as a whole. The state
is a pure :class:`~groupwire.client.transactions.TransactionManager`; this shell talks
to the coordinators. Before a partition's first batch of a transaction goes, the sender
adds it (AddPartitionsToTxn, every partition with a batch queued in one request); the
batches are built with the transactional attribute. A commit flushes first; an abort
fails the records not sent yet (:class:`TransactionAbortedError`) and waits for those
on their way. A record that fails makes the transaction abortable only; an old epoch
(another producer took the transactional id) makes the producer fenced for good.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import chain
from time import time_ns as _time_ns
from types import TracebackType
from typing import Any, Final, TypeVar

from groupwire.client.accumulator import CLOSED, RECORD_OVERHEAD, Accumulator, Batch, headers_size
from groupwire.client.batch import BatchBuilder, as_bytes, check_headers
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
    ClusterAuthorizationFailedError,
    ConnectionClosedError,
    GroupwireError,
    IllegalStateError,
    IncompatibleBrokerError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    LeaderNotAvailableError,
    OperationNotAttemptedError,
    OutOfOrderSequenceNumberError,
    ProducerFencedError,
    RequestTimedOutError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionalIdAuthorizationFailedError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
    error_for,
)
from groupwire.client.security import DEFAULT_SASL_MECHANISM, SecurityConfig
from groupwire.client.sequences import ProducerSequences
from groupwire.client.supervisor import cancel_and_wait
from groupwire.client.transactions import (
    ConsumerGroupMetadata,
    Outcome,
    TransactionManager,
    TxnState,
    coordinator_error,
    outcome_of,
    severity,
)
from groupwire.client.types import (
    OffsetAndMetadata,
    RecordMetadata,
    TopicPartition,
    choose_bootstrap,
)
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.hashing import murmur2
from groupwire.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    ApiKey,
    EndTxnRequest,
    EndTxnResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    Request,
    Response,
    TopicProduceData,
    TxnOffsetCommitPartition,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitTopic,
    TxnTopic,
)

log = logging.getLogger("groupwire.producer")
CONCURRENT_RETRY_S: Final = 0.002
"""How soon a transactional request refused CONCURRENT_TRANSACTIONS (the coordinator
still completing the previous transaction) is first sent again; doubled each time up to
:data:`CONCURRENT_RETRY_MAX_S`, for :data:`QUICK_RETRIES` times."""
CONCURRENT_RETRY_MAX_S: Final = 0.02
QUICK_RETRIES: Final = 8

Headers = list[tuple[str, bytes | None]]
Serializer = Callable[[Any], bytes | None]

_FRAME_HEADROOM = 65536
DELIVERY_TIMEOUT_MS: Final = 120000
"""Kafka's ``delivery.timeout.ms`` default: how long a record may take, retries included."""

UNKNOWN_TOPIC_ATTEMPTS: Final = 3
"""Metadata requests answered UNKNOWN_TOPIC_OR_PARTITION before ``send`` gives up."""

KEY_HASH_CACHE: Final = 4096
"""Keys whose hash a producer remembers (the set starts over when full)."""
KEY_HASH_MAX_BYTES: Final = 256
"""Longer keys are hashed every time: the cache stays under ~1.5 MB."""

YIELD_EVERY: Final = 1024
"""``send`` yields to the event loop once in this many calls, and after one that filled a
batch, so the sender task sends and reads answers while an application sends in a loop."""

TRANSACTION_TIMEOUT_MS: Final = 60000
"""Kafka's ``transaction.timeout.ms`` default: how long the coordinator lets a transaction
stay open before it aborts it."""
TRANSACTION_COORDINATOR: Final = 1
"""FindCoordinator's ``key_type`` for a transactional id (0: a group)."""

_Batch = Batch["asyncio.Future[RecordMetadata]"]
R = TypeVar("R", bound=Response)

_FATAL_IN_PRODUCE: Final = (ProducerFencedError, TransactionalIdAuthorizationFailedError,
                            ClusterAuthorizationFailedError, InvalidTxnStateError,
                            InvalidProducerIdMappingError, UnsupportedVersionError)
"""A transactional producer's batch failing with these makes the producer fatal (as in
Kafka); with anything else only its transaction abortable."""


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

    ``enable_idempotence`` (Kafka's ``enable.idempotence``, on by default as in Kafka's
    producer since 3.0): the producer asks the broker for a producer id before its first
    batch and numbers its records per partition, so that a batch it sends again after
    losing the answer is stored once, the broker answering the resend with the offsets
    the batch got the first time (docs/protocol.md §5.4). It needs ``acks="all"``:
    ``enable_idempotence=True`` with ``acks=1`` is a ValueError, while ``acks=1`` with
    ``enable_idempotence`` left unset (None) turns idempotence off, as Kafka's producer
    does since 3.2 when the user did not ask for it. A broker without InitProducerId (an
    older one) makes the producer send without it, with one warning logged. A batch the
    broker refuses as out of order (:class:`OutOfOrderSequenceNumberError`) or of an old
    producer epoch (:class:`InvalidProducerEpochError`) fails its records, and the
    producer goes on with a new producer id (a warning is logged); so it does, without
    the warning, after a batch fails whose records the broker may or may not have stored
    (its delivery timeout ran out, say). ``enable_idempotence=False`` sends batches
    without producer fields (layout v1), and a resend after a lost answer may store
    them twice.

    ``transactional_id`` makes the producer transactional (it implies idempotence:
    ``enable_idempotence=False`` or ``acks=1`` with it is a ValueError, as Kafka's
    ConfigException). ``start`` finds the id's transaction coordinator and gets the
    producer id and epoch from it (InitProducerId), fencing any earlier producer with the
    same id: that one's next transactional call raises :class:`ProducerFencedError`, and
    its open transaction is aborted. Records are then sent only between
    :meth:`begin_transaction` and :meth:`commit_transaction` / :meth:`abort_transaction`
    (``send`` outside raises IllegalStateError, as aiokafka's IllegalOperation), or in
    ``async with producer.transaction():``. A read_committed consumer sees a
    transaction's records once it commits, never if it aborts. ``transaction_timeout_ms``
    (Kafka's, default 60 s) is how long the coordinator lets a transaction stay open
    before aborting it. Each transactional call retries the coordinators' retriable
    answers (busy, moved, loading) for up to ``request_timeout_ms``, then raises; a
    commit or abort that raised so may be called again. ``close`` aborts a transaction
    left open.
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
                 security: SecurityConfig | None = None,
                 enable_idempotence: bool | None = None,
                 transactional_id: str | None = None,
                 transaction_timeout_ms: int = TRANSACTION_TIMEOUT_MS) -> None:
        if transactional_id is not None:
            if not isinstance(transactional_id, str) or not transactional_id:
                raise ValueError("transactional_id must be a non-empty string")
            if enable_idempotence is False:
                raise ValueError("a transactional_id needs idempotence: leave "
                                 "enable_idempotence unset (or True)")
            if acks == 1:
                raise ValueError("a transactional_id needs acks='all' (or -1), got acks=1")
            enable_idempotence = True
        if acks == 0 and not isinstance(acks, bool):
            raise ValueError("acks=0 is not supported: the broker answers every Produce; "
                             "use acks=1 (leader) or 'all' (every in-sync replica)")
        if isinstance(acks, bool) or acks not in (1, -1, "all"):
            raise ValueError(f"acks must be 1, -1 or 'all', got {acks!r}")
        if enable_idempotence is None:
            # Kafka (3.2+): idempotence is on unless the user's own settings conflict
            enable_idempotence = acks != 1
        elif enable_idempotence and acks == 1:
            raise ValueError("enable_idempotence=True needs acks='all' (or -1), got acks=1: "
                             "set acks='all' or enable_idempotence=False")
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
        self.enable_idempotence = bool(enable_idempotence)
        """Whether this producer numbers its batches for the broker to deduplicate (the
        setting as resolved; it stays on when a broker turns out not to serve it, which
        :attr:`idempotent` then tells)."""
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
        self._fresh_until: dict[str, float] = {}  # loop time each topic's count ages at
        self._loop: asyncio.AbstractEventLoop | None = None
        self._key_hashes: dict[bytes, int] = {}  # recent keys' murmur2, sign bit cleared
        self._unyielded = 0  # sends since one yielded to the loop
        self._in_flight: list[_Batch] = []
        self._space: asyncio.Event | None = None
        self._wakeup: asyncio.Event | None = None
        self._sender: asyncio.Task[None] | None = None
        self._flushing = 0
        self._sequences = ProducerSequences()
        self._txn = (TransactionManager(transactional_id, transaction_timeout_ms)
                     if transactional_id is not None else None)
        self._coordinators: dict[tuple[str, int], int] = {}  # (key, key_type) -> node
        self._idempotent = self.enable_idempotence   # off once a broker lacks InitProducerId
        self._new_id_wanted = self.enable_idempotence  # before the next batch is numbered
        self._started = False
        self._closing = False
        self._closed = False

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect (ApiVersions checked) and start the sender task; a transactional
        producer first gets its producer id and epoch from its transaction coordinator
        (raising what a refusal or ``request_timeout_ms`` of retries leaves: call again
        after a timeout)."""
        if self._closed:
            raise ClientClosedError("the producer is closed")
        if self._started:
            return
        await self._cluster.connection()
        if self._txn is not None:
            await self._init_transactions(self._txn)
        self._loop = asyncio.get_running_loop()
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
        A transaction left open is aborted first (as Kafka's producer does at close),
        within ``request_timeout_ms`` too.
        """
        if self._closed:
            return
        self._closing = True
        try:
            txn = self._txn
            if self._started and txn is not None and txn.state in (
                    TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR, TxnState.ABORTING):
                await self._abort_on_close(txn)
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
        request timeout) and for buffer space when ``max_buffer_bytes`` are queued; once
        in a thousand calls, and after one that filled a batch, it lets the event loop run
        once, so that a loop of sends does not hold back the batches it fills. For many
        records at once, :meth:`create_batch` and :meth:`send_batch` cost several times
        less per record (one future per batch).

        A transactional producer sends inside a transaction only (IllegalStateError
        otherwise), and raises the transaction's error once it has one
        (:class:`TransactionAbortableError`, or the fatal one).
        """
        if self._closing or self._closed or not self._started:
            self._check_usable()
        txn = self._txn
        begun = 0
        if txn is not None:
            if txn.state is not TxnState.IN_TRANSACTION:
                txn.check_send()
            begun = txn.begun
        unyielded = self._unyielded + 1
        if unyielded >= YIELD_EVERY:
            # a loop of sends that never waits would hold the loop until max_buffer_bytes
            # are queued: the sender could neither send full batches nor read answers
            unyielded = 0
            await asyncio.sleep(0)
            self._check_usable()
        self._unyielded = unyielded
        kb = self._key_serializer(key) if self._key_serializer else key
        vb = self._value_serializer(value) if self._value_serializer else value
        if kb is not None and type(kb) is not bytes:
            kb = as_bytes("key", kb)
        if vb is not None and type(vb) is not bytes:
            vb = as_bytes("value", vb)
        loop = self._loop
        assert loop is not None
        now = loop.time()
        until = self._fresh_until.get(topic)
        if until is not None and now < until:
            count = self._partitions[topic]
        else:
            count = await self._partition_count(topic)
            now = loop.time()
        sticky = False
        if partition is None:
            if kb is not None:
                hashed = self._key_hashes.get(kb)
                partition = (hashed if hashed is not None else self._hash_key(kb)) % count
            else:
                partition = self._acc.sticky_partition(topic, count)
                sticky = True
        elif not 0 <= partition < count:
            count = await self._partition_count(topic, refresh=True)
            if not 0 <= partition < count:
                raise UnknownTopicOrPartitionError(
                    f"{topic!r} has {count} partitions, no partition {partition}")
            now = loop.time()
        # accumulator.record_size, inline: this is the per-record path
        size = RECORD_OVERHEAD + (len(kb) if kb else 0) + (len(vb) if vb else 0)
        if headers:
            hdrs = check_headers(headers)
            size += headers_size(hdrs)
        else:
            hdrs = ()
        acc = self._acc
        if acc.buffered >= acc.max_buffer_bytes:
            await self._wait_for_space()
            self._check_usable()
            now = loop.time()
        if txn is not None and (txn.state is not TxnState.IN_TRANSACTION
                                or txn.begun != begun):
            txn.check_send(begun=begun)  # the transaction ended while this send waited
        ts = _time_ns() // 1_000_000 if timestamp_ms is None else timestamp_ms
        future: asyncio.Future[RecordMetadata] = loop.create_future()
        changed = acc.append(topic, partition, kb, vb, hdrs, ts, size, future, sticky=sticky,
                             now=now)
        if changed:
            self._wake()
            if changed == CLOSED:
                self._unyielded = YIELD_EVERY  # the next send lets the sender take it
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

    def create_batch(self) -> BatchBuilder:
        """An empty :class:`BatchBuilder` for :meth:`send_batch` (aiokafka's
        ``create_batch``): up to ``max_batch_bytes`` of records, with this producer's
        serializers. Nothing is queued until the batch is sent."""
        return BatchBuilder(self.max_batch_bytes, key_serializer=self._key_serializer,
                            value_serializer=self._value_serializer)

    async def send_batch(self, batch: BatchBuilder, topic: str, *,
                         partition: int) -> asyncio.Future[RecordMetadata]:
        """Queue a filled :class:`BatchBuilder` whole on ``partition`` (aiokafka's
        ``send_batch``); the future resolves to the RecordMetadata of its first record
        (the batch's base offset and timestamp): record ``i`` (its ``append`` metadata's
        ``offset``) lands at that offset + ``i``.

        The batch goes after the records already queued for the partition, in one
        Produce, retried and failed as a whole as ``send``'s records are (an error is
        set on the future). It closes the batch; sending it again, or an empty batch, is
        a ValueError. Waits, as ``send`` does, for the topic's metadata and for buffer
        space. A transactional producer takes it inside a transaction only, as ``send``.
        """
        if self._closing or self._closed or not self._started:
            self._check_usable()
        txn = self._txn
        begun = 0
        if txn is not None:
            txn.check_send("send_batch")
            begun = txn.begun
        await asyncio.sleep(0)  # the sender takes the batches before (see send)
        self._check_usable()
        if not isinstance(batch, BatchBuilder):
            raise TypeError(f"send_batch takes a create_batch() batch, got "
                            f"{type(batch).__name__}")
        if not batch.record_count():
            raise ValueError("the batch is empty: nothing to send")
        count = await self._partition_count(topic)
        if not 0 <= partition < count:
            count = await self._partition_count(topic, refresh=True)
            if not 0 <= partition < count:
                raise UnknownTopicOrPartitionError(
                    f"{topic!r} has {count} partitions, no partition {partition}")
        acc = self._acc
        if acc.buffered >= acc.max_buffer_bytes:
            await self._wait_for_space()
            self._check_usable()
        if txn is not None:
            txn.check_send("send_batch", begun)  # the transaction ended meanwhile
        writer = batch._take()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[RecordMetadata] = loop.create_future()
        acc.append_batch(TopicPartition(topic, partition), writer, batch.size(), future,
                         now=loop.time())
        self._wake()
        return future

    @property
    def idempotent(self) -> bool:
        """Whether batches go out numbered for the broker to deduplicate:
        :attr:`enable_idempotence`, unless the broker does not serve InitProducerId."""
        return self._idempotent

    @property
    def cluster(self) -> Cluster:
        """The connection shell this producer sends through (connecting, retries,
        metadata): read-only, for tools and tests that look underneath."""
        return self._cluster

    async def partitions_for(self, topic: str) -> set[int]:
        """The topic's partitions (metadata fetched if not known yet)."""
        return set(range(await self._partition_count(topic)))

    # --- transactions ---------------------------------------------------------------------

    @property
    def transactional_id(self) -> str | None:
        """The ``transactional_id`` given (None: not a transactional producer)."""
        return self._txn.transactional_id if self._txn is not None else None

    async def begin_transaction(self) -> None:
        """Start a transaction (aiokafka's ``begin_transaction``): the records sent until
        :meth:`commit_transaction` are committed together, or aborted together by
        :meth:`abort_transaction`. One transaction at a time; needs ``transactional_id``
        and a started producer."""
        self._transactional("begin_transaction").begin()

    async def commit_transaction(self) -> None:
        """Send every record of the transaction (as :meth:`flush` does), then commit it
        (EndTxn): read_committed consumers see its records, and the offsets given to
        :meth:`send_offsets_to_transaction` become the group's committed ones.

        If a record of it failed, nothing is committed: this raises
        :class:`TransactionAbortableError` (``__cause__``: the failure) and the
        transaction must be aborted. Raises the fatal error (such as
        :class:`ProducerFencedError`) once the producer has one."""
        txn = self._transactional("commit_transaction")
        txn.begin_commit()
        await self.flush()
        txn.check_usable("commit_transaction")  # a record failed meanwhile
        if txn.started:
            await self._end_txn(txn, commit=True)
        txn.completed()

    async def abort_transaction(self) -> None:
        """Abort the transaction (EndTxn): its records are never seen by read_committed
        consumers, its offsets never committed. Records not sent yet fail with
        :class:`TransactionAbortedError`; those on their way are waited for. Allowed
        after a :class:`TransactionAbortableError`, which it clears."""
        txn = self._transactional("abort_transaction")
        txn.begin_abort()
        await self._abort(txn)

    def transaction(self) -> contextlib.AbstractAsyncContextManager[None]:
        """``async with producer.transaction():`` begins a transaction, commits it when
        the block ends and aborts it when the block raises (aiokafka's). A commit that
        raises :class:`TransactionAbortableError` is aborted before it is raised; after a
        fatal error nothing is aborted (nothing can be)."""
        return _Transaction(self)

    async def send_offsets_to_transaction(
            self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
            group_id: str | ConsumerGroupMetadata) -> None:
        """Add a consumer group's offsets to the transaction: they become the group's
        committed offsets when it commits, and are dropped if it aborts
        (consume-transform-produce exactly once). ``offsets`` are the next offsets to
        read, as a consumer commits them.

        ``group_id`` is the group's id (aiokafka's argument) or, better, the consumer's
        ``group_metadata()``: its generation and member id go with the offsets, so the
        group coordinator refuses them once that consumer has lost its partitions to a
        rebalance (KIP-447), which raises :class:`CommitFailedError` and makes the
        transaction abortable. AddOffsetsToTxn goes to the transaction coordinator (once
        per group and transaction), TxnOffsetCommit to the group's coordinator."""
        txn = self._transactional("send_offsets_to_transaction")
        txn.check_offsets()
        if isinstance(group_id, ConsumerGroupMetadata):
            group = group_id
        elif isinstance(group_id, str) and group_id:
            group = ConsumerGroupMetadata(group_id)
        else:
            raise ValueError(f"group_id must be a group id or a consumer's group_metadata(), "
                             f"got {group_id!r}")
        chosen = _offsets(offsets)
        if not chosen:
            return
        seq = self._sequences
        if group.group_id not in txn.groups:
            await self._txn_exchange(lambda: AddOffsetsToTxnRequest(
                transactional_id=txn.transactional_id, producer_id=seq.producer_id,
                producer_epoch=seq.producer_epoch, group_id=group.group_id),
                AddOffsetsToTxnResponse)
            txn.group_added(group.group_id)
            txn.check_offsets()
        by_topic: dict[str, list[TxnOffsetCommitPartition]] = {}
        for tp, om in sorted(chosen.items()):
            by_topic.setdefault(tp.topic, []).append(TxnOffsetCommitPartition(
                partition_index=tp.partition, committed_offset=om.offset,
                committed_metadata=om.metadata or None))
        await self._txn_exchange(lambda: TxnOffsetCommitRequest(
            transactional_id=txn.transactional_id, group_id=group.group_id,
            producer_id=seq.producer_id, producer_epoch=seq.producer_epoch,
            generation_id=group.generation_id, member_id=group.member_id,
            group_instance_id=group.group_instance_id,
            topics=[TxnOffsetCommitTopic(name=t, partitions=ps)
                    for t, ps in by_topic.items()]),
            TxnOffsetCommitResponse, group_id=group.group_id)

    # --- internals: accumulating ----------------------------------------------------------

    def _check_usable(self) -> None:
        if self._closing or self._closed:
            raise ClientClosedError("the producer is closed")
        if not self._started:
            raise IllegalStateError("start() the producer before sending")

    def _fresh_count(self, topic: str) -> int | None:
        """The cached partition count while younger than metadata_max_age_ms."""
        until = self._fresh_until.get(topic)
        if until is not None and asyncio.get_running_loop().time() < until:
            return self._partitions[topic]
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
                self._fresh_until[topic] = loop.time() + self.metadata_max_age_ms / 1000
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

    def _hash_key(self, key: bytes) -> int:
        """Kafka's default partitioner's hash of ``key`` (``partition_for_key`` before the
        modulus), remembered for the next :data:`KEY_HASH_CACHE` short keys: murmur2 in
        Python costs a microsecond or more a key, and keys tend to repeat."""
        hashed = murmur2(key) & 0x7FFFFFFF
        if len(key) <= KEY_HASH_MAX_BYTES:
            if len(self._key_hashes) >= KEY_HASH_CACHE:
                self._key_hashes.clear()
            self._key_hashes[key] = hashed
        return hashed

    async def _wait_for_space(self) -> None:
        """Until less than ``max_buffer_bytes`` are queued (a completed batch frees its
        bytes and sets ``_space``)."""
        space = self._space
        acc = self._acc
        while space is not None and acc.buffered >= acc.max_buffer_bytes:
            space.clear()
            await space.wait()
            self._check_usable()

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    # --- internals: transactions ----------------------------------------------------------

    def _transactional(self, what: str) -> TransactionManager:
        txn = self._txn
        if txn is None:
            raise IllegalStateError(f"{what}: the producer has no transactional_id")
        if self._closing or self._closed:
            raise ClientClosedError("the producer is closed")
        if not self._started:
            txn.check_usable(what)  # a fatal refusal start() met is raised again
            raise IllegalStateError(f"{what}: start() the producer first")
        return txn

    async def _init_transactions(self, txn: TransactionManager) -> None:
        """The producer id and epoch from the transaction coordinator (InitProducerId),
        which fences earlier producers with the same transactional id."""
        txn.check_usable("start")
        if txn.state is not TxnState.UNINITIALIZED:
            return
        if ApiKey.INIT_PRODUCER_ID not in self._cluster.api_versions:
            raise IncompatibleBrokerError(
                "the broker does not serve InitProducerId: no transactions (an older "
                "broker)")
        resp = await self._txn_exchange(lambda: InitProducerIdRequest(
            transactional_id=txn.transactional_id,
            transaction_timeout_ms=txn.transaction_timeout_ms), InitProducerIdResponse)
        self._sequences.reset(resp.producer_id, resp.producer_epoch)
        self._new_id_wanted = False
        txn.initialized()

    async def _abort(self, txn: TransactionManager) -> None:
        """An abort begun: fail what is not sent, wait for what is, then EndTxn; bump
        the epoch if a batch failed whose records the broker may hold."""
        self._abort_undrained()
        await self._settle(self._in_flight)
        txn.check_usable("abort_transaction")  # fenced meanwhile
        if txn.started:
            await self._end_txn(txn, commit=False)
            txn.ended()
        if txn.bump_epoch:
            seq = self._sequences
            resp = await self._txn_exchange(lambda: InitProducerIdRequest(
                transactional_id=txn.transactional_id,
                transaction_timeout_ms=txn.transaction_timeout_ms,
                producer_id=seq.producer_id, producer_epoch=seq.producer_epoch),
                InitProducerIdResponse)
            self._sequences.reset(resp.producer_id, resp.producer_epoch)
            txn.bump_epoch = False
        txn.completed()

    async def _abort_on_close(self, txn: TransactionManager) -> None:
        """``close`` with a transaction open: abort it, bounded by the request timeout
        (the coordinator aborts it anyway once its timeout passes)."""
        try:
            txn.begin_abort()
            async with asyncio.timeout(self.request_timeout_ms / 1000):
                await self._abort(txn)
        except (GroupwireError, ConnectionError, TimeoutError) as exc:
            log.warning("producer %s: aborting the open transaction of %r at close failed: "
                        "%s (its coordinator aborts it after transaction_timeout_ms)",
                        self._cluster.client_id, txn.transactional_id, exc)

    async def _end_txn(self, txn: TransactionManager, *, commit: bool) -> None:
        seq = self._sequences
        await self._txn_exchange(lambda: EndTxnRequest(
            transactional_id=txn.transactional_id, producer_id=seq.producer_id,
            producer_epoch=seq.producer_epoch, committed=commit), EndTxnResponse)

    def _abort_undrained(self) -> None:
        """Fail every batch still queued (none is on its way): its transaction is being
        aborted, or can only be."""
        err = self._txn_aborted()
        for batch in self._acc.pop_all():
            self._complete(batch, err)
        if self._space is not None:
            self._space.set()

    def _txn_aborted(self) -> TransactionAbortedError:
        err = TransactionAbortedError("the record's transaction was aborted before the "
                                      "record was sent")
        if self._txn is not None and self._txn.error is not None:
            err.__cause__ = self._txn.error
        return err

    async def _settle(self, batches: Iterable[_Batch]) -> None:
        """Until each of ``batches`` is done (sent and answered, or failed)."""
        loop = asyncio.get_running_loop()
        pending: list[asyncio.Future[None]] = []
        for batch in batches:
            if batch.done:
                continue
            if batch.settled is None:
                batch.settled = loop.create_future()
            assert isinstance(batch.settled, asyncio.Future)
            pending.append(batch.settled)
        if pending:
            await asyncio.wait(pending)

    async def _coordinator(self, key: str, key_type: int) -> int:
        """The node id of ``key``'s coordinator (a transactional id's or a group's),
        looked up once (FindCoordinator) and kept until it answers that it moved."""
        node = self._coordinators.get((key, key_type))
        if node is not None:
            return node
        resp = await self._cluster.send(FindCoordinatorRequest(key=key, key_type=key_type),
                                        response_type=FindCoordinatorResponse)
        if resp.error_code != ErrorCode.NONE:
            raise error_for(resp.error_code, resp.error_message or f"FindCoordinator {key!r}",
                            group_id=key if key_type != TRANSACTION_COORDINATOR else None)
        self._cluster.add_node(resp.node_id, resp.host, resp.port)
        self._coordinators[(key, key_type)] = resp.node_id
        return resp.node_id

    async def _txn_exchange(self, build: Callable[[], Request], response_type: type[R], *,
                            group_id: str | None = None) -> R:
        """``build()``'s request to the transaction coordinator (to ``group_id``'s with
        one), sent again while the answer is retriable or the coordinator moved, for up
        to ``request_timeout_ms``; the answer. An abortable or fatal answer puts the
        transaction in that state and raises it."""
        txn = self._txn
        assert txn is not None
        cluster = self._cluster
        key, key_type = ((txn.transactional_id, TRANSACTION_COORDINATOR) if group_id is None
                         else (group_id, 0))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.request_timeout_ms / 1000
        attempt = 0
        while True:
            request = build()
            err: BaseException
            try:
                node = await self._coordinator(key, key_type)
                resp = await cluster.send_to(node, request, response_type=response_type)
            except (ConnectionError, RequestTimedOutError, BrokerNotAvailableError) as exc:
                outcome, err = Outcome.FIND_COORDINATOR, exc
            except BrokerResponseError as exc:  # FindCoordinator's answer
                outcome = outcome_of(exc.raw_code)
                err = coordinator_error(exc.raw_code, str(exc),
                                        transactional_id=txn.transactional_id,
                                        group_id=group_id)
            else:
                code, message, topic = _worst_code(resp)
                outcome = outcome_of(code)
                if outcome is Outcome.DONE:
                    return resp
                if code == ErrorCode.CONCURRENT_TRANSACTIONS and attempt < QUICK_RETRIES:
                    # the previous transaction's markers are being written: a matter of
                    # milliseconds, so asked again soon (Kafka's producer: after 20 ms,
                    # KAFKA-5482), sooner at first
                    await asyncio.sleep(min(CONCURRENT_RETRY_S * 2 ** attempt,
                                            CONCURRENT_RETRY_MAX_S))
                    attempt += 1
                    continue
                err = coordinator_error(code, message or request.API_KEY.name,
                                        transactional_id=txn.transactional_id,
                                        group_id=group_id, topic=topic)
            if outcome is Outcome.FATAL:
                txn.fatal_error(err)
                raise err
            if outcome is Outcome.ABORTABLE:
                txn.abortable_error(err)
                raise err
            if outcome is Outcome.FIND_COORDINATOR:
                self._coordinators.pop((key, key_type), None)
            delay = backoff_s(attempt, cluster.retry_backoff_ms, cluster.retry_backoff_max_ms)
            if loop.time() + delay >= deadline:
                raise err
            attempt += 1
            await asyncio.sleep(delay)

    async def _txn_ready(self, batches: list[_Batch]) -> list[_Batch]:
        """Of a round's batches, those that may go: their transaction is being sent
        (else they fail), and their partitions are in it. Partitions new to it are added
        first (AddPartitionsToTxn), with those of every batch queued, at once."""
        txn = self._txn
        assert txn is not None
        if not txn.sending:
            err = self._txn_aborted()
            for batch in batches:
                self._complete(batch, err)
            return []
        missing = txn.partitions_to_add(b.tp for b in chain(batches, self._acc.queued()))
        if missing:
            by_topic: dict[str, list[int]] = {}
            for tp in missing:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            seq = self._sequences
            try:
                resp = await self._txn_exchange(lambda: AddPartitionsToTxnRequest(
                    transactional_id=txn.transactional_id, producer_id=seq.producer_id,
                    producer_epoch=seq.producer_epoch,
                    topics=[TxnTopic(name=t, partitions=ps) for t, ps in by_topic.items()]),
                    AddPartitionsToTxnResponse)
            except (GroupwireError, ConnectionError) as exc:
                for batch in batches:
                    self._retry_or_fail(batch, exc, retriable=_retriable(exc))
                return []
            txn.partitions_added(
                TopicPartition(t.name, p.partition_index) for t in resp.results
                for p in t.results if p.error_code == ErrorCode.NONE)
        if not txn.sending:  # aborted while the partitions were being added
            err = self._txn_aborted()
            for batch in batches:
                self._complete(batch, err)
            return []
        ready = []
        for batch in batches:
            if batch.tp in txn.partitions:
                ready.append(batch)
            else:  # left out of the answer: asked again
                self._retry_or_fail(batch, OperationNotAttemptedError(
                    f"{batch.tp}: not added to the transaction"), retriable=True)
        return ready

    def _txn_batch_failed(self, exc: BaseException) -> None:
        """A transactional batch failed: the producer is fenced (or refused) for good,
        or the transaction can only be aborted."""
        txn = self._txn
        assert txn is not None
        if isinstance(exc, TransactionAbortedError):
            return   # a consequence of the abort, not a cause
        if isinstance(exc, _FATAL_IN_PRODUCE):
            txn.fatal_error(exc)
        else:
            txn.abortable_error(exc)

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
            if self._txn is not None:
                batches = await self._txn_ready(batches)
                if not batches:
                    return
            elif self._new_id_wanted:
                try:
                    await self._init_producer_id()
                except (GroupwireError, ConnectionError) as exc:
                    # retried with the batches' backoff, until their delivery timeout
                    for batch in batches:
                        self._retry_or_fail(batch, exc, retriable=_retriable(exc))
                    return
            by_node = await self._route(batches)
            await asyncio.gather(*(self._send_to_leader(node, group)
                                   for node, group in by_node.items()))
        finally:
            self._in_flight = []

    async def _init_producer_id(self) -> None:
        """A producer id and epoch from any broker, every partition numbered from 0 again
        (or idempotence off, with a warning, when the broker does not serve InitProducerId).
        Raises what the broker answered otherwise (COORDINATOR_LOAD_IN_PROGRESS, say)."""
        cluster = self._cluster
        await cluster.connection()  # its ApiVersions answer says whether the API is served
        resp = InitProducerIdResponse(error_code=ErrorCode.UNSUPPORTED_VERSION)
        if ApiKey.INIT_PRODUCER_ID in cluster.api_versions:
            resp = await cluster.send(InitProducerIdRequest(),
                                      response_type=InitProducerIdResponse)
        if resp.error_code == ErrorCode.NONE:
            self._sequences.reset(resp.producer_id, resp.producer_epoch)
            self._new_id_wanted = False
        elif resp.error_code == ErrorCode.UNSUPPORTED_VERSION:
            log.warning("producer %s: the broker does not serve InitProducerId (an older "
                        "broker): sending without idempotence, so a batch resent after a "
                        "lost answer may be stored twice", cluster.client_id)
            self._idempotent = self._new_id_wanted = False
        else:
            raise error_for(resp.error_code, resp.error_message or "InitProducerId")

    def _want_new_id(self) -> None:
        """The next batches are numbered under a new producer id (asked before the next
        round): a batch failed whose numbers the broker may hold, or refused them."""
        if self._txn is not None:
            self._txn.bump_epoch = True   # once the transaction is aborted
        elif self._idempotent and not self._closed:
            self._new_id_wanted = True

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
        sequences = self._sequences if self._idempotent else None
        transactional = self._txn is not None
        for batch in batches:
            if sequences is not None and batch.sequence is None:
                # numbered when first sent; a retry resends the bytes built here
                batch.sequence = seq = sequences.assign(batch.tp, len(batch.writer))
                batch.writer.transactional = transactional
                records = batch.writer.build(producer_id=seq.producer_id,
                                             producer_epoch=seq.producer_epoch,
                                             base_sequence=seq.base_sequence)
            else:
                records = batch.writer.build()
            by_topic.setdefault(batch.tp.topic, []).append(
                PartitionProduceData(index=batch.tp.partition, records=records))
        request = ProduceRequest(acks=self.acks, timeout_ms=self.request_timeout_ms,
                                 topic_data=[TopicProduceData(name=t, partition_data=parts)
                                             for t, parts in by_topic.items()],
                                 transactional_id=self.transactional_id)
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
            err = self._produce_error(resp.error_code, resp.error_message or "Produce")
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
            err = self._produce_error(code, msg or f"{batch.tp.topic}[{batch.tp.partition}]",
                                      topic=batch.tp.topic)
            if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                self._partitions.pop(batch.tp.topic, None)
                self._fresh_until.pop(batch.tp.topic, None)
            if code in STALE_METADATA_ERRORS:
                self._cluster.mark_stale()
            # a refusal that is final (not retriable) stored nothing of the batch
            self._retry_or_fail(batch, err, retriable=err.retriable,
                                refused=not err.retriable)

    def _produce_error(self, code: int, message: str, *,
                       topic: str | None = None) -> BrokerResponseError:
        """The error a Produce answer's ``code`` fails batches with: to a transactional
        producer an old epoch means another producer took its transactional id (as
        aiokafka reports it)."""
        if self._txn is not None and code in (ErrorCode.INVALID_PRODUCER_EPOCH,
                                              ErrorCode.PRODUCER_FENCED):
            return ProducerFencedError(
                f"transactional id {self._txn.transactional_id!r}: a batch was refused "
                f"for an old producer epoch ({ErrorCode.name_of(code)}; {message}): "
                f"another producer with this id started since")
        return error_for(code, message, topic=topic)

    def _retry_or_fail(self, batch: _Batch, exc: BaseException, *, retriable: bool,
                       refused: bool = False) -> None:
        if retriable and self._txn is not None and not self._txn.sending:
            exc, retriable = self._txn_aborted(), False  # no transaction to retry it in
        loop = asyncio.get_running_loop()
        delay = backoff_s(batch.attempts - 1, self._cluster.retry_backoff_ms,
                          self._cluster.retry_backoff_max_ms)
        if not retriable or self._closed or loop.time() + delay >= batch.deadline:
            if not isinstance(exc, GroupwireError):
                exc = RequestTimedOutError(f"{batch.tp.topic}[{batch.tp.partition}]: {exc}")
            self._complete(batch, exc, refused=refused)
            return
        self._acc.retry(batch, exc, loop.time() + delay)
        self._wake()

    def _complete(self, batch: _Batch, exc: BaseException | None, base: int = -1, *,
                  refused: bool = False) -> None:
        """Settle ``batch``'s futures; ``refused``: the broker's answer to it was a final
        refusal (nothing of it stored)."""
        if not self._acc.complete(batch):
            return
        if exc is not None and self._txn is not None:
            self._txn_batch_failed(exc)
        if exc is not None and batch.sequence is not None:
            self._sequence_failed(batch, exc, refused=refused)
        settled = batch.settled
        if isinstance(settled, asyncio.Future) and not settled.done():
            settled.set_result(None)
        if self._space is not None and not self._acc.full:
            self._space.set()
        topic, partition = batch.tp
        whole = batch.whole
        if exc is not None:
            if whole is not None and not whole.done():
                whole.set_exception(exc)
            for future in batch.handles:
                if not future.done():
                    future.set_exception(exc)
            return
        if whole is not None and not whole.done():
            whole.set_result(RecordMetadata(topic, partition, base,
                                            batch.writer.base_timestamp_ms))
        offset = base
        for future, ts in zip(batch.handles, batch.timestamps, strict=True):
            if not future.done():
                future.set_result(RecordMetadata(topic, partition, offset, ts))
            offset += 1

    def _sequence_failed(self, batch: _Batch, exc: BaseException, *, refused: bool) -> None:
        """A numbered batch failed: the numbers the partition goes on with.

        Out of order or of a fenced epoch, the broker will refuse what follows too: a new
        producer id. Refused outright on its only attempt, its numbers are given back to
        its partition. Otherwise the broker may hold it (an attempt whose answer was lost,
        a timeout) or not, and the next batch's numbers could leave a gap or repeat its
        own: a new producer id, which the broker takes at any number."""
        seq = batch.sequence
        assert seq is not None
        sequences = self._sequences
        if isinstance(exc, OutOfOrderSequenceNumberError | InvalidProducerEpochError):
            if seq.producer_id == sequences.producer_id and not self._closed:
                log.warning("producer %s: %s[%d] refused a batch (%s): going on with %s",
                            self._cluster.client_id, batch.tp.topic, batch.tp.partition,
                            ErrorCode.name_of(exc.code),
                            "a new producer id" if self._txn is None else
                            "a bumped epoch once the transaction is aborted")
                self._want_new_id()
            return
        if refused and batch.attempts == 1 and sequences.give_back(
                batch.tp, seq, len(batch.writer)):
            return
        if seq.producer_id == sequences.producer_id:
            self._want_new_id()

    def _fail_all(self, exc: BaseException) -> None:
        for batch in self._acc.pop_all():
            self._complete(batch, exc)
        for batch in self._in_flight:
            self._complete(batch, exc)
        self._in_flight = []
        if self._space is not None:
            self._space.set()


class _Transaction:
    """:meth:`Producer.transaction`'s context manager."""

    __slots__ = ("_producer",)

    def __init__(self, producer: Producer) -> None:
        self._producer = producer

    async def __aenter__(self) -> None:
        await self._producer.begin_transaction()

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        producer = self._producer
        txn = producer._txn
        assert txn is not None
        if exc_type is None:
            try:
                await producer.commit_transaction()
            except TransactionAbortableError:
                await producer.abort_transaction()
                raise
            return
        if not txn.fatal and txn.state is not TxnState.READY:
            await producer.abort_transaction()


def _worst_code(resp: Response) -> tuple[int, str | None, str | None]:
    """The code a transactional answer is acted on by (its own, or a partition's, the
    heaviest: :func:`~groupwire.client.transactions.severity`), its message, and the
    topic it is about."""
    worst: tuple[int, str | None, str | None] = (resp.error_code, resp.error_message, None)
    topics = (resp.results if isinstance(resp, AddPartitionsToTxnResponse)
              else resp.topics if isinstance(resp, TxnOffsetCommitResponse) else [])
    for topic in topics:
        for part in topic.results:
            if severity(part.error_code) > severity(worst[0]):
                worst = (part.error_code, f"{topic.name}[{part.partition_index}]", topic.name)
    return worst


def _offsets(offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
             ) -> dict[TopicPartition, OffsetAndMetadata]:
    """``send_offsets_to_transaction``'s offsets, checked: partitions to next offsets."""
    if not isinstance(offsets, Mapping):
        raise TypeError(f"offsets must map TopicPartition to an offset, got "
                        f"{type(offsets).__name__}")
    out: dict[TopicPartition, OffsetAndMetadata] = {}
    for tp, value in offsets.items():
        om = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value)
        if isinstance(om.offset, bool) or not isinstance(om.offset, int) or om.offset < 0:
            raise ValueError(f"{tp}: offset must be an int >= 0, got {om.offset!r}")
        out[TopicPartition(*tp)] = om
    return out


def _retriable(exc: BaseException) -> bool:
    """A metadata read that failed: retried unless the broker's answer says it is final."""
    return exc.retriable if isinstance(exc, BrokerResponseError) else isinstance(
        exc, ConnectionError | RequestTimedOutError)


__all__ = ["Producer"]
