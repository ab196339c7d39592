"""OffsetCommit (docs/design/kafka.md §10.1 + ownership fencing, docs/protocol.md §7.2) and
OffsetFetch."""

from __future__ import annotations

from typing import Final

from groupwire.broker.coordinator.engine import Engine
from groupwire.broker.coordinator.fencing import not_owned
from groupwire.broker.coordinator.group import Group
from groupwire.broker.coordinator.history import group_partitions
from groupwire.broker.coordinator.member import TP, Member
from groupwire.broker.coordinator.offsets import CommittedOffset
from groupwire.broker.coordinator.outputs import RequestContext
from groupwire.broker.coordinator.paced import STEP_WORK, sorted_steps
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
from groupwire.protocol.steps import Steps, run_steps

NONE: Final = ErrorCode.NONE
UNKNOWN_TOPIC_OR_PARTITION: Final = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
OFFSET_METADATA_TOO_LARGE: Final = ErrorCode.OFFSET_METADATA_TOO_LARGE
PARTITION_NOT_OWNED: Final = ErrorCode.PARTITION_NOT_OWNED


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
    group_id = group.group_id
    committed = engine.offsets.of(group_id)  # {} if none yet: a new dict comes on first use
    max_metadata = engine.config.offset_metadata_max_bytes
    # metadata of at most this many characters fits whatever they are (4 bytes each)
    short_metadata = max_metadata // 4
    records = engine.out.records
    refused_all: list[TP] = []
    topics: list[OffsetCommitResponseTopic] = []
    for topic in req.topics:
        name = topic.name
        count = engine.partition_count(name)
        if count is None:
            count = 0
        refused: frozenset[TP] = frozenset()
        if fenced_member is not None:
            refused = not_owned(fenced_member, ((name, p.partition_index)
                                                for p in topic.partitions), releasing=True)
        answers: list[OffsetCommitResponsePartition] = []
        for p in topic.partitions:
            index = p.partition_index
            metadata = p.committed_metadata or ""
            if not 0 <= index < count:
                error = UNKNOWN_TOPIC_OR_PARTITION
            elif len(metadata) > short_metadata and len(metadata.encode()) > max_metadata:
                error = OFFSET_METADATA_TOO_LARGE
            elif refused and (name, index) in refused:
                error = PARTITION_NOT_OWNED
                refused_all.append((name, index))
            else:
                error = NONE
                if not committed:
                    committed = engine.offsets.for_commit(group_id)
                offset = p.committed_offset
                committed[(name, index)] = CommittedOffset(offset, metadata, now_ms)
                records.append(OffsetCommitRecord(group_id, name, index, offset, metadata,
                                                  now_ms))
            answers.append(OffsetCommitResponsePartition(partition_index=index, error_code=error))
        topics.append(OffsetCommitResponseTopic(name=name, partitions=answers))
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
    engine.out.reply(ctx.conn_id, ctx.correlation_id, run_steps(offset_fetch_steps(engine, req)))


def offset_fetch_steps(engine: Engine, req: OffsetFetchRequest) -> Steps[OffsetFetchResponse]:
    """OffsetFetch as steps. Always allowed; unknown groups and partitions read as offset
    -1, metadata "". Each partition reads its offset as committed when it is reached
    (a commit in between shows for the partitions read after it)."""
    group_id = req.group_id
    offsets = engine.offsets
    topics: list[OffsetFetchResponseTopic] = []
    work = 0
    if req.topics is None:
        by_topic: dict[str, list[OffsetFetchResponsePartition]] = {}
        committed = yield from sorted_steps(list(offsets.of(group_id)))
        current = offsets.of(group_id)
        for tp in committed:
            work += 1
            if work >= STEP_WORK:
                work = 0
                yield
                current = offsets.of(group_id)
            found = current.get(tp)
            if found is None:
                continue  # deleted meanwhile: as if fetched after it
            topic, partition = tp
            by_topic.setdefault(topic, []).append(OffsetFetchResponsePartition(
                partition_index=partition, committed_offset=found.offset,
                metadata=found.metadata))
        topics = [OffsetFetchResponseTopic(name=t, partitions=ps) for t, ps in by_topic.items()]
    else:
        for t in req.topics:
            answers: list[OffsetFetchResponsePartition] = []
            current = offsets.of(group_id)
            for partition in t.partition_indexes:
                work += 1
                if work >= STEP_WORK:
                    work = 0
                    yield
                    current = offsets.of(group_id)
                found = current.get((t.name, partition))
                answers.append(OffsetFetchResponsePartition(partition_index=partition)
                               if found is None else
                               OffsetFetchResponsePartition(
                                   partition_index=partition, committed_offset=found.offset,
                                   metadata=found.metadata))
            topics.append(OffsetFetchResponseTopic(name=t.name, partitions=answers))
    return OffsetFetchResponse(topics=topics)
