"""Forgetting the groups of a ``__consumer_offsets`` partition this broker no longer leads
(Kafka's ``removeGroupsForPartition`` and ``onGroupUnloaded``), and telling which groups
a partition holds.

Nothing is written: the partition's records stay for its next leader, which resumes the
groups from them. Requests the groups had parked are answered NOT_COORDINATOR, so their
clients look for the new coordinator at once instead of waiting for a timeout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

from groupwire.broker.coordinator.engine import Engine, heartbeat_response
from groupwire.broker.coordinator.parking import HEARTBEAT, JOIN, SYNC
from groupwire.broker.coordinator.state import DEAD
from groupwire.broker.coordinator.timers import session_key
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.hashing import coordinator_partition
from groupwire.protocol.messages import JoinGroupResponse, SyncGroupResponse

NOT_COORDINATOR: Final = ErrorCode.NOT_COORDINATOR
_MOVED: Final = "the group's coordinator moved; find it again"


def partition_filter(engine: Engine, partition: int) -> Callable[[str], bool]:
    """group id -> whether ``partition`` holds it (each id hashed once: a partition's log
    names the same groups many times)."""
    count = engine.offsets_partitions
    if count is None:
        raise ValueError("the coordinator was not given offsets_partitions")
    if not 0 <= partition < count:
        raise ValueError(f"offsets partition {partition} not in [0, {count})")
    memo: dict[str, bool] = {}

    def holds(group_id: str) -> bool:
        hit = memo.get(group_id)
        if hit is None:
            hit = memo[group_id] = coordinator_partition(group_id, count) == partition
        return hit
    return holds


def groups_of(engine: Engine, holds: Callable[[str], bool]) -> list[str]:
    """The groups here (with metadata or only offsets) that ``holds`` accepts, sorted."""
    ids = {g for g in engine.groups if holds(g)}
    ids.update(g for g in engine.offsets.group_ids() if holds(g))
    return sorted(ids)


def unload(engine: Engine, group_ids: Iterable[str], now_ms: int) -> None:
    """Drop the groups and their offsets from memory: parked requests answered
    NOT_COORDINATOR, every timer of theirs cancelled, their members detached from their
    connections (a closed connection then finds none of them). No records, no events."""
    out = engine.out
    parking = engine.parking
    for gid in group_ids:
        for member_id, address in parking.take_all(JOIN, gid):
            out.reply(address.conn_id, address.correlation_id, JoinGroupResponse(
                error_code=NOT_COORDINATOR, error_message=_MOVED, member_id=member_id))
        for _, address in parking.take_all(SYNC, gid):
            out.reply(address.conn_id, address.correlation_id, SyncGroupResponse(
                error_code=NOT_COORDINATOR, error_message=_MOVED))
        for _, address in parking.take_all(HEARTBEAT, gid):
            if address.timer is not None:
                out.cancel_timer(address.timer)
            out.reply(address.conn_id, address.correlation_id,
                      heartbeat_response(NOT_COORDINATOR))
        group = engine.groups.pop(gid, None)
        if group is not None:
            engine.cancel_join_timer(group)
            engine.cancel_sync_timer(group)
            for pending_id in group.pending_join:
                out.cancel_timer(session_key(gid, pending_id))
            for member in group.members.values():
                # unconditionally: a session timer may be armed earlier than the deadline
                # it serves, and cancelling an unarmed key is harmless
                member.session_deadline = None
                out.cancel_timer(member.session_key)
                engine.detach_all(gid, member)
            # as Kafka's onGroupUnloaded, for anything still holding the object; not a
            # transition of the group, which lives on in the log
            group.transition_to(DEAD, now_ms)
        engine.offsets.drop_group(gid)
