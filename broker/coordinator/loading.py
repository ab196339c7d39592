"""Rebuilding groups and offsets from persisted records (Kafka's "coordinator load"): all
of them at broker start, or one ``__consumer_offsets`` partition's when this broker
becomes its leader (cluster mode); and arming the timers restored groups need."""

from __future__ import annotations

from collections.abc import Iterable
from sys import intern

from groupwire.broker.coordinator import unloading
from groupwire.broker.coordinator.engine import Engine
from groupwire.broker.coordinator.fencing import owner_map, restore_ownership
from groupwire.broker.coordinator.group import Group
from groupwire.broker.coordinator.member import Member
from groupwire.broker.coordinator.offsets import CommittedOffset, TxnOffset
from groupwire.broker.coordinator.records import (
    GroupDeleteRecord,
    GroupMetadataRecord,
    GroupRecord,
    OffsetCommitRecord,
    OffsetDeleteRecord,
    TxnOffsetCommitRecord,
    TxnOffsetDeleteRecord,
)
from groupwire.broker.coordinator.state import COMPLETING_REBALANCE, EMPTY, STABLE
from groupwire.broker.coordinator.timers import RETENTION_KEY


def load(engine: Engine, records: Iterable[GroupRecord], now_ms: int) -> None:
    """Replay records in log order: the last record for a key wins, tombstones delete."""
    replay(engine, records, now_ms)
    for group in engine.groups.values():
        _settle(engine, group)


def replay(engine: Engine, records: Iterable[GroupRecord], now_ms: int) -> None:
    """Apply records in log order. Their times are wall times: they come back on the
    monotonic clock (``Engine.wall_offset_ms``), as retention counts on it.

    A transaction's offset whose key has no tombstone is pending again: its marker has
    not been written, and the transaction coordinator sends it again (Kafka's load keeps
    such offsets pending too). Its own key per producer makes that so whatever order
    compaction left the records in."""
    offset = engine.wall_offset_ms
    for record in records:
        if isinstance(record, OffsetCommitRecord):
            if record.group_id not in engine.groups:
                engine.create_group(record.group_id, now_ms)  # a "simple" group
            engine.offsets.commit(record.group_id, (record.topic, record.partition),
                                  CommittedOffset(record.offset, record.metadata,
                                                  record.commit_ms - offset))
        elif isinstance(record, OffsetDeleteRecord):
            engine.offsets.delete(record.group_id, (record.topic, record.partition))
        elif isinstance(record, GroupMetadataRecord):
            engine.groups[record.group_id] = restore_group(engine, record)
        elif isinstance(record, GroupDeleteRecord):
            engine.groups.pop(record.group_id, None)
            engine.offsets.drop_group(record.group_id)
        elif isinstance(record, TxnOffsetCommitRecord):
            if record.group_id not in engine.groups:
                engine.create_group(record.group_id, now_ms)  # as its TxnOffsetCommit did
            engine.offsets.load_txn(record.group_id, record.producer_id,
                                    (record.topic, record.partition),
                                    TxnOffset(record.producer_epoch, record.offset,
                                              record.metadata, record.commit_ms - offset))
        elif isinstance(record, TxnOffsetDeleteRecord):
            engine.offsets.unload_txn(record.group_id, record.producer_id,
                                      (record.topic, record.partition))


def _settle(engine: Engine, group: Group) -> None:
    """What a restored group derives from its persisted members."""
    group.subscribed_topics = group.compute_subscribed_topics()
    restore_ownership(group, engine.shared)
    group.settled_owners = owner_map(group) if group.state is STABLE else {}


def restore_group(engine: Engine, record: GroupMetadataRecord) -> Group:
    """A group with members comes back Stable, or CompletingRebalance if it was persisted
    at join completion (every member must then sync again); otherwise Empty."""
    state_ms = record.state_ms - engine.wall_offset_ms  # onto the monotonic clock
    group = Group(record.group_id, state_ms, engine.config.history_size)
    for m in record.members:
        member = Member(record.group_id, m.member_id, m.group_instance_id, m.client_id,
                        m.client_host, m.session_timeout_ms, m.rebalance_timeout_ms,
                        record.protocol_type or "", m.protocols, m.assignment,
                        intern(m.principal))
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
    group.restore(state, state_ms)
    return group


def start(engine: Engine, now_ms: int) -> None:
    """Arm what restored groups need (sessions, pending syncs) and the retention sweep."""
    for group in engine.groups.values():
        _arm(engine, group, now_ms)
    interval = engine.config.offsets_retention_check_interval_ms
    if interval > 0:
        engine.out.set_timer(RETENTION_KEY, now_ms + interval)


def _arm(engine: Engine, group: Group, now_ms: int) -> None:
    for member in group.members.values():
        if member.session_deadline is None:
            engine.arm_session(member, member.session_timeout_ms, now_ms)
    if group.pending_sync and group.sync_deadline is None:
        # restored CompletingRebalance: every member owes a SyncGroup
        engine.arm_sync_timer(group, now_ms)


def load_partition(engine: Engine, partition: int, records: Iterable[GroupRecord],
                   now_ms: int) -> None:
    """Kafka's ``loadGroupsForPartition``: the partition's groups as it persisted them,
    their timers counted from ``now_ms`` (the members had no coordinator meanwhile).

    Groups of the partition already here are unloaded first, so the log replaces them
    whole; records of groups placed on another partition are skipped."""
    holds = unloading.partition_filter(engine, partition)
    unloading.unload(engine, unloading.groups_of(engine, holds), now_ms)
    named: set[str] = set()

    def of_partition(record: GroupRecord) -> bool:
        if holds(record.group_id):
            named.add(record.group_id)
            return True
        return False
    replay(engine, filter(of_partition, records), now_ms)
    for group_id in sorted(named):
        group = engine.groups.get(group_id)
        if group is not None:
            _settle(engine, group)
            _arm(engine, group, now_ms)
