"""The fetcher's buffers, without a broker."""

from __future__ import annotations

from typing import Any

from client.fetcher import Fetcher
from client.subscription import SubscriptionState
from client.types import Record, TopicPartition


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
