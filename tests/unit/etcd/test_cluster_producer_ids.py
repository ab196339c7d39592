"""Producer ids in cluster mode: blocks claimed from etcd with a compare-and-swap, so two
brokers, or a broker that lost its data dir, never hand out the same id."""

from __future__ import annotations

import asyncio
import json

import pytest

from groupwire.broker.cluster.keys import producer_ids_key
from groupwire.broker.cluster.txn import Put, Txn
from groupwire.broker.clustering.producer_ids import FIRST_ID, ClusterProducerIds
from groupwire.broker.etcd import MemoryStore


async def _drain(ids: ClusterProducerIds, count: int) -> list[int]:
    """``count`` ids, letting a claim run whenever none is in hand."""
    out: list[int] = []
    while len(out) < count:
        pid = ids.next_id()
        if pid is None:
            await asyncio.sleep(0)  # the claim under way
            continue
        out.append(pid)
    return out


async def test_no_id_until_a_block_is_claimed_then_the_block_in_order() -> None:
    store = MemoryStore()
    ids = ClusterProducerIds(lambda: store, "c", block_size=10)
    assert ids.next_id() is None  # the claim has just started
    assert await _drain(ids, 3) == [FIRST_ID, FIRST_ID + 1, FIRST_ID + 2]
    kv = await store.get(producer_ids_key("c"))
    assert kv is not None and json.loads(kv.value) == {"next": FIRST_ID + 10}


async def test_two_brokers_and_a_wiped_one_never_share_an_id() -> None:
    store = MemoryStore()
    a = ClusterProducerIds(lambda: store, "c", block_size=7)
    b = ClusterProducerIds(lambda: store, "c", block_size=7)
    got = await asyncio.gather(_drain(a, 30), _drain(b, 30))
    wiped = ClusterProducerIds(lambda: store, "c", block_size=7)  # a's replacement
    again = await _drain(wiped, 10)
    every = [*got[0], *got[1], *again]
    assert len(set(every)) == len(every)
    assert min(every) >= FIRST_ID


async def test_claims_racing_on_the_key_each_get_their_own_block() -> None:
    store = MemoryStore()
    claimers = [ClusterProducerIds(lambda: store, "c", block_size=100) for _ in range(4)]
    blocks = await asyncio.gather(*(c.claim() for c in claimers))
    assert None not in blocks
    starts = sorted(b[0] for b in blocks if b is not None)
    assert starts == [FIRST_ID + 100 * i for i in range(4)]


async def test_the_next_block_is_claimed_before_the_current_one_runs_out() -> None:
    store = MemoryStore()
    ids = ClusterProducerIds(lambda: store, "c", block_size=10, refill_below=3)
    first = await _drain(ids, 7)  # 3 left: the next claim starts
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert ids.claims == 2
    rest = [ids.next_id() for _ in range(5)]  # no gap: the spare block is in hand
    assert None not in rest
    assert first + rest == [FIRST_ID + i for i in range(7)] + [
        FIRST_ID + 7, FIRST_ID + 8, FIRST_ID + 9, FIRST_ID + 10, FIRST_ID + 11]


async def test_a_key_it_cannot_read_hands_out_nothing() -> None:
    store = MemoryStore()
    await store.txn(Txn((), (Put(producer_ids_key("c"), b"not json"),)))
    ids = ClusterProducerIds(lambda: store, "c")
    with pytest.raises(ValueError):
        await ids.claim()
    assert ids.next_id() is None
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert ids.next_id() is None
    await ids.close()
