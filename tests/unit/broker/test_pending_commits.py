"""broker.pending_commits: what OffsetFetch shows while commits await their writes."""

from __future__ import annotations

from groupwire.broker.coordinator.offsets import CommittedOffset
from groupwire.broker.pending_commits import PendingCommits
from groupwire.protocol.messages import (
    OffsetFetchResponse,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
)

TP = ("t", 0)


def at(offset: int) -> CommittedOffset:
    return CommittedOffset(offset, f"m{offset}", 0)


def shown(pending: PendingCommits, cached: int) -> tuple[int, str]:
    """What an OffsetFetch answer built from the cache (``cached``) says after masking."""
    answer = OffsetFetchResponse(topics=[OffsetFetchResponseTopic(name="t", partitions=[
        OffsetFetchResponsePartition(partition_index=0, committed_offset=cached,
                                     metadata=f"m{cached}"),
        OffsetFetchResponsePartition(partition_index=1, committed_offset=9)])])
    masked = pending.masker("g")(answer)
    assert isinstance(masked, OffsetFetchResponse)
    assert masked.topics[0].partitions[1].committed_offset == 9  # not pending: as cached
    p = masked.topics[0].partitions[0]
    return p.committed_offset, p.metadata


def test_overlapping_commits_show_the_value_before_the_oldest_still_pending() -> None:
    pending = PendingCommits()
    first = pending.add("g", {TP: None}, {TP: at(5)})
    second = pending.add("g", {TP: at(5)}, {TP: at(8)})
    assert pending.pending("g")
    assert shown(pending, 8) == (-1, "")  # nothing was committed before the first
    first()
    assert shown(pending, 8) == (5, "m5")
    second()
    assert not pending.pending("g")
    assert shown(pending, 8) == (8, "m8")


def test_a_commit_that_changes_nothing_is_never_pending() -> None:
    pending = PendingCommits()
    settle = pending.add("g", {TP: at(5)}, {TP: at(5)})
    assert not pending.pending("g")
    settle()
    assert not pending.pending("g")


def test_settling_twice_or_out_of_order_leaves_nothing_behind() -> None:
    pending = PendingCommits()
    first = pending.add("g", {TP: at(1)}, {TP: at(2)})
    second = pending.add("g", {TP: at(2)}, {TP: at(3)})
    second()
    assert shown(pending, 3) == (1, "m1")
    first()
    first()
    assert not pending.pending("g")
