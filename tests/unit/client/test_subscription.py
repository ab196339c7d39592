"""Subscription state: what is fetchable, and what survives a cooperative reassignment."""

from __future__ import annotations

import pytest

from groupwire.client.errors import IllegalStateError
from groupwire.client.subscription import SubscriptionState
from groupwire.client.types import Record, TopicPartition

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def test_reassignment_keeps_positions_of_partitions_kept() -> None:
    s = SubscriptionState()
    s.subscribe(["a", "b"], None)
    s.set_assignment([A0, A1])
    s.partitions[A0].seek(7)
    s.partitions[A1].owned = False
    epoch = s.epoch
    s.set_assignment([A0, B0])
    assert s.assigned() == {A0, B0}
    assert s.partitions[A0].position == 7 and s.partitions[B0].position is None
    assert s.epoch == epoch + 1
    assert s.missing_positions() == [B0]


def test_fetchable_skips_paused_unowned_buffered_and_unpositioned() -> None:
    s = SubscriptionState()
    s.assign_manual([A0, A1, B0])
    for tp in (A0, A1, B0):
        s.partitions[tp].seek(0)
    s.partitions[A1].paused = True
    s.partitions[B0].buffer.append(Record("b", 0, 0, None, b"v", 0))
    assert s.fetchable() == [A0]
    s.partitions[A0].owned = False
    assert s.fetchable() == []
    s.set_assignment([A0])  # a new assignment clears PARTITION_NOT_OWNED
    assert s.fetchable() == [A0]


def test_subscribe_and_assign_exclude_each_other() -> None:
    s = SubscriptionState()
    s.assign_manual([A0])
    with pytest.raises(IllegalStateError):
        s.subscribe(["a"], None)
    s.unsubscribe()
    s.subscribe(None, r"a|b")
    assert s.match(["a", "b", "ab"]) == frozenset({"a", "b"})
    with pytest.raises(IllegalStateError):
        s.assign_manual([A0])
    with pytest.raises(ValueError):
        s.subscribe(["a"], "a")
