"""Timers as data: the coordinator asks for them, the shell (or a test) keeps them.

Every timer has a key (a tuple of strings) and at most one deadline: setting a key again
replaces its deadline, cancelling it forgets it. :class:`TimerQueue` is the pure heap both
the asyncio shell and the simulated-clock tests use to know what is due.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass

TimerKey = tuple[str, ...]
"""``("session", group, member)``, ``("join", group)``, ``("sync", group, generation)``,
``("hbwait", conn_id, correlation_id)`` or ``("retention",)``."""

SESSION = "session"
JOIN = "join"
SYNC = "sync"
HBWAIT = "hbwait"
RETENTION = "retention"
RETENTION_KEY: TimerKey = (RETENTION,)


def session_key(group_id: str, member_id: str) -> TimerKey:
    return (SESSION, group_id, member_id)


def join_key(group_id: str) -> TimerKey:
    return (JOIN, group_id)


def sync_key(group_id: str, generation_id: int) -> TimerKey:
    return (SYNC, group_id, str(generation_id))


def hbwait_key(conn_id: int, correlation_id: int) -> TimerKey:
    return (HBWAIT, str(conn_id), str(correlation_id))


@dataclass(frozen=True, slots=True)
class SetTimer:
    """Arm ``key`` to fire at ``deadline_ms``, replacing any deadline it had."""

    key: TimerKey
    deadline_ms: int


@dataclass(frozen=True, slots=True)
class CancelTimer:
    """Forget ``key``; cancelling a key that is not armed is harmless."""

    key: TimerKey


TimerOp = SetTimer | CancelTimer


class TimerQueue:
    """A min-heap of deadlines with cancel-and-replace by key (lazy deletion).

    Replaced and cancelled entries stay in the heap until they surface or until they
    make up a third of it, when the heap is rebuilt: re-arming timers stays O(log n)
    without letting garbage grow without bound. (Session timers are not re-armed per
    heartbeat: one fires at its old deadline and re-arms for the member's new one.)
    """

    __slots__ = ("_heap", "_live", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, TimerKey]] = []
        self._live: dict[TimerKey, int] = {}  # key -> seq of its live heap entry
        self._seq = 0

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, key: object) -> bool:
        return key in self._live

    def armed(self) -> list[TimerKey]:
        """The armed keys (in arming order)."""
        return list(self._live)

    @property
    def heap_size(self) -> int:
        """Entries the heap holds, replaced and cancelled ones not yet dropped included."""
        return len(self._heap)

    def set(self, key: TimerKey, deadline_ms: int) -> None:
        self._seq += 1
        self._live[key] = self._seq
        heapq.heappush(self._heap, (deadline_ms, self._seq, key))
        if len(self._heap) > 64 and 2 * len(self._heap) > 3 * len(self._live):
            self._compact()

    def cancel(self, key: TimerKey) -> None:
        self._live.pop(key, None)

    def apply(self, ops: Iterable[TimerOp]) -> None:
        for op in ops:
            if isinstance(op, SetTimer):
                self.set(op.key, op.deadline_ms)
            else:
                self.cancel(op.key)

    def deadline_of(self, key: TimerKey) -> int | None:
        seq = self._live.get(key)
        if seq is None:
            return None
        for deadline, s, k in self._heap:
            if s == seq and k == key:
                return deadline
        return None  # pragma: no cover - the live entry is always in the heap

    def next_deadline(self) -> int | None:
        heap = self._heap
        while heap:
            deadline, seq, key = heap[0]
            if self._live.get(key) == seq:
                return deadline
            heapq.heappop(heap)
        return None

    def pop_due(self, now_ms: int) -> list[TimerKey]:
        """Remove and return every key due at ``now_ms``, earliest deadline first."""
        due: list[TimerKey] = []
        heap = self._heap
        live = self._live
        while heap and heap[0][0] <= now_ms:
            _, seq, key = heapq.heappop(heap)
            if live.get(key) == seq:
                del live[key]
                due.append(key)
        return due

    def _compact(self) -> None:
        live = self._live
        self._heap = [entry for entry in self._heap if live.get(entry[2]) == entry[1]]
        heapq.heapify(self._heap)
