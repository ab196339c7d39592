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
        self._bootstrap = bootstrap
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
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        attempt = 0
        while True:
            for host, port in self._bootstrap:
                conn = await self._open_one(host, port)
                if conn is not None:
                    return conn
            attempt += 1
            if loop.time() >= deadline or self.closed:
                raise ConnectionClosedError(f"cannot reach any of {self._bootstrap}")
            await asyncio.sleep(backoff_ms(attempt, self._backoff_ms) / 1000)

    async def _open_one(self, host: str, port: int) -> Connection | None:
        try:
            conn = await Connection.open(host, port, client_id=self._client_id,
                                         connect_timeout=self._timeout)
        except (OSError, TimeoutError) as exc:
            log.debug("connect to %s:%s failed: %s", host, port, exc)
            return None
        if self._group_id is None:
            return conn
        try:
            found = await conn.send(FindCoordinatorRequest(key=self._group_id),
                                    timeout=self._timeout, response_type=FindCoordinatorResponse)
        except (ConnectionError, TimeoutError):
            await conn.close()
            return None
        if found.error_code != ErrorCode.NONE:
            await conn.close()
            return None
        if found.port == port:  # the bootstrap broker is the coordinator (single node)
            self.coordinator = (host, port)
            return conn
        await conn.close()
        self.coordinator = (found.host, found.port)
        try:
            return await Connection.open(found.host, found.port, client_id=self._client_id,
                                         connect_timeout=self._timeout)
        except (OSError, TimeoutError):
            return None
