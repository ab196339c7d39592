"""The consumer's app-loop connection to its group coordinator.

Asks FindCoordinator for the group (when there is one) over the shared :class:`Cluster`
and uses the cluster's connection to that node (the bootstrap connection when the
coordinator is the broker it reaches: same address, or the only broker of the cluster);
``send`` retries idempotent requests after a lost connection, finding the coordinator
again. The heartbeat thread reads :attr:`coordinator` to open its own connection on its
own loop, and finds the coordinator itself (:func:`find_coordinator_on`) when it moves.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Final, TypeVar

from groupwire.client.cluster import API_VERSION_REQUEST_TIMEOUT_MS, Cluster
from groupwire.client.connection import Connection
from groupwire.client.errors import ConnectionClosedError, GroupwireError, error_for
from groupwire.client.security import SecurityConfig
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    ApiKey,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
    Request,
    Response,
)

__all__ = [
    "COORDINATOR_MOVED",
    "COORDINATOR_RETRY_MAX_MS",
    "CoordinatorLink",
    "backoff_ms",
    "find_coordinator_on",
]

log = logging.getLogger("groupwire.consumer")

R = TypeVar("R", bound=Response)

COORDINATOR_MOVED: Final = frozenset({ErrorCode.NOT_COORDINATOR,
                                      ErrorCode.COORDINATOR_NOT_AVAILABLE})
"""Answers after which the group's coordinator is looked up again."""

_CHECKED_APIS: Final = frozenset({ApiKey.OFFSET_FETCH})
"""Requests whose coordinator errors ``send`` handles itself (commits, joins and
heartbeats feed theirs to the membership)."""


COORDINATOR_RETRY_MAX_MS: Final = 250
"""Longest pause between two lookups of a group's coordinator. A coordinator that died
is replaced within the cluster's lease TTL, and a member should find the new one soon
after, not a doubling backoff later; a lookup is one small request (Kafka's clients
used a flat 100 ms)."""


def backoff_ms(attempt: int, base_ms: int, max_ms: int = 1000) -> int:
    return int(min(base_ms * 2 ** min(attempt, 10), max_ms))


async def find_coordinator_on(conn: Connection, group_id: str, here: tuple[str, int],
                              timeout: float) -> tuple[str, int] | None:
    """The group's coordinator as the broker at ``here`` (reached by ``conn``) names it;
    ``here`` itself when it is that broker (same address, or the only broker of a
    one-broker cluster, whose advertised address may not be the one dialled). None: no
    coordinator now. A refusal no retry mends (GROUP_AUTHORIZATION_FAILED) raises."""
    found = await conn.send(FindCoordinatorRequest(key=group_id), timeout=timeout,
                            response_type=FindCoordinatorResponse)
    _raise_if_refused(found, group_id)
    if found.error_code != ErrorCode.NONE:
        return None
    addr = (found.host, found.port)
    if addr == here:
        return here
    md = await conn.send(MetadataRequest(topics=[], allow_auto_topic_creation=False),
                         timeout=timeout, response_type=MetadataResponse)
    if len(md.brokers) == 1 and md.brokers[0].node_id == found.node_id:
        return here
    return addr


def _raise_if_refused(found: FindCoordinatorResponse, group_id: str) -> None:
    """FindCoordinator refused by the broker's ACLs (this principal may not DESCRIBE the
    group): waiting will not mend it, so it is raised, naming the group."""
    code = found.error_code
    if code in (ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.CLUSTER_AUTHORIZATION_FAILED):
        raise error_for(code, found.error_message or f"FindCoordinator for {group_id!r}",
                        group_id=group_id)


class CoordinatorLink:
    def __init__(self, bootstrap: list[tuple[str, int]], *, group_id: str | None,
                 client_id: str, request_timeout_ms: int, retry_backoff_ms: int,
                 api_version_request_timeout_ms: int = API_VERSION_REQUEST_TIMEOUT_MS,
                 security: SecurityConfig | None = None) -> None:
        self.cluster = Cluster([f"{h}:{p}" for h, p in bootstrap], client_id=client_id,
                               request_timeout_ms=request_timeout_ms,
                               retry_backoff_ms=retry_backoff_ms,
                               api_version_request_timeout_ms=api_version_request_timeout_ms,
                               security=security)
        """Connections, metadata and leaders: shared with the fetcher."""
        self._group_id = group_id
        self._client_id = client_id
        self._timeout = request_timeout_ms / 1000
        self._backoff_ms = retry_backoff_ms
        self._conn: Connection | None = None
        self._lock = asyncio.Lock()
        self.coordinator: tuple[str, int] | None = None
        self.coordinator_id: int | None = None
        self.closed = False

    async def connection(self) -> Connection:
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        async with self._lock:
            if self._conn is not None and not self._conn.closed:
                return self._conn
            self._conn = await self._open()
            return self._conn

    async def drop(self) -> None:
        """Forget the coordinator (it moved or failed): the next send finds it again. The
        connection stays the cluster's (fetches may share it)."""
        self._conn = None

    async def close(self) -> None:
        self.closed = True
        self._conn = None
        await self.cluster.close()

    async def send(self, request: Request, *, timeout: float | None = None,
                   retry: bool = True, response_type: type[R] | None = None) -> Any:
        """Send; on a lost connection find the coordinator again and, when ``retry``,
        send again. An OffsetFetch answered NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE
        goes to the coordinator found again, COORDINATOR_LOAD_IN_PROGRESS to the same one
        after a backoff, until the request timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        attempt = 0
        while True:
            conn = await self.connection()
            try:
                resp = await conn.send(request, timeout=timeout or self._timeout,
                                       response_type=response_type)
            except ConnectionClosedError:
                if self._conn is conn:
                    self._conn = None
                attempt += 1
                if not retry or loop.time() >= deadline or self.closed:
                    raise
                await asyncio.sleep(backoff_ms(attempt, self._backoff_ms) / 1000)
                continue
            code = getattr(resp, "error_code", ErrorCode.NONE)
            if (retry and request.API_KEY in _CHECKED_APIS and not self.closed
                    and (code in COORDINATOR_MOVED
                         or code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
                    and loop.time() < deadline):
                if code in COORDINATOR_MOVED:
                    await self.drop()
                attempt += 1
                await asyncio.sleep(backoff_ms(attempt, self._backoff_ms) / 1000)
                continue
            return resp

    async def _open(self) -> Connection:
        """A checked connection to the group's coordinator (to the bootstrap broker without
        a group). Unreachable or non-groupwire bootstrap addresses raise as the shared
        :class:`Cluster` decides (at once before the first connection); a coordinator not
        known yet is asked again with backoff until the request timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        attempt = 0
        while True:
            conn = await self.cluster.connection(deadline)
            if self._group_id is None:
                self.coordinator = self.cluster.connected_to
                return conn
            found = await self._coordinator_of(conn, deadline)
            if found is not None:
                return found
            attempt += 1
            if loop.time() >= deadline or self.closed:
                raise ConnectionClosedError(
                    f"no coordinator for group {self._group_id!r} within "
                    f"{int(self._timeout * 1000)} ms")
            await asyncio.sleep(backoff_ms(attempt, self._backoff_ms,
                                           COORDINATOR_RETRY_MAX_MS) / 1000)

    async def _coordinator_of(self, conn: Connection, deadline: float) -> Connection | None:
        """Ask ``conn`` for the coordinator; the cluster's connection to it (``conn``
        itself when the bootstrap broker is the coordinator), or None when that failed
        for now."""
        cluster = self.cluster
        try:
            found = await conn.send(FindCoordinatorRequest(key=self._group_id or ""),
                                    timeout=self._timeout, response_type=FindCoordinatorResponse)
        except (ConnectionError, TimeoutError) as exc:
            log.debug("FindCoordinator on %s failed: %s", conn.peer, exc)
            return None
        _raise_if_refused(found, self._group_id or "")
        if found.error_code != ErrorCode.NONE:
            return None
        here = cluster.connected_to
        node = found.node_id
        cluster.add_node(node, found.host, found.port)
        if (found.host, found.port) != here and cluster.metadata_cache is None:
            try:  # is this a one-broker cluster advertising another name for itself?
                await cluster.metadata([])
            except (GroupwireError, ConnectionError, TimeoutError) as exc:
                log.debug("metadata for the coordinator failed: %s", exc)
                return None
        self.coordinator_id = node
        if (found.host, found.port) == here or cluster.is_bootstrap_node(node):
            self.coordinator = here
            return await cluster.connection(deadline)
        self.coordinator = (found.host, found.port)
        try:
            return await cluster.node_connection(node, deadline)
        except (GroupwireError, ConnectionError) as exc:
            log.debug("connect to coordinator %s:%s failed: %s", found.host, found.port, exc)
            return None
