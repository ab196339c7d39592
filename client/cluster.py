"""The client's view of the cluster: checked connections, retries, metadata, leaders.

Producer, Consumer and Admin share this one shell so that connecting (ApiVersions first,
backoff with jitter across the bootstrap list), retrying idempotent requests after a lost
connection and reading Metadata behave the same everywhere.

Each Metadata answer gives the brokers, the controller and every partition's leader and
leader epoch; :meth:`Cluster.send_to` sends to one node over a connection opened on
demand, so Produce, Fetch and ListOffsets go to the partition's leader and the topic
APIs to the controller, as Kafka's clients route them. A lost node connection or an
answer saying the leader moved (:data:`STALE_METADATA_ERRORS`) marks the metadata stale;
the next use refreshes it, at most once per backoff, concurrent callers sharing one
request. A cluster of one broker (single-broker mode) is reached through the bootstrap
connection whatever address it advertises, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import socket
import ssl
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, TypeVar

from groupwire.client.connection import Connection, show_answer, tls_failure
from groupwire.client.errors import (
    BrokerNotAvailableError,
    ClientClosedError,
    ConnectionClosedError,
    GroupwireError,
    IncompatibleBrokerError,
    RequestTimedOutError,
    TlsHandshakeError,
    error_for,
)
from groupwire.client.sasl import authenticate
from groupwire.client.security import SecurityConfig
from groupwire.client.types import TopicPartition, parse_bootstrap
from groupwire.protocol.errors import ErrorCode, ProtocolError
from groupwire.protocol.framing import DEFAULT_MAX_FRAME_BYTES
from groupwire.protocol.messages import (
    SUPPORTED_VERSIONS,
    ApiKey,
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    Request,
    Response,
)

R = TypeVar("R", bound=Response)

IDEMPOTENT_APIS: Final = frozenset({
    ApiKey.METADATA, ApiKey.LIST_OFFSETS, ApiKey.FETCH, ApiKey.OFFSET_FETCH,
    ApiKey.FIND_COORDINATOR, ApiKey.DESCRIBE_GROUPS, ApiKey.LIST_GROUPS,
    ApiKey.API_VERSIONS,
})
"""Requests that may be sent again after a lost connection without changing the outcome."""

STALE_METADATA_ERRORS: Final = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.REPLICA_NOT_AVAILABLE, ErrorCode.BROKER_NOT_AVAILABLE,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
})
"""Partition answers meaning the client's leaders are out of date (Kafka's clients refresh
metadata on the same ones): routed again after a refresh."""

CLOSED_HANDSHAKE_ROUNDS: Final = 3
"""Rounds in which every address closed the connection before answering ApiVersions
after which a never-connected client stops trying (a peer that is no groupwire broker)."""

API_VERSION_REQUEST_TIMEOUT_MS: Final = 2000
"""How long a new connection waits for the broker's ApiVersions answer by default
(librdkafka's ``api.version.request.timeout.ms``). A groupwire broker answers it at once,
before any authentication or group work; a peer that accepted the connection and stays
silent (an HTTP server waiting for a line end, a wrong port) is no broker to wait 30 s
for."""

SOFTWARE_NAME: Final = "groupwire-python"


class NoApiVersionsAnswerError(TimeoutError):
    """A peer accepted the connection and did not answer ApiVersions in time: it does not
    speak groupwire (or is stalled). Before a client ever connected, a round of these is
    given up on at once; a connected client's broker may be paused, and is waited for."""


@functools.cache
def software_version() -> str:
    """Sent in ApiVersions, as Kafka's clients send theirs: the installed package's
    version, read when a first connection is made (importlib.metadata costs a command
    that never connects 20 ms)."""
    from importlib import metadata

    try:
        return metadata.version("groupwire")
    except metadata.PackageNotFoundError:  # a checkout that was never installed
        return "0+unknown"


def __getattr__(name: str) -> str:
    if name == "SOFTWARE_VERSION":  # the old name of software_version()
        return software_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def backoff_s(attempt: int, base_ms: int, max_ms: int, rng: random.Random | None = None,
              ) -> float:
    """Exponential backoff with full jitter in its upper half: ``attempt`` 0 is ~``base``."""
    ceiling = min(max_ms, base_ms * (1 << min(attempt, 30)))
    r = rng.random() if rng is not None else random.random()
    return (ceiling * (0.5 + 0.5 * r)) / 1000.0


def _describe(failures: dict[str, BaseException]) -> str:
    """``"a:1, b:2: connection refused"``, or one reason per address when they differ."""
    reasons = {addr: _reason(exc) for addr, exc in failures.items()}
    if len(set(reasons.values())) == 1:
        return f"{', '.join(reasons)}: {next(iter(reasons.values()))}"
    return ", ".join(f"{addr} ({why})" for addr, why in reasons.items())


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.gaierror):
        return f"host name not resolved ({exc.strerror or exc})"
    if isinstance(exc, TimeoutError):
        return str(exc) or "timed out"
    return str(exc) or type(exc).__name__


def _raise_if_hopeless(failures: dict[str, BaseException], rounds: int,
                       connected_once: bool, tls: bool = False) -> None:
    """Raise when a full round failed for reasons waiting will not mend: all not groupwire;
    or, for a client that never connected, all refused, unresolvable (Kafka's clients
    refuse a bootstrap list with no resolvable address, too) or silent after accepting the
    connection, or all closed at once round after round (a connected client's broker may
    be restarting or paused: it waits)."""
    errors = list(failures.values())
    if all(isinstance(e, IncompatibleBrokerError) for e in errors):
        raise IncompatibleBrokerError("; ".join(str(e) for e in errors)) from errors[-1]
    if connected_once:
        return
    if all(isinstance(e, ConnectionRefusedError | socket.gaierror | IncompatibleBrokerError
                      | TlsHandshakeError | NoApiVersionsAnswerError) for e in errors):
        if all(isinstance(e, TlsHandshakeError) for e in errors):
            raise TlsHandshakeError("; ".join(dict.fromkeys(str(e) for e in errors))
                                    ) from errors[-1]
        raise BrokerNotAvailableError(
            f"no broker reachable at {_describe(failures)}") from errors[-1]
    if rounds >= CLOSED_HANDSHAKE_ROUNDS and all(
            isinstance(e, ConnectionClosedError) for e in errors):
        raise BrokerNotAvailableError(
            f"no broker reachable at {_describe(failures)} (is it a groupwire broker?)"
            f"{'' if tls else '; a TLS listener needs security_protocol SSL or SASL_SSL'}"
        ) from errors[-1]


@dataclass(frozen=True, slots=True)
class PartitionLeader:
    """Who leads a partition, in which leader epoch (-1: none elected / unknown)."""

    node_id: int
    epoch: int = -1


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    """One Metadata answer: partitions per topic, which are internal, per-topic errors,
    the brokers, the controller and each partition's leader."""

    partitions: dict[str, int] = field(default_factory=dict)
    internal: frozenset[str] = frozenset()
    errors: dict[str, int] = field(default_factory=dict)
    brokers: list[tuple[int, str, int]] = field(default_factory=list)
    cluster_id: str = ""
    controller_id: int = -1
    leaders: dict[TopicPartition, PartitionLeader] = field(default_factory=dict)

    def partitions_for(self, topic: str) -> int | None:
        """The topic's partition count, or None if it is unknown (or errored)."""
        return self.partitions.get(topic)


def _read_exception(task: asyncio.Task[ClusterMetadata]) -> None:
    """A shared refresh whose every waiter was cancelled: its error is not news."""
    if not task.cancelled():
        task.exception()


class Cluster:
    """Connections to the cluster's brokers for one client."""

    def __init__(self, bootstrap: str | list[str], *, client_id: str = "groupwire",
                 request_timeout_ms: int = 30000, retry_backoff_ms: int = 100,
                 retry_backoff_max_ms: int = 1000,
                 api_version_request_timeout_ms: int = API_VERSION_REQUEST_TIMEOUT_MS,
                 security: SecurityConfig | None = None) -> None:
        if api_version_request_timeout_ms <= 0:
            raise ValueError("api_version_request_timeout_ms must be > 0")
        self.bootstrap = parse_bootstrap(bootstrap)
        self.client_id = client_id
        self.security = security or SecurityConfig()
        """How every connection of this client is made (TLS, SASL)."""
        self._tls = self.security.tls_context()
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = max(retry_backoff_max_ms, retry_backoff_ms)
        self.api_version_request_timeout_ms = api_version_request_timeout_ms
        """The longest wait for a new connection's ApiVersions answer (within the
        caller's own timeout)."""
        self.max_frame_bytes = DEFAULT_MAX_FRAME_BYTES
        self.api_versions: dict[ApiKey, int] = {}
        self.broker_versions: ApiVersionsResponse | None = None
        """The latest ApiVersions answer, as the broker sent it."""
        self.metadata_cache: ClusterMetadata | None = None
        self.nodes: dict[int, tuple[str, int]] = {}
        self._last_coordinator_node = -1
        """node id -> (host, port), from Metadata (and FindCoordinator answers)."""
        self.controller_id = -1
        self.leaders: dict[TopicPartition, PartitionLeader] = {}
        self._single_node: int | None = None  # the node id when Metadata named one broker
        self._node_conns: dict[int, Connection] = {}
        self._node_locks: dict[int, asyncio.Lock] = {}
        self._stale = False
        self._refresh: asyncio.Task[ClusterMetadata] | None = None
        self._refreshed_at: float | None = None
        self._topics: set[str] = set()  # topics whose leaders this client routes by
        self._led_topics: set[str] = set()  # topics whose partitions' leaders are known
        self._conn: Connection | None = None
        self._lock: asyncio.Lock | None = None
        self._next_address = 0
        self._connected_once = False
        self.connected_to: tuple[str, int] | None = None
        self._closed = False

    # --- connections ----------------------------------------------------------------------

    async def connection(self, deadline: float | None = None) -> Connection:
        """The shared (bootstrap) connection, (re)opened and checked when needed."""
        return await self._connection(deadline)

    async def _connection(self, deadline: float | None) -> Connection:
        self._check_open()
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            self._check_open()
            if self._conn is None or self._conn.closed:
                if self._conn is not None:
                    await self._conn.close()
                self._conn = await self._open_checked(deadline)
            return self._conn

    async def new_connection(self, deadline: float | None = None) -> Connection:
        """A separate checked connection the caller owns (and closes), on the running loop;
        tries until ``deadline`` (loop time; default: the request timeout from now).
        :attr:`connected_to` is the bootstrap address it reached."""
        self._check_open()
        return await self._open_checked(deadline)

    async def _open_checked(self, deadline: float | None) -> Connection:
        """Connect and check, trying each address in turn until ``deadline`` (loop time;
        default: the request timeout from now).

        Failures that waiting will not mend end the wait early: before this client has
        ever connected, a round in which every address refused the connection, or
        answered with something that is not groupwire, raises at once. Timeouts, resets
        and a broker restarting behind a known address are retried until the deadline.
        """
        loop = asyncio.get_running_loop()
        if deadline is None:
            deadline = loop.time() + self.request_timeout_ms / 1000
        attempt = 0
        n = len(self.bootstrap)
        round_failures: dict[str, BaseException] = {}
        latest: dict[str, BaseException] = {}  # each address's latest failure, for the message
        while True:
            host, port = self.bootstrap[self._next_address % n]
            remaining = deadline - loop.time()
            try:
                conn = await self.open_one(host, port, max(remaining, 0.001))
            except (OSError, TimeoutError, ConnectionClosedError, IncompatibleBrokerError
                    ) as exc:
                round_failures[f"{host}:{port}"] = latest[f"{host}:{port}"] = exc
            else:
                self._connected_once = True
                self.connected_to = (host, port)
                return conn
            self._next_address += 1
            attempt += 1
            rounds, end_of_round = divmod(attempt, n)
            if end_of_round == 0:
                _raise_if_hopeless(round_failures, rounds, self._connected_once,
                                   self._tls is not None)
                round_failures = {}
            # Back off only once every address of the list has failed in this round.
            delay = backoff_s(rounds, self.retry_backoff_ms, self.retry_backoff_max_ms
                              ) if end_of_round == 0 else 0.0
            if loop.time() + delay >= deadline:
                raise BrokerNotAvailableError(f"no broker reachable at {_describe(latest)}"
                                              ) from list(latest.values())[-1]
            if delay:
                await asyncio.sleep(delay)

    async def open_one(self, host: str, port: int, timeout: float) -> Connection:
        """One connection to ``host:port``, opened and checked by ApiVersions within
        ``timeout`` s in all (the ApiVersions answer within
        :attr:`api_version_request_timeout_ms` of that), then authenticated when the
        client uses SASL, with no retry: raises what went wrong (OSError for a refusal,
        :class:`TlsHandshakeError` for a failed TLS handshake,
        :class:`IncompatibleBrokerError` for a peer that is no groupwire broker,
        ConnectionClosedError for one that hung up, :class:`NoApiVersionsAnswerError`
        for one silent after connecting, TimeoutError for no connection in time; these
        last say what happened without the address, which the caller
        names; :class:`AuthenticationFailedError`, which no caller retries, for refused
        credentials)."""
        address = f"{host}:{port}"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            conn = await Connection.open(host, port, client_id=self.client_id,
                                         max_frame_bytes=self.max_frame_bytes,
                                         connect_timeout=timeout, ssl_context=self._tls)
        except TimeoutError:
            raise TimeoutError(f"no connection within {timeout * 1000:.0f} ms") from None
        probe_s = min(max(deadline - loop.time(), 0.001),
                      self.api_version_request_timeout_ms / 1000)
        try:
            resp = await conn.send(
                ApiVersionsRequest(client_software_name=SOFTWARE_NAME,
                                   client_software_version=software_version()),
                timeout=probe_s, response_type=ApiVersionsResponse)
            self._check_versions(resp)
        except ConnectionClosedError as exc:
            await conn.close()
            head = conn.received_head
            if isinstance(conn.failure, ssl.SSLError):
                # TLS 1.3: a client certificate the broker refused shows up at the first read
                raise TlsHandshakeError(tls_failure(address, conn.failure)) from exc
            if head[:1] in (b"\x15", b"\x16") and head[1:2] == b"\x03":
                raise IncompatibleBrokerError(
                    f"{address} speaks TLS: set security_protocol to SSL or SASL_SSL",
                    reason="it speaks TLS: set security_protocol to SSL or SASL_SSL"
                ) from exc
            if isinstance(conn.failure, ProtocolError) or head:
                why = (f"it answered {show_answer(head)}" if head else
                       f"its answer is not the groupwire protocol ({conn.failure})")
                if not isinstance(conn.failure, ProtocolError):
                    why += " and closed the connection"
                raise IncompatibleBrokerError(
                    f"{address} is not a groupwire broker: {why}",
                    reason=f"not a groupwire broker: {why}") from exc
            if self._tls is not None and not head:
                # asyncio reads TLS 1.3's "certificate required" / "bad certificate" alert,
                # sent once the handshake is over, as a plain end of stream
                raise TlsHandshakeError(
                    f"{address} closed the TLS connection without answering: a broker "
                    "that requires a client certificate refuses one that is missing, "
                    "expired or not signed by a CA it trusts this way (check the "
                    "certificate ssl_context presents)") from exc
            how = "reset" if isinstance(conn.failure, ConnectionResetError) else "closed"
            raise ConnectionClosedError(f"{how} the connection without answering") from exc
        except TimeoutError:
            await conn.close()
            raise NoApiVersionsAnswerError(
                f"connected, but no answer to ApiVersions within {probe_s * 1000:.0f} ms: "
                f"it does not speak groupwire (or is stalled)") from None
        except BaseException:
            await conn.close()
            raise
        announced = resp.max_frame_bytes
        if announced > self.max_frame_bytes:
            # Accept at least what the broker may send: reopen with its limit.
            self.max_frame_bytes = announced
            await conn.close()
            return await self.open_one(host, port, max(deadline - loop.time(), 0.001))
        try:
            await authenticate(conn, self.security, max(deadline - loop.time(), 0.001))
        except TimeoutError:
            await conn.close()
            raise TimeoutError(f"connected, but {self.security.sasl_mechanism} "
                               f"authentication did not finish within "
                               f"{timeout * 1000:.0f} ms") from None
        except BaseException:
            await conn.close()
            raise
        return conn

    def _check_versions(self, resp: ApiVersionsResponse) -> None:
        self.broker_versions = resp
        if resp.error_code != ErrorCode.NONE:
            raise error_for(resp.error_code, resp.error_message or "ApiVersions")
        theirs = {v.api_key: (v.min_version, v.max_version) for v in resp.api_keys}
        chosen: dict[ApiKey, int] = {}
        for key, (lo, hi) in SUPPORTED_VERSIONS.items():
            if key not in theirs:
                continue  # an API the broker lacks fails when (if ever) it is used
            b_lo, b_hi = theirs[key]
            top = min(hi, b_hi)
            if top < max(lo, b_lo):
                raise IncompatibleBrokerError(
                    f"{key.name}: broker supports v{b_lo}-{b_hi}, client v{lo}-{hi}",
                    reason=f"incompatible: {key.name}: broker supports v{b_lo}-{b_hi}, "
                           f"client v{lo}-{hi}")
            chosen[key] = top
        self.api_versions = chosen

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("the client is closed")

    # --- requests -------------------------------------------------------------------------

    async def send(self, request: Request, *, timeout_ms: int | None = None,
                   response_type: type[R] | None = None) -> R:
        """Send on the shared connection and await the answer.

        After a lost connection, idempotent requests (:data:`IDEMPOTENT_APIS`) are sent
        again on a new one until ``timeout_ms`` (default: the request timeout) runs out;
        others raise :class:`ConnectionClosedError`, as their outcome is unknown. No answer
        in time raises :class:`RequestTimedOutError`.
        """
        total_ms = self.request_timeout_ms if timeout_ms is None else timeout_ms
        loop = asyncio.get_running_loop()
        deadline = loop.time() + total_ms / 1000
        retry = request.API_KEY in IDEMPOTENT_APIS
        attempt = 0
        while True:
            conn = await self._connection(deadline)
            remaining = deadline - loop.time()
            try:
                return await conn.send(request, timeout=max(remaining, 0.001),
                                       response_type=response_type)
            except TimeoutError:
                raise RequestTimedOutError(
                    f"{request.API_KEY.name}: no answer within {total_ms} ms") from None
            except ConnectionClosedError:
                if not retry or self._closed:
                    raise
                delay = backoff_s(attempt, self.retry_backoff_ms, self.retry_backoff_max_ms)
                if loop.time() + delay >= deadline:
                    raise
                attempt += 1
                await asyncio.sleep(delay)

    async def metadata(self, topics: list[str] | None = None, *,
                       allow_auto_topic_creation: bool = False) -> ClusterMetadata:
        """Fresh Metadata for ``topics`` (None: all); also kept in :attr:`metadata_cache`."""
        req = MetadataRequest(
            topics=None if topics is None else [MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=allow_auto_topic_creation)
        loop = asyncio.get_running_loop()
        resp = await self._send_any(req)
        if resp.error_code != ErrorCode.NONE:
            raise error_for(resp.error_code, resp.error_message or "Metadata")
        partitions: dict[str, int] = {}
        errors: dict[str, int] = {}
        internal: set[str] = set()
        leaders: dict[TopicPartition, PartitionLeader] = {}
        for t in resp.topics:
            if t.error_code != ErrorCode.NONE:
                errors[t.name] = t.error_code
                continue
            partitions[t.name] = len(t.partitions)
            if t.is_internal:
                internal.add(t.name)
            for p in t.partitions:
                leaders[TopicPartition(t.name, p.partition_index)] = PartitionLeader(
                    p.leader_id, p.leader_epoch)
        md = ClusterMetadata(partitions=partitions, internal=frozenset(internal),
                             errors=errors,
                             brokers=[(b.node_id, b.host, b.port) for b in resp.brokers],
                             cluster_id=resp.cluster_id, controller_id=resp.controller_id,
                             leaders=leaders)
        self._merge_cache(md, full=topics is None)
        self._learn(md, topics)
        self._refreshed_at = loop.time()
        return md

    def _learn(self, md: ClusterMetadata, topics: list[str] | None) -> None:
        """Take the brokers, controller and leaders of one answer as the routing truth."""
        if md.brokers:
            self.nodes.update({n: (h, p) for n, h, p in md.brokers})
            self._single_node = md.brokers[0][0] if len(md.brokers) == 1 else None
        self.controller_id = md.controller_id
        named = set(md.partitions) | set(md.errors) if topics is not None else None
        for tp in [tp for tp in self.leaders if named is None or tp.topic in named]:
            del self.leaders[tp]  # a topic answered again: only its new partitions count
        self.leaders.update(md.leaders)
        if topics is None:
            self._led_topics = set(md.partitions)
        else:
            self._led_topics = (self._led_topics - set(md.errors)) | set(md.partitions)
        covered = self._topics if topics is None else set(topics)
        if covered >= self._topics:
            self._stale = False

    def _merge_cache(self, md: ClusterMetadata, *, full: bool) -> None:
        old = self.metadata_cache
        if full or old is None:
            self.metadata_cache = md
            return
        parts = {k: v for k, v in old.partitions.items() if k not in md.errors}
        parts.update(md.partitions)
        self.metadata_cache = ClusterMetadata(
            partitions=parts, internal=old.internal | md.internal, errors=dict(md.errors),
            brokers=md.brokers, cluster_id=md.cluster_id, controller_id=md.controller_id,
            leaders={**{tp: ld for tp, ld in old.leaders.items() if tp.topic in parts
                        and tp.topic not in md.partitions}, **md.leaders})

    # --- routing --------------------------------------------------------------------------

    @property
    def stale(self) -> bool:
        """The leaders known may be out of date: the next use refreshes them."""
        return self._stale

    def mark_stale(self) -> None:
        self._stale = True

    def leader(self, tp: TopicPartition) -> PartitionLeader | None:
        """``tp``'s leader as last read (None: unknown or none elected)."""
        ld = self.leaders.get(tp)
        return ld if ld is not None and ld.node_id >= 0 else None

    async def ensure_leaders(self, topics: Iterable[str]) -> None:
        """Read metadata when it is stale or lacks a leader of ``topics``; callers at once
        share one request, and a stale refresh waits out the backoff since the last."""
        wanted = set(topics)
        self._topics |= wanted
        if self._stale or not wanted <= self._led_topics:
            await self.refresh_metadata()

    async def refresh_metadata(self) -> ClusterMetadata:
        """One Metadata for every routed topic, shared by whoever asks while it runs."""
        task = self._refresh
        if task is None or task.done():
            task = self._refresh = asyncio.get_running_loop().create_task(
                self._refresh_once(), name="groupwire-metadata")
            task.add_done_callback(_read_exception)
        return await asyncio.shield(task)

    async def _refresh_once(self) -> ClusterMetadata:
        loop = asyncio.get_running_loop()
        if self._refreshed_at is not None:
            wait = self._refreshed_at + self.retry_backoff_ms / 1000 - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
        return await self.metadata(sorted(self._topics))

    def add_node(self, node_id: int, host: str, port: int) -> None:
        """A node named outside Metadata (a FindCoordinator answer)."""
        if node_id >= 0:
            self.nodes[node_id] = (host, port)

    def is_bootstrap_node(self, node_id: int) -> bool:
        """Whether ``node_id`` is reached through the bootstrap connection: the only broker
        of a one-broker cluster (its advertised address may not be the one dialled), or
        the node advertising the address the bootstrap connection reached."""
        if node_id == self._single_node:
            return True
        addr = self.nodes.get(node_id)
        return addr is not None and addr == self.connected_to

    async def node_connection(self, node_id: int, deadline: float | None = None,
                              ) -> Connection:
        """A checked connection to ``node_id``, kept for reuse; one attempt (a node that
        cannot be reached marks the metadata stale and raises
        :class:`BrokerNotAvailableError`)."""
        self._check_open()
        if self.is_bootstrap_node(node_id):
            return await self._connection(deadline)
        conn = self._node_conns.get(node_id)
        if conn is not None and not conn.closed:
            return conn
        addr = self.nodes.get(node_id)
        if addr is None:
            self._stale = True
            raise BrokerNotAvailableError(f"node {node_id} is not in the metadata")
        lock = self._node_locks.setdefault(node_id, asyncio.Lock())
        async with lock:
            self._check_open()
            conn = self._node_conns.get(node_id)
            if conn is not None and not conn.closed:
                return conn
            if conn is not None:
                await conn.close()
            loop = asyncio.get_running_loop()
            if deadline is None:
                deadline = loop.time() + self.request_timeout_ms / 1000
            host, port = addr
            try:
                conn = await self.open_one(host, port, max(deadline - loop.time(), 0.001))
            except (OSError, TimeoutError, ConnectionClosedError) as exc:
                self._stale = True
                raise BrokerNotAvailableError(
                    f"node {node_id} at {host}:{port}: {_reason(exc)}") from exc
            self._node_conns[node_id] = conn
            return conn

    async def send_to(self, node_id: int, request: Request, *, timeout_ms: int | None = None,
                      response_type: type[R] | None = None) -> R:
        """Send to one node and await the answer; no retry, as the caller routes again
        (a lost connection marks the metadata stale and raises
        :class:`ConnectionClosedError`; no answer in time raises
        :class:`RequestTimedOutError`)."""
        total_ms = self.request_timeout_ms if timeout_ms is None else timeout_ms
        loop = asyncio.get_running_loop()
        deadline = loop.time() + total_ms / 1000
        conn = await self.node_connection(node_id, deadline)
        try:
            return await conn.send(request, timeout=max(deadline - loop.time(), 0.001),
                                   response_type=response_type)
        except TimeoutError:
            # As Kafka's clients do: a node that does not answer in time is dropped
            # (a stalled broker keeps its connections open) and metadata is read again,
            # elsewhere, so the next attempt goes to whoever leads now.
            self._stale = True
            if self._node_conns.get(node_id) is conn:
                del self._node_conns[node_id]
            await conn.close()
            raise RequestTimedOutError(
                f"{request.API_KEY.name} to node {node_id}: no answer within {total_ms} ms"
            ) from None
        except ConnectionClosedError:
            self._stale = True
            raise

    async def _send_any(self, request: Request) -> MetadataResponse:
        """Metadata from any live node: an open node connection first, else the bootstrap
        connection (with its retries across the bootstrap list)."""
        # The least loaded first (Kafka's leastLoadedNode): a stalled broker piles up
        # requests, so it is asked last.
        for node_id, conn in sorted(self._node_conns.items(),
                                    key=lambda item: item[1].in_flight):
            if conn.closed:
                continue
            try:
                return await conn.send(request, timeout=self.request_timeout_ms / 1000,
                                       response_type=MetadataResponse)
            except (ConnectionClosedError, TimeoutError):
                if self._node_conns.get(node_id) is conn:
                    del self._node_conns[node_id]
                await conn.close()
        return await self.send(request, response_type=MetadataResponse)

    async def list_offsets(self, specs: dict[TopicPartition, int], *,
                           timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        """ListOffsets sent to each partition's leader; partitions whose leader moved are
        asked again of the new one until ``timeout_ms`` (default: the request timeout)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.request_timeout_ms if timeout_ms is None
                                  else timeout_ms) / 1000
        left = dict(specs)
        out: dict[TopicPartition, int] = {}
        attempt = 0
        while left:
            last: BaseException | None = None
            try:
                await self.ensure_leaders({tp.topic for tp in left})
            except (GroupwireError, ConnectionError) as exc:
                last = exc
            by_node: dict[int, list[TopicPartition]] = {}
            for tp in left:
                ld = self.leader(tp)
                if ld is None:
                    self._stale = True
                    last = error_for(ErrorCode.LEADER_NOT_AVAILABLE, f"{tp}: no leader")
                    continue
                by_node.setdefault(ld.node_id, []).append(tp)
            for node_id, tps in by_node.items():
                by_topic: dict[str, list[ListOffsetsPartition]] = {}
                for tp in tps:
                    by_topic.setdefault(tp.topic, []).append(ListOffsetsPartition(
                        partition_index=tp.partition, timestamp=left[tp]))
                try:
                    resp = await self.send_to(node_id, ListOffsetsRequest(topics=[
                        ListOffsetsTopic(name=t, partitions=ps)
                        for t, ps in by_topic.items()]), response_type=ListOffsetsResponse)
                except (ConnectionError, BrokerNotAvailableError, RequestTimedOutError
                        ) as exc:
                    last = exc
                    continue
                if resp.error_code != ErrorCode.NONE:
                    raise error_for(resp.error_code, resp.error_message or "ListOffsets")
                for t in resp.topics:
                    for p in t.partitions:
                        tp = TopicPartition(t.name, p.partition_index)
                        if p.error_code == ErrorCode.NONE:
                            out[tp] = p.offset
                            left.pop(tp, None)
                            continue
                        err = error_for(p.error_code,
                                        p.error_message or f"{t.name}[{p.partition_index}]")
                        if p.error_code not in STALE_METADATA_ERRORS or not err.retriable:
                            raise err
                        self._stale = True
                        last = err
            if not left:
                break
            delay = backoff_s(attempt, self.retry_backoff_ms, self.retry_backoff_max_ms)
            if loop.time() + delay >= deadline:
                if isinstance(last, BaseException):
                    raise last
                raise RequestTimedOutError(f"ListOffsets: {sorted(left)} unanswered")
            attempt += 1
            await asyncio.sleep(delay)
        return out

    async def coordinator_node(self, group_id: str) -> int:
        """The node id of the group's coordinator, known as a node from then on
        (``send_to`` reaches it); retriable errors are retried."""
        await self.find_coordinator(group_id)
        return self._last_coordinator_node

    async def find_coordinator(self, group_id: str) -> tuple[str, int]:
        """``(host, port)`` of the group's coordinator; retriable errors are retried."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.request_timeout_ms / 1000
        attempt = 0
        while True:
            resp = await self.send(FindCoordinatorRequest(key=group_id),
                                   response_type=FindCoordinatorResponse)
            if resp.error_code == ErrorCode.NONE:
                self.add_node(resp.node_id, resp.host, resp.port)
                self._last_coordinator_node = resp.node_id
                return resp.host, resp.port
            err = error_for(resp.error_code, resp.error_message or f"group {group_id!r}")
            delay = backoff_s(attempt, self.retry_backoff_ms, self.retry_backoff_max_ms)
            if not err.retriable or loop.time() + delay >= deadline:
                raise err
            attempt += 1
            await asyncio.sleep(delay)

    async def close(self) -> None:
        self._closed = True
        conns = [self._conn, *self._node_conns.values()]
        self._conn = None
        self._node_conns.clear()
        refresh, self._refresh = self._refresh, None
        if refresh is not None and not refresh.done():
            refresh.cancel()
        for conn in conns:
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()

    @property
    def closed(self) -> bool:
        return self._closed
