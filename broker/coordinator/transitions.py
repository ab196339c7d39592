"""How each group state answers each input: one table, as h11 keeps its state machine.

Every cell of :data:`TABLE` is either :class:`Refuse` (answered with an error before the
request's member is looked at; nothing changes) or :class:`Handle` (a handler runs; a valid
member is answered ``answer`` and the group may move to one of ``moves_to``). The API
modules ask :func:`cell` instead of testing states themselves, :func:`check_transition`
allows exactly the moves the table lists, and the state diagram in
docs/design/coordinator.md is drawn from it by :func:`diagram` (a test keeps them equal;
``python -m tests.unit.docs.test_design_doc`` rewrites the doc's block).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from groupwire.broker.coordinator.state import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    GroupState,
)
from groupwire.protocol.errors import ErrorCode


class Input(enum.Enum):
    """What reaches a group: a request (named as on the wire) or a timer of its own."""

    JOIN_GROUP = "JoinGroup"
    SYNC_GROUP = "SyncGroup"
    HEARTBEAT = "Heartbeat"
    LEAVE_GROUP = "LeaveGroup"
    OFFSET_COMMIT = "OffsetCommit"
    DELETE_GROUPS = "DeleteGroups"
    SESSION_EXPIRY = "session expiry"
    JOIN_TIMER = "join timer"
    SYNC_TIMER = "sync timer"
    RETENTION = "retention"


@dataclass(frozen=True, slots=True)
class Refuse:
    """Answered ``code`` at once; nothing changes."""

    code: ErrorCode


@dataclass(frozen=True, slots=True)
class Handle:
    """``handler`` runs; a valid member gets ``answer``; the group may move to ``moves_to``."""

    handler: str
    moves_to: frozenset[GroupState] = frozenset()
    answer: ErrorCode = ErrorCode.NONE


Cell = Refuse | Handle

_GONE: Final = Refuse(ErrorCode.COORDINATOR_NOT_AVAILABLE)
_NOT_A_MEMBER: Final = Refuse(ErrorCode.UNKNOWN_MEMBER_ID)
_IGNORED: Final = Handle("ignored")
_REBALANCE: Final = frozenset({PREPARING_REBALANCE})
_END_JOIN_PHASE: Final = frozenset({COMPLETING_REBALANCE, EMPTY})

_S, _P, _C, _E, _D = STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE, EMPTY, DEAD

TABLE: Final[Mapping[tuple[GroupState, Input], Cell]] = MappingProxyType({
    # JoinGroup (reference §4): a known member re-joining Stable/CompletingRebalance with
    # changed metadata (or as leader) starts a rebalance; the last join ends the phase
    (_E, Input.JOIN_GROUP): Handle("join", _REBALANCE),
    (_P, Input.JOIN_GROUP): Handle("join", frozenset({COMPLETING_REBALANCE})),
    (_C, Input.JOIN_GROUP): Handle("join", _REBALANCE),
    (_S, Input.JOIN_GROUP): Handle("join", _REBALANCE),
    (_D, Input.JOIN_GROUP): _GONE,
    # SyncGroup (reference §5): the leader's assignment makes the group Stable
    (_E, Input.SYNC_GROUP): _NOT_A_MEMBER,
    (_P, Input.SYNC_GROUP): Handle("sync", answer=ErrorCode.REBALANCE_IN_PROGRESS),
    (_C, Input.SYNC_GROUP): Handle("sync: park, apply the leader's assignment",
                                   frozenset({STABLE})),
    (_S, Input.SYNC_GROUP): Handle("sync: the current assignment"),
    (_D, Input.SYNC_GROUP): _GONE,
    # Heartbeat (reference §6, docs/protocol.md §7.1): an expired poll interval removes
    (_E, Input.HEARTBEAT): _NOT_A_MEMBER,
    (_P, Input.HEARTBEAT): Handle("heartbeat", _END_JOIN_PHASE,
                                  answer=ErrorCode.REBALANCE_IN_PROGRESS),
    (_C, Input.HEARTBEAT): Handle("heartbeat", _REBALANCE),
    (_S, Input.HEARTBEAT): Handle("heartbeat", _REBALANCE),
    (_D, Input.HEARTBEAT): _GONE,
    # LeaveGroup (reference §7)
    (_E, Input.LEAVE_GROUP): Handle("leave"),
    (_P, Input.LEAVE_GROUP): Handle("leave", _END_JOIN_PHASE),
    (_C, Input.LEAVE_GROUP): Handle("leave", _REBALANCE),
    (_S, Input.LEAVE_GROUP): Handle("leave", _REBALANCE),
    (_D, Input.LEAVE_GROUP): _GONE,
    # OffsetCommit (reference §10): no commits while an assignment is being handed out
    (_E, Input.OFFSET_COMMIT): Handle("commit"),
    (_P, Input.OFFSET_COMMIT): Handle("commit"),
    (_C, Input.OFFSET_COMMIT): Handle("commit", answer=ErrorCode.REBALANCE_IN_PROGRESS),
    (_S, Input.OFFSET_COMMIT): Handle("commit"),
    (_D, Input.OFFSET_COMMIT): _GONE,
    # DeleteGroups: only an Empty group
    (_E, Input.DELETE_GROUPS): Handle("delete", frozenset({DEAD})),
    (_P, Input.DELETE_GROUPS): Refuse(ErrorCode.NON_EMPTY_GROUP),
    (_C, Input.DELETE_GROUPS): Refuse(ErrorCode.NON_EMPTY_GROUP),
    (_S, Input.DELETE_GROUPS): Refuse(ErrorCode.NON_EMPTY_GROUP),
    (_D, Input.DELETE_GROUPS): Refuse(ErrorCode.GROUP_ID_NOT_FOUND),
    # timers (reference §8, §9, §4.8)
    (_E, Input.SESSION_EXPIRY): _IGNORED,
    (_P, Input.SESSION_EXPIRY): Handle("remove member", _END_JOIN_PHASE),
    (_C, Input.SESSION_EXPIRY): Handle("remove member", _REBALANCE),
    (_S, Input.SESSION_EXPIRY): Handle("remove member", _REBALANCE),
    (_D, Input.SESSION_EXPIRY): _IGNORED,
    (_E, Input.JOIN_TIMER): _IGNORED,
    (_P, Input.JOIN_TIMER): Handle("complete the join phase", _END_JOIN_PHASE),
    (_C, Input.JOIN_TIMER): _IGNORED,
    (_S, Input.JOIN_TIMER): _IGNORED,
    (_D, Input.JOIN_TIMER): _IGNORED,
    (_E, Input.SYNC_TIMER): _IGNORED,
    (_P, Input.SYNC_TIMER): _IGNORED,
    (_C, Input.SYNC_TIMER): Handle("remove members that did not sync", _REBALANCE),
    (_S, Input.SYNC_TIMER): Handle("remove members that did not sync", _REBALANCE),
    (_D, Input.SYNC_TIMER): _IGNORED,
    (_E, Input.RETENTION): Handle("delete once its offsets expired", frozenset({DEAD})),
    (_P, Input.RETENTION): _IGNORED,
    (_C, Input.RETENTION): _IGNORED,
    (_S, Input.RETENTION): _IGNORED,
    (_D, Input.RETENTION): _IGNORED,
})

@dataclass(frozen=True, slots=True)
class Row:
    """One state's row of :data:`TABLE`; a group carries its state's (``Group.row``), so
    the hot paths read a cell with two attribute loads."""

    join_group: Cell
    sync_group: Cell
    heartbeat: Cell
    leave_group: Cell
    offset_commit: Cell
    delete_groups: Cell
    session_expiry: Cell
    join_timer: Cell
    sync_timer: Cell
    retention: Cell


ROWS: Final[Mapping[GroupState, Row]] = MappingProxyType({
    state: Row(**{i.name.lower(): TABLE[(state, i)] for i in Input}) for state in GroupState})

DIES_FROM_ANYWHERE: Final = True
"""Reference §2: a group may become Dead from any state (Kafka: when its coordinator
unloads it). Here only DeleteGroups and retention do it, from Empty; the rest of the
coordinator never relies on the group being Empty when it deletes one."""


def cell(state: GroupState, input_: Input) -> Cell:
    return TABLE[(state, input_)]


def _legal_moves() -> frozenset[tuple[GroupState, GroupState]]:
    moves = {(state, target) for (state, _), c in TABLE.items() if isinstance(c, Handle)
             for target in c.moves_to}
    if DIES_FROM_ANYWHERE:
        moves |= {(state, DEAD) for state in GroupState}  # Dead -> Dead: harmless
    return frozenset(moves)


LEGAL_MOVES: Final = _legal_moves()
CAN_REBALANCE: Final = frozenset({EMPTY, STABLE, COMPLETING_REBALANCE})
"""States from which a trigger starts a rebalance; in PreparingRebalance it tries to finish."""


class IllegalTransitionError(RuntimeError):
    """The coordinator tried a move the table forbids: a bug in the coordinator."""


def check_transition(current: GroupState, target: GroupState) -> None:
    if (current, target) not in LEGAL_MOVES:
        raise IllegalTransitionError(f"illegal group transition {current.value} -> {target.value}")


def diagram() -> str:
    """A Mermaid state diagram drawn from :data:`TABLE`: each move labelled with the
    inputs that can make it, in table order."""
    labels: dict[tuple[GroupState, GroupState], list[str]] = {}
    for (state, input_), c in TABLE.items():
        if isinstance(c, Handle):
            for target in sorted(c.moves_to, key=lambda s: s.value):
                labels.setdefault((state, target), []).append(input_.value)
    lines = ["stateDiagram-v2", f"    [*] --> {EMPTY.value}"]
    for source, target in sorted(LEGAL_MOVES, key=lambda m: (m[1].value, m[0].value)):
        if source is target:
            continue
        names = labels.get((source, target))
        suffix = f": {', '.join(names)}" if names else ""
        lines.append(f"    {source.value} --> {target.value}{suffix}")
    return "\n".join(lines) + "\n"


BEGIN: Final = "<!-- state-diagram:begin -->"
END: Final = "<!-- state-diagram:end -->"


def with_diagram(doc: str) -> str:
    """``doc`` with the block between the state-diagram markers replaced by :func:`diagram`."""
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n```mermaid\n{diagram()}```\n{END}{tail}"

