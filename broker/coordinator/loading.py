"""Rebuilding groups and offsets from persisted records at broker start (Kafka's
"coordinator load"), and arming the timers restored groups need."""

from __future__ import annotations

from collections.abc import Iterable

from groupwire.broker.coordinator.engine import Engine
from groupwire.broker.coordinator.fencing import owner_map, restore_ownership
from groupwire.broker.coordinator.group import Group
from groupwire.broker.coordinator.member import Member
from groupwire.broker.coordinator.offsets import CommittedOffset
from groupwire.broker.coordinator.records import (
    GroupDeleteRecord,
    GroupMetadataRecord,
    GroupRecord,
    OffsetCommitRecord,
    OffsetDeleteRecord,
)
from groupwire.broker.coordinator.state import COMPLETING_REBALANCE, EMPTY, STABLE
from groupwire.broker.coordinator.timers import RETENTION_KEY


def load(engine: Engine, records: Iterable[GroupRecord], now_ms: int) -> None:
    """Replay records in log order: the last record for a key wins, tombstones delete."""
    for record in records:
        if isinstance(record, OffsetCommitRecord):
            if record.group_id not in engine.groups:
                engine.create_group(record.group_id, now_ms)  # a "simple" group
            engine.offsets.commit(record.group_id, (record.topic, record.partition),
                                  CommittedOffset(record.offset, record.metadata,
                                                  record.commit_ms))
        elif isinstance(record, OffsetDeleteRecord):
            engine.offsets.delete(record.group_id, (record.topic, record.partition))
        elif isinstance(record, GroupMetadataRecord):
            engine.groups[record.group_id] = restore_group(engine, record)
        elif isinstance(record, GroupDeleteRecord):
            engine.groups.pop(record.group_id, None)
            engine.offsets.drop_group(record.group_id)
    for group in engine.groups.values():
        group.subscribed_topics = group.compute_subscribed_topics()
        restore_ownership(group, engine.shared)
        group.settled_owners = owner_map(group) if group.state is STABLE else {}


def restore_group(engine: Engine, record: GroupMetadataRecord) -> Group:
    """A group with members comes back Stable, or CompletingRebalance if it was persisted
    at join completion (every member must then sync again); otherwise Empty."""
    group = Group(record.group_id, record.state_ms, engine.config.history_size)
    for m in record.members:
        member = Member(record.group_id, m.member_id, m.group_instance_id, m.client_id,
                        m.client_host, m.session_timeout_ms, m.rebalance_timeout_ms,
                        record.protocol_type or "", m.protocols, m.assignment)
        group.add_member(member)
    group.protocol_type = record.protocol_type
    group.protocol_name = record.protocol_name if group.members else None
    group.generation_id = record.generation_id
    if record.leader_id in group.members:
        group.leader_id = record.leader_id
    if not group.members:
        state = EMPTY
    elif record.state == COMPLETING_REBALANCE.value:
        state = COMPLETING_REBALANCE
        group.pending_sync.update(group.members)
    else:
        state = STABLE
    group.restore(state, record.state_ms)
    return group


def start(engine: Engine, now_ms: int) -> None:
    """Arm what restored groups need (sessions, pending syncs) and the retention sweep."""
    for group in engine.groups.values():
        for member in group.members.values():
            if member.session_deadline is None:
                engine.arm_session(member, member.session_timeout_ms, now_ms)
        if group.pending_sync and group.sync_deadline is None:
            # restored CompletingRebalance: every member owes a SyncGroup
            engine.arm_sync_timer(group, now_ms)
    interval = engine.config.offsets_retention_check_interval_ms
    if interval > 0:
        engine.out.set_timer(RETENTION_KEY, now_ms + interval)
