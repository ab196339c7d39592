"""Replica placement for a new topic (Kafka's scheme, with and without racks)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from groupwire.broker.cluster.keys import BrokerInfo
from groupwire.broker.cluster.placement import InvalidReplicationFactor, assign_replicas


def _brokers(ids: list[int]) -> list[BrokerInfo]:
    return [BrokerInfo(n, "h", 1, None, "i") for n in ids]


def test_without_racks_leaders_go_round_from_start_and_followers_shift() -> None:
    got = assign_replicas(_brokers([30, 10, 20]), 6, 2, start=1, shift=0)
    # Sorted brokers 10, 20, 30; leaders from index 1; the shift grows after a full round.
    assert got == ((20, 30), (30, 10), (10, 20), (20, 10), (30, 20), (10, 30))


def test_with_racks_each_partition_uses_distinct_racks_first() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    brokers = [BrokerInfo(n, "h", 1, rack, "i") for n, rack in racks.items()]
    got = assign_replicas(brokers, 4, 2, start=0)
    # Without racks, sorted 1..4 would pair 1 with 2 (both "a") for partition 0.
    assert all({racks[r] for r in p} == {"a", "b"} for p in got)
    assert [p[0] for p in got] == [1, 3, 2, 4]  # the rack-alternated list


@pytest.mark.parametrize("rf", [0, 4])
def test_a_replication_factor_the_live_brokers_cannot_hold_is_refused(rf: int) -> None:
    with pytest.raises(InvalidReplicationFactor, match="replication factor"):
        assign_replicas(_brokers([1, 2, 3]), 3, rf, start=0)


def _check(got: tuple[tuple[int, ...], ...], partitions: int, rf: int, n: int) -> None:
    assert len(got) == partitions
    assert all(len(p) == rf == len(set(p)) for p in got)
    if partitions:
        leaders = Counter(p[0] for p in got)
        counts = [leaders.get(i, 0) for i in range(n)]
        assert max(counts) - min(counts) <= 1


@given(n=st.integers(1, 12), partitions=st.integers(0, 60), data=st.data(),
       start=st.integers(0, 1000), shift=st.none() | st.integers(0, 1000))
def test_without_racks_replicas_are_distinct_and_leaders_even(
        n: int, partitions: int, data: st.DataObject, start: int, shift: int | None) -> None:
    rf = data.draw(st.integers(1, n))
    got = assign_replicas(_brokers(list(range(n))), partitions, rf, start, shift)
    _check(got, partitions, rf, n)


@given(n=st.integers(1, 12), racks=st.integers(1, 5), partitions=st.integers(0, 60),
       data=st.data(), start=st.integers(0, 1000))
def test_with_racks_every_partition_spans_as_many_racks_as_it_can(
        n: int, racks: int, partitions: int, data: st.DataObject, start: int) -> None:
    rf = data.draw(st.integers(1, n))
    # None mixed with racks counts as one more rack; all None is the rack-unaware case.
    names: list[str | None] = [None, *(f"r{i}" for i in range(racks))]
    rack_of = [data.draw(st.sampled_from(names)) for _ in range(n)]
    brokers = [BrokerInfo(i, "h", 1, rack_of[i], "i") for i in range(n)]
    got = assign_replicas(brokers, partitions, rf, start)
    _check(got, partitions, rf, n)
    distinct = len(set(rack_of))
    assert all(len({rack_of[r] for r in p}) == min(rf, distinct) for p in got)
