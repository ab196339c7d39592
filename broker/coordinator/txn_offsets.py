"""Transactional offset commits (Kafka's KIP-98, with KIP-447's group fencing):
TxnOffsetCommit and the transaction marker of an offsets partition.

A TxnOffsetCommit writes one :class:`TxnOffsetCommitRecord` per partition, keyed by
(group, partition, producer), and is answered once that write is stored, as an
OffsetCommit is. Its offsets are then *pending*: OffsetFetch does not return them and
nothing counts them as committed, but OffsetFetch with ``require_stable`` answers their
partitions UNSTABLE_OFFSET_COMMIT, retention keeps the partition's committed offset and
the group, and they go with their group (DeleteGroups), their topic, or an
OffsetDelete of their partition (tombstones of their keys, as Kafka's tombstone of
the shared key drops them).

The transaction's marker (:func:`complete`) ends them: on commit one write of an
:class:`OffsetCommitRecord` for each, plus the tombstone of its transactional key; on
abort the tombstones only. They become committed, or vanish, when that write is stored;
a failed one leaves them pending for the marker to come again. The committed value is
always the transaction's, even over an OffsetCommit of the partition made while it was
pending (Kafka keeps whichever record is later in the log; the offsets log's compaction
does not keep that order, so here the rule is one that replay can follow).

Validation is Kafka's ``validateTransactionalOffsetCommit``: a group that does not exist
takes offsets with generation -1 (a "simple" group is created) and is ILLEGAL_GENERATION
otherwise; a member id, instance id or generation given must match the group
(UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION), none given is accepted in
any state (older producers send none); unlike OffsetCommit, CompletingRebalance is not
REBALANCE_IN_PROGRESS and the member's session is not renewed. Member ownership and
ownership fencing (docs/protocol.md §7.2, §7.5) apply as to OffsetCommit. The producer
id and epoch are kept, not checked: fencing producers is the transaction coordinator's.
"""

from __future__ import annotations

from typing import Final

from groupwire.broker.coordinator.engine import Engine
from groupwire.broker.coordinator.group import Group
from groupwire.broker.coordinator.history import group_partitions
from groupwire.broker.coordinator.member import TP, Member
from groupwire.broker.coordinator.offsets import CommittedOffset, TxnOffset
from groupwire.broker.coordinator.offsets_api import fencing_member, partition_verdicts
from groupwire.broker.coordinator.outputs import RequestContext
from groupwire.broker.coordinator.ownership import NOT_YOURS, may_act
from groupwire.broker.coordinator.records import (
    OffsetCommitRecord,
    TxnOffsetCommitRecord,
    TxnOffsetDeleteRecord,
)
from groupwire.broker.coordinator.transitions import Refuse
from groupwire.broker.coordinator.unloading import partition_filter
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnPartitionResult,
    TxnTopicResult,
)

NONE: Final = ErrorCode.NONE
PARTITION_NOT_OWNED: Final = ErrorCode.PARTITION_NOT_OWNED


def handle_txn_offset_commit(engine: Engine, ctx: RequestContext, req: TxnOffsetCommitRequest,
                             now_ms: int) -> None:
    """Answer ``req``: refused as a whole (the same code on every partition), or per
    partition, the accepted ones written and held until the write's outcome."""
    if engine.refusal is not None:
        code = engine.refusal(req.group_id)
        if code is not None:
            _refuse_all(engine, ctx, req, code)
            return
    code, group, member = _validate(engine, ctx, req, now_ms)
    if code is not NONE or group is None:
        _refuse_all(engine, ctx, req, code)
        return
    fenced_member = fencing_member(engine, group, member)
    group_id = group.group_id
    producer_id, producer_epoch = req.producer_id, req.producer_epoch
    out = engine.out
    commit_wall_ms = engine.wall_ms(now_ms)  # what the record keeps; memory keeps now_ms
    refused_all: list[TP] = []
    topics: list[TxnTopicResult] = []
    for topic in req.topics:
        name = topic.name
        answers: list[TxnPartitionResult] = []
        for p, error in partition_verdicts(engine, name, topic.partitions, fenced_member):
            index = p.partition_index
            metadata = p.committed_metadata or ""
            if error is PARTITION_NOT_OWNED:
                refused_all.append((name, index))
            elif error is NONE:
                offset = p.committed_offset
                engine.offsets.stage_txn(out.token(), group_id, producer_id, (name, index),
                                         TxnOffset(producer_epoch, offset, metadata, now_ms))
                out.records.append(TxnOffsetCommitRecord(
                    group_id, name, index, producer_id, producer_epoch, offset, metadata,
                    commit_wall_ms))
            answers.append(TxnPartitionResult(partition_index=index, error_code=error))
        topics.append(TxnTopicResult(name=name, results=answers))
    if refused_all and member is not None:
        engine.emit("commit_fenced", group, now_ms, member=member,
                    partitions=group_partitions(refused_all))
    out.reply(ctx.conn_id, ctx.correlation_id, TxnOffsetCommitResponse(topics=topics))


def _validate(engine: Engine, ctx: RequestContext, req: TxnOffsetCommitRequest,
              now_ms: int) -> tuple[ErrorCode, Group | None, Member | None]:
    """Kafka's ``validateTransactionalOffsetCommit`` (see the module's docstring), plus
    member ownership; returns the member if the request named one."""
    group = engine.groups.get(req.group_id)
    if group is None:
        if req.generation_id >= 0:
            return ErrorCode.ILLEGAL_GENERATION, None, None
        group = engine.create_group(req.group_id, now_ms)  # a "simple" group
    cell = group.row.offset_commit
    if isinstance(cell, Refuse):
        return cell.code, None, None
    if req.generation_id < 0 and cell.without_member:
        return NONE, group, None  # Empty: offsets of anyone, as OffsetCommit's
    if req.generation_id < 0 and not req.member_id and req.group_instance_id is None:
        return NONE, group, None  # no group context (KIP-447 is optional): any state
    code = group.validate_member(req.member_id, req.group_instance_id)
    if code is not NONE:
        return code, None, None
    member = group.members[req.member_id]
    if not may_act(member, ctx):
        return NOT_YOURS, None, None
    if req.generation_id != group.generation_id:
        return ErrorCode.ILLEGAL_GENERATION, None, None
    return NONE, group, member


def _refuse_all(engine: Engine, ctx: RequestContext, req: TxnOffsetCommitRequest,
                code: ErrorCode) -> None:
    engine.out.reply(ctx.conn_id, ctx.correlation_id, TxnOffsetCommitResponse(topics=[
        TxnTopicResult(name=t.name, results=[
            TxnPartitionResult(partition_index=p.partition_index, error_code=code)
            for p in t.partitions])
        for t in req.topics]))


def complete(engine: Engine, partition: int, producer_id: int, commit: bool,
             now_ms: int) -> None:
    """The marker of ``producer_id``'s transaction for offsets ``partition``: the records
    that end its pending offsets in the partition's groups, one write (its token is the
    Result's ``write``); nothing if it has none there."""
    ending = engine.offsets.producer_offsets(producer_id, partition_filter(engine, partition))
    if not ending:
        return
    out = engine.out
    token = out.token()
    engine.offsets.end_txn(token, producer_id, ((g, tp) for g, tp, _ in ending))
    records = out.records
    offset = engine.wall_offset_ms
    for group_id, (topic, index), value in ending:
        if commit:
            if group_id not in engine.groups:
                engine.create_group(group_id, now_ms)  # as the OffsetCommitRecord's replay
            engine.offsets.stage(token, group_id)[(topic, index)] = CommittedOffset(
                value.offset, value.metadata, value.commit_ms)
            records.append(OffsetCommitRecord(group_id, topic, index, value.offset,
                                              value.metadata, value.commit_ms + offset))
        records.append(TxnOffsetDeleteRecord(group_id, topic, index, producer_id))
