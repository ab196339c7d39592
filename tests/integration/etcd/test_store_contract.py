"""The same contract against etcd and against its in-memory twin, so tests that use the
twin hold for etcd: guarded writes, leases, watches, prefixes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from groupwire.broker.cluster.txn import Compare, Delete, Put, Txn, WatchEvent
from groupwire.broker.etcd import WatchCompactedError
from tests.integration.etcd.conftest import Harness

WAIT_S = 8.0
"""Bound on waiting for an event etcd produces by itself (a lease expiring)."""


class Events:
    """A watch read one event at a time, however the store batches them."""

    def __init__(self, stream: AsyncIterator[list[WatchEvent]]) -> None:
        self._stream = stream
        self._pending: list[WatchEvent] = []

    async def next(self) -> WatchEvent:
        async with asyncio.timeout(WAIT_S):
            while not self._pending:
                self._pending = list(await anext(self._stream))
        return self._pending.pop(0)


@contextlib.asynccontextmanager
async def watching(h: Harness, start_revision: int) -> AsyncIterator[Events]:
    stream = h.store.watch(h.prefix, start_revision)
    try:
        yield Events(stream)
    finally:
        await stream.aclose()  # type: ignore[attr-defined]


async def expire(h: Harness, events: Events, key: str) -> WatchEvent:
    """Wait for ``key``'s lease to run out: its delete event on the watch."""
    h.let_time_pass(1.0)
    while (event := await events.next()).kv.key != key or event.kind != "delete":
        pass
    return event


async def test_put_if_absent_by_create_revision_zero(harness: Harness) -> None:
    key = harness.prefix + "controller"
    absent = (Compare(key, "create", "==", 0),)
    first = await harness.store.txn(Txn(absent, (Put(key, b"one"),)))
    second = await harness.store.txn(Txn(absent, (Put(key, b"two"),)))
    assert first.succeeded and not second.succeeded
    assert second.revision == first.revision  # a failed txn with no failure ops writes nothing
    kv = await harness.store.get(key)
    assert kv is not None and kv.value == b"one"
    assert kv.create_revision == kv.mod_revision == first.revision and kv.version == 1


async def test_guarded_write_fails_on_a_stale_mod_revision(harness: Harness) -> None:
    key = harness.prefix + "partitions/t/0"
    created = await harness.store.txn(Txn((), (Put(key, b"v1"),)))
    moved = await harness.store.txn(
        Txn((Compare(key, "mod", "==", created.revision),), (Put(key, b"v2"),)))
    stale = await harness.store.txn(
        Txn((Compare(key, "mod", "==", created.revision),), (Put(key, b"v3"),),
            (Put(key + "/lost", b"x"),)))
    assert moved.succeeded and moved.revision == created.revision + 1
    assert not stale.succeeded and stale.revision == moved.revision + 1  # failure branch ran
    kv = await harness.store.get(key)
    assert kv is not None and kv.value == b"v2" and kv.version == 2
    assert kv.create_revision == created.revision and kv.mod_revision == moved.revision


async def test_lease_without_keep_alive_drops_its_key(harness: Harness) -> None:
    key = harness.prefix + "brokers/1"
    lease = await harness.store.grant_lease(1)
    _, revision = await harness.store.get_prefix(harness.prefix)
    async with watching(harness, revision + 1) as events:
        await harness.store.txn(Txn((), (Put(key, b"b1", lease=lease),)))
        put = await events.next()
        assert put.kind == "put" and put.kv.lease == lease
        deleted = await expire(harness, events, key)
    assert deleted.kv.mod_revision > put.kv.mod_revision
    assert await harness.store.get(key) is None
    assert await harness.store.keep_alive(lease) == 0


async def test_keep_alive_keeps_the_key_past_its_ttl(harness: Harness) -> None:
    kept = harness.prefix + "brokers/kept"
    lease = await harness.store.grant_lease(3)
    await harness.store.txn(Txn((), (Put(kept, b"k", lease=lease),)))
    _, revision = await harness.store.get_prefix(harness.prefix)
    async with watching(harness, revision + 1) as events:
        # Each step outlives a TTL-1 lease, the clock the test can see; four outlive 3 s.
        for step in range(4):
            tick = harness.prefix + f"tick/{step}"
            short = await harness.store.grant_lease(1)
            await harness.store.txn(Txn((), (Put(tick, b"", lease=short),)))
            await expire(harness, events, tick)
            assert await harness.store.keep_alive(lease) == 3
    kv = await harness.store.get(kept)
    assert kv is not None and kv.lease == lease
    await harness.store.revoke(lease)
    assert await harness.store.get(kept) is None
    await harness.store.revoke(lease)  # gone already: not an error


async def test_watch_sees_puts_and_deletes_in_order(harness: Harness) -> None:
    p = harness.prefix
    _, start = await harness.store.get_prefix(p)
    await harness.store.txn(Txn((), (Put(p + "a", b"1"), Put(p + "b", b"2"))))
    await harness.store.txn(Txn((), (Put(p + "a", b"3"),)))
    await harness.store.txn(Txn((), (Delete(p, prefix=True),)))
    await harness.store.txn(Txn((), (Put("/elsewhere/" + p, b"not watched"),)))
    await harness.store.txn(Txn((), (Put(p + "c", b"4"),)))
    async with watching(harness, start + 1) as events:  # from the past: history replayed
        seen = [await events.next() for _ in range(6)]
    assert [(e.kind, e.kv.key.removeprefix(p), e.kv.value) for e in seen] == [
        ("put", "a", b"1"), ("put", "b", b"2"), ("put", "a", b"3"),
        ("delete", "a", b""), ("delete", "b", b""), ("put", "c", b"4")]
    revisions = [e.kv.mod_revision for e in seen]
    assert revisions == [start + 1, start + 1, start + 2, start + 3, start + 3, start + 5]
    assert seen[2].kv.version == 2 and seen[2].kv.create_revision == start + 1


async def test_get_prefix_lists_keys_in_order_at_a_revision(harness: Harness) -> None:
    p = harness.prefix
    result = await harness.store.txn(
        Txn((), (Put(p + "b", b"2"), Put(p + "a", b"1"), Put(p + "a/x", b"3"))))
    await harness.store.txn(Txn((), (Put(p[:-1] + "z", b"outside"),)))
    kvs, revision = await harness.store.get_prefix(p)
    assert [(kv.key.removeprefix(p), kv.value) for kv in kvs] == [
        ("a", b"1"), ("a/x", b"3"), ("b", b"2")]
    assert revision == result.revision + 1
    assert await harness.store.get(p + "missing") is None


async def test_watch_from_a_compacted_revision_says_so(harness: Harness) -> None:
    p = harness.prefix
    first = await harness.store.txn(Txn((), (Put(p + "a", b"1"),)))
    last = await harness.store.txn(Txn((), (Put(p + "a", b"2"),)))
    await harness.store.compact(last.revision)  # type: ignore[attr-defined]  # not in the protocol
    with pytest.raises(WatchCompactedError) as caught:
        async with watching(harness, first.revision) as events:
            await events.next()
    assert caught.value.compact_revision == last.revision
    async with watching(harness, last.revision) as events:  # the compact revision is kept
        assert (await events.next()).kv.value == b"2"
