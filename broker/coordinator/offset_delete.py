"""OffsetDelete (Kafka's KIP-496): an admin forgets some of a group's committed offsets, so
that the group starts those partitions afresh without being deleted itself.

Kafka's rules (``OffsetMetadataManager.deleteOffsets``, ``ClassicGroup``): an unknown
group is GROUP_ID_NOT_FOUND; a group with members is refused NON_EMPTY_GROUP unless it is a
``"consumer"`` group; a topic its members subscribe to keeps its offsets, every partition
of it answered GROUP_SUBSCRIBED_TO_TOPIC (subscriptions that cannot be read count as
subscribed, to be safe); every other partition's offset is forgotten, stored or still
being written, a transaction's pending one too (its key tombstoned), and the partition
answered NONE. A partition the topic does not have is UNKNOWN_TOPIC_OR_PARTITION, as
Kafka's broker answers before its coordinator. An Empty group left without offsets goes
at the next retention check, as in Kafka.

One difference: Kafka writes a tombstone only where it holds an offset; here every
partition answered NONE gets one. Memory forgets at once, so after a write that failed
(the answer says so) a retry would find nothing to tombstone and leave the offset in the
log, to come back when the coordinator reloads; this way the retry writes it again.
"""

from __future__ import annotations

from typing import Final

from groupwire.broker.coordinator.engine import Engine
from groupwire.broker.coordinator.group import Group
from groupwire.broker.coordinator.member import TP
from groupwire.broker.coordinator.outputs import RequestContext
from groupwire.broker.coordinator.records import OffsetDeleteRecord, TxnOffsetDeleteRecord
from groupwire.broker.coordinator.transitions import Refuse
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
)

NONE: Final = ErrorCode.NONE
UNKNOWN_TOPIC_OR_PARTITION: Final = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
GROUP_SUBSCRIBED_TO_TOPIC: Final = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC


def handle_offset_delete(engine: Engine, ctx: RequestContext, req: OffsetDeleteRequest) -> None:
    """Answer ``req`` (the group is served here: ``Coordinator.handle`` checked)."""
    group = engine.groups.get(req.group_id)
    refusal = _refusal(group, req.group_id)
    if refusal is not None:
        engine.out.reply(ctx.conn_id, ctx.correlation_id, refusal)
        return
    assert group is not None
    group_id = group.group_id
    wanted: list[TP] = []
    topics: list[OffsetDeleteResponseTopic] = []
    for topic in req.topics:
        name = topic.name
        count = engine.partition_count(name) or 0
        subscribed = _subscribes(group, name)
        message = _subscribed_message(group, name) if subscribed else None
        answers: list[OffsetDeleteResponsePartition] = []
        for p in topic.partitions:
            index = p.partition_index
            if not 0 <= index < count:
                answers.append(OffsetDeleteResponsePartition(
                    partition_index=index, error_code=UNKNOWN_TOPIC_OR_PARTITION))
            elif subscribed:
                answers.append(OffsetDeleteResponsePartition(
                    partition_index=index, error_code=GROUP_SUBSCRIBED_TO_TOPIC,
                    error_message=message))
            else:
                wanted.append((name, index))
                answers.append(OffsetDeleteResponsePartition(partition_index=index))
        topics.append(OffsetDeleteResponseTopic(name=name, partitions=answers))
    pending_txn = engine.offsets.forget(group_id, wanted)
    records = engine.out.records
    for topic_name, partition in dict.fromkeys(wanted):  # a partition named twice: once
        records.append(OffsetDeleteRecord(group_id, topic_name, partition))
    for producer_id, (topic_name, partition) in pending_txn:  # transactions' go too
        records.append(TxnOffsetDeleteRecord(group_id, topic_name, partition, producer_id))
    # with records, the answer is held until they are written (outputs.Outputs.build)
    engine.out.reply(ctx.conn_id, ctx.correlation_id, OffsetDeleteResponse(topics=topics))


def _refusal(group: Group | None, group_id: str) -> OffsetDeleteResponse | None:
    """The whole request's refusal (a top-level error, no partitions), or None."""
    if group is None:
        return OffsetDeleteResponse(error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                                    error_message=f"group {group_id!r} does not exist")
    cell = group.row.offset_delete
    if isinstance(cell, Refuse):
        return OffsetDeleteResponse(error_code=cell.code,
                                    error_message=f"group {group_id!r} does not exist")
    if cell.consumers_only and not group.is_consumer:
        return OffsetDeleteResponse(
            error_code=ErrorCode.NON_EMPTY_GROUP,
            error_message=(f"group {group_id!r} is {group.state.value} with "
                           f"{len(group.members)} member(s) of protocol type "
                           f"{group.protocol_type!r}: only a 'consumer' group's offsets can "
                           "be deleted while it has members"))
    return None


def _subscribes(group: Group, topic: str) -> bool:
    """Kafka's ``isSubscribedToTopic``: unknown subscriptions of a ``"consumer"`` group
    count as subscribed (to be safe); of any other group, as not."""
    topics = group.subscribed_topics
    if topics is None:
        return group.is_consumer
    return topic in topics


def _subscribed_message(group: Group, topic: str) -> str:
    if group.subscribed_topics is None:
        return (f"group {group.group_id!r} has members whose subscriptions cannot be read: "
                f"topic {topic!r} counts as subscribed")
    return f"group {group.group_id!r} has members subscribed to topic {topic!r}"
