"""The broker's view of etcd never goes silently stale (issue 24): a stalled watch fences
the broker once its image is older than the lease TTL, a new registration re-reads the
image before the broker acts again, a malformed value is logged and skipped, and the
watch and keep-alive loops are supervised services that come back after a crash."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest
import structlog

from groupwire.broker.cluster.keys import (
    BrokerInfo,
    PartitionState,
    broker_key,
    encode_broker,
    encode_partition,
    partition_key,
)
from groupwire.broker.cluster.txn import Put, Txn, WatchEvent
from groupwire.broker.clustering import ImageWatcher, Registration
from groupwire.broker.clustering.leadership import ClusterLeadership
from groupwire.broker.etcd import MemoryStore
from groupwire.broker.supervisor import Supervisor
from groupwire.protocol.errors import ErrorCode

CLUSTER = "c1"
TTL = 3
BOUND_S = 5.0
"""Bounds each wait so a regression fails rather than hangs; never asserted."""


def info(node_id: int) -> BrokerInfo:
    return BrokerInfo(node_id, "127.0.0.1", 9000 + node_id, None, "a")


class FrozenWatch(MemoryStore):
    """A store whose watches stop bringing anything once ``freeze()`` is called, as a
    watch on a half-open connection would without a read deadline."""

    def __init__(self) -> None:
        super().__init__(progress_interval_s=None)
        self.frozen = asyncio.Event()
        self.reads = 0

    def freeze(self) -> None:
        self.frozen.set()

    async def get_prefix(self, prefix: str) -> tuple[list, int]:  # type: ignore[type-arg]
        self.reads += 1
        return await super().get_prefix(prefix)

    async def watch(self, prefix: str, start_revision: int) -> AsyncIterator[list[WatchEvent]]:
        inner = super().watch(prefix, start_revision)
        try:
            while not self.frozen.is_set():
                next_batch = asyncio.ensure_future(anext(inner))
                frozen = asyncio.ensure_future(self.frozen.wait())
                await asyncio.wait({next_batch, frozen}, return_when=asyncio.FIRST_COMPLETED)
                frozen.cancel()
                if next_batch.done():
                    yield next_batch.result()
                else:
                    next_batch.cancel()
            await asyncio.Event().wait()  # silent forever
        finally:
            await inner.aclose()  # type: ignore[attr-defined]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def _put_broker(store: MemoryStore, node_id: int) -> None:
    await store.txn(Txn((), (Put(broker_key(CLUSTER, node_id), encode_broker(info(node_id))),)))


async def _until(predicate: Callable[[], bool]) -> None:
    async with asyncio.timeout(BOUND_S):
        while not predicate():
            await asyncio.sleep(0.01)  # polls state another task changes


@pytest.fixture
def clock() -> Clock:
    return Clock()


async def _node(store: MemoryStore, clock: Clock, supervisor: Supervisor | None = None
                ) -> tuple[Registration, ImageWatcher, ClusterLeadership]:
    watcher = ImageWatcher(store, CLUSTER, clock=clock, supervisor=supervisor)
    membership = Registration(store, CLUSTER, info(1), TTL, clock=clock, image=watcher,
                            supervisor=supervisor)
    membership.on_registered.append(watcher.resync)
    watcher.on_confirmed.append(membership.image_confirmed)
    await membership.start()
    membership.stop_keep_alive()  # the test ticks
    watcher.start()
    async with asyncio.timeout(BOUND_S):
        await watcher.ready
    leadership = ClusterLeadership(1, lambda: watcher.image, lambda: membership.fenced,
                                   why_fenced=membership.fence_reason)
    return membership, watcher, leadership


async def test_a_stalled_watch_fences_the_broker_until_its_image_is_current(
        clock: Clock) -> None:
    store = FrozenWatch()
    await store.txn(Txn((), (Put(partition_key(CLUSTER, "t", 0),
                                 encode_partition(PartitionState(1, 0, (1,), 0))),)))
    membership, watcher, leadership = await _node(store, clock)
    leadership.led[("t", 0)] = 0
    fenced: list[bool] = []
    membership.on_fenced.append(lambda: fenced.append(True))
    membership.on_unfenced.append(lambda: fenced.append(False))
    assert leadership.check("t", 0) is None

    store.freeze()
    await _put_broker(store, 2)  # the cluster moves on; this broker does not see it
    clock.now += TTL  # keep-alives are answered all along: only the image is stale
    await membership.tick()
    assert membership.fenced and fenced == [True]
    refusal = leadership.check("t", 0)
    assert refusal is not None and refusal.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert "not confirmed current" in refusal.message

    # The watch comes back (a new stream from its revision): current again.
    store.frozen = asyncio.Event()
    watcher.resync()
    await _until(lambda: 2 in watcher.image.brokers and not membership.fenced)
    assert fenced == [True, False]
    assert leadership.check("t", 0) is None
    await watcher.close()
    await membership.close()


async def test_a_new_registration_rereads_the_image_before_the_broker_acts(
        clock: Clock) -> None:
    store = FrozenWatch()
    membership, watcher, _ = await _node(store, clock)
    reads = store.reads
    unfenced: list[float] = []
    membership.on_unfenced.append(lambda: unfenced.append(watcher.read_at))
    store.freeze()  # this watch will never bring anything again
    await store.revoke(membership.lease)  # etcd dropped the lease (a partition, say)
    await membership.tick()  # fenced: registers again
    assert membership.lease != 0
    # Unfenced only by a read made after the new registration (the old watch is dead).
    store.frozen = asyncio.Event()
    await _until(lambda: bool(unfenced))
    assert store.reads > reads
    assert unfenced[0] >= membership.registered_at
    assert not membership.fenced
    await watcher.close()
    await membership.close()


async def test_a_malformed_value_is_logged_and_the_watch_goes_on(clock: Clock) -> None:
    store = MemoryStore()
    membership, watcher, _ = await _node(store, clock)
    with structlog.testing.capture_logs() as logs:
        await store.txn(Txn((), (Put(partition_key(CLUSTER, "t", 0), b"{oops"),)))
        await _put_broker(store, 2)
        async with asyncio.timeout(BOUND_S):
            await watcher.until(lambda im: 2 in im.brokers)
    assert ("t", 0) not in watcher.image.partitions
    assert watcher.service is not None and watcher.service.failures == 0
    [skipped] = [e for e in logs if e["event"] == "metadata_value_skipped"]
    assert "partitions/t/0" in skipped["error"] and skipped["log_level"] == "error"
    await watcher.close()
    await membership.close()


class CrashOnce(MemoryStore):
    """Its first watch raises a bug (not an etcd error) after one batch."""

    def __init__(self) -> None:
        super().__init__()
        self.watches = 0

    async def _crashing(self) -> AsyncIterator[list[WatchEvent]]:
        await asyncio.sleep(0)
        raise KeyError("a bug in the watch")
        yield []

    def watch(self, prefix: str, start_revision: int) -> AsyncIterator[list[WatchEvent]]:
        self.watches += 1
        if self.watches == 1 and prefix.endswith(f"{CLUSTER}/"):
            return self._crashing()
        return super().watch(prefix, start_revision)


async def test_the_watch_is_a_supervised_service_that_rereads_after_a_crash(
        clock: Clock) -> None:
    store = CrashOnce()
    failures: list[str] = []
    supervisor = Supervisor(on_failure=failures.append)
    watcher = ImageWatcher(store, CLUSTER, supervisor=supervisor, clock=clock)
    watcher.start()
    await _until(lambda: watcher.reads >= 2)
    assert failures == ["metadata-watch"]
    assert watcher.service is not None and watcher.service.failures == 1
    await _put_broker(store, 5)
    async with asyncio.timeout(BOUND_S):
        await watcher.until(lambda im: 5 in im.brokers)
    await watcher.close()


async def test_the_keep_alive_loop_is_a_supervised_service(clock: Clock) -> None:
    class KeepAliveCrashesOnce(MemoryStore):
        calls = 0

        async def keep_alive(self, lease: int) -> int:
            self.calls += 1
            if self.calls == 1:
                raise RuntimeError("a bug in the keep-alive")
            return await super().keep_alive(lease)

    store = KeepAliveCrashesOnce()
    failures: list[str] = []
    supervisor = Supervisor(on_failure=failures.append)
    m = Registration(store, CLUSTER, info(1), 1, supervisor=supervisor)
    await m.start()
    await _until(lambda: store.calls >= 2)
    assert failures == ["membership"]
    assert m.service is not None and m.service.running and not m.fenced
    await m.close()
