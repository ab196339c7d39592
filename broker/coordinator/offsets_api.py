"""OffsetCommit (docs/design/kafka.md §10.1 + ownership fencing, docs/protocol.md §7.2) and
OffsetFetch."""

from __future__ import annotations

from groupwire.broker.coordinator.engine import Engine
from groupwire.broker.coordinator.fencing import not_owned
from groupwire.broker.coordinator.group import Group
from groupwire.broker.coordinator.history import group_partitions
from groupwire.broker.coordinator.member import TP, Member
from groupwire.broker.coordinator.offsets import CommittedOffset
from groupwire.broker.coordinator.outputs import RequestContext
from groupwire.broker.coordinator.records import OffsetCommitRecord
from groupwire.broker.coordinator.transitions import Commit, Refuse
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
)


def handle_offset_commit(engine: Engine, ctx: RequestContext, req: OffsetCommitRequest,
                         now_ms: int) -> None:
    code, group, member = _validate(engine, req, now_ms)
    if code is not ErrorCode.NONE or group is None:
        engine.out.reply(ctx.conn_id, ctx.correlation_id, OffsetCommitResponse(topics=[
            OffsetCommitResponseTopic(name=t.name, partitions=[
                OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code)
                for p in t.partitions])
            for t in req.topics]))
        return
    cell = group.row.offset_commit
    assert isinstance(cell, Commit)  # _validate answered a Refuse
    if member is not None and cell.renews_session:
        engine.arm_session(member, member.session_timeout_ms, now_ms)
    fenced_member = (member if member is not None and engine.config.ownership_fencing
                     and group.is_consumer and member.owned is not None else None)
    max_metadata = engine.config.offset_metadata_max_bytes
    refused_all: list[TP] = []
    topics: list[OffsetCommitResponseTopic] = []
    for topic in req.topics:
        count = engine.partition_count(topic.name)
        refused: frozenset[TP] = frozenset()
        if fenced_member is not None:
            refused = not_owned(fenced_member, ((topic.name, p.partition_index)
                                                for p in topic.partitions), releasing=True)
        answers: list[OffsetCommitResponsePartition] = []
        for p in topic.partitions:
            index = p.partition_index
            metadata = p.committed_metadata or ""
            if count is None or not 0 <= index < count:
                error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif len(metadata.encode()) > max_metadata:
                error = ErrorCode.OFFSET_METADATA_TOO_LARGE
            elif (topic.name, index) in refused:
                error = ErrorCode.PARTITION_NOT_OWNED
                refused_all.append((topic.name, index))
            else:
                error = ErrorCode.NONE
                engine.offsets.commit(group.group_id, (topic.name, index),
                                      CommittedOffset(p.committed_offset, metadata, now_ms))
                engine.out.records.append(OffsetCommitRecord(
                    group.group_id, topic.name, index, p.committed_offset, metadata, now_ms))
            answers.append(OffsetCommitResponsePartition(partition_index=index, error_code=error))
        topics.append(OffsetCommitResponseTopic(name=topic.name, partitions=answers))
    if refused_all and member is not None:
        engine.emit("commit_fenced", group, now_ms, member=member,
                    partitions=group_partitions(refused_all))
    engine.out.reply(ctx.conn_id, ctx.correlation_id, OffsetCommitResponse(topics=topics))


def _validate(engine: Engine, req: OffsetCommitRequest,
              now_ms: int) -> tuple[ErrorCode, Group | None, Member | None]:
    """Kafka's classic ``validateOffsetCommit``; returns the member if it had context."""
    group = engine.groups.get(req.group_id)
    if group is None:
        if req.generation_id >= 0:
            # Kafka < v9 (what classic clients expect); v9+ says GROUP_ID_NOT_FOUND
            return ErrorCode.ILLEGAL_GENERATION, None, None
        # a "simple" group: offsets only, no protocol type
        group = engine.create_group(req.group_id, now_ms)
    cell = group.row.offset_commit
    if isinstance(cell, Refuse):
        return cell.code, None, None
    if req.generation_id < 0 and cell.without_member:
        return ErrorCode.NONE, group, None  # admin tools, manual assignment
    member: Member | None = None
    if req.generation_id >= 0 or req.member_id or req.group_instance_id is not None:
        code = group.validate_member(req.member_id, req.group_instance_id)
        if code is not ErrorCode.NONE:
            return code, None, None
        if req.generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION, None, None
        member = group.members[req.member_id]
    elif not cell.without_member:
        return ErrorCode.UNKNOWN_MEMBER_ID, None, None
    if cell.answer is not ErrorCode.NONE:
        return cell.answer, None, None  # CompletingRebalance: no commits mid-assignment
    return ErrorCode.NONE, group, member


def handle_offset_fetch(engine: Engine, ctx: RequestContext, req: OffsetFetchRequest) -> None:
    """Always allowed; unknown groups and partitions read as offset -1, metadata ""."""
    offsets = engine.offsets.of(req.group_id)
    topics: list[OffsetFetchResponseTopic] = []
    if req.topics is None:
        by_topic: dict[str, list[OffsetFetchResponsePartition]] = {}
        for (topic, partition), committed in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append(OffsetFetchResponsePartition(
                partition_index=partition, committed_offset=committed.offset,
                metadata=committed.metadata))
        topics = [OffsetFetchResponseTopic(name=t, partitions=ps) for t, ps in by_topic.items()]
    else:
        for t in req.topics:
            answers: list[OffsetFetchResponsePartition] = []
            for partition in t.partition_indexes:
                found = offsets.get((t.name, partition))
                answers.append(OffsetFetchResponsePartition(partition_index=partition)
                               if found is None else
                               OffsetFetchResponsePartition(
                                   partition_index=partition, committed_offset=found.offset,
                                   metadata=found.metadata))
            topics.append(OffsetFetchResponseTopic(name=t.name, partitions=answers))
    engine.out.reply(ctx.conn_id, ctx.correlation_id, OffsetFetchResponse(topics=topics))
