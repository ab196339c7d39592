"""Synchronous helpers for Spark tests: topics, producing, consuming, all on loopback."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence

from groupwire.client import Consumer, Producer, TopicPartition
from groupwire.client.admin import Admin

_names = itertools.count()


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    async def go() -> None:
        async with Admin(bootstrap) as admin:
            await admin.create_topics(name, partitions)

    asyncio.run(go())


def add_partitions(bootstrap: str, name: str, total: int) -> None:
    async def go() -> None:
        async with Admin(bootstrap) as admin:
            await admin.create_partitions(name, total)

    asyncio.run(go())


def produce(bootstrap: str, topic: str, values: Sequence[bytes], *,
            partition: int | None = None, keyed: bool = True,
            headers: list[tuple[str, bytes | None]] | None = None) -> list[tuple[int, int]]:
    """Produce ``values`` (key = value when ``keyed``); returns (partition, offset) each."""
    async def go() -> list[tuple[int, int]]:
        async with Producer(bootstrap, linger_ms=2) as producer:
            futures = [await producer.send(topic, v, key=v if keyed else None,
                                           partition=partition, headers=headers)
                       for v in values]
            await producer.flush()
            metas = [await f for f in futures]
        return [(m.partition, m.offset) for m in metas]

    return asyncio.run(go())


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    async def go() -> dict[int, int]:
        async with Admin(bootstrap) as admin:
            got = await admin.list_offsets(
                {TopicPartition(topic, p): -1 for p in range(partitions)})
        return {tp.partition: off for tp, off in got.items()}

    return asyncio.run(go())


Consumed = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]
"""partition, offset, key, value, headers"""


def consume_all(bootstrap: str, topic: str, partitions: int) -> list[Consumed]:
    """Every record of ``topic`` through a plain assigned Consumer (no group)."""
    ends = end_offsets(bootstrap, topic, partitions)

    async def go() -> list[Consumed]:
        out: list[Consumed] = []
        async with Consumer(bootstrap, group_id=None, auto_offset_reset="earliest",
                            enable_auto_commit=False) as consumer:
            consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
            want = sum(ends.values())
            while len(out) < want:
                batch = await consumer.getmany(timeout_ms=2000)
                if not batch:
                    break
                for records in batch.values():
                    out.extend((r.partition, r.offset, r.key, r.value, r.headers)
                               for r in records)
        return sorted(out, key=lambda r: (r[0], r[1]))

    return asyncio.run(go())
