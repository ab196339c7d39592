"""Inputs that are not requests: timers firing (session, join, sync, long poll, retention)
and connections closing (docs/protocol.md §7.4).

Every handler re-checks the deadline it recorded, so a key fired late, twice, or after it
was superseded within one batch of due timers is harmless.
"""

from __future__ import annotations

from groupwire.broker.coordinator.engine import Engine, heartbeat_response
from groupwire.broker.coordinator.events import CONNECTION_LOST, OFFSETS_EXPIRED, SESSION_EXPIRED
from groupwire.broker.coordinator.group import Group
from groupwire.broker.coordinator.history import SYNC_TIMEOUT, Cause
from groupwire.broker.coordinator.member import Member
from groupwire.broker.coordinator.offsets import expired_offsets
from groupwire.broker.coordinator.parking import HEARTBEAT
from groupwire.broker.coordinator.records import OffsetDeleteRecord
from groupwire.broker.coordinator.state import COMPLETING_REBALANCE, DEAD
from groupwire.broker.coordinator.timers import (
    HBWAIT,
    JOIN,
    RETENTION,
    RETENTION_KEY,
    SESSION,
    SYNC,
    TimerKey,
    session_key,
    sync_key,
)
from groupwire.broker.coordinator.transitions import Ignore
from groupwire.protocol.errors import ErrorCode


def expire(engine: Engine, key: TimerKey, now_ms: int) -> None:
    kind = key[0]
    if kind == SESSION and len(key) == 3:
        expire_session(engine, key[1], key[2], now_ms)
    elif kind == HBWAIT:
        expire_long_poll(engine, key)
    elif kind == JOIN and len(key) == 2:
        expire_join(engine, key[1], now_ms)
    elif kind == SYNC and len(key) == 3:
        expire_pending_sync(engine, key[1], key[2], now_ms)
    elif kind == RETENTION:
        sweep_offsets(engine, now_ms)
        if engine.config.offsets_retention_check_interval_ms > 0:
            engine.out.set_timer(
                RETENTION_KEY, now_ms + engine.config.offsets_retention_check_interval_ms)


# --- session (docs/design/kafka.md §8) ------------------------------------------------------------


def expire_session(engine: Engine, group_id: str, member_id: str, now_ms: int) -> None:
    group = engine.groups.get(group_id)
    if group is None:
        return
    cell = group.row.session_expiry
    if isinstance(cell, Ignore):
        return
    pending_deadline = group.pending_join.get(member_id)
    if pending_deadline is not None:
        if now_ms < pending_deadline:
            engine.out.set_timer(session_key(group_id, member_id), pending_deadline)
            return
        # a pending id is no member: it never starts a rebalance, it may end a join phase
        group.remove(member_id)
        if COMPLETING_REBALANCE in cell.moves_to:
            engine.complete_join_if_all_joined(group, now_ms)
        return
    member = group.members.get(member_id)
    if member is None or member.session_deadline is None:
        return
    if now_ms < member.session_deadline:
        # renewed since the timer was armed (heartbeat.renew only moves the deadline), or
        # fired early: arm again for when the session ends
        engine.out.set_timer(member.session_key, member.session_deadline)
        return
    member.session_deadline = None
    if engine.is_satisfied(group, member):
        return  # parked in Join/Sync: re-armed when that completes
    token = CONNECTION_LOST if member.connection_lost else SESSION_EXPIRED
    engine.emit_member("member_expired", group, member, now_ms, token)
    engine.remove_and_update(group, member, now_ms, Cause(token, None, member_id))


# --- join phase (docs/design/kafka.md §4.8, §4.10) ------------------------------------------------


def expire_join(engine: Engine, group_id: str, now_ms: int) -> None:
    group = engine.groups.get(group_id)
    if group is None or group.join_deadline is None:
        return
    if now_ms < group.join_deadline:
        engine.out.set_timer(group.join_key, group.join_deadline)
        return
    group.join_deadline = None
    if isinstance(group.row.join_timer, Ignore):
        group.initial_delay = None
        return
    if group.initial_delay is not None:
        delay, remaining = group.initial_delay
        if group.new_member_added and remaining != 0:
            # someone joined during the last window: wait one more, within the budget
            group.new_member_added = False
            new_delay = min(engine.config.initial_rebalance_delay_ms, remaining)
            engine.arm_join_timer(group, new_delay, now_ms)
            group.initial_delay = (new_delay, max(remaining - delay, 0))
            return
    engine.complete_join(group, now_ms)


# --- pending sync (docs/design/kafka.md §9) -------------------------------------------------------


def expire_pending_sync(engine: Engine, group_id: str, generation: str, now_ms: int) -> None:
    group = engine.groups.get(group_id)
    if (group is None or group.sync_deadline is None
            or generation != str(group.generation_id)):
        return
    if now_ms < group.sync_deadline:
        engine.out.set_timer(sync_key(group_id, group.generation_id), group.sync_deadline)
        return
    group.sync_deadline = None
    if isinstance(group.row.sync_timer, Ignore):
        return
    late = [m for m in group.members.values() if m.member_id in group.pending_sync]
    if not late:
        return
    for member in late:
        engine.emit_member("member_expired", group, member, now_ms, SYNC_TIMEOUT)
        engine.remove_member(group, member)
    detail = "no SyncGroup from " + ", ".join(m.member_id for m in late)
    engine.prepare_rebalance(group, now_ms, Cause(SYNC_TIMEOUT, detail, late[0].member_id))


# --- heartbeat long poll (docs/protocol.md §7.3) -----------------------------------------------


def expire_long_poll(engine: Engine, key: TimerKey) -> None:
    owner = engine.parking.heartbeat_for_timer(key)
    if owner is None:
        return
    group_id, member_id = owner
    address = engine.parking.take(HEARTBEAT, group_id, member_id)
    if address is not None:
        engine.out.reply(address.conn_id, address.correlation_id,
                         heartbeat_response(ErrorCode.NONE))


# --- connection loss (docs/protocol.md §7.4) ---------------------------------------------------


def connection_closed(engine: Engine, conn_id: int, now_ms: int) -> None:
    """Parked requests on the connection die unanswered; members left without any
    connection get the reconnect grace (dynamic) or keep their session (static)."""
    unparked: list[tuple[Group, Member]] = []
    for dropped in engine.parking.drop_conn(conn_id):
        if dropped.address.timer is not None:
            engine.out.cancel_timer(dropped.address.timer)
        group = engine.groups.get(dropped.group_id)
        member = group.members.get(dropped.member_id) if group is not None else None
        if group is not None and member is not None and dropped.kind != HEARTBEAT:
            unparked.append((group, member))
    for group, member in unparked:
        # a member whose session timer fired while it was parked has none: it needs one
        # now that it no longer waits in Join/Sync
        if member.session_deadline is None and not engine.is_satisfied(group, member):
            engine.arm_session(member, member.session_timeout_ms, now_ms)
    lost: list[tuple[Group, Member]] = []
    for group_id, member_id in sorted(engine.conn_members.pop(conn_id, ())):
        group = engine.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            continue
        member.remove_conn(conn_id)
        if member.last_conn == -1:
            lost.append((group, member))
    grace = engine.config.connection_loss_grace_ms
    for group, member in lost:
        if member.is_static:
            if member.session_deadline is None and not engine.is_satisfied(group, member):
                engine.arm_session(member, member.session_timeout_ms, now_ms)
        else:
            member.connection_lost = True
            if member.session_deadline is None or member.session_deadline > now_ms + grace:
                engine.arm_session(member, grace, now_ms)
        engine.emit_member("connection_lost", group, member, now_ms, None)


# --- offsets retention (docs/design/kafka.md §10.3) -----------------------------------------------


def sweep_offsets(engine: Engine, now_ms: int) -> None:
    """Expire offsets by Kafka's per-group condition, then delete Empty groups left
    without offsets (a group still handing out MEMBER_ID_REQUIRED ids is kept)."""
    retention = engine.config.offsets_retention_ms
    for group in list(engine.groups.values()):
        offsets = engine.offsets.of(group.group_id)
        if offsets:
            pending = engine.offsets.pending(group.group_id)
            for tp in expired_offsets(group, offsets, now_ms, retention):
                if pending and tp in pending:
                    continue  # a commit of it awaits its write: Kafka keeps these too
                engine.offsets.delete(group.group_id, tp)
                engine.out.records.append(OffsetDeleteRecord(group.group_id, tp[0], tp[1]))
        if (DEAD in group.row.retention.moves_to
                and not engine.offsets.has_offsets(group.group_id)
                and not group.pending_join):
            engine.delete_group(group, now_ms, OFFSETS_EXPIRED)

