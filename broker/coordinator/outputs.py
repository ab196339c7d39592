"""What the coordinator returns: replies, timers, records and events, all plain data.

The shell executes a :class:`Result` in order: arm timers, emit events, write the
records, send the replies. A result that writes records (or stages offsets) carries a
write token instead of its replies: the core holds them until the shell reports the
write's outcome (``Coordinator.stored`` / ``Coordinator.failed``, writes.py), so what a
client is told always matches what was stored. Handlers append to one reusable
:class:`Outputs` builder; the common heartbeat builds none of this (``Coordinator.renew``
returns a ``Renewal`` instead).
"""

from __future__ import annotations

from dataclasses import dataclass

from groupwire.broker.coordinator.events import GroupEvent
from groupwire.broker.coordinator.records import GroupMetadataRecord, GroupRecord
from groupwire.broker.coordinator.state import GroupState
from groupwire.broker.coordinator.timers import CancelTimer, SetTimer, TimerKey, TimerOp
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import Response
from groupwire.protocol.security import ANONYMOUS


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Where a request came from: the shell's connection number and the envelope.

    ``principal`` is who the connection authenticated as, ``superuser`` whether the broker
    counts it among its super users: member ownership (docs/protocol.md §7.5) rests on them.
    A connection's principal must not change once it has sent a group request (the
    heartbeat fast path trusts the connections a member is attached to)."""

    conn_id: int
    correlation_id: int
    client_id: str
    client_host: str
    principal: str = ANONYMOUS
    superuser: bool = False


@dataclass(frozen=True, slots=True)
class Reply:
    """Send ``response`` on connection ``conn_id`` under ``correlation_id``."""

    conn_id: int
    correlation_id: int
    response: Response


Transition = tuple[str, GroupState, GroupState]
"""``(group_id, source, target)``."""


@dataclass(frozen=True, slots=True)
class Result:
    """Everything one input produced.

    ``write``: the token of the write this input made (its ``records``, or offsets staged
    for a batch the shell encoded itself), None if it wrote nothing. Such a result has no
    ``replies``: the core holds them under the token, and the shell, once it knows the
    write's outcome, executes ``Coordinator.stored(token)`` or ``failed(token, code)``,
    whose results carry them. Tokens increase per coordinator in the order of the writes.

    ``transitions`` lists the state moves it made, ``(group, from, to)`` in order: the
    shell has nothing to do for them; they are there so the result tells every change."""

    replies: tuple[Reply, ...] = ()
    timers: tuple[TimerOp, ...] = ()
    records: tuple[GroupRecord, ...] = ()
    events: tuple[GroupEvent, ...] = ()
    transitions: tuple[Transition, ...] = ()
    write: int | None = None

    def __bool__(self) -> bool:
        return bool(self.replies or self.timers or self.records or self.events
                    or self.transitions or self.write is not None)


EMPTY_RESULT = Result()


@dataclass(frozen=True, slots=True)
class FetchCheck:
    """Verdict on a fenced Fetch (docs/protocol.md §7.2): a top-level error, or the refused set."""

    error_code: ErrorCode
    not_owned: frozenset[tuple[str, int]]
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class HeldWrite:
    """What waits for a write's outcome besides its staged offsets: the replies of the
    input that made it, and ``(group, generation)`` of each group metadata record in it
    (a failed one makes the group rebalance)."""

    replies: tuple[Reply, ...]
    generations: tuple[tuple[str, int], ...]


class Outputs:
    """Mutable collector behind every entry point; :meth:`build` empties it. It also
    numbers the writes and holds their replies until their outcome (``held``)."""

    __slots__ = ("replies", "timers", "records", "events", "transitions", "held",
                 "_token", "_last_token")

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.timers: list[TimerOp] = []
        self.records: list[GroupRecord] = []
        self.events: list[GroupEvent] = []
        self.transitions: list[Transition] = []
        self.held: dict[int, HeldWrite] = {}
        """Write token -> what its outcome releases; every token here is pending."""
        self._token: int | None = None
        self._last_token = 0

    def token(self) -> int:
        """The token of the write this input makes (allocated on first call): code
        that stages offsets stages them under it."""
        token = self._token
        if token is None:
            self._last_token = token = self._last_token + 1
            self._token = token
        return token

    def reply(self, conn_id: int, correlation_id: int, response: Response) -> None:
        self.replies.append(Reply(conn_id, correlation_id, response))

    def set_timer(self, key: TimerKey, deadline_ms: int) -> None:
        self.timers.append(SetTimer(key, deadline_ms))

    def cancel_timer(self, key: TimerKey) -> None:
        self.timers.append(CancelTimer(key))

    def reset(self) -> None:
        self.replies.clear()
        self.timers.clear()
        self.records.clear()
        self.events.clear()
        self.transitions.clear()
        self._token = None

    def build(self) -> Result:
        token = self._token
        if token is None and self.records:
            token = self.token()
        if token is None:
            if not (self.replies or self.timers or self.events or self.transitions):
                return EMPTY_RESULT
            result = Result(tuple(self.replies), tuple(self.timers), (),
                            tuple(self.events), tuple(self.transitions))
        else:
            self.held[token] = HeldWrite(tuple(self.replies), tuple(
                (r.group_id, r.generation_id) for r in self.records
                if type(r) is GroupMetadataRecord))
            result = Result((), tuple(self.timers), tuple(self.records),
                            tuple(self.events), tuple(self.transitions), token)
        self.reset()
        return result
