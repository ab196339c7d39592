"""Cluster mode: producer ids from blocks the cluster hands out, so no two brokers, and no
broker whose data dir was wiped, ever hand out the same id.

etcd holds the first id no broker has claimed (``keys.producer_ids_key``); a broker
claims the next block of :data:`BLOCK_SIZE` with a compare-and-swap on that key's
revision (two claiming at once: one wins, the other reads again), as Kafka's controller
hands out AllocateProducerIds blocks. A broker hands its block out in memory and claims
the next one in the background before the current one runs out; a block left unused
when the broker stops is simply skipped. Ids start at :data:`FIRST_ID`, above every id the
earlier per-broker ranges (``node_id << 32`` plus a local counter, for node ids below
2**30) handed out.

InitProducerId asks :meth:`ClusterProducerIds.next_id` on the event loop and must not
wait on etcd: while no block is in hand it gets None, answered
COORDINATOR_LOAD_IN_PROGRESS (retriable), and the claim is under way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Final

from groupwire.broker.cluster.keys import producer_ids_key
from groupwire.broker.cluster.txn import Compare, Put, Txn
from groupwire.broker.etcd.store import EtcdError, MetadataStore
from groupwire.broker.logs import get_logger
from groupwire.broker.storage.producer_ids import MAX_PRODUCER_ID

log = get_logger("groupwire.cluster")

BLOCK_SIZE: Final = 1000
FIRST_ID: Final = 1 << 62
CLAIM_ATTEMPTS: Final = 5
"""Compare-and-swap rounds one claim tries before it gives up (another broker kept
winning); the next InitProducerId starts another claim."""


class ClusterProducerIds:
    """A broker's producer ids in cluster mode (``ProducerIds``)."""

    def __init__(self, etcd: Callable[[], MetadataStore], cluster: str, *,
                 block_size: int = BLOCK_SIZE, refill_below: int | None = None) -> None:
        """``etcd``: the cluster's store (read when a claim starts: the node connects it
        at start); ``refill_below``: ids left in the block when the next is claimed
        (a fifth of a block by default)."""
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self._etcd = etcd
        self._key = producer_ids_key(cluster)
        self._block = block_size
        self._low = block_size // 5 if refill_below is None else refill_below
        self._next = self._end = 0
        self._spare: tuple[int, int] | None = None
        self._claim: asyncio.Task[None] | None = None
        self.claims = 0
        """Blocks this broker claimed."""

    def start(self) -> None:
        """Claim the first block now (etcd is connected), so that the first
        InitProducerId need not wait for it."""
        self._claim_soon()

    def next_id(self) -> int | None:
        if self._next >= self._end and self._spare is not None:
            (self._next, self._end), self._spare = self._spare, None
        if self._next >= self._end:
            self._claim_soon()
            return None
        pid = self._next
        self._next += 1
        if self._end - self._next <= self._low and self._spare is None:
            self._claim_soon()
        return pid

    async def close(self) -> None:
        claim, self._claim = self._claim, None
        if claim is not None:
            claim.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await claim

    def _claim_soon(self) -> None:
        if self._claim is None or self._claim.done():
            self._claim = asyncio.get_running_loop().create_task(self._claim_block())

    async def _claim_block(self) -> None:
        try:
            block = await self.claim()
        except (EtcdError, OSError, ValueError) as exc:
            log.warning("producer_ids_not_claimed", error=str(exc))
            return
        if block is None:
            log.warning("producer_ids_not_claimed", error="other brokers kept claiming")
            return
        self.claims += 1
        if self._next >= self._end:
            self._next, self._end = block
        else:
            self._spare = block

    async def claim(self) -> tuple[int, int] | None:
        """Claim the next block: ``(first, end)``, or None if every round lost to
        another broker's claim. Raises EtcdError when etcd does not answer, ValueError
        when the key holds something this broker did not write."""
        etcd = self._etcd()
        for _ in range(CLAIM_ATTEMPTS):
            kv = await etcd.get(self._key)
            first = FIRST_ID if kv is None else _first_free(kv.value)
            end = first + self._block
            if end > MAX_PRODUCER_ID + 1:
                raise ValueError("the cluster's producer ids are exhausted")
            guard = (Compare(self._key, "create", "==", 0) if kv is None
                     else Compare(self._key, "mod", "==", kv.mod_revision))
            result = await etcd.txn(Txn((guard,), (Put(self._key, json.dumps(
                {"next": end}).encode()),)))
            if result.succeeded:
                log.info("producer_ids_claimed", first=first, end=end)
                return first, end
        return None


def _first_free(value: bytes) -> int:
    doc = json.loads(value)
    first = doc.get("next") if isinstance(doc, dict) else None
    if type(first) is not int or not FIRST_ID <= first <= MAX_PRODUCER_ID + 1:
        raise ValueError(f"unreadable producer id block key: {value[:100]!r}")
    return first
