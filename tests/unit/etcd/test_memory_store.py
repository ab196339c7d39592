"""The in-memory twin keeps etcd's bookkeeping: revisions, compares, atomic txns,
leases on its clock, watch history and compaction."""

from __future__ import annotations

import pytest

from groupwire.broker.cluster.txn import Compare, Delete, Put, Txn, WatchEvent
from groupwire.broker.etcd import EtcdError, MemoryStore, WatchCompactedError


async def take(store: MemoryStore, prefix: str, start: int, count: int) -> list[WatchEvent]:
    stream = store.watch(prefix, start)
    seen: list[WatchEvent] = []
    while len(seen) < count:
        seen.extend(await anext(stream))
    await stream.aclose()  # type: ignore[attr-defined]
    return seen


async def test_one_revision_per_write_txn_and_none_for_no_change() -> None:
    store = MemoryStore()
    assert store.revision == 1
    result = await store.txn(Txn((), (Put("a", b"1"), Put("b", b"2"))))
    assert result.revision == store.revision == 2
    assert (await store.txn(Txn((), (Delete("missing"),)))).revision == 2
    await store.txn(Txn((), (Put("a", b"3"),)))
    a = await store.get("a")
    assert a is not None and (a.create_revision, a.mod_revision, a.version) == (2, 3, 2)


async def test_compares_read_zero_for_a_missing_key() -> None:
    store = MemoryStore()
    for target in ("create", "mod", "version", "lease"):
        assert Compare("k", target, "==", 0).holds(await store.get("k"))  # type: ignore[arg-type]
    assert (await store.txn(Txn((Compare("k", "version", "<", 1),), (Put("k", b""),)))).succeeded
    assert not (await store.txn(Txn((Compare("k", "mod", "!=", 2),), (Put("k", b""),)))).succeeded


async def test_a_txn_etcd_would_refuse_applies_nothing() -> None:
    store = MemoryStore()
    with pytest.raises(EtcdError, match="lease not found"):
        await store.txn(Txn((), (Put("a", b"1"), Put("b", b"2", lease=999))))
    with pytest.raises(EtcdError, match="duplicate key"):
        await store.txn(Txn((), (Put("a", b"1"), Delete("", prefix=True))))
    assert await store.get("a") is None and store.revision == 1


async def test_an_expired_lease_deletes_its_keys_in_one_revision() -> None:
    store = MemoryStore()
    lease = await store.grant_lease(2)
    await store.txn(Txn((), (Put("b/1", b"x", lease=lease), Put("b/2", b"y", lease=lease))))
    store.advance(1.5)
    assert await store.keep_alive(lease) == 2  # deadline now 3.5
    store.advance(1.9)
    assert await store.get("b/1") is not None
    store.advance(0.1)
    assert await store.get("b/1") is None and await store.keep_alive(lease) == 0
    events = await take(store, "b/", 3, 2)
    assert [(e.kind, e.kv.key, e.kv.mod_revision) for e in events] == [
        ("delete", "b/1", 3), ("delete", "b/2", 3)]


async def test_an_injected_clock_is_read_on_every_operation() -> None:
    now = [0.0]
    store = MemoryStore(clock=lambda: now[0])
    lease = await store.grant_lease(1)
    await store.txn(Txn((), (Put("k", b"", lease=lease),)))
    now[0] = 1.0
    assert await store.get("k") is None


async def test_a_put_moves_a_key_to_its_new_lease() -> None:
    store = MemoryStore()
    old, new = await store.grant_lease(1), await store.grant_lease(5)
    await store.txn(Txn((), (Put("k", b"1", lease=old),)))
    await store.txn(Txn((), (Put("k", b"2", lease=new),)))
    await store.revoke(old)
    kv = await store.get("k")
    assert kv is not None and kv.lease == new and store.revision == 3


async def test_watch_replays_history_then_follows_live_writes() -> None:
    store = MemoryStore()
    await store.txn(Txn((), (Put("p/a", b"1"),)))
    stream = store.watch("p/", 2)
    assert [e.kv.value for e in await anext(stream)] == [b"1"]
    await store.txn(Txn((), (Put("q/x", b"other"),)))
    await store.txn(Txn((), (Delete("p/a"),)))
    batch = await anext(stream)
    assert [(e.kind, e.kv.mod_revision) for e in batch] == [("delete", 4)]
    await store.close()
    assert [batch async for batch in stream] == []


async def test_compaction_refuses_older_watches() -> None:
    store = MemoryStore()
    for value in (b"1", b"2", b"3"):
        await store.txn(Txn((), (Put("k", value),)))
    await store.compact(3)
    with pytest.raises(WatchCompactedError) as caught:
        await anext(store.watch("", 2))
    assert caught.value.compact_revision == 3
    assert [e.kv.value for e in await take(store, "", 3, 2)] == [b"2", b"3"]
    with pytest.raises(EtcdError):
        await store.compact(3)
