"""Rebalance history (docs/protocol.md §7.4): why each rebalance started, how long it took,
which partitions changed owner. Kept in memory, the last ``history_size`` per group."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Final

from groupwire.protocol.messages import Rebalance
from groupwire.protocol.types import TopicPartitions

# reason tokens (§7.4)
MEMBER_JOINED: Final = "member-joined"
MEMBER_REJOINED: Final = "member-rejoined"
MEMBER_LEFT: Final = "member-left"
SESSION_EXPIRED: Final = "session-expired"
POLL_INTERVAL_EXPIRED: Final = "poll-interval-expired"
CONNECTION_LOST: Final = "connection-lost"
SYNC_TIMEOUT: Final = "sync-timeout"
STATIC_MEMBER_REPLACED: Final = "static-member-replaced"

Owners = dict[tuple[str, int], str]
"""partition -> owner (instance id if static, else member id)."""


class Cause:
    """Why a rebalance is being asked for: a §7.4 token, the client's words, who."""

    __slots__ = ("token", "detail", "member_id")

    def __init__(self, token: str, detail: str | None = None,
                 member_id: str | None = None) -> None:
        self.token = token
        self.detail = detail
        self.member_id = member_id


class RebalanceEntry:
    __slots__ = ("generation_id", "reason", "detail", "started_ms", "completed_ms",
                 "duration_ms", "moved_partitions", "trigger_member_id", "owners_at_start",
                 "started_wall_ms", "completed_wall_ms")

    def __init__(self, cause: Cause, started_ms: int, owners_at_start: Owners,
                 started_wall_ms: int) -> None:
        self.generation_id: int | None = None
        self.reason = cause.token
        self.detail = cause.detail
        self.started_ms = started_ms
        """Monotonic, for the duration; ``started_wall_ms`` is what people read, the
        same instant as the ``rebalance_started`` event's ``ts_ms``."""
        self.started_wall_ms = started_wall_ms
        self.completed_ms: int | None = None
        self.completed_wall_ms: int | None = None
        self.duration_ms: int | None = None
        self.moved_partitions: TopicPartitions = []
        self.trigger_member_id = cause.member_id
        self.owners_at_start = owners_at_start

    def to_message(self) -> Rebalance:
        """As DescribeGroups shows it: wall times taken when it started and completed
        (as its events' ``ts_ms``), the duration from the monotonic ones."""
        return Rebalance(
            generation_id=self.generation_id, reason=self.reason, detail=self.detail,
            started_ms=self.started_wall_ms, completed_ms=self.completed_wall_ms,
            duration_ms=self.duration_ms,
            moved_partitions=[(t, list(ps)) for t, ps in self.moved_partitions],
            trigger_member_id=self.trigger_member_id,
        )


class RebalanceHistory:
    """The recent rebalances of one group, oldest first; the last may still be running."""

    __slots__ = ("_entries", "running")

    def __init__(self, size: int) -> None:
        self._entries: deque[RebalanceEntry] = deque(maxlen=max(size, 0))
        self.running: RebalanceEntry | None = None

    def start(self, cause: Cause, now_ms: int, owners: Owners,
              wall_ms: int) -> RebalanceEntry:
        entry = RebalanceEntry(cause, now_ms, owners, wall_ms)
        self.running = entry
        self._entries.append(entry)
        return entry

    def complete(self, now_ms: int, generation_id: int, owners: Owners,
                 ) -> RebalanceEntry | None:
        entry = self.running
        if entry is None:
            return None
        self.running = None
        entry.generation_id = generation_id
        entry.completed_ms = now_ms
        entry.duration_ms = now_ms - entry.started_ms
        # on the wall clock it ends its (monotonic) duration after it started, so that
        # completed - started = duration whatever the wall clock did meanwhile
        entry.completed_wall_ms = entry.started_wall_ms + entry.duration_ms
        entry.moved_partitions = moved_partitions(entry.owners_at_start, owners)
        entry.owners_at_start = {}
        return entry

    def entries(self) -> list[RebalanceEntry]:
        return list(self._entries)

    def to_messages(self) -> list[Rebalance]:
        return [e.to_message() for e in self._entries]


def moved_partitions(before: Owners, after: Owners) -> TopicPartitions:
    """Sorted partitions whose owner (or lack of one) differs between the two maps."""
    moved = [tp for tp, owner in before.items() if after.get(tp) != owner]
    moved.extend(tp for tp in after if tp not in before)
    return group_partitions(moved)


def group_partitions(partitions: Iterable[tuple[str, int]]) -> TopicPartitions:
    """``{(t, p), ...}`` -> ``[(t, [p, ...]), ...]`` sorted by topic then partition."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return list(by_topic.items())
