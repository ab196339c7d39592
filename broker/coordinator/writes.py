"""A write's outcome as an input: :func:`stored` and :func:`failed` (docs/design/coordinator.md,
"Writes and their outcomes").

An input that writes records gets a token (``Result.write``); its replies and the offsets
it committed wait under it. Stored: the offsets become what OffsetFetch reads and the
replies go out as they are. Failed: the offsets are dropped and the replies say why;
a group whose metadata was in the write rebalances. Kafka's coordinator runtime does the
same with its uncommitted state: visible once the append is replicated, reverted if not.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from groupwire.broker.coordinator.engine import Engine
from groupwire.broker.coordinator.history import Cause
from groupwire.broker.coordinator.member import NO_PARTITIONS
from groupwire.broker.coordinator.outputs import HeldWrite, Reply
from groupwire.broker.coordinator.transitions import Ignore
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
    SyncGroupResponse,
    TxnOffsetCommitResponse,
    TxnPartitionResult,
    TxnTopicResult,
)

COMMIT_FAILURES: Final[Mapping[ErrorCode, str]] = MappingProxyType({
    ErrorCode.KAFKA_STORAGE_ERROR: "offset not written: storage error",
    ErrorCode.COORDINATOR_NOT_AVAILABLE:
        "offset not replicated to --min-insync-replicas in time: commit again",
    ErrorCode.NOT_COORDINATOR: "the coordinator moved before the offset was replicated",
})
"""What a commit whose write failed says, by the failure's code (Kafka's mapping of a
failed offsets append: storage error, not enough replicas in time, leadership lost)."""

_FAILED_SYNC: Final = SyncGroupResponse(
    error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, assignment=b"")
"""A SyncGroup whose group metadata was not stored: the member rejoins (Kafka's answer
when the leader's assignment could not be stored)."""


def _take(engine: Engine, token: int) -> HeldWrite:
    held = engine.out.held.pop(token, None)
    if held is None:
        raise ValueError(f"write {token} is not pending (settled twice, or never made)")
    return held


def stored(engine: Engine, token: int) -> None:
    """The write is durable (in a cluster, in the ISR)."""
    held = _take(engine, token)
    engine.offsets.store(token)
    engine.out.replies.extend(held.replies)


def failed(engine: Engine, token: int, code: ErrorCode, now_ms: int) -> None:
    """The write did not happen, or is not known to have."""
    held = _take(engine, token)
    engine.offsets.discard(token)
    out = engine.out
    for reply in held.replies:
        out.replies.append(_failed_reply(reply, code))
    for group_id, generation_id in held.generations:
        _group_write_failed(engine, group_id, generation_id, now_ms)


def _failed_reply(reply: Reply, code: ErrorCode) -> Reply:
    response = reply.response
    if type(response) is OffsetCommitResponse:
        message = COMMIT_FAILURES.get(code)
        response = OffsetCommitResponse(topics=[
            OffsetCommitResponseTopic(name=t.name, partitions=[
                OffsetCommitResponsePartition(partition_index=p.partition_index,
                                              error_code=code, error_message=message)
                if p.error_code == ErrorCode.NONE else p
                for p in t.partitions])
            for t in response.topics])
    elif type(response) is OffsetDeleteResponse:
        # the tombstones are not known to be written: the offsets may come back from the
        # log, and a retry writes them again (offset_delete.py)
        message = f"offset deletion not written ({code.name}): delete again"
        response = OffsetDeleteResponse(topics=[
            OffsetDeleteResponseTopic(name=t.name, partitions=[
                OffsetDeleteResponsePartition(partition_index=p.partition_index,
                                              error_code=code, error_message=message)
                if p.error_code == ErrorCode.NONE else p
                for p in t.partitions])
            for t in response.topics])
    elif type(response) is TxnOffsetCommitResponse:
        response = TxnOffsetCommitResponse(topics=[
            TxnTopicResult(name=t.name, results=[
                TxnPartitionResult(partition_index=p.partition_index, error_code=code)
                if p.error_code == ErrorCode.NONE else p
                for p in t.results])
            for t in response.topics])
    elif type(response) is SyncGroupResponse and response.error_code == ErrorCode.NONE:
        response = _FAILED_SYNC
    else:
        return reply
    return Reply(reply.conn_id, reply.correlation_id, response)


def _group_write_failed(engine: Engine, group_id: str, generation_id: int,
                        now_ms: int) -> None:
    """The group's metadata for ``generation_id`` was not stored.

    Kafka's rule for a leader's SyncGroup whose store failed: the members were told
    COORDINATOR_NOT_AVAILABLE, so their assignments are reset and the group rebalances;
    the next completed generation is written again. Nothing happens if the group has
    moved on since, or its state ignores this input (only Stable acts on it: the
    transition table's ``WRITE_FAILED`` column).
    """
    group = engine.groups.get(group_id)
    if (group is None or isinstance(group.row.write_failed, Ignore)
            or group.generation_id != generation_id):
        return
    for member in group.members.values():
        # Nobody was handed the unwritten assignment, and the disk refuses commits
        # anyway: owning and releasing nothing until the next generation is exact
        # for eager members and costs cooperative ones only refused commits.
        member.assignment = b""
        member.owned = member.releasing = NO_PARTITIONS
    engine.prepare_rebalance(group, now_ms, Cause(
        "member-rejoined", "group metadata not written (storage error); rejoin"))
