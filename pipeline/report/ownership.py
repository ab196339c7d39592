"""Who owned each partition when, and how long it had no owner, from one group's events.

Pure and sequential (one group's events in log order), so Spark runs it per group and the
unit tests run it on hand-written events. The view is the broker's (docs/protocol.md §7.2): a
member owns what the last applied SyncGroup gave it until it is removed. A partition is
*without owner* from the moment the broker learned its owner was gone (the
``connection_lost`` of a member later expired for ``connection-lost``, else the removal
event) until the ``rebalance_completed`` that moved it to someone. Partitions are known
from the events only: a partition appears when a rebalance first hands it out (or, for a
window starting mid-run, when its owner is removed). An emptied group owns nothing and
counts no time without owner: nobody was consuming by design.

The new owner after a rebalance is not in the events (they carry moved partitions, not
assignments); it becomes known when that member is later removed, and stays ``None``
otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from groupwire.pipeline.report.events import (
    CONNECTION_LOST,
    GROUP_DELETED,
    GROUP_EMPTIED,
    REBALANCE_COMPLETED,
    REMOVAL_TYPES,
    EventRow,
    TopicPartition,
)

OWNED: Final = "owned"
UNOWNED: Final = "unowned"

# end reasons that are not a removal reason
REASSIGNED: Final = "reassigned"
ASSIGNED: Final = "assigned"
GROUP_EMPTIED_END: Final = "group-emptied"
GROUP_DELETED_END: Final = "group-deleted"

CONNECTION_LOST_REASON: Final = "connection-lost"
"""The ``member_expired`` reason whose time without owner starts at ``connection_lost``."""


@dataclass(slots=True)
class Interval:
    """One stretch of one partition in one state; ``end_ms`` is None while still open."""

    group_id: str
    topic: str
    partition: int
    state: str
    start_ms: int
    end_ms: int | None
    owner_member_id: str | None
    generation_id: int | None
    start_reason: str | None
    end_reason: str | None = None

    def duration_ms(self, as_of_ms: int) -> int:
        """Length, counting an open interval up to ``as_of_ms`` (the end of the data)."""
        end = self.end_ms if self.end_ms is not None else max(as_of_ms, self.start_ms)
        return end - self.start_ms

    def as_record(self, as_of_ms: int) -> dict[str, Any]:
        """The row as ``tables.INTERVAL_SCHEMA`` holds it."""
        return {
            "group_id": self.group_id, "topic": self.topic, "partition": self.partition,
            "state": self.state, "start_ms": self.start_ms, "end_ms": self.end_ms,
            "duration_ms": self.duration_ms(as_of_ms), "open": self.end_ms is None,
            "owner_member_id": self.owner_member_id, "generation_id": self.generation_id,
            "start_reason": self.start_reason, "end_reason": self.end_reason,
        }


class _Tracker:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.current: dict[TopicPartition, Interval] = {}
        self.done: list[Interval] = []
        self.lost_at: dict[str, int] = {}

    def close(self, tp: TopicPartition, at_ms: int, reason: str) -> Interval | None:
        cur = self.current.pop(tp, None)
        if cur is not None:
            cur.end_ms = max(at_ms, cur.start_ms)
            cur.end_reason = reason
            self.done.append(cur)
        return cur

    def open(self, tp: TopicPartition, state: str, at_ms: int, owner: str | None,
             generation: int | None, reason: str | None) -> None:
        self.current[tp] = Interval(self.group_id, tp[0], tp[1], state, at_ms, None, owner,
                                    generation, reason)

    def completed(self, ev: EventRow, emptied: bool) -> None:
        for tp in ev.partitions:
            cur = self.current.get(tp)
            if emptied and cur is not None and cur.state == UNOWNED and cur.start_ms >= ev.ts_ms:
                del self.current[tp]  # the last member left: no gap, the group just ended
            elif cur is not None:
                end = GROUP_EMPTIED_END if emptied else (
                    REASSIGNED if cur.state == OWNED else ASSIGNED)
                self.close(tp, ev.ts_ms, end)
            if not emptied:
                self.open(tp, OWNED, ev.ts_ms, None, ev.generation_id, ev.reason)

    def connection_lost(self, ev: EventRow) -> None:
        # The broker expires a member for ``connection-lost`` only if it never re-attached
        # since, so the latest loss of that member is when its partitions went ownerless.
        if ev.member_id is None:
            return
        self.lost_at[ev.member_id] = ev.ts_ms
        self._learn_owner(ev.member_id, ev.partitions)

    def removed(self, ev: EventRow) -> None:
        member = ev.member_id
        lost = self.lost_at.pop(member, None) if member is not None else None
        since = lost if lost is not None and ev.reason == CONNECTION_LOST_REASON else ev.ts_ms
        reason = ev.reason or ev.type
        if member is not None:
            self._learn_owner(member, ev.partitions)
        for tp in ev.partitions:
            cur = self.current.get(tp)
            if cur is not None and cur.state == UNOWNED:
                continue  # already free: an earlier removal said so
            self.close(tp, since, reason)
            self.open(tp, UNOWNED, since, member, None, reason)

    def _learn_owner(self, member: str, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            cur = self.current.get(tp)
            if cur is not None and cur.state == OWNED and cur.owner_member_id is None:
                cur.owner_member_id = member

    def close_all(self, at_ms: int, reason: str) -> None:
        for tp in sorted(self.current):
            self.close(tp, at_ms, reason)
        self.lost_at.clear()


def ownership_intervals(events: Sequence[EventRow]) -> list[Interval]:
    """Intervals of one group's partitions, from that group's events in log order."""
    if not events:
        return []
    ordered = sorted(events, key=lambda e: e.offset)
    tracker = _Tracker(ordered[0].group_id)
    for i, ev in enumerate(ordered):
        if ev.type == REBALANCE_COMPLETED:
            nxt = ordered[i + 1] if i + 1 < len(ordered) else None
            emptied = nxt is not None and nxt.type == GROUP_EMPTIED and nxt.ts_ms == ev.ts_ms
            tracker.completed(ev, emptied)
        elif ev.type == CONNECTION_LOST:
            tracker.connection_lost(ev)
        elif ev.type in REMOVAL_TYPES:
            tracker.removed(ev)
        elif ev.type == GROUP_EMPTIED:
            tracker.close_all(ev.ts_ms, GROUP_EMPTIED_END)
        elif ev.type == GROUP_DELETED:
            tracker.close_all(ev.ts_ms, GROUP_DELETED_END)
    out = tracker.done + list(tracker.current.values())
    out.sort(key=lambda iv: (iv.topic, iv.partition, iv.start_ms, iv.state == OWNED))
    return out


@dataclass(frozen=True, slots=True)
class Downtime:
    """Time without owner of one partition over the whole window."""

    group_id: str
    topic: str
    partition: int
    unowned_ms: int
    gaps: int
    longest_ms: int
    still_unowned: bool


def downtime(intervals: Iterable[Interval], as_of_ms: int) -> list[Downtime]:
    """Per partition: total and longest time without owner, and whether it still has none."""
    acc: dict[tuple[str, str, int], list[Interval]] = {}
    for iv in intervals:
        acc.setdefault((iv.group_id, iv.topic, iv.partition), []).append(iv)
    out = []
    for (group, topic, partition), ivs in sorted(acc.items()):
        gaps = [iv for iv in ivs if iv.state == UNOWNED]
        lengths = [iv.duration_ms(as_of_ms) for iv in gaps]
        out.append(Downtime(group, topic, partition, sum(lengths), len(gaps),
                            max(lengths, default=0), any(iv.end_ms is None for iv in gaps)))
    return out
