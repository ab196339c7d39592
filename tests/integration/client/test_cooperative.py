"""Two real consumers, cooperative-sticky, records flowing the whole time.

When the second consumer joins, the first keeps reading the partitions it keeps (its
positions run on without a gap or a re-read) and a moved partition is never read by
both: the first's last read of it comes before the second's first read, and the second
starts where the first's commit left off.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from groupwire.broker.server import Broker
from groupwire.client.connection import Connection
from groupwire.client.consumer import Consumer
from groupwire.client.types import TopicPartition

from ..rawgroup import create_topic, produce
from .test_consumer import FAST, Recorder, admin, bootstrap  # noqa: F401 (fixture)

TOPIC = "coop"
PARTITIONS = 6


async def test_joining_consumer_moves_only_some_partitions_and_none_is_read_twice(
        broker: Broker, admin: Connection) -> None:  # noqa: F811
    await create_topic(admin, TOPIC, PARTITIONS)
    coop: dict[str, Any] = {**FAST, "partition_assignment_strategy": ("cooperative-sticky",),
                            "auto_commit_interval_ms": 100}
    reads: dict[str, list[tuple[TopicPartition, int, float]]] = {"a": [], "b": []}
    stop = asyncio.Event()
    b_read = asyncio.Event()

    async def keep_producing() -> None:
        n = 0
        while not stop.is_set():
            for p in range(PARTITIONS):
                await produce(admin, TOPIC, p, [b"r%d" % n])
            n += 1
            await asyncio.sleep(0.01)  # a steady trickle of records, not a wait for an event

    async def consume(name: str, consumer: Consumer) -> None:
        while not stop.is_set():
            for tp, records in (await consumer.getmany(timeout_ms=50)).items():
                now = time.monotonic()
                reads[name].extend((tp, r.offset, now) for r in records)
                if name == "b":
                    b_read.set()

    rec_a, rec_b = Recorder(), Recorder()
    producer = asyncio.ensure_future(keep_producing())
    async with Consumer(bootstrap(broker), group_id="g-coop", client_id="a", **coop) as a:
        a.subscribe([TOPIC], listener=rec_a)
        reading_a = asyncio.ensure_future(consume("a", a))
        while len(a.assignment()) < PARTITIONS:
            await rec_a.changed.wait()
            rec_a.changed.clear()
        async with Consumer(bootstrap(broker), group_id="g-coop", client_id="b",
                            **coop) as b:
            b.subscribe([TOPIC], listener=rec_b)
            reading_b = asyncio.ensure_future(consume("b", b))
            while not (len(b.assignment()) == PARTITIONS // 2
                       and len(a.assignment()) == PARTITIONS // 2
                       and a.health()["state"] == b.health()["state"] == "stable"):
                # a listener callback, or a re-check: state turns stable between callbacks
                waits = [asyncio.ensure_future(r.changed.wait()) for r in (rec_a, rec_b)]
                await asyncio.wait(waits, timeout=0.2, return_when=asyncio.FIRST_COMPLETED)
                for w in waits:
                    w.cancel()
                rec_a.changed.clear()
                rec_b.changed.clear()
            kept, moved = a.assignment(), b.assignment()
            a_events = list(rec_a.events)  # before close() revokes the rest
            # let b read a few more batches after the handover, then stop everything
            for _ in range(3):
                b_read.clear()
                await b_read.wait()
            stop.set()
            await asyncio.gather(reading_a, reading_b, producer)

    # a revoked exactly the partitions that moved, once, and was never told it lost any
    assert [e for e in a_events if e[0] != "assigned"] == [("revoked", frozenset(moved))]
    # kept partitions: a's offsets run on without a gap or a repeat across the rebalance
    for tp in kept:
        offsets = [o for t, o, _ in reads["a"] if t == tp]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
        assert not any(t == tp for t, _, _ in reads["b"])
    # moved partitions: never read by both at once, and b resumes at a's committed position
    for tp in moved:
        a_reads = [(o, at) for t, o, at in reads["a"] if t == tp]
        b_reads = [(o, at) for t, o, at in reads["b"] if t == tp]
        assert a_reads and b_reads
        assert max(at for _, at in a_reads) < min(at for _, at in b_reads)
        assert b_reads[0][0] == max(o for o, _ in a_reads) + 1
