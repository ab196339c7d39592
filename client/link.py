"""The consumer's app-loop connection to its group coordinator.

Opens the first reachable bootstrap address, asks FindCoordinator for the group (when
there is one) and reconnects with exponential backoff; ``send`` retries idempotent
requests after a lost connection. The heartbeat thread reads :attr:`coordinator` to open
its own connection on its own loop.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, TypeVar

from groupwire.client.cluster import Cluster
from groupwire.client.connection import Connection
from groupwire.client.errors import ConnectionClosedError
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    Request,
    Response,
)

__all__ = ["CoordinatorLink", "backoff_ms"]

log = logging.getLogger("groupwire.consumer")

R = TypeVar("R", bound=Response)


def backoff_ms(attempt: int, base_ms: int, max_ms: int = 1000) -> int:
    return int(min(base_ms * 2 ** min(attempt, 10), max_ms))


class CoordinatorLink:
    def __init__(self, bootstrap: list[tuple[str, int]], *, group_id: str | None,
                 client_id: str, request_timeout_ms: int, retry_backoff_ms: int) -> None:
        self._cluster = Cluster([f"{h}:{p}" for h, p in bootstrap], client_id=client_id,
                                request_timeout_ms=request_timeout_ms,
                                retry_backoff_ms=retry_backoff_ms)
        self._group_id = group_id
        self._client_id = client_id
        self._timeout = request_timeout_ms / 1000
        self._backoff_ms = retry_backoff_ms
        self._conn: Connection | None = None
        self._lock = asyncio.Lock()
        self.coordinator: tuple[str, int] | None = None
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
        """Forget the connection (coordinator moved or failed); the next send reconnects."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    async def close(self) -> None:
        self.closed = True
        await self.drop()
        await self._cluster.close()

    async def send(self, request: Request, *, timeout: float | None = None,
                   retry: bool = True, response_type: type[R] | None = None) -> Any:
        """Send; on a lost connection reconnect and, when ``retry``, send again."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        attempt = 0
        while True:
            conn = await self.connection()
            try:
                return await conn.send(request, timeout=timeout or self._timeout,
                                       response_type=response_type)
            except ConnectionClosedError:
                if self._conn is conn:
                    self._conn = None
                attempt += 1
                if not retry or loop.time() >= deadline or self.closed:
                    raise
                await asyncio.sleep(backoff_ms(attempt, self._backoff_ms) / 1000)

    async def _open(self) -> Connection:
        """A checked connection to the group's coordinator (to the bootstrap broker without
        a group). Unreachable or non-groupwire bootstrap addresses raise as the shared
        :class:`Cluster` decides (at once before the first connection); a coordinator not
        known yet is asked again with backoff until the request timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        attempt = 0
        while True:
            conn = await self._cluster.new_connection(deadline)
            if self._group_id is None:
                return conn
            found = await self._coordinator_of(conn)
            if found is not None:
                return found
            attempt += 1
            if loop.time() >= deadline or self.closed:
                raise ConnectionClosedError(
                    f"no coordinator for group {self._group_id!r} within "
                    f"{int(self._timeout * 1000)} ms")
            await asyncio.sleep(backoff_ms(attempt, self._backoff_ms) / 1000)

    async def _coordinator_of(self, conn: Connection) -> Connection | None:
        """Ask ``conn`` for the coordinator; a connection to it (``conn`` itself when the
        bootstrap broker is the coordinator), or None when that failed for now."""
        try:
            found = await conn.send(FindCoordinatorRequest(key=self._group_id or ""),
                                    timeout=self._timeout, response_type=FindCoordinatorResponse)
        except (ConnectionError, TimeoutError) as exc:
            log.debug("FindCoordinator on %s failed: %s", conn.peer, exc)
            await conn.close()
            return None
        if found.error_code != ErrorCode.NONE:
            await conn.close()
            return None
        here = self._cluster.connected_to
        if here is not None and found.port == here[1]:  # the bootstrap broker coordinates
            self.coordinator = here
            return conn
        await conn.close()
        self.coordinator = (found.host, found.port)
        try:
            return await Connection.open(found.host, found.port, client_id=self._client_id,
                                         connect_timeout=self._timeout)
        except (OSError, TimeoutError) as exc:
            log.debug("connect to coordinator %s:%s failed: %s", found.host, found.port, exc)
            return None
