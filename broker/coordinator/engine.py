"""The coordinator's shared machinery: Kafka's rebalance steps (prepare, complete the join
phase, propagate assignments, remove members) over groups, parked requests and timers.

The per-API handlers (join.py, sync.py, ...) and the timer handlers (expiry.py) call these
steps; everything they decide lands in ``self.out``. Nothing here reads a clock: ``now_ms``
is always an argument, read from a monotonic clock (every deadline and duration is counted
on it, so a step of the wall clock expires nothing early and stalls nothing). Timestamps
users read (events, records, DescribeGroups) are that time moved onto the wall clock by
``wall_offset_ms``, which the shell keeps up to date (``Coordinator.set_wall_clock``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Final

from groupwire.broker.coordinator.config import CoordinatorConfig
from groupwire.broker.coordinator.events import EventType, GroupEvent
from groupwire.broker.coordinator.fencing import owner_map
from groupwire.broker.coordinator.group import Group
from groupwire.broker.coordinator.history import Cause, group_partitions
from groupwire.broker.coordinator.member import Member
from groupwire.broker.coordinator.offsets import OffsetStore
from groupwire.broker.coordinator.outputs import Outputs
from groupwire.broker.coordinator.parking import HEARTBEAT, JOIN, SYNC, Address, Kind, Parking
from groupwire.broker.coordinator.records import (
    GroupDeleteRecord,
    GroupMetadataRecord,
    MemberRecord,
    OffsetDeleteRecord,
    TxnOffsetDeleteRecord,
)
from groupwire.broker.coordinator.sharing import Sharing
from groupwire.broker.coordinator.state import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    GroupState,
)
from groupwire.broker.coordinator.timers import session_key, sync_key
from groupwire.broker.coordinator.transitions import INITIAL_DELAY_FROM
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import HeartbeatResponse, JoinGroupResponse, SyncGroupResponse

MAX_REASON_CHARS: Final = 255

_HEARTBEAT_RESPONSES: Final[Mapping[ErrorCode, HeartbeatResponse]] = MappingProxyType({
    code: HeartbeatResponse(error_code=code) for code in ErrorCode
})


def cut_reason(reason: str | None) -> str | None:
    """Client-supplied reasons are cut to 255 characters (docs/protocol.md §4)."""
    if reason is None or len(reason) <= MAX_REASON_CHARS:
        return reason
    return reason[:MAX_REASON_CHARS]


def heartbeat_response(code: ErrorCode) -> HeartbeatResponse:
    """Shared immutable responses: the heartbeat path allocates none."""
    return _HEARTBEAT_RESPONSES[code]


class Engine:
    """All coordinator state plus the steps that change it."""

    def __init__(self, config: CoordinatorConfig,
                 partition_count: Callable[[str], int | None],
                 new_uuid: Callable[[], str]) -> None:
        self.config = config
        self.partition_count = partition_count
        self.new_uuid = new_uuid
        self.groups: dict[str, Group] = {}
        self.offsets = OffsetStore()
        self.parking = Parking()
        self.parked_heartbeats = self.parking.table(HEARTBEAT)
        """Group id -> members with a long-poll heartbeat parked (the fast path's view)."""
        self.conn_members: dict[int, set[tuple[str, str]]] = {}
        self.out = Outputs()
        self.shared = Sharing()
        self.refusal: Callable[[str], ErrorCode | None] | None = None
        """Why a group is not served here (``hosting.refusal``); None: every group is,
        as in single-broker mode, where nothing is checked."""
        self.offsets_partitions: int | None = None
        """``__consumer_offsets``' partition count, for loading and unloading by partition."""
        self.wall_offset_ms = 0
        """Wall clock minus monotonic clock, as the shell last read them: a monotonic time
        plus this is a wall time (what events, records and DescribeGroups show); a
        persisted wall time minus this is a monotonic one (what a load counts from).
        0 where one clock serves both (simulations)."""

    def wall_ms(self, mono_ms: int) -> int:
        """A monotonic time as a timestamp a user reads (epoch milliseconds)."""
        return mono_ms + self.wall_offset_ms

    # --- events and records ---------------------------------------------------------

    def emit(self, type_: EventType, group: Group, now_ms: int, *,
             member: Member | None = None, member_id: str | None = None,
             reason: str | None = None, detail: str | None = None,
             duration_ms: int | None = None,
             partitions: list[tuple[str, list[int]]] | None = None,
             replaced_member_id: str | None = None, ts_ms: int | None = None) -> None:
        """``ts_ms``: the event's wall time when it is not now's (a rebalance's end is
        its start plus its duration, as DescribeGroups shows it)."""
        self.out.events.append(GroupEvent(
            type=type_, group_id=group.group_id, generation_id=group.generation_id,
            member_id=member.member_id if member is not None else member_id,
            group_instance_id=member.group_instance_id if member is not None else None,
            reason=reason, detail=detail,
            ts_ms=now_ms + self.wall_offset_ms if ts_ms is None else ts_ms,
            duration_ms=duration_ms,
            partitions=partitions if partitions is not None else [],
            replaced_member_id=replaced_member_id))

    def emit_member(self, type_: EventType, group: Group, member: Member, now_ms: int,
                    reason: str | None, detail: str | None = None) -> None:
        """A member event whose partitions are what the member owns."""
        self.emit(type_, group, now_ms, member=member, reason=reason, detail=detail,
                  partitions=group_partitions(member.owned or ()))

    def persist(self, group: Group) -> None:
        self.out.records.append(group_record(group, self.wall_offset_ms))

    # --- group life -----------------------------------------------------------------

    def create_group(self, group_id: str, now_ms: int) -> Group:
        group = Group(group_id, now_ms, self.config.history_size)
        self.groups[group_id] = group
        return group

    def delete_group(self, group: Group, now_ms: int, reason: str) -> None:
        """Tombstone the group and its offsets (transactions' pending ones too, as Kafka's
        DeleteGroups); anything still parked is told it is gone."""
        gid = group.group_id
        out = self.out
        for producer_id, (topic, partition) in self.offsets.drop_txn(gid):
            out.records.append(TxnOffsetDeleteRecord(gid, topic, partition, producer_id))
        for topic, partition in self.offsets.drop_group(gid):
            out.records.append(OffsetDeleteRecord(gid, topic, partition))
        out.records.append(GroupDeleteRecord(gid))
        for pending_id in list(group.pending_join):
            out.cancel_timer(session_key(gid, pending_id))
        self.cancel_join_timer(group)
        self.cancel_sync_timer(group)
        gone = ErrorCode.COORDINATOR_NOT_AVAILABLE
        for member in list(group.members.values()):
            self.remove_member(group, member, join_error=gone, sync_error=gone, hb_error=gone)
        source = group.state
        group.transition_to(DEAD, now_ms)
        out.transitions.append((gid, source, DEAD))
        del self.groups[gid]
        self.emit("group_deleted", group, now_ms, reason=reason)

    # --- timers ---------------------------------------------------------------------

    def arm_session(self, member: Member, timeout_ms: int, now_ms: int) -> None:
        """The session now ends at ``now_ms + timeout_ms``; its timer fires then.

        (The heartbeat fast path, heartbeat.renew, only moves the deadline later and
        leaves the timer armed earlier to re-arm itself.)
        """
        deadline = now_ms + timeout_ms
        member.session_deadline = deadline
        self.out.set_timer(member.session_key, deadline)

    def cancel_session(self, member: Member) -> None:
        if member.session_deadline is not None:
            member.session_deadline = None
            self.out.cancel_timer(member.session_key)

    def arm_join_timer(self, group: Group, delay_ms: int, now_ms: int) -> None:
        group.join_deadline = now_ms + delay_ms
        self.out.set_timer(group.join_key, group.join_deadline)

    def cancel_join_timer(self, group: Group) -> None:
        group.initial_delay = None
        if group.join_deadline is not None:
            group.join_deadline = None
            self.out.cancel_timer(group.join_key)

    def arm_sync_timer(self, group: Group, now_ms: int) -> None:
        group.sync_deadline = now_ms + group.rebalance_timeout_ms()
        self.out.set_timer(sync_key(group.group_id, group.generation_id), group.sync_deadline)

    def cancel_sync_timer(self, group: Group) -> None:
        if group.sync_deadline is not None:
            group.sync_deadline = None
            self.out.cancel_timer(sync_key(group.group_id, group.generation_id))

    # --- connections ----------------------------------------------------------------

    def attach(self, conn_id: int, group_id: str, member: Member) -> None:
        """The member is alive on this connection (it carried a Join/Sync/Heartbeat)."""
        if not member.add_conn(conn_id):
            return
        member.connection_lost = False
        self.conn_members.setdefault(conn_id, set()).add((group_id, member.member_id))

    def detach_all(self, group_id: str, member: Member) -> None:
        entry = (group_id, member.member_id)
        for conn_id in member.conns:
            members = self.conn_members.get(conn_id)
            if members is not None:
                members.discard(entry)
                if not members:
                    del self.conn_members[conn_id]
        member.clear_conns()

    # --- parked requests ------------------------------------------------------------

    def is_awaiting_join(self, group: Group, member_id: str) -> bool:
        return self.parking.is_parked(JOIN, group.group_id, member_id)

    def is_satisfied(self, group: Group, member: Member) -> bool:
        """Kafka's ``hasSatisfiedHeartbeat``: a non-new member parked in Join or Sync."""
        if member.is_new:
            return False
        gid, mid = group.group_id, member.member_id
        return self.parking.is_parked(JOIN, gid, mid) or self.parking.is_parked(SYNC, gid, mid)

    def all_joined(self, group: Group) -> bool:
        return (self.parking.count(JOIN, group.group_id) == len(group.members)
                and not group.pending_join)

    def park_join(self, conn_id: int, correlation_id: int, group: Group, member: Member) -> None:
        # A re-sent JoinGroup displaces the earlier one, which Kafka never answers.
        self.parking.park(JOIN, group.group_id, member.member_id,
                          Address(conn_id, correlation_id))

    def answer_join(self, group: Group, member_id: str, response: JoinGroupResponse) -> bool:
        return self._answer_parked(JOIN, group, member_id, response)

    def answer_sync(self, group: Group, member_id: str, response: SyncGroupResponse) -> bool:
        return self._answer_parked(SYNC, group, member_id, response)

    def _answer_parked(self, kind: Kind, group: Group, member_id: str,
                       response: JoinGroupResponse | SyncGroupResponse) -> bool:
        """Answer the member's parked request of ``kind``; False if none was parked."""
        address = self.parking.take(kind, group.group_id, member_id)
        if address is None:
            return False
        self.out.reply(address.conn_id, address.correlation_id, response)
        return True

    def answer_heartbeat(self, group_id: str, member_id: str, code: ErrorCode) -> None:
        address = self.parking.take(HEARTBEAT, group_id, member_id)
        if address is not None:
            if address.timer is not None:
                self.out.cancel_timer(address.timer)
            self.out.reply(address.conn_id, address.correlation_id, heartbeat_response(code))

    def answer_all_heartbeats(self, group: Group, code: ErrorCode) -> None:
        for _, address in self.parking.take_all(HEARTBEAT, group.group_id):
            if address.timer is not None:
                self.out.cancel_timer(address.timer)
            self.out.reply(address.conn_id, address.correlation_id, heartbeat_response(code))

    # --- transitions ----------------------------------------------------------------

    def transition(self, group: Group, target: GroupState, now_ms: int,
                   cause: Cause | None = None) -> None:
        """Move the group and keep the rebalance history and long polls in step with it."""
        source = group.state
        group.transition_to(target, now_ms)
        self.out.transitions.append((group.group_id, source, target))
        if target is PREPARING_REBALANCE:
            if source is STABLE or source is EMPTY:
                cause = cause or Cause("unknown")
                group.history.start(cause, now_ms, group.settled_owners,
                                    self.wall_ms(now_ms))
                self.emit("rebalance_started", group, now_ms, member_id=cause.member_id,
                          reason=cause.token, detail=cause.detail)
            self.answer_all_heartbeats(group, ErrorCode.REBALANCE_IN_PROGRESS)
        elif target is STABLE or target is EMPTY:
            owners = owner_map(group) if target is STABLE else {}
            entry = group.history.complete(now_ms, group.generation_id, owners)
            group.settled_owners = owners
            if entry is not None:
                self.emit("rebalance_completed", group, now_ms,
                          member_id=entry.trigger_member_id, reason=entry.reason,
                          detail=entry.detail, duration_ms=entry.duration_ms,
                          partitions=entry.moved_partitions, ts_ms=entry.completed_wall_ms)
            if target is EMPTY:
                self.emit("group_emptied", group, now_ms)

    # --- rebalance steps (docs/design/kafka.md §4.7-§4.10) -------------------------------------

    def prepare_rebalance(self, group: Group, now_ms: int, cause: Cause) -> None:
        if group.state is COMPLETING_REBALANCE:
            self.reset_and_propagate_error(group, ErrorCode.REBALANCE_IN_PROGRESS, now_ms)
        group.pending_sync.clear()
        self.cancel_sync_timer(group)
        initial = group.state in INITIAL_DELAY_FROM
        if initial:
            delay = self.config.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            self.arm_join_timer(group, delay, now_ms)
            group.initial_delay = (delay, remaining)
        self.transition(group, PREPARING_REBALANCE, now_ms, cause)
        if not initial:
            if self.all_joined(group):
                self.complete_join(group, now_ms)
            else:
                self.arm_join_timer(group, group.rebalance_timeout_ms(), now_ms)

    def maybe_prepare_or_complete(self, group: Group, now_ms: int, cause: Cause) -> None:
        if group.can_rebalance():
            self.prepare_rebalance(group, now_ms, cause)
        else:
            self.maybe_complete_join_phase(group, now_ms)

    def maybe_complete_join_phase(self, group: Group, now_ms: int) -> None:
        """After a join or leave: never during the initial delay (docs/design/kafka.md §4.9)."""
        if (group.row.in_join_phase and not group.initial_rebalance
                and self.all_joined(group)):
            self.complete_join(group, now_ms)

    def complete_join_if_all_joined(self, group: Group, now_ms: int) -> None:
        """After an expiry: Kafka checks only that everyone joined (docs/design/kafka.md §8)."""
        if group.row.in_join_phase and self.all_joined(group):
            self.complete_join(group, now_ms)

    def complete_join(self, group: Group, now_ms: int) -> None:
        self.cancel_join_timer(group)
        for member in list(group.members.values()):
            if not member.is_static and not self.is_awaiting_join(group, member.member_id):
                self.emit_member("member_expired", group, member, now_ms, "rebalance-timeout")
                self.remove_member(group, member)
        if group.state is DEAD:
            return
        if not self._elect_joined_leader(group) and group.members:
            # only static members that did not re-join are left: wait for them to come
            # back or for their sessions to expire
            self.arm_join_timer(group, group.rebalance_timeout_ms(), now_ms)
            return
        group.generation_id += 1
        group.pending_sync.clear()
        if not group.members:
            group.protocol_name = None
            group.subscribed_topics = group.compute_subscribed_topics()
            self.transition(group, EMPTY, now_ms)
            self.persist(group)
            return
        group.protocol_name = group.select_protocol()
        group.subscribed_topics = group.compute_subscribed_topics()
        self.transition(group, COMPLETING_REBALANCE, now_ms)
        member_list = group.current_member_list()
        for member in group.members.values():
            is_leader = member.member_id == group.leader_id
            self.answer_join(group, member.member_id, JoinGroupResponse(
                generation_id=group.generation_id, protocol_type=group.protocol_type,
                protocol_name=group.protocol_name, leader=group.leader_id or "",
                skip_assignment=False, member_id=member.member_id,
                members=member_list if is_leader else []))
            self.arm_session(member, member.session_timeout_ms, now_ms)
            member.is_new = False
            group.pending_sync.add(member.member_id)
        self.arm_sync_timer(group, now_ms)
        self.persist(group)

    def _elect_joined_leader(self, group: Group) -> bool:
        """Keep a leader that re-joined, else the earliest-joined member that did."""
        leader = group.leader_id
        if leader is None:
            return False
        if self.is_awaiting_join(group, leader):
            return True
        for member_id in group.members:
            if self.is_awaiting_join(group, member_id):
                group.leader_id = member_id
                return True
        return False

    def propagate_assignment(self, group: Group, code: ErrorCode, now_ms: int) -> None:
        ok = code is ErrorCode.NONE
        for member in group.members.values():
            if self.answer_sync(group, member.member_id, SyncGroupResponse(
                    error_code=code,
                    protocol_type=group.protocol_type if ok else None,
                    protocol_name=group.protocol_name if ok else None,
                    assignment=member.assignment)):
                self.arm_session(member, member.session_timeout_ms, now_ms)

    def reset_and_propagate_error(self, group: Group, code: ErrorCode, now_ms: int) -> None:
        for member in group.members.values():
            member.assignment = b""
        self.propagate_assignment(group, code, now_ms)

    # --- removing members -----------------------------------------------------------

    def remove_member(self, group: Group, member: Member, *,
                      join_error: ErrorCode = ErrorCode.UNKNOWN_MEMBER_ID,
                      sync_error: ErrorCode = ErrorCode.UNKNOWN_MEMBER_ID,
                      hb_error: ErrorCode = ErrorCode.UNKNOWN_MEMBER_ID) -> None:
        """Take the member out, answering whatever it has parked."""
        self.answer_join(group, member.member_id,
                         JoinGroupResponse(error_code=join_error, member_id=""))
        self.answer_sync(group, member.member_id, SyncGroupResponse(error_code=sync_error))
        self.answer_heartbeat(group.group_id, member.member_id, hb_error)
        self.cancel_session(member)
        self.detach_all(group.group_id, member)
        group.remove(member.member_id)

    def remove_and_update(self, group: Group, member: Member, now_ms: int,
                          cause: Cause) -> None:
        """Kafka's ``removeMemberAndUpdateClassicGroup`` (session or poll expiry): what
        follows is what the state's session-expiry cell says."""
        self.remove_member(group, member)
        if PREPARING_REBALANCE in group.row.session_expiry.moves_to:
            self.prepare_rebalance(group, now_ms, cause)
        else:
            self.complete_join_if_all_joined(group, now_ms)

    def fence_replaced(self, group: Group, old: Member) -> None:
        """A static member's old id was replaced: its parked requests are fenced."""
        fenced = ErrorCode.FENCED_INSTANCE_ID
        self.answer_join(group, old.member_id, JoinGroupResponse(
            error_code=fenced, member_id=old.member_id, generation_id=-1, leader=""))
        self.answer_sync(group, old.member_id, SyncGroupResponse(error_code=fenced))
        self.answer_heartbeat(group.group_id, old.member_id, fenced)
        self.cancel_session(old)
        self.detach_all(group.group_id, old)


def group_record(group: Group, wall_offset_ms: int) -> GroupMetadataRecord:
    """The group as persisted: its state time on the wall clock (``Engine.wall_offset_ms``)."""
    return GroupMetadataRecord(
        group_id=group.group_id,
        protocol_type=group.protocol_type,
        protocol_name=group.protocol_name,
        generation_id=group.generation_id,
        leader_id=group.leader_id,
        state=group.state.value,
        state_ms=group.state_ms + wall_offset_ms,
        members=tuple(
            MemberRecord(
                member_id=m.member_id, group_instance_id=m.group_instance_id,
                client_id=m.client_id, client_host=m.client_host,
                session_timeout_ms=m.session_timeout_ms,
                rebalance_timeout_ms=m.rebalance_timeout_ms, protocols=m.protocols,
                assignment=m.assignment, principal=m.principal)
            for m in group.members.values()),
    )


def new_group_record(group: Group, wall_offset_ms: int) -> GroupMetadataRecord:
    """What Kafka writes when a JoinGroup creates a group: an empty generation-0 group."""
    return GroupMetadataRecord(
        group_id=group.group_id, protocol_type=group.protocol_type, protocol_name=None,
        generation_id=0, leader_id=None, state=EMPTY.value,
        state_ms=group.state_ms + wall_offset_ms,
        members=())
