"""The fetcher's buffers, without a broker."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from groupwire.client.fetcher import Fetcher
from groupwire.client.subscription import SubscriptionState
from groupwire.client.types import Record, TopicPartition
from groupwire.protocol.batches import BatchRecord, encode_batch
from groupwire.protocol.messages import FetchPartitionData, FetchResponse, FetchTopicResponse


async def _never(_request: Any) -> Any:
    raise AssertionError("no request expected")


def test_drain_takes_partitions_in_turn_so_buffers_empty_evenly() -> None:
    subs = SubscriptionState()
    tps = [TopicPartition("t", p) for p in range(3)]
    subs.set_assignment(tps)
    for tp in tps:
        st = subs.partitions[tp]
        st.seek(0)
        st.buffer.extend(Record(tp.topic, tp.partition, o, None, b"v", 0, []) for o in range(4))
    fetcher = Fetcher(subs, _never, auto_offset_reset="earliest", fetch_max_wait_ms=500)
    order = [next(iter(fetcher.drain(1))) for _ in range(6)]
    # every partition in turn, not the first one four times while the others wait
    assert sorted(order[:3]) == tps and order[3:] == order[:3]
    assert [len(subs.partitions[tp].buffer) for tp in tps] == [2, 2, 2]
    assert all(subs.partitions[tp].position == 2 for tp in tps)


async def test_a_rebalance_during_a_fetch_keeps_the_records_of_partitions_that_stay() -> None:
    """Cooperative rebalancing promises no pause for partitions that stay: the answer to a
    Fetch sent before the new assignment still fills their buffers; a partition given up
    gets nothing, and a newly assigned one waits for its own position."""
    kept, gone, new = [TopicPartition("t", p) for p in range(3)]
    subs = SubscriptionState()
    subs.set_assignment([kept, gone])
    for tp in (kept, gone):
        subs.partitions[tp].seek(0)
    answered = asyncio.Event()
    release = asyncio.Event()

    async def send(_request: Any) -> Any:
        answered.set()
        await release.wait()
        batch = encode_batch([BatchRecord(b"v", None, [], 7)], base_offset=0)
        return FetchResponse(responses=[FetchTopicResponse(topic="t", partitions=[
            FetchPartitionData(partition_index=tp.partition, high_watermark=1, records=batch)
            for tp in (kept, gone, new)])])

    fetcher = Fetcher(subs, send, auto_offset_reset="earliest", fetch_max_wait_ms=500)
    done = asyncio.Event()
    fetcher.on_done = done.set
    fetcher.maybe_fetch(None)
    await answered.wait()
    subs.set_assignment([kept, new])  # the rebalance lands while the Fetch is out
    release.set()
    await done.wait()
    task = fetcher.cancel()  # already done: hands back the task to look at
    assert task is not None and task.exception() is None
    assert [r.offset for r in subs.partitions[kept].buffer] == [0]
    assert gone not in subs.partitions
    assert not subs.partitions[new].buffer  # no position yet: its records are not taken


async def test_a_fetch_planned_before_its_partitions_were_lost_sends_nothing() -> None:
    """The Fetch task starts a loop turn after it was planned; a poll in between may drop
    the assignment (lost partitions). The task must then end quietly, not crash."""
    tp = TopicPartition("t", 0)
    subs = SubscriptionState()
    subs.set_assignment([tp])
    subs.partitions[tp].seek(0)
    tasks: list[asyncio.Task[None]] = []

    def spawn(coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        tasks.append(asyncio.get_running_loop().create_task(coro, name=name))
        return tasks[-1]

    fetcher = Fetcher(subs, _never, auto_offset_reset="earliest", fetch_max_wait_ms=500,
                      spawn=spawn)
    fetcher.maybe_fetch(None)
    subs.set_assignment(())  # before the task has run
    (task,) = tasks
    await asyncio.wait({task})
    assert task.exception() is None
    assert not fetcher.in_flight and fetcher.record_error(set()) is None
