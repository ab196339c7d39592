"""What the coordinator returns: replies, timers, records and events, all plain data.

The shell executes a :class:`Result` in order: arm timers, emit events, write records,
and only once they are durable send the replies. Handlers append to one reusable
:class:`Outputs` builder; the common heartbeat builds none of this (``Coordinator.renew``
returns a ``Renewal`` instead).
"""

from __future__ import annotations

from dataclasses import dataclass

from groupwire.broker.coordinator.events import GroupEvent
from groupwire.broker.coordinator.records import GroupRecord
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
    """Everything one input produced. Replies go out only after ``records`` are durable.

    ``transitions`` lists the state moves it made, ``(group, from, to)`` in order: the
    shell has nothing to do for them; they are there so the result tells every change."""

    replies: tuple[Reply, ...] = ()
    timers: tuple[TimerOp, ...] = ()
    records: tuple[GroupRecord, ...] = ()
    events: tuple[GroupEvent, ...] = ()
    transitions: tuple[Transition, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.replies or self.timers or self.records or self.events
                    or self.transitions)


EMPTY_RESULT = Result()


@dataclass(frozen=True, slots=True)
class FetchCheck:
    """Verdict on a fenced Fetch (docs/protocol.md §7.2): a top-level error, or the refused set."""

    error_code: ErrorCode
    not_owned: frozenset[tuple[str, int]]
    error_message: str | None = None


class Outputs:
    """Mutable collector behind every entry point; :meth:`build` empties it."""

    __slots__ = ("replies", "timers", "records", "events", "transitions")

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.timers: list[TimerOp] = []
        self.records: list[GroupRecord] = []
        self.events: list[GroupEvent] = []
        self.transitions: list[Transition] = []

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

    def build(self) -> Result:
        if not (self.replies or self.timers or self.records or self.events
                or self.transitions):
            return EMPTY_RESULT
        result = Result(tuple(self.replies), tuple(self.timers), tuple(self.records),
                        tuple(self.events), tuple(self.transitions))
        self.reset()
        return result
