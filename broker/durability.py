"""Group commit: acknowledge writes only once they are durable under the fsync policy.

With ``always``, every write made during one loop iteration shares one fsync, run on a
worker thread so the event loop keeps answering heartbeats meanwhile; acknowledgements
wait for it. With ``interval`` a background task syncs periodically and acknowledgements go
at once; with ``never`` the OS decides. Either way a SIGKILLed broker keeps what it
acknowledged: data written to the page cache survives the process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from groupwire.broker.logs import get_logger
from groupwire.broker.storage import FsyncPolicy, TopicStore
from groupwire.broker.storage.errors import StorageError
from groupwire.broker.supervisor import Service, Supervisor

log = get_logger("groupwire.durability")


class Durability:
    def __init__(self, store: TopicStore, policy: FsyncPolicy, interval_ms: int,
                 on_durable: Callable[[], None], *,
                 supervisor: Supervisor | None = None) -> None:
        self._store = store
        self._supervisor = supervisor
        self._policy = policy
        self._interval_s = interval_ms / 1000
        self._on_durable = on_durable
        self._waiting: list[Callable[[StorageError | None], None]] = []
        self._flushing = False
        self._scheduled = False
        self._periodic_sync: Service | None = None
        self._round: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._policy is FsyncPolicy.INTERVAL:
            supervisor = self._supervisor or Supervisor()
            self._periodic_sync = supervisor.spawn("interval-fsync", self._periodic)

    def after_write(self, callback: Callable[[StorageError | None], None]) -> None:
        """Call ``callback(None)`` once everything written so far is durable under the
        policy, or ``callback(error)`` if the fsync failed: nothing is acknowledged then."""
        if self._policy is not FsyncPolicy.ALWAYS:
            self._on_durable()
            callback(None)
            return
        self._waiting.append(callback)
        if not self._scheduled and not self._flushing:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._kick)

    def _kick(self) -> None:
        self._scheduled = False
        if self._flushing or not self._waiting:
            return
        self._flushing = True
        self._round = asyncio.get_running_loop().create_task(self._flush_round())

    async def _flush_round(self) -> None:
        callbacks, self._waiting = self._waiting, []
        error: StorageError | None = StorageError("broker stopped before the fsync")
        try:
            error = await self._sync()
        finally:
            self._flushing = False
            self._on_durable()
            for callback in callbacks:
                callback(error)
            if self._waiting:
                self._kick()

    async def _sync(self) -> StorageError | None:
        ticket = self._store.take_dirty()
        error: StorageError | None = None
        try:
            await asyncio.get_running_loop().run_in_executor(None, ticket.sync)
        except OSError as exc:
            log.error("fsync_failed", error=str(exc))
            error = StorageError(f"fsync failed: {exc}")
        self._store.complete(ticket)
        return error

    async def _periodic(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            await self._sync()

    async def close(self) -> None:
        """Stop the periodic task and make everything written so far durable."""
        if self._periodic_sync is not None:
            await self._periodic_sync.stop()
        while self._round is not None and not self._round.done():
            await self._round
        error = await self._sync()
        self._on_durable()
        callbacks, self._waiting = self._waiting, []
        for callback in callbacks:
            callback(error)
