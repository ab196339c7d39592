"""The client's view of the cluster: a checked connection, retries, metadata, coordinators.

Producer, Consumer and Admin share this one shell so that connecting (ApiVersions first,
backoff with jitter across the bootstrap list), retrying idempotent requests after a lost
connection and reading Metadata behave the same everywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
from dataclasses import dataclass, field
from importlib import metadata
from typing import Final, TypeVar

from groupwire.client.connection import Connection, show_answer
from groupwire.client.errors import (
    BrokerNotAvailableError,
    ClientClosedError,
    ConnectionClosedError,
    IncompatibleBrokerError,
    RequestTimedOutError,
    error_for,
)
from groupwire.client.types import parse_bootstrap
from groupwire.protocol.errors import ErrorCode, ProtocolError
from groupwire.protocol.framing import DEFAULT_MAX_FRAME_BYTES
from groupwire.protocol.messages import (
    SUPPORTED_VERSIONS,
    ApiKey,
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
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

CLOSED_HANDSHAKE_ROUNDS: Final = 3
"""Rounds in which every address closed the connection before answering ApiVersions
after which a never-connected client stops trying (a peer that is no groupwire broker)."""

SOFTWARE_NAME: Final = "groupwire-python"


def _installed_version() -> str:
    try:
        return metadata.version("groupwire")
    except metadata.PackageNotFoundError:  # a checkout that was never installed
        return "0+unknown"


SOFTWARE_VERSION: Final = _installed_version()
"""Sent in ApiVersions, as Kafka's clients send theirs: the installed package's version."""


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
                       connected_once: bool) -> None:
    """Raise when a full round failed for reasons waiting will not mend: all not groupwire;
    or, for a client that never connected, all refused or unresolvable (Kafka's clients
    refuse a bootstrap list with no resolvable address, too), or all closed at once round
    after round (a connected client's broker may be restarting: it waits)."""
    errors = list(failures.values())
    if all(isinstance(e, IncompatibleBrokerError) for e in errors):
        raise IncompatibleBrokerError("; ".join(str(e) for e in errors)) from errors[-1]
    if connected_once:
        return
    if all(isinstance(e, ConnectionRefusedError | socket.gaierror | IncompatibleBrokerError)
           for e in errors):
        raise BrokerNotAvailableError(
            f"no broker reachable at {_describe(failures)}") from errors[-1]
    if rounds >= CLOSED_HANDSHAKE_ROUNDS and all(
            isinstance(e, ConnectionClosedError) for e in errors):
        raise BrokerNotAvailableError(
            f"no broker reachable at {_describe(failures)} (is it a groupwire broker?)"
        ) from errors[-1]


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    """One Metadata answer: partitions per topic, which are internal, per-topic errors."""

    partitions: dict[str, int] = field(default_factory=dict)
    internal: frozenset[str] = frozenset()
    errors: dict[str, int] = field(default_factory=dict)
    brokers: list[tuple[int, str, int]] = field(default_factory=list)
    cluster_id: str = ""

    def partitions_for(self, topic: str) -> int | None:
        """The topic's partition count, or None if it is unknown (or errored)."""
        return self.partitions.get(topic)


class Cluster:
    """Connections to the cluster (one broker today) for one client."""

    def __init__(self, bootstrap: str | list[str], *, client_id: str = "groupwire",
                 request_timeout_ms: int = 30000, retry_backoff_ms: int = 100,
                 retry_backoff_max_ms: int = 1000) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = max(retry_backoff_max_ms, retry_backoff_ms)
        self.max_frame_bytes = DEFAULT_MAX_FRAME_BYTES
        self.api_versions: dict[ApiKey, int] = {}
        self.broker_versions: ApiVersionsResponse | None = None
        """The latest ApiVersions answer, as the broker sent it."""
        self.metadata_cache: ClusterMetadata | None = None
        self._conn: Connection | None = None
        self._lock: asyncio.Lock | None = None
        self._next_address = 0
        self._connected_once = False
        self.connected_to: tuple[str, int] | None = None
        self._closed = False

    # --- connections ----------------------------------------------------------------------

    async def connection(self) -> Connection:
        """The shared connection, (re)opened and checked when needed."""
        return await self._connection(None)

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
                _raise_if_hopeless(round_failures, rounds, self._connected_once)
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
        ``timeout`` s in all, with no retry: raises what went wrong (OSError for a refusal,
        :class:`IncompatibleBrokerError` for a peer that is no groupwire broker,
        ConnectionClosedError for one that hung up, TimeoutError for silence; the last two
        say what happened without the address, which the caller names)."""
        address = f"{host}:{port}"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            conn = await Connection.open(host, port, client_id=self.client_id,
                                         max_frame_bytes=self.max_frame_bytes,
                                         connect_timeout=timeout)
        except TimeoutError:
            raise TimeoutError(f"no connection within {timeout * 1000:.0f} ms") from None
        try:
            resp = await conn.send(
                ApiVersionsRequest(client_software_name=SOFTWARE_NAME,
                                   client_software_version=SOFTWARE_VERSION),
                timeout=max(deadline - loop.time(), 0.001), response_type=ApiVersionsResponse)
            self._check_versions(resp)
        except ConnectionClosedError as exc:
            await conn.close()
            head = conn.received_head
            if isinstance(conn.failure, ProtocolError) or head:
                why = (f"it answered {show_answer(head)}" if head else
                       f"its answer is not the groupwire protocol ({conn.failure})")
                if not isinstance(conn.failure, ProtocolError):
                    why += " and closed the connection"
                raise IncompatibleBrokerError(
                    f"{address} is not a groupwire broker: {why}",
                    reason=f"not a groupwire broker: {why}") from exc
            how = "reset" if isinstance(conn.failure, ConnectionResetError) else "closed"
            raise ConnectionClosedError(f"{how} the connection without answering") from exc
        except TimeoutError:
            await conn.close()
            raise TimeoutError(f"connected, but no answer to ApiVersions within "
                               f"{timeout * 1000:.0f} ms (is it a groupwire broker?)"
                               ) from None
        except BaseException:
            await conn.close()
            raise
        announced = resp.max_frame_bytes
        if announced > self.max_frame_bytes:
            # Accept at least what the broker may send: reopen with its limit.
            self.max_frame_bytes = announced
            await conn.close()
            return await self.open_one(host, port, max(deadline - loop.time(), 0.001))
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
        resp = await self.send(req, response_type=MetadataResponse)
        if resp.error_code != ErrorCode.NONE:
            raise error_for(resp.error_code, resp.error_message or "Metadata")
        partitions: dict[str, int] = {}
        errors: dict[str, int] = {}
        internal: set[str] = set()
        for t in resp.topics:
            if t.error_code != ErrorCode.NONE:
                errors[t.name] = t.error_code
                continue
            partitions[t.name] = len(t.partitions)
            if t.is_internal:
                internal.add(t.name)
        md = ClusterMetadata(partitions=partitions, internal=frozenset(internal),
                             errors=errors,
                             brokers=[(b.node_id, b.host, b.port) for b in resp.brokers],
                             cluster_id=resp.cluster_id)
        self._merge_cache(md, full=topics is None)
        return md

    def _merge_cache(self, md: ClusterMetadata, *, full: bool) -> None:
        old = self.metadata_cache
        if full or old is None:
            self.metadata_cache = md
            return
        parts = {k: v for k, v in old.partitions.items() if k not in md.errors}
        parts.update(md.partitions)
        self.metadata_cache = ClusterMetadata(
            partitions=parts, internal=old.internal | md.internal, errors=dict(md.errors),
            brokers=md.brokers, cluster_id=md.cluster_id)

    async def find_coordinator(self, group_id: str) -> tuple[str, int]:
        """``(host, port)`` of the group's coordinator; retriable errors are retried."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.request_timeout_ms / 1000
        attempt = 0
        while True:
            resp = await self.send(FindCoordinatorRequest(key=group_id),
                                   response_type=FindCoordinatorResponse)
            if resp.error_code == ErrorCode.NONE:
                return resp.host, resp.port
            err = error_for(resp.error_code, resp.error_message or f"group {group_id!r}")
            delay = backoff_s(attempt, self.retry_backoff_ms, self.retry_backoff_max_ms)
            if not err.retriable or loop.time() + delay >= deadline:
                raise err
            attempt += 1
            await asyncio.sleep(delay)

    async def close(self) -> None:
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    @property
    def closed(self) -> bool:
        return self._closed
