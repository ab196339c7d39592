"""One broker-wide budget for request bytes held in memory (Kafka's queued.max.request.bytes).

Without it every connection may hold a partial frame of up to ``max_frame_bytes`` for the
whole frame-read timeout, so memory grows with connections x 16 MiB. Like Kafka's memory
pool, the budget is asked when a frame's header announces its length, and a connection
it cannot serve stops being read until memory frees.

Sans-I/O: owners are connection ids, which grow with age. Each call returns a
:class:`Decision` (who may read again, who is closed) that the asyncio shell carries out.

Rules, in the order they protect the broker:

- Each connection holds up to ``allowance`` bytes without asking (heartbeats and other
  small requests never wait on the budget); only bytes beyond it are reserved.
- A frame reserves its whole announced size (less the allowance) as soon as its header
  is in, so a frame whose bytes are reserved can always finish.
- Bytes already received are charged at once. If they do not fit, waiting connections
  newer than the one asking are closed, newest first; if that is not enough, the asker
  is itself the newest offender and is closed.
- Waiters are served oldest first (established clients before newcomers), none overtakes
  another. The oldest waits while connections that are reading (frames with their memory)
  can free enough by finishing or timing out; only memory held by newer waiters, which
  make no progress, is reclaimed by closing them, newest first.
"""

from __future__ import annotations

import enum
from bisect import insort
from dataclasses import dataclass
from typing import Final

__all__ = ["DEFAULT_ALLOWANCE", "Decision", "MemoryBudget", "Verdict"]

DEFAULT_ALLOWANCE: Final = 8 * 1024
"""Bytes each connection may hold without reserving: a heartbeat is about 100."""


class Verdict(enum.Enum):
    READ = "read"
    """Everything the owner holds and announced is reserved: keep reading."""
    WAIT = "wait"
    """Bytes in hand are reserved, the rest of the frame is not: stop reading."""
    CLOSE = "close"
    """The owner cannot be given the bytes it holds: close it (memory-pressure)."""


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    """For the owner that asked (READ after a release)."""
    resume: tuple[int, ...] = ()
    """Other owners that waited and now have their frame reserved: read them again."""
    close: tuple[int, ...] = ()
    """Other owners closed to make room, newest first; their reservations are gone."""


@dataclass(slots=True)
class _Hold:
    reserved: int = 0
    want: int = 0


class MemoryBudget:
    """Reservations of ``total`` bytes among connections; ``reserved`` never exceeds it."""

    __slots__ = ("allowance", "peak", "reserved", "total", "_holds", "_waiting")

    def __init__(self, total: int, allowance: int = DEFAULT_ALLOWANCE) -> None:
        if total < 1 or allowance < 0:
            raise ValueError("total must be positive and allowance not negative")
        self.total = total
        self.allowance = allowance
        self.reserved = 0
        self.peak = 0
        """Most bytes ever reserved at once (tests and operators: never above total)."""
        self._holds: dict[int, _Hold] = {}
        self._waiting: list[int] = []
        """Owners whose frame is not yet reserved, oldest (smallest id) first."""

    # --- views ---------------------------------------------------------------------------

    @property
    def free(self) -> int:
        return self.total - self.reserved

    @property
    def waiting(self) -> tuple[int, ...]:
        return tuple(self._waiting)

    def held_by(self, owner: int) -> int:
        hold = self._holds.get(owner)
        return 0 if hold is None else hold.reserved

    def owners(self) -> tuple[int, ...]:
        """Owners holding or waiting for a reservation."""
        return tuple(self._holds)

    # --- requests ------------------------------------------------------------------------

    def request(self, owner: int, held: int, wanted: int) -> Decision:
        """``owner`` now holds ``held`` bytes and will hold ``wanted`` once its partial
        frame is complete (both counting queued frames). Replaces its earlier request."""
        need = max(0, held - self.allowance)
        want = max(need, wanted - self.allowance)
        if want == 0:
            return self._drop(owner, Verdict.READ)
        if want > self.total:  # could never be reserved: refuse it rather than wait forever
            return self._drop(owner, Verdict.CLOSE)
        hold = self._holds.get(owner)
        if hold is None:
            hold = self._holds[owner] = _Hold()
        hold.want = want
        if hold.reserved == want and owner not in self._waiting:
            return Decision(Verdict.READ)  # more of a reserved frame: nothing changes
        if hold.reserved >= want:  # a frame ended and the next one is smaller
            self._unwait(owner)
            self._set(hold, want)
            return self._settled(Verdict.READ)
        if owner not in self._waiting:
            insort(self._waiting, owner)
        closed: list[int] = []
        if hold.reserved < need:  # bytes already in memory: they cannot wait
            if not self._room_from_newer(owner, need - hold.reserved, closed):
                self._forget(owner)
                return self._settled(Verdict.CLOSE, closed)
            self._set(hold, need)
        resume, more = self._settle()
        closed += more
        if owner in resume:
            resume.remove(owner)
            verdict = Verdict.READ
        elif owner in closed:
            closed.remove(owner)
            verdict = Verdict.CLOSE
        else:
            verdict = Verdict.WAIT
        return Decision(verdict, tuple(resume), tuple(closed))

    def release(self, owner: int) -> Decision:
        """``owner`` is gone: its reservation serves the waiters."""
        return self._drop(owner, Verdict.READ)

    # --- internals -----------------------------------------------------------------------

    def _drop(self, owner: int, verdict: Verdict) -> Decision:
        if owner not in self._holds:
            return Decision(verdict)
        self._forget(owner)
        return self._settled(verdict)

    def _settled(self, verdict: Verdict, closed: list[int] | None = None) -> Decision:
        resume, more = self._settle()
        return Decision(verdict, tuple(resume), tuple([*(closed or ()), *more]))

    def _forget(self, owner: int) -> None:
        hold = self._holds.pop(owner)
        self.reserved -= hold.reserved
        self._unwait(owner)

    def _unwait(self, owner: int) -> None:
        if owner in self._waiting:
            self._waiting.remove(owner)

    def _set(self, hold: _Hold, reserved: int) -> None:
        self.reserved += reserved - hold.reserved
        hold.reserved = reserved
        assert self.reserved <= self.total, "reserved more than the budget"
        if self.reserved > self.peak:
            self.peak = self.reserved

    def _room_from_newer(self, owner: int, amount: int, closed: list[int]) -> bool:
        """Make ``amount`` free by closing waiters newer than ``owner``, newest first;
        close none if even all of them would not be enough."""
        if amount <= self.free:
            return True
        newer = [w for w in self._waiting if w > owner]
        if self.free + sum(self._holds[w].reserved for w in newer) < amount:
            return False
        while amount > self.free:
            victim = newer.pop()
            self._forget(victim)
            closed.append(victim)
        return True

    def _settle(self) -> tuple[list[int], list[int]]:
        """Serve waiters oldest first; reclaim newer waiters' memory only when the oldest
        could never be served by what reading connections hold."""
        resume: list[int] = []
        closed: list[int] = []
        while self._waiting:
            head = self._waiting[0]
            hold = self._holds[head]
            deficit = hold.want - hold.reserved
            if deficit <= self.free:
                self._waiting.pop(0)
                self._set(hold, hold.want)
                resume.append(head)
                continue
            waiters_hold = sum(self._holds[w].reserved for w in self._waiting)
            readers_hold = self.reserved - waiters_hold
            if self.free + readers_hold >= deficit:
                break  # reading connections finish their frames (or time out) and free it
            # Only waiters' memory can make up the rest, and they are stuck behind the
            # head: close the newest until what readers free will do. Since a want never
            # exceeds the total, all newer waiters together always suffice.
            while self.free + readers_hold < deficit:
                victim = self._waiting[-1]
                self._forget(victim)
                closed.append(victim)
        return resume, closed
