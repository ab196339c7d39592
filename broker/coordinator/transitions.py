"""How each group state answers each input: one table, as h11 keeps its state machine.

Every cell of :data:`TABLE` is either :class:`Refuse` (answered with an error before the
request's member is looked at; nothing changes) or :class:`Handle` (a handler runs; a valid
member is answered ``answer`` and the group may move to one of ``moves_to``). Where a
handler does different things in different states, its cell says which (:class:`Join`,
:class:`Sync`, :class:`Commit`, :class:`DeleteOffsets`, :class:`Describe`,
:class:`Retain`; :class:`Ignore` for an input a state drops). The handlers read their
group's row (``group.row.<input>``) instead of testing states themselves,
:func:`check_transition` allows exactly the moves the table lists, and the state diagram
in docs/design/coordinator.md is drawn from it by :func:`diagram` (a test keeps them
equal; ``python -m tests.unit.docs.test_design_doc`` rewrites the doc's block).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, TypeVar, final

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
    OFFSET_DELETE = "OffsetDelete"
    DESCRIBE_GROUPS = "DescribeGroups"
    SESSION_EXPIRY = "session expiry"
    JOIN_TIMER = "join timer"
    SYNC_TIMER = "sync timer"
    RETENTION = "retention"
    WRITE_FAILED = "metadata write failed"


@final
@dataclass(frozen=True, slots=True)
class Refuse:
    """Answered ``code`` at once; nothing changes."""

    code: ErrorCode


@dataclass(frozen=True, slots=True)
class Handle:
    """``handler`` runs; a valid member gets ``answer``; the group may move to ``moves_to``.

    A move to PreparingRebalance means the input starts a rebalance; one to
    CompletingRebalance that it may end the join phase (when everyone has re-joined)."""

    handler: str
    moves_to: frozenset[GroupState] = frozenset()
    answer: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class Ignore(Handle):
    """The input does nothing in this state (a timer left over from an earlier one)."""

    handler: str = "ignored"


class Admit(enum.Enum):
    """Who group.max.size lets join (docs/design/kafka.md §4.2)."""

    ANYONE = "anyone"
    WHILE_FEW_REJOINED = "a member awaiting the join phase, or while fewer than the max re-joined"
    WHILE_FEW_MEMBERS = "a member, or while there are fewer members than the max"


class Rejoin(enum.Enum):
    """What a JoinGroup from a known member does (docs/design/kafka.md §4.4)."""

    UNKNOWN = "unknown member"
    UPDATE = "update the member and wait for the join phase to end"
    REPEAT_UNLESS_CHANGED = "repeat the current generation unless its metadata changed"
    REPEAT_UNLESS_LEADER_OR_CHANGED = ("repeat the current generation unless it leads or its "
                                       "metadata changed")


class Replace(enum.Enum):
    """What a static member re-joining with a new id does to the group (docs/design/kafka.md
    §4.12)."""

    MAY_END_JOIN_PHASE = "the join phase may end"
    RESTART = "start the rebalance over (the leader may have assigned to the old id)"
    KEEP_UNLESS_PROTOCOL_CHANGES = "keep the generation unless the chosen protocol changes"


@dataclass(frozen=True, slots=True)
class Join(Handle):
    """JoinGroup: ``any_protocol``: any non-empty type and list is accepted (§4.11)."""

    admit: Admit = Admit.ANYONE
    rejoin: Rejoin = Rejoin.UNKNOWN
    replace: Replace = Replace.MAY_END_JOIN_PHASE
    any_protocol: bool = False


class SyncReply(enum.Enum):
    """What a valid member's SyncGroup is answered (docs/design/kafka.md §5)."""

    ANSWER = "the cell's answer (re-join first)"
    AWAIT_LEADER = "parked until the leader's assignment"
    ASSIGNMENT = "its current assignment"


@dataclass(frozen=True, slots=True)
class Sync(Handle):
    reply: SyncReply = SyncReply.ANSWER


@dataclass(frozen=True, slots=True)
class Commit(Handle):
    """OffsetCommit (docs/design/kafka.md §10.1): ``without_member``: commits without a member
    (admin tools, manual assignment) are taken; ``renews_session``: a member's commit renews
    it."""

    without_member: bool = False
    renews_session: bool = False


@dataclass(frozen=True, slots=True)
class DeleteOffsets(Handle):
    """OffsetDelete (Kafka's KIP-496): ``consumers_only``: the group has members, so only a
    ``"consumer"`` group's offsets may go (any other is refused NON_EMPTY_GROUP); in every
    state, a topic the members subscribe to keeps its offsets (GROUP_SUBSCRIBED_TO_TOPIC)."""

    consumers_only: bool = False


@dataclass(frozen=True, slots=True)
class Describe(Handle):
    """DescribeGroups (docs/design/kafka.md §11): the protocol and members' metadata are shown
    only when ``shows_protocol``; assignments always are."""

    shows_protocol: bool = False


class Expire(enum.Enum):
    """Which offsets of a group with a protocol type retention expires (docs/design/kafka.md
    §10.3)."""

    ALL_AFTER_EMPTY = "all, once the group has been Empty for the retention"
    UNSUBSCRIBED = "a consumer group's unsubscribed topics', by commit time"


@dataclass(frozen=True, slots=True)
class Retain(Handle):
    expires: Expire = Expire.ALL_AFTER_EMPTY


Cell = Refuse | Handle

_GONE: Final = Refuse(ErrorCode.COORDINATOR_NOT_AVAILABLE)
_NOT_A_MEMBER: Final = Refuse(ErrorCode.UNKNOWN_MEMBER_ID)
_IGNORED: Final = Ignore()
_REBALANCE: Final = frozenset({PREPARING_REBALANCE})
_END_JOIN_PHASE: Final = frozenset({COMPLETING_REBALANCE, EMPTY})
_IN_PROGRESS: Final = ErrorCode.REBALANCE_IN_PROGRESS

_S, _P, _C, _E, _D = STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE, EMPTY, DEAD

TABLE: Final[Mapping[tuple[GroupState, Input], Cell]] = MappingProxyType({
    # JoinGroup (docs/design/kafka.md §4): a known member re-joining Stable/CompletingRebalance with
    # changed metadata (or as leader) starts a rebalance; the last join ends the phase
    (_E, Input.JOIN_GROUP): Join("join", _REBALANCE, any_protocol=True),
    (_P, Input.JOIN_GROUP): Join("join", frozenset({COMPLETING_REBALANCE}),
                                 admit=Admit.WHILE_FEW_REJOINED, rejoin=Rejoin.UPDATE),
    (_C, Input.JOIN_GROUP): Join("join", _REBALANCE, admit=Admit.WHILE_FEW_MEMBERS,
                                 rejoin=Rejoin.REPEAT_UNLESS_CHANGED, replace=Replace.RESTART),
    (_S, Input.JOIN_GROUP): Join("join", _REBALANCE, admit=Admit.WHILE_FEW_MEMBERS,
                                 rejoin=Rejoin.REPEAT_UNLESS_LEADER_OR_CHANGED,
                                 replace=Replace.KEEP_UNLESS_PROTOCOL_CHANGES),
    (_D, Input.JOIN_GROUP): _GONE,
    # SyncGroup (docs/design/kafka.md §5): the leader's assignment makes the group Stable
    (_E, Input.SYNC_GROUP): _NOT_A_MEMBER,
    (_P, Input.SYNC_GROUP): Sync("sync", answer=_IN_PROGRESS),
    (_C, Input.SYNC_GROUP): Sync("sync: park, apply the leader's assignment",
                                 frozenset({STABLE}), reply=SyncReply.AWAIT_LEADER),
    (_S, Input.SYNC_GROUP): Sync("sync: the current assignment", reply=SyncReply.ASSIGNMENT),
    (_D, Input.SYNC_GROUP): _GONE,
    # Heartbeat (docs/design/kafka.md §6, docs/protocol.md §7.1): an expired poll interval removes
    (_E, Input.HEARTBEAT): _NOT_A_MEMBER,
    (_P, Input.HEARTBEAT): Handle("heartbeat", _END_JOIN_PHASE, answer=_IN_PROGRESS),
    (_C, Input.HEARTBEAT): Handle("heartbeat", _REBALANCE),
    (_S, Input.HEARTBEAT): Handle("heartbeat", _REBALANCE),
    (_D, Input.HEARTBEAT): _GONE,
    # LeaveGroup (docs/design/kafka.md §7)
    (_E, Input.LEAVE_GROUP): Handle("leave"),
    (_P, Input.LEAVE_GROUP): Handle("leave", _END_JOIN_PHASE),
    (_C, Input.LEAVE_GROUP): Handle("leave", _REBALANCE),
    (_S, Input.LEAVE_GROUP): Handle("leave", _REBALANCE),
    (_D, Input.LEAVE_GROUP): _GONE,
    # OffsetCommit (docs/design/kafka.md §10): no commits while an assignment is being handed out
    (_E, Input.OFFSET_COMMIT): Commit("commit", without_member=True),
    (_P, Input.OFFSET_COMMIT): Commit("commit", renews_session=True),
    (_C, Input.OFFSET_COMMIT): Commit("commit", answer=_IN_PROGRESS),
    (_S, Input.OFFSET_COMMIT): Commit("commit", renews_session=True),
    (_D, Input.OFFSET_COMMIT): _GONE,
    # DeleteGroups: only an Empty group
    (_E, Input.DELETE_GROUPS): Handle("delete", frozenset({DEAD})),
    (_P, Input.DELETE_GROUPS): Refuse(ErrorCode.NON_EMPTY_GROUP),
    (_C, Input.DELETE_GROUPS): Refuse(ErrorCode.NON_EMPTY_GROUP),
    (_S, Input.DELETE_GROUPS): Refuse(ErrorCode.NON_EMPTY_GROUP),
    (_D, Input.DELETE_GROUPS): Refuse(ErrorCode.GROUP_ID_NOT_FOUND),
    # OffsetDelete: a group with members keeps the offsets of the topics it consumes
    (_E, Input.OFFSET_DELETE): DeleteOffsets("delete offsets"),
    (_P, Input.OFFSET_DELETE): DeleteOffsets("delete offsets", consumers_only=True),
    (_C, Input.OFFSET_DELETE): DeleteOffsets("delete offsets", consumers_only=True),
    (_S, Input.OFFSET_DELETE): DeleteOffsets("delete offsets", consumers_only=True),
    (_D, Input.OFFSET_DELETE): Refuse(ErrorCode.GROUP_ID_NOT_FOUND),
    # DescribeGroups: the chosen protocol only once it is settled
    (_E, Input.DESCRIBE_GROUPS): Describe("describe"),
    (_P, Input.DESCRIBE_GROUPS): Describe("describe"),
    (_C, Input.DESCRIBE_GROUPS): Describe("describe"),
    (_S, Input.DESCRIBE_GROUPS): Describe("describe", shows_protocol=True),
    (_D, Input.DESCRIBE_GROUPS): Describe("describe"),
    # timers (docs/design/kafka.md §8, §9, §4.8, §10.3)
    (_E, Input.SESSION_EXPIRY): Handle("forget the pending member id"),
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
    (_E, Input.RETENTION): Retain("expire offsets; delete once none are left",
                                  frozenset({DEAD})),
    (_P, Input.RETENTION): _IGNORED,
    (_C, Input.RETENTION): _IGNORED,
    (_S, Input.RETENTION): Retain("expire unsubscribed topics' offsets",
                                  expires=Expire.UNSUBSCRIBED),
    (_D, Input.RETENTION): _IGNORED,
    # the shell could not store the generation a leader's SyncGroup made Stable
    (_E, Input.WRITE_FAILED): _IGNORED,
    (_P, Input.WRITE_FAILED): _IGNORED,
    (_C, Input.WRITE_FAILED): _IGNORED,
    (_S, Input.WRITE_FAILED): Handle("reset the assignments and rebalance", _REBALANCE),
    (_D, Input.WRITE_FAILED): _IGNORED,
})
"""(A group without a protocol type, a "simple" group, expires offsets by commit time
whatever its state; the retention cells are for the others.)"""

_H = TypeVar("_H", bound=Handle)


def _typed(c: Cell, kind: type[_H]) -> Refuse | _H:
    if not isinstance(c, Refuse | kind):
        raise TypeError(f"{c!r} is not a Refuse or a {kind.__name__}")
    return c


def _handled(c: Cell, kind: type[_H]) -> _H:
    if not isinstance(c, kind):
        raise TypeError(f"{c!r} is not a {kind.__name__}")
    return c


@dataclass(frozen=True, slots=True)
class Row:
    """One state's row of :data:`TABLE`; a group carries its state's (``Group.row``), so
    the hot paths read a cell with two attribute loads. Typed by input: a timer is never
    refused, and a request's cell carries that request's data."""

    join_group: Refuse | Join
    sync_group: Refuse | Sync
    heartbeat: Cell
    leave_group: Cell
    offset_commit: Refuse | Commit
    delete_groups: Cell
    offset_delete: Refuse | DeleteOffsets
    describe_groups: Describe
    session_expiry: Handle
    join_timer: Handle
    sync_timer: Handle
    retention: Handle
    write_failed: Handle

    @property
    def in_join_phase(self) -> bool:
        """Members are re-joining: the join timer would end the phase."""
        return not isinstance(self.join_timer, Ignore)


def _row(state: GroupState) -> Row:
    def at(i: Input) -> Cell:
        return TABLE[(state, i)]
    return Row(
        join_group=_typed(at(Input.JOIN_GROUP), Join),
        sync_group=_typed(at(Input.SYNC_GROUP), Sync),
        heartbeat=at(Input.HEARTBEAT),
        leave_group=at(Input.LEAVE_GROUP),
        offset_commit=_typed(at(Input.OFFSET_COMMIT), Commit),
        delete_groups=at(Input.DELETE_GROUPS),
        offset_delete=_typed(at(Input.OFFSET_DELETE), DeleteOffsets),
        describe_groups=_handled(at(Input.DESCRIBE_GROUPS), Describe),
        session_expiry=_handled(at(Input.SESSION_EXPIRY), Handle),
        join_timer=_handled(at(Input.JOIN_TIMER), Handle),
        sync_timer=_handled(at(Input.SYNC_TIMER), Handle),
        retention=_handled(at(Input.RETENTION), Handle),
        write_failed=_handled(at(Input.WRITE_FAILED), Handle),
    )


ROWS: Final[Mapping[GroupState, Row]] = MappingProxyType({s: _row(s) for s in GroupState})

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
INITIAL_DELAY_FROM: Final = frozenset({EMPTY})
"""A rebalance started from these states waits group.initial.rebalance.delay.ms for more
members (docs/design/kafka.md §4.8), and no join or leave ends its join phase early (§4.9)."""


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

