"""One group's metadata (docs/design/kafka.md §1 "Group") and the bookkeeping Kafka's
``ClassicGroup`` does on it. No parked requests, no timers here: those are the
coordinator's; this module only knows who is in the group and what they support."""

from __future__ import annotations

from typing import Final

from groupwire.broker.coordinator.history import Owners, RebalanceHistory
from groupwire.broker.coordinator.member import Member, Protocols
from groupwire.broker.coordinator.state import EMPTY, PREPARING_REBALANCE, GroupState
from groupwire.broker.coordinator.timers import TimerKey, join_key
from groupwire.broker.coordinator.transitions import (
    CAN_REBALANCE,
    INITIAL_DELAY_FROM,
    ROWS,
    Join,
    check_transition,
)
from groupwire.protocol.consumer import (
    CONSUMER_PROTOCOL_TYPE,
    ConsumerProtocolError,
    decode_subscription,
)
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import JoinGroupResponseMember

NONE: Final = ErrorCode.NONE
UNKNOWN_MEMBER_ID: Final = ErrorCode.UNKNOWN_MEMBER_ID
FENCED_INSTANCE_ID: Final = ErrorCode.FENCED_INSTANCE_ID


class Group:
    """``members`` keeps join order; it decides leader hand-over deterministically."""

    __slots__ = (
        "group_id",
        "state",
        "row",
        "initial_rebalance",
        "state_ms",
        "generation_id",
        "protocol_type",
        "protocol_name",
        "leader_id",
        "members",
        "static_members",
        "pending_join",
        "pending_sync",
        "supported_protocols",
        "new_member_added",
        "subscribed_topics",
        "join_key",
        "join_deadline",
        "initial_delay",
        "sync_deadline",
        "history",
        "settled_owners",
    )

    def __init__(self, group_id: str, now_ms: int, history_size: int) -> None:
        self.group_id = group_id
        self.state = EMPTY
        self.row = ROWS[EMPTY]
        # the join phase of a rebalance started from an INITIAL_DELAY_FROM state
        self.initial_rebalance = False
        self.state_ms = now_ms  # monotonic (retention); persisted as wall time
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}
        self.pending_join: dict[str, int] = {}  # MEMBER_ID_REQUIRED id -> session deadline
        self.pending_sync: set[str] = set()
        self.supported_protocols: dict[str, int] = {}
        self.new_member_added = False
        self.subscribed_topics: frozenset[str] | None = None
        self.join_key: TimerKey = join_key(group_id)
        self.join_deadline: int | None = None
        # (delay, remaining) of the pending initial-rebalance check (docs/design/kafka.md §4.8)
        self.initial_delay: tuple[int, int] | None = None
        self.sync_deadline: int | None = None
        self.history = RebalanceHistory(history_size)
        self.settled_owners: Owners = {}

    def __repr__(self) -> str:
        return (f"Group({self.group_id!r}, {self.state.value}, gen={self.generation_id}, "
                f"members={list(self.members)})")

    # --- state ----------------------------------------------------------------------

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        check_transition(self.state, target)
        self.initial_rebalance = (target is PREPARING_REBALANCE
                                  and self.state in INITIAL_DELAY_FROM)
        self.state = target
        self.row = ROWS[target]
        self.state_ms = now_ms

    def restore(self, state: GroupState, state_ms: int) -> None:
        """Loading from records: the state the log says, not a transition."""
        self.state = state
        self.initial_rebalance = False
        self.row = ROWS[state]
        self.state_ms = state_ms

    def can_rebalance(self) -> bool:
        return self.state in CAN_REBALANCE

    @property
    def is_consumer(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def rebalance_timeout_ms(self) -> int:
        """Max over current members (0 with none), evaluated when a timer is armed."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # --- membership -------------------------------------------------------------------

    def validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode:
        """Kafka's ``validateMember``: instance mapping first, then the member id."""
        if group_instance_id is not None:
            mapped = self.static_members.get(group_instance_id)
            if mapped is None:
                return UNKNOWN_MEMBER_ID
            if mapped != member_id:
                return FENCED_INSTANCE_ID
        if member_id not in self.members:
            return UNKNOWN_MEMBER_ID
        return NONE

    def add_member(self, member: Member) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise RuntimeError(f"instance {member.group_instance_id} already mapped")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        self._count_protocols(member, 1)
        self.pending_join.pop(member.member_id, None)
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        """Kafka's ``remove``: drops the member or pending id; a removed leader hands over
        to the earliest remaining member."""
        member = self.members.pop(member_id, None)
        if member is not None:
            self._count_protocols(member, -1)
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_join.pop(member_id, None)
        self.pending_sync.discard(member_id)
        return member

    def replace_static(self, old: Member, new: Member) -> None:
        """The instance's member id changes; leadership and pending sync follow it."""
        assert old.group_instance_id is not None
        del self.members[old.member_id]
        self.members[new.member_id] = new
        if self.leader_id == old.member_id:
            self.leader_id = new.member_id
        if old.member_id in self.pending_sync:
            self.pending_sync.discard(old.member_id)
            self.pending_sync.add(new.member_id)
        self.static_members[old.group_instance_id] = new.member_id

    def update_member(self, member: Member, protocols: Protocols, rebalance_timeout_ms: int,
                      session_timeout_ms: int) -> None:
        self._count_protocols(member, -1)
        member.protocols = protocols
        self._count_protocols(member, 1)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms

    def _count_protocols(self, member: Member, delta: int) -> None:
        counts = self.supported_protocols
        for name, _ in member.protocols:
            n = counts.get(name, 0) + delta
            if n:
                counts[name] = n
            else:
                counts.pop(name, None)

    # --- protocols --------------------------------------------------------------------

    def supports_protocols(self, protocol_type: str, names: list[str]) -> bool:
        """Reference §4.11: where the state's JoinGroup cell says ``any_protocol`` (Empty),
        any non-empty type and list; otherwise the type must match and one name must be
        listed by every current member."""
        join = self.row.join_group
        if isinstance(join, Join) and join.any_protocol:
            return bool(protocol_type) and bool(names)
        if self.protocol_type != protocol_type:
            return False
        n = len(self.members)
        counts = self.supported_protocols
        return any(counts.get(name, 0) == n for name in names)

    def encoding_conflict(self, protocol_type: str, protocols: Protocols,
                          member_id: str) -> str | None:
        """Why a ``"consumer"`` member may not join, if its subscriptions are encoded for
        the other door than the members' already here (docs/protocol.md §13.5): a leader
        of one kind cannot read the other's subscriptions nor write it an assignment."""
        if protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        mine = _encoding(protocols)
        if mine is None:
            return None
        for other in self.members.values():
            if other.member_id == member_id:
                continue
            theirs = _encoding(other.protocols)
            if theirs is None or theirs == mine:
                continue
            return (f"group {self.group_id}'s members subscribe in {theirs} encoding and "
                    f"this member in {mine}: one group cannot mix Kafka clients with "
                    "groupwire SDK members")
        return None

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, count in self.supported_protocols.items() if count == n}

    def select_protocol(self) -> str:
        """Each member votes for its first candidate; most votes wins. A tie goes to the
        tied name the leader prefers most (Kafka leaves ties to hash order)."""
        if not self.members:
            raise RuntimeError("cannot select a protocol for a group without members")
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            name = member.vote(candidates)
            votes[name] = votes.get(name, 0) + 1
        best = max(votes.values())
        tied = {name for name, count in votes.items() if count == best}
        if len(tied) == 1:
            return next(iter(tied))
        leader = self.members.get(self.leader_id or "") or next(iter(self.members.values()))
        for name, _ in leader.protocols:
            if name in tied:
                return name
        return min(tied)  # pragma: no cover - every candidate is in the leader's list

    def current_member_list(self) -> list[JoinGroupResponseMember]:
        """What the leader's JoinGroup response carries: every member's chosen metadata."""
        name = self.protocol_name
        return [
            JoinGroupResponseMember(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                    metadata=m.metadata_for(name))
            for m in self.members.values()
        ]

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        """Union of consumer subscriptions for the chosen protocol; ``None`` if unknown."""
        if not self.members:
            return frozenset() if self.protocol_type is not None else None
        if not self.is_consumer or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            try:
                topics.update(decode_subscription(member.metadata_for(self.protocol_name)).topics)
            except ConsumerProtocolError:
                return None
        return frozenset(topics)


def _encoding(protocols: Protocols) -> str | None:
    """Which door's consumer-protocol encoding a member's subscriptions are in: Kafka's
    starts with an int16 version (a 0x00 byte), groupwire's with a msgpack map or array;
    None when every subscription is empty."""
    for _, metadata in protocols:
        if metadata:
            return "Kafka's binary" if metadata[0] == 0 else "groupwire's msgpack"
    return None
