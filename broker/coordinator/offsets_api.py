"""OffsetCommit (docs/design/kafka.md §10.1 + ownership fencing, docs/protocol.md §7.2) and
OffsetFetch (with KIP-447's ``require_stable``: transactions' pending offsets, txn_offsets.py)."""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from typing import Final, Protocol, TypeVar

from groupwire.broker.coordinator import hosting
from groupwire.broker.coordinator.engine import Engine
from groupwire.broker.coordinator.fencing import not_owned
from groupwire.broker.coordinator.group import Group
from groupwire.broker.coordinator.history import group_partitions
from groupwire.broker.coordinator.member import TP, Member
from groupwire.broker.coordinator.offsets import CommittedOffset
from groupwire.broker.coordinator.outputs import RequestContext, Result
from groupwire.broker.coordinator.ownership import NOT_YOURS, may_act, member_message
from groupwire.broker.coordinator.paced import STEP_WORK, sorted_steps
from groupwire.broker.coordinator.records import OffsetCommitRecord, OffsetRecordEncoder
from groupwire.broker.coordinator.state import GroupState
from groupwire.broker.coordinator.timers import TimerOp
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
UNSTABLE_OFFSET_COMMIT: Final = ErrorCode.UNSTABLE_OFFSET_COMMIT
OFFSET_METADATA_TOO_LARGE: Final = ErrorCode.OFFSET_METADATA_TOO_LARGE
PARTITION_NOT_OWNED: Final = ErrorCode.PARTITION_NOT_OWNED

LONG_COMMIT: Final = STEP_WORK
"""Partitions over which an OffsetCommit is worth running as steps
(:func:`offset_commit_steps`); smaller ones are handled at once."""


def handle_offset_commit(engine: Engine, ctx: RequestContext, req: OffsetCommitRequest,
                         now_ms: int) -> None:
    if engine.refusal is not None and _refused_here(engine, ctx, req):
        return
    code, group, member = _validate(engine, ctx, req, now_ms)
    if code is not ErrorCode.NONE or group is None:
        _refuse_all(engine, ctx, req, code)
        return
    cell = group.row.offset_commit
    assert isinstance(cell, Commit)  # _validate answered a Refuse
    if member is not None and cell.renews_session:
        engine.arm_session(member, member.session_timeout_ms, now_ms)
    fenced_member = fencing_member(engine, group, member)
    group_id = group.group_id
    staged: dict[TP, CommittedOffset] | None = None  # what the write stores, on first use
    records = engine.out.records
    commit_wall_ms = engine.wall_ms(now_ms)  # what the record keeps; memory keeps now_ms
    refused_all: list[TP] = []
    topics: list[OffsetCommitResponseTopic] = []
    for topic in req.topics:
        name = topic.name
        answers: list[OffsetCommitResponsePartition] = []
        for p, error in partition_verdicts(engine, name, topic.partitions, fenced_member):
            index = p.partition_index
            metadata = p.committed_metadata or ""
            if error is PARTITION_NOT_OWNED:
                refused_all.append((name, index))
            elif error is NONE:
                if staged is None:
                    staged = engine.offsets.stage(engine.out.token(), group_id)
                offset = p.committed_offset
                staged[(name, index)] = CommittedOffset(offset, metadata, now_ms)
                records.append(OffsetCommitRecord(group_id, name, index, offset, metadata,
                                                  commit_wall_ms))
            answers.append(OffsetCommitResponsePartition(partition_index=index, error_code=error))
        topics.append(OffsetCommitResponseTopic(name=name, partitions=answers))
    if refused_all and member is not None:
        engine.emit("commit_fenced", group, now_ms, member=member,
                    partitions=group_partitions(refused_all))
    engine.out.reply(ctx.conn_id, ctx.correlation_id, OffsetCommitResponse(topics=topics))


class CommitPartition(Protocol):
    """A partition of an OffsetCommit or a TxnOffsetCommit."""

    @property
    def partition_index(self) -> int: ...
    @property
    def committed_metadata(self) -> str | None: ...


P = TypeVar("P", bound=CommitPartition)


def partition_verdicts(engine: Engine, name: str, partitions: Sequence[P],
                       fenced_member: Member | None) -> list[tuple[P, ErrorCode]]:
    """Each partition of topic ``name`` in a commit, with why it is refused (NONE: it is
    accepted); ``fenced_member``: the committer whose ownership fencing applies."""
    max_metadata = engine.config.offset_metadata_max_bytes
    short_metadata = max_metadata // 4  # see commit_refusal
    count = engine.partition_count(name) or 0
    refused: frozenset[TP] = frozenset()
    if fenced_member is not None:
        refused = not_owned(fenced_member, ((name, p.partition_index) for p in partitions),
                            releasing=True)
    return [(p, commit_refusal(name, p.partition_index, p.committed_metadata or "", count,
                               refused, short_metadata, max_metadata)) for p in partitions]


def fencing_member(engine: Engine, group: Group, member: Member | None) -> Member | None:
    """The committer whose ownership fencing applies to a commit (§7.2), or None."""
    if (member is not None and engine.config.ownership_fencing and group.is_consumer
            and member.owned is not None):
        return member
    return None


def commit_refusal(name: str, index: int, metadata: str, count: int, refused: frozenset[TP],
             short_metadata: int, max_metadata: int) -> ErrorCode:
    """Why one partition of a commit (OffsetCommit, TxnOffsetCommit) is refused, or NONE.
    Metadata of at most ``short_metadata`` characters fits whatever they are (4 bytes
    each), unencoded."""
    if not 0 <= index < count:
        return UNKNOWN_TOPIC_OR_PARTITION
    if len(metadata) > short_metadata and len(metadata.encode()) > max_metadata:
        return OFFSET_METADATA_TOO_LARGE
    if refused and (name, index) in refused:
        return PARTITION_NOT_OWNED
    return NONE


def _refuse_all(engine: Engine, ctx: RequestContext, req: OffsetCommitRequest,
                code: ErrorCode) -> None:
    message = member_message(req.member_id) if code is NOT_YOURS else None
    engine.out.reply(ctx.conn_id, ctx.correlation_id, OffsetCommitResponse(topics=[
        OffsetCommitResponseTopic(name=t.name, partitions=[
            OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code,
                                          error_message=message)
            for p in t.partitions])
        for t in req.topics]))


def _refused_here(engine: Engine, ctx: RequestContext, req: OffsetCommitRequest) -> bool:
    """Answered as a whole if the group is not served here (cluster mode)."""
    assert engine.refusal is not None
    code = engine.refusal(req.group_id)
    if code is None:
        return False
    engine.out.reply(ctx.conn_id, ctx.correlation_id,
                     hosting.refused_response(req, req.group_id, code))
    return True


def commit_size(req: OffsetCommitRequest) -> int:
    """Partitions an OffsetCommit names (compare with :data:`LONG_COMMIT`)."""
    return sum(len(t.partitions) for t in req.topics)


# --- a large OffsetCommit as steps ------------------------------------------------------
# Kafka's model: validate on arrival, apply when the records are appended. The first
# step validates, renews the session and decides ownership refusals, as
# handle_offset_commit does, atomically on arrival. The steps after it build the answer,
# the offsets to stage and the encoded records without changing anything. apply_commit
# then, in one piece, stages them under the write's token, if nothing the validation
# read has changed meanwhile; otherwise it runs handle_offset_commit then (a rebalance
# mid-way: rare).


@dataclass(eq=False, slots=True)
class PreparedCommit:
    """An OffsetCommit validated on arrival and built, not applied (:func:`apply_commit`).

    ``records`` are the key/value bytes of the records it writes, in order (``to_kv``'s),
    so the shell can encode their batch before the apply.
    """

    group_id: str
    records: list[tuple[bytes, bytes]]
    ctx: RequestContext
    request: OffsetCommitRequest
    now_ms: int
    timers: tuple[TimerOp, ...]
    """The arrival step's timer operations (a renewed session), handed over at the apply."""
    group: Group
    member: Member | None
    seen: tuple[int, GroupState, str | None, frozenset[TP] | None, frozenset[TP], list[int]]
    """What the arrival step's decisions rest on: generation, state, protocol type, the
    member's ``owned`` and ``releasing`` (by identity), each topic's partition count."""
    tps: list[TP]
    entries: list[CommittedOffset]
    refused: list[TP]
    response: OffsetCommitResponse


@dataclass(frozen=True, slots=True)
class AppliedCommit:
    """What :func:`apply_commit` did. ``as_prepared``: the shell writes the prepared
    records (``result.records`` is empty; ``result.write`` is their token if any were
    staged); otherwise it fell back to the plain handler and ``result.records`` are the
    records."""

    result: Result
    as_prepared: bool


def offset_commit_steps(engine: Engine, ctx: RequestContext, req: OffsetCommitRequest,
                        now_ms: int) -> Steps[Result | PreparedCommit]:
    """A large OffsetCommit: a Result at once (refused as a whole, on the first step) or,
    after yielding every ``STEP_WORK`` partitions, a :class:`PreparedCommit`.

    Only the first step changes state (a simple group created, the session renewed); it
    uses ``engine.out`` and takes what it produced before yielding, so other inputs
    handled between steps have it to themselves.
    """
    out = engine.out
    out.reset()
    if engine.refusal is not None and _refused_here(engine, ctx, req):
        return out.build()
    code, group, member = _validate(engine, ctx, req, now_ms)
    if code is not ErrorCode.NONE or group is None:
        _refuse_all(engine, ctx, req, code)
        return out.build()
    cell = group.row.offset_commit
    assert isinstance(cell, Commit)  # _validate answered a Refuse
    if member is not None and cell.renews_session:
        engine.arm_session(member, member.session_timeout_ms, now_ms)
    timers = out.build().timers
    fenced_member = fencing_member(engine, group, member)
    counts = [engine.partition_count(t.name) or 0 for t in req.topics]
    refusals = [not_owned(fenced_member, ((t.name, p.partition_index) for p in t.partitions),
                          releasing=True) if fenced_member is not None else frozenset()
                for t in req.topics]
    seen = (group.generation_id, group.state, group.protocol_type,
            member.owned if member is not None else None,
            member.releasing if member is not None else frozenset(), counts)
    group_id = group.group_id
    max_metadata = engine.config.offset_metadata_max_bytes
    short_metadata = max_metadata // 4
    kv = OffsetRecordEncoder().kv
    commit_wall_ms = engine.wall_ms(now_ms)  # what the records keep; memory keeps now_ms
    tps: list[TP] = []
    entries: list[CommittedOffset] = []
    records: list[tuple[bytes, bytes]] = []
    refused_all: list[TP] = []
    topics: list[OffsetCommitResponseTopic] = []
    work = 0
    for topic, count, refused in zip(req.topics, counts, refusals, strict=True):
        name = topic.name
        answers: list[OffsetCommitResponsePartition] = []
        for p in topic.partitions:
            work += 1
            if work >= STEP_WORK:
                work = 0
                yield
            index = p.partition_index
            metadata = p.committed_metadata or ""
            error = commit_refusal(name, index, metadata, count, refused, short_metadata,
                             max_metadata)
            if error is PARTITION_NOT_OWNED:
                refused_all.append((name, index))
            elif error is NONE:
                offset = p.committed_offset
                tps.append((name, index))
                entries.append(CommittedOffset(offset, metadata, now_ms))
                records.append(kv(group_id, name, index, offset, metadata,
                                  commit_wall_ms))
            answers.append(OffsetCommitResponsePartition(partition_index=index, error_code=error))
        topics.append(OffsetCommitResponseTopic(name=name, partitions=answers))
    return PreparedCommit(group_id, records, ctx, req, now_ms, timers, group, member, seen,
                          tps, entries, refused_all, OffsetCommitResponse(topics=topics))


def apply_commit(engine: Engine, prepared: PreparedCommit) -> AppliedCommit:
    """Apply a prepared commit in one piece: its entries are staged under the write's
    token, its answer (held until the outcome) and ``commit_fenced`` event come out. If
    what its arrival step decided on has changed since (a rebalance, the member gone, a
    topic deleted or grown), ``handle_offset_commit`` runs instead."""
    out = engine.out
    out.reset()
    if not _unchanged(engine, prepared):
        return _apply_afresh(engine, prepared)
    tps = prepared.tps
    if tps:
        engine.offsets.stage(out.token(), prepared.group_id).update(
            zip(tps, prepared.entries, strict=True))  # a C loop
    member = prepared.member
    if prepared.refused and member is not None:
        engine.emit("commit_fenced", prepared.group, prepared.now_ms, member=member,
                    partitions=group_partitions(prepared.refused))
    ctx = prepared.ctx
    out.reply(ctx.conn_id, ctx.correlation_id, prepared.response)
    return AppliedCommit(_with_timers(out.build(), prepared.timers), True)


def _unchanged(engine: Engine, prepared: PreparedCommit) -> bool:
    group, member, req = prepared.group, prepared.member, prepared.request
    generation, state, protocol_type, owned, releasing, counts = prepared.seen
    if (engine.groups.get(prepared.group_id) is not group
            or group.generation_id != generation or group.state is not state
            or group.protocol_type != protocol_type):
        return False
    if member is not None and (
            group.members.get(member.member_id) is not member
            or group.validate_member(req.member_id, req.group_instance_id) is not NONE
            or member.owned is not owned or member.releasing is not releasing):
        return False
    return all((engine.partition_count(t.name) or 0) == count
               for t, count in zip(req.topics, counts, strict=True))


def _apply_afresh(engine: Engine, prepared: PreparedCommit) -> AppliedCommit:
    """The plain handler, now (rare)."""
    handle_offset_commit(engine, prepared.ctx, prepared.request, prepared.now_ms)
    return AppliedCommit(_with_timers(engine.out.build(), prepared.timers), False)


def _with_timers(result: Result, timers: tuple[TimerOp, ...]) -> Result:
    return replace(result, timers=timers + result.timers) if timers else result


def _validate(engine: Engine, ctx: RequestContext, req: OffsetCommitRequest,
              now_ms: int) -> tuple[ErrorCode, Group | None, Member | None]:
    """Kafka's classic ``validateOffsetCommit``, plus member ownership (docs/protocol.md
    §7.5) once the member is known to exist; returns the member if it had context."""
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
        member = group.members[req.member_id]
        if not may_act(member, ctx):
            return NOT_YOURS, None, None
        if req.generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION, None, None
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
    (a commit in between shows for the partitions read after it).

    ``require_stable`` (KIP-447): a partition with a transaction's offset pending is
    answered UNSTABLE_OFFSET_COMMIT (offset -1), as Kafka's coordinator does, so a
    read_committed consumer does not start from an offset its transaction is about to
    replace; the consumer retries. All partitions (``topics`` None): those with a
    committed offset, as without it."""
    group_id = req.group_id
    if engine.refusal is not None:
        refused = engine.refusal(group_id)
        if refused is not None:
            return OffsetFetchResponse(error_code=refused,
                                       error_message=hosting.message(group_id, refused))
    offsets = engine.offsets
    stable = req.require_stable
    unstable: AbstractSet[TP] = _NO_TPS  # read again wherever ``current`` is
    topics: list[OffsetFetchResponseTopic] = []
    work = 0
    if req.topics is None:
        by_topic: dict[str, list[OffsetFetchResponsePartition]] = {}
        committed = yield from sorted_steps(list(offsets.of(group_id)))
        current = offsets.of(group_id)
        if stable:
            unstable = offsets.txn_partitions(group_id)
        for tp in committed:
            work += 1
            if work >= STEP_WORK:
                work = 0
                yield
                current = offsets.of(group_id)
                if stable:
                    unstable = offsets.txn_partitions(group_id)
            found = current.get(tp)
            if found is None:
                continue  # deleted meanwhile: as if fetched after it
            topic, partition = tp
            by_topic.setdefault(topic, []).append(
                _unstable(partition) if unstable and tp in unstable else
                OffsetFetchResponsePartition(partition_index=partition,
                                             committed_offset=found.offset,
                                             metadata=found.metadata))
        topics = [OffsetFetchResponseTopic(name=t, partitions=ps) for t, ps in by_topic.items()]
    else:
        if stable:
            unstable = offsets.txn_partitions(group_id)
        for t in req.topics:
            answers: list[OffsetFetchResponsePartition] = []
            current = offsets.of(group_id)
            for partition in t.partition_indexes:
                work += 1
                if work >= STEP_WORK:
                    work = 0
                    yield
                    current = offsets.of(group_id)
                    if stable:
                        unstable = offsets.txn_partitions(group_id)
                if unstable and (t.name, partition) in unstable:
                    answers.append(_unstable(partition))
                    continue
                found = current.get((t.name, partition))
                answers.append(OffsetFetchResponsePartition(partition_index=partition)
                               if found is None else
                               OffsetFetchResponsePartition(
                                   partition_index=partition, committed_offset=found.offset,
                                   metadata=found.metadata))
            topics.append(OffsetFetchResponseTopic(name=t.name, partitions=answers))
    return OffsetFetchResponse(topics=topics)


_NO_TPS: Final[frozenset[TP]] = frozenset()


def _unstable(partition: int) -> OffsetFetchResponsePartition:
    return OffsetFetchResponsePartition(partition_index=partition,
                                        error_code=UNSTABLE_OFFSET_COMMIT)
