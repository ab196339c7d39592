"""The broker's registration in etcd: ``brokers/<id>`` bound to a lease it keeps alive,
and self-fencing when the keep-alives stop being answered, or when its view of the
cluster (the metadata image) is not known to be current (docs/design/cluster.md,
"Liveness and fencing")."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Protocol

from groupwire.broker.cluster.keys import BrokerInfo, broker_key, encode_broker
from groupwire.broker.cluster.txn import Compare, Put, Txn
from groupwire.broker.etcd.store import EtcdError, MetadataStore
from groupwire.broker.logs import get_logger
from groupwire.broker.supervisor import Service, Supervisor

log = get_logger("groupwire.cluster")

REGISTER_MARGIN_S = 1.0
"""Beyond the TTL, how long a restart waits for its old key: etcd drops a dead holder's
keys a little after the TTL (~0.3 s)."""

Listener = Callable[[], None]


class ImageClock(Protocol):
    """When the broker's metadata image was last known current, and last read whole
    (monotonic seconds, on the membership's clock)."""

    @property
    def confirmed_at(self) -> float: ...

    @property
    def read_at(self) -> float: ...

    @property
    def reads(self) -> int:
        """Whole reads so far."""
        ...


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


class Registration:
    """The keep-alive loop is a supervised service (``membership``): a crash is logged,
    counted and the loop started again; meanwhile the fence rule, which reads the clock,
    keeps the broker from acting on a lease it no longer refreshes.

    Fenced means: no keep-alive answered for a TTL (the lease may be gone), or, given
    ``image``, the metadata image not confirmed current for a TTL (a stalled watch: the
    cluster may have moved on without this broker seeing it) or not read whole since
    this registration (what it held before may be long stale). Listeners hear each
    change; ``on_registered`` hears a new registration (the image is then re-read)."""

    def __init__(self, store: MetadataStore, cluster: str, info: BrokerInfo, ttl_s: int,
                 clock: Callable[[], float] = time.monotonic,
                 register_wait_s: float | None = None, *,
                 image: ImageClock | None = None,
                 supervisor: Supervisor | None = None) -> None:
        self.store = store
        self.cluster = cluster
        self.info = info
        self.ttl_s = ttl_s
        self.key = broker_key(cluster, info.node_id)
        self._clock = clock
        self._register_wait_s = ttl_s + REGISTER_MARGIN_S if register_wait_s is None \
            else register_wait_s
        self._rule = FenceRule(ttl_s, clock(), lost=True)
        self._image = image
        self._supervisor = supervisor if supervisor is not None else Supervisor()
        self._lease = 0
        self.registered_at = -math.inf
        """When the request that granted the current lease was sent."""
        self._reads_at_registration = -1
        self._told_fenced = True
        self._started = False
        """Whether the broker has acted since its first registration (for the logs)."""
        self._service: Service | None = None
        self.on_fenced: list[Listener] = []
        self.on_unfenced: list[Listener] = []
        self.on_registered: list[Listener] = []

    @property
    def lease(self) -> int:
        """The current lease (0 before ``start``): keys bound to it go with this
        registration."""
        return self._lease

    @property
    def fenced(self) -> bool:
        return self.fence_reason() is not None

    def fence_reason(self) -> str | None:
        """Why the broker may not lead, coordinate or acknowledge now; None if it may."""
        now = self._clock()
        if self._rule.fenced(now):
            return "no etcd keep-alive answered for a whole lease TTL"
        if self._image is None:
            return None
        if self._image.reads <= self._reads_at_registration \
                or self._image.read_at < self.registered_at:
            return "the metadata image was not read again since this registration"
        if now - self._image.confirmed_at >= self.ttl_s:
            return (f"the metadata image was not confirmed current for "
                    f"{now - self._image.confirmed_at:.1f} s (its etcd watch is stalled)")
        return None

    @property
    def service(self) -> Service | None:
        return self._service

    async def start(self) -> None:
        await self._register()
        # With an image, the broker may act once it has been read (image_confirmed).
        self._told_fenced = self._image is not None and self.fenced
        self._started = not self._told_fenced
        self._service = self._supervisor.spawn(f"membership-{self.info.node_id}",
                                               self._keep_alive_loop, kind="membership")

    def stop_keep_alive(self) -> None:
        """Stop refreshing the lease without revoking it, as a crash or a stall would
        (tests use it; ``close`` also calls it)."""
        if self._service is not None:
            self._service.task.cancel()
            self._supervisor.forget(self._service)
            self._service = None

    def image_confirmed(self) -> None:
        """The image was confirmed current: the broker may act again at once, not a
        keep-alive round later."""
        if self._told_fenced and not self.fenced:
            self._tell(fenced=False)

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
                # Bounded by a keep-alive round, so a hung request cannot delay noticing
                # the fence (the next round tries again).
                async with asyncio.timeout(self.ttl_s / 3):
                    ttl = await self.store.keep_alive(self._lease)
            except (EtcdError, TimeoutError) as exc:
                log.warning("keep_alive_failed", node_id=self.info.node_id,
                            error=str(exc) or type(exc).__name__)
            else:
                if ttl > 0:
                    self._rule.answered(sent)
                else:
                    self._rule.lost = True
        if self._rule.fenced(self._clock()):
            self._tell(fenced=True)
            try:
                await self._reregister()
            except (EtcdError, RegistrationError) as exc:
                log.warning("register_failed", node_id=self.info.node_id, error=str(exc))
                return
        self._tell(fenced=self.fenced)

    async def _keep_alive_loop(self) -> None:
        watchdog = asyncio.ensure_future(self._watchdog())
        try:
            while True:
                await asyncio.sleep(self.ttl_s / 3)
                await self.tick()
        finally:
            watchdog.cancel()

    async def _watchdog(self) -> None:
        """Tells the listeners the moment a fence deadline passes, not when a keep-alive
        round (maybe hung on a silent connection) next ends: a fenced coordinator must
        unload its groups before another broker may load them."""
        while True:
            now = self._clock()
            deadline = self._rule.last_answered_sent + self.ttl_s
            if self._image is not None:
                deadline = min(deadline, self._image.confirmed_at + self.ttl_s)
            if self.fenced:
                self._tell(fenced=True)
                deadline = now + self.ttl_s / 3  # look again; ``tick`` re-registers
            await asyncio.sleep(max(0.01, deadline - now))

    def _tell(self, fenced: bool) -> None:
        if fenced == self._told_fenced:
            return
        self._told_fenced = fenced
        if fenced:
            log.warning("broker_fenced", node_id=self.info.node_id,
                        why=self.fence_reason() or "no keep-alive answered for a whole TTL")
        elif self._started:
            log.info("broker_unfenced", node_id=self.info.node_id,
                     why="registered, and its metadata image is current")
        self._started = True
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
                        self.registered_at = sent
                        if self._image is not None:
                            self._reads_at_registration = self._image.reads
                        for listener in list(self.on_registered):
                            listener()
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
