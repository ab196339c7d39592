"""The broker's registration in etcd: ``brokers/<id>`` bound to a lease it keeps alive,
and self-fencing when the keep-alives stop being answered (docs/design/cluster.md,
"Liveness and fencing")."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from groupwire.broker.cluster.keys import BrokerInfo, broker_key, encode_broker
from groupwire.broker.cluster.txn import Compare, Put, Txn
from groupwire.broker.etcd.store import EtcdError, MetadataStore
from groupwire.broker.logs import get_logger

log = get_logger("groupwire.cluster")

REGISTER_MARGIN_S = 1.0
"""Beyond the TTL, how long a restart waits for its old key: etcd drops a dead holder's
keys a little after the TTL (~0.3 s)."""

Listener = Callable[[], None]


class RegistrationError(Exception):
    """The broker's key stayed registered by someone else past the TTL: another live
    broker has the same node id."""


@dataclass(slots=True)
class FenceRule:
    """Fenced once no keep-alive was answered for a whole TTL, counted from when the
    last answered one was *sent*: by then etcd may have dropped the lease, so the
    controller may have moved this broker's leaderships."""

    ttl_s: float
    last_answered_sent: float
    lost: bool = False
    """etcd said the lease is gone: fenced whatever the time."""

    def answered(self, sent_at: float) -> None:
        self.last_answered_sent = max(self.last_answered_sent, sent_at)

    def fenced(self, now: float) -> bool:
        return self.lost or now - self.last_answered_sent >= self.ttl_s

    def renew(self, sent_at: float) -> None:
        """A new lease, granted by a request sent at ``sent_at``."""
        self.last_answered_sent = sent_at
        self.lost = False


class Membership:
    def __init__(self, store: MetadataStore, cluster: str, info: BrokerInfo, ttl_s: int,
                 clock: Callable[[], float] = time.monotonic,
                 register_wait_s: float | None = None) -> None:
        self.store = store
        self.cluster = cluster
        self.info = info
        self.ttl_s = ttl_s
        self.key = broker_key(cluster, info.node_id)
        self._clock = clock
        self._register_wait_s = ttl_s + REGISTER_MARGIN_S if register_wait_s is None \
            else register_wait_s
        self._rule = FenceRule(ttl_s, clock(), lost=True)
        self._lease = 0
        self._told_fenced = True
        self._task: asyncio.Task[None] | None = None
        self.on_fenced: list[Listener] = []
        self.on_unfenced: list[Listener] = []

    @property
    def lease(self) -> int:
        """The current lease (0 before ``start``): keys bound to it go with this
        registration."""
        return self._lease

    @property
    def fenced(self) -> bool:
        return self._rule.fenced(self._clock())

    async def start(self) -> None:
        await self._register()
        self._told_fenced = False
        self._task = asyncio.create_task(self._keep_alive_loop(),
                                         name=f"membership-{self.info.node_id}")

    def stop_keep_alive(self) -> None:
        """Stop refreshing the lease without revoking it, as a crash or a stall would
        (tests use it; ``close`` also calls it)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def close(self) -> None:
        self.stop_keep_alive()
        if self._lease:
            with contextlib.suppress(EtcdError):
                await self.store.revoke(self._lease)
        self._rule.lost = True

    async def tick(self) -> None:
        """One keep-alive round; the loop runs it every TTL/3. Re-registers once fenced."""
        if self._lease and not self._rule.lost:
            sent = self._clock()
            try:
                ttl = await self.store.keep_alive(self._lease)
            except EtcdError as exc:
                log.warning("keep_alive_failed", node_id=self.info.node_id, error=str(exc))
            else:
                if ttl > 0:
                    self._rule.answered(sent)
                else:
                    self._rule.lost = True
        if self.fenced:
            self._tell(fenced=True)
            try:
                await self._reregister()
            except (EtcdError, RegistrationError) as exc:
                log.warning("register_failed", node_id=self.info.node_id, error=str(exc))
                return
        self._tell(fenced=self.fenced)

    async def _keep_alive_loop(self) -> None:
        while True:
            await asyncio.sleep(self.ttl_s / 3)
            await self.tick()

    def _tell(self, fenced: bool) -> None:
        if fenced == self._told_fenced:
            return
        self._told_fenced = fenced
        if fenced:
            log.warning("broker_fenced", node_id=self.info.node_id,
                        why="no keep-alive answered for a whole lease TTL")
        else:
            log.info("broker_registered_again", node_id=self.info.node_id)
        for listener in list(self.on_fenced if fenced else self.on_unfenced):
            listener()

    async def _reregister(self) -> None:
        # The old lease may still live in etcd (we were cut off, not it): drop it so
        # its key goes now rather than a TTL later.
        old, self._lease = self._lease, 0
        if old:
            with contextlib.suppress(EtcdError):
                await self.store.revoke(old)
        await self._register()

    async def _register(self) -> None:
        """Put-if-absent; a key left by an older lease (a restart within the TTL) is
        waited out, never overwritten: its holder may still be serving."""
        absent = (Compare(self.key, "create", "==", 0),)
        try:
            async with asyncio.timeout(self._register_wait_s):
                while True:
                    await self._wait_absent()
                    sent = self._clock()
                    lease = await self.store.grant_lease(self.ttl_s)
                    txn = Txn(absent, (Put(self.key, encode_broker(self.info), lease),))
                    if (await self.store.txn(txn)).succeeded:
                        self._lease = lease
                        self._rule.renew(sent)
                        return
                    with contextlib.suppress(EtcdError):
                        await self.store.revoke(lease)
        except TimeoutError:
            held = await self.store.get(self.key)
            raise RegistrationError(
                f"broker id {self.info.node_id}: {self.key} is still held "
                f"({held.value.decode(errors='replace') if held else 'gone now'}) "
                f"after {self._register_wait_s:.1f} s; is another broker running with "
                f"this node id?") from None

    async def _wait_absent(self) -> None:
        held = await self.store.get(self.key)
        if held is None:
            return
        log.info("register_waiting", node_id=self.info.node_id,
                 why="the previous registration's lease has not expired yet")
        # The prefix also matches brokers/<id>N: look at this key's events only.
        stream = self.store.watch(self.key, held.mod_revision + 1)
        try:
            async for events in stream:
                if any(e.kind == "delete" and e.kv.key == self.key for e in events):
                    return
        finally:
            await close_stream(stream)


async def close_stream(stream: AsyncIterator[object]) -> None:
    """End a watch now (its connection too), not when the generator is collected."""
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()
