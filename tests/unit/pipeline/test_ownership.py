"""Partition ownership intervals and time without owner, from hand-written events."""

from __future__ import annotations

import itertools

from groupwire.pipeline.report.events import EventRow
from groupwire.pipeline.report.ownership import (
    GROUP_EMPTIED_END,
    OWNED,
    REASSIGNED,
    UNOWNED,
    Interval,
    downtime,
    ownership_intervals,
)

_offsets = itertools.count()


def ev(type_: str, ts: int, *, member: str | None = None, reason: str | None = None,
       gen: int = 1, parts: tuple[int, ...] = (), duration: int | None = None) -> EventRow:
    return EventRow(offset=next(_offsets), ts_ms=ts, type=type_, group_id="g",
                    generation_id=gen, member_id=member, reason=reason,
                    duration_ms=duration, partitions=tuple(("t", p) for p in parts))


def formed(ts: int = 100) -> list[EventRow]:
    """a owns t-0, t-1; b owns t-2, t-3 from ``ts``."""
    return [ev("rebalance_started", ts - 10, member="a", reason="member-joined"),
            ev("rebalance_completed", ts, member="a", reason="member-joined", gen=1,
               parts=(0, 1, 2, 3), duration=10)]


def gaps(intervals: list[Interval]) -> dict[int, list[tuple[int, int | None, str | None]]]:
    out: dict[int, list[tuple[int, int | None, str | None]]] = {}
    for iv in intervals:
        if iv.state == UNOWNED:
            out.setdefault(iv.partition, []).append((iv.start_ms, iv.end_ms, iv.start_reason))
    return out


def test_a_killed_member_leaves_its_partitions_ownerless_from_the_connection_loss() -> None:
    events = [*formed(),
              ev("connection_lost", 1_000, member="b", parts=(2, 3)),
              ev("member_expired", 1_200, member="b", reason="connection-lost", parts=(2, 3)),
              ev("rebalance_started", 1_200, member="b", reason="connection-lost"),
              ev("rebalance_completed", 1_450, member="b", reason="connection-lost", gen=2,
                 parts=(2, 3), duration=250)]
    ivs = ownership_intervals(events)
    assert gaps(ivs) == {2: [(1_000, 1_450, "connection-lost")],
                         3: [(1_000, 1_450, "connection-lost")]}
    before = next(iv for iv in ivs if iv.partition == 2 and iv.state == OWNED)
    assert (before.owner_member_id, before.end_ms, before.end_reason) == (
        "b", 1_000, "connection-lost")
    assert [d.unowned_ms for d in downtime(ivs, as_of_ms=2_000)] == [0, 0, 450, 450]


def test_an_expired_session_counts_from_the_expiry() -> None:
    events = [*formed(),
              ev("member_expired", 5_000, member="a", reason="session-expired", parts=(0, 1)),
              ev("rebalance_started", 5_000, member="a", reason="session-expired"),
              ev("rebalance_completed", 5_020, reason="session-expired", gen=2,
                 parts=(0, 1), duration=20)]
    assert gaps(ownership_intervals(events)) == {0: [(5_000, 5_020, "session-expired")],
                                                 1: [(5_000, 5_020, "session-expired")]}


def test_a_connection_loss_the_member_survived_does_not_start_the_gap() -> None:
    """Reconnected (no event), later stalled: the gap starts at the poll expiry."""
    events = [*formed(),
              ev("connection_lost", 1_000, member="a", parts=(0, 1)),
              ev("poll_interval_expired", 9_000, member="a", reason="poll-interval-expired",
                 parts=(0, 1)),
              ev("rebalance_completed", 9_100, reason="poll-interval-expired", gen=2,
                 parts=(0, 1), duration=100)]
    assert gaps(ownership_intervals(events))[0] == [(9_000, 9_100, "poll-interval-expired")]


def test_partitions_moving_between_live_members_have_no_gap() -> None:
    events = [*formed(),
              ev("member_joined", 2_000, member="c"),
              ev("rebalance_started", 2_000, member="c", reason="member-joined"),
              ev("rebalance_completed", 2_300, member="c", reason="member-joined", gen=2,
                 parts=(1, 3), duration=300)]
    ivs = ownership_intervals(events)
    assert gaps(ivs) == {}
    p1 = [iv for iv in ivs if iv.partition == 1]
    assert [(iv.start_ms, iv.end_ms, iv.end_reason, iv.generation_id) for iv in p1] == [
        (100, 2_300, REASSIGNED, 1), (2_300, None, None, 2)]


def test_the_last_member_leaving_ends_ownership_without_a_gap() -> None:
    events = [*formed(),
              ev("member_left", 3_000, member="a", reason="shutdown", parts=(0, 1, 2, 3)),
              ev("rebalance_started", 3_000, member="a", reason="member-left"),
              ev("rebalance_completed", 3_000, member="a", reason="member-left", gen=2,
                 parts=(0, 1, 2, 3), duration=0),
              ev("group_emptied", 3_000)]
    ivs = ownership_intervals(events)
    assert gaps(ivs) == {}
    assert all(iv.end_ms == 3_000 and iv.end_reason == "shutdown" for iv in ivs)
    assert [d.unowned_ms for d in downtime(ivs, as_of_ms=10_000)] == [0, 0, 0, 0]


def test_a_group_emptied_by_a_crash_counts_the_grace_then_stops() -> None:
    events = [*formed(),
              ev("connection_lost", 3_000, member="a", parts=(0, 1, 2, 3)),
              ev("member_expired", 3_200, member="a", reason="connection-lost",
                 parts=(0, 1, 2, 3)),
              ev("rebalance_started", 3_200, reason="connection-lost"),
              ev("rebalance_completed", 3_200, reason="connection-lost", gen=2,
                 parts=(0, 1, 2, 3), duration=0),
              ev("group_emptied", 3_200)]
    ivs = ownership_intervals(events)
    assert {p: [(s, e) for s, e, _ in g] for p, g in gaps(ivs).items()} == {
        p: [(3_000, 3_200)] for p in range(4)}
    assert all(iv.end_reason == GROUP_EMPTIED_END for iv in ivs if iv.state == UNOWNED)
    assert all(iv.end_ms is not None for iv in ivs)


def test_a_partition_still_ownerless_at_the_end_counts_up_to_the_end() -> None:
    events = [*formed(),
              ev("member_expired", 4_000, member="b", reason="session-expired", parts=(2,)),
              ev("rebalance_started", 4_000, reason="session-expired")]
    ivs = ownership_intervals(events)
    (gap,) = [iv for iv in ivs if iv.state == UNOWNED]
    assert gap.end_ms is None and gap.duration_ms(as_of_ms=4_500) == 500
    d2 = next(d for d in downtime(ivs, as_of_ms=4_500) if d.partition == 2)
    assert (d2.unowned_ms, d2.gaps, d2.longest_ms, d2.still_unowned) == (500, 1, 500, True)
    assert gap.as_record(4_500)["open"] is True


def test_a_window_starting_mid_run_still_sees_gaps() -> None:
    """--since cut off the rebalance that assigned the partition."""
    events = [ev("member_left", 7_000, member="x", reason="bye", parts=(5,)),
              ev("rebalance_completed", 7_040, reason="member-left", gen=9, parts=(5,),
                 duration=40)]
    ivs = ownership_intervals(events)
    assert gaps(ivs) == {5: [(7_000, 7_040, "bye")]}
    assert ivs[-1].state == OWNED and ivs[-1].generation_id == 9


def test_group_deleted_closes_everything_and_no_events_no_intervals() -> None:
    events = [*formed(), ev("group_deleted", 8_000, reason="delete-groups")]
    ivs = ownership_intervals(events)
    assert all(iv.end_ms == 8_000 for iv in ivs)
    assert ownership_intervals([]) == []
