"""The coordinator the broker shell drives: requests, timer expiries and closed
connections in, :class:`Result` out; plus :meth:`Coordinator.renew`, the heartbeat fast
path, whose :class:`Renewal` lists its changes. Time is always an argument (a monotonic
``now_ms``; the wall clock's offset from it by :meth:`Coordinator.set_wall_clock`);
nothing here does I/O."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Iterable
from types import MethodType
from typing import Final

from groupwire.broker.coordinator import (
    expiry,
    hosting,
    loading,
    txn_offsets,
    unloading,
    writes,
)
from groupwire.broker.coordinator.config import CoordinatorConfig
from groupwire.broker.coordinator.engine import Engine
from groupwire.broker.coordinator.fencing import not_owned
from groupwire.broker.coordinator.group_admin import (
    describe_steps,
    handle_delete,
    handle_describe,
    handle_list,
    list_steps,
)
from groupwire.broker.coordinator.heartbeat import Renewal, handle_heartbeat, renew
from groupwire.broker.coordinator.join import handle_join
from groupwire.broker.coordinator.leave import handle_leave
from groupwire.broker.coordinator.offset_delete import handle_offset_delete
from groupwire.broker.coordinator.offsets_api import (
    AppliedCommit,
    PreparedCommit,
    apply_commit,
    handle_offset_commit,
    handle_offset_fetch,
    offset_commit_steps,
    offset_fetch_steps,
)
from groupwire.broker.coordinator.outputs import FetchCheck, RequestContext, Result
from groupwire.broker.coordinator.ownership import NOT_YOURS, may_use, member_message
from groupwire.broker.coordinator.records import (
    GroupRecord,
    OffsetDeleteRecord,
    TxnOffsetDeleteRecord,
)
from groupwire.broker.coordinator.state import DEAD, GroupState
from groupwire.broker.coordinator.sync import handle_sync
from groupwire.broker.coordinator.timers import TimerKey
from groupwire.broker.coordinator.view import CoreView
from groupwire.protocol.codec import HeartbeatFields
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.hashing import coordinator_partition
from groupwire.protocol.messages import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FetchGroup,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
    Request,
    Response,
    SyncGroupRequest,
    TxnOffsetCommitRequest,
)
from groupwire.protocol.security import ANONYMOUS
from groupwire.protocol.steps import Steps

_NOTHING: Final[frozenset[tuple[str, int]]] = frozenset()
_WHOLE_REQUEST: Final = (HeartbeatRequest, JoinGroupRequest, SyncGroupRequest,
                         LeaveGroupRequest, OffsetDeleteRequest)
"""Requests refused as a whole for a group not served here. OffsetCommit and OffsetFetch
check in their own handlers (they also run as steps), TxnOffsetCommit in its own (it
answers per partition); the multi-group APIs, per group."""
FETCH_OK: Final = FetchCheck(ErrorCode.NONE, _NOTHING)
_FETCH_UNKNOWN: Final = FetchCheck(ErrorCode.UNKNOWN_MEMBER_ID, _NOTHING)
_FETCH_FENCED: Final = FetchCheck(ErrorCode.FENCED_INSTANCE_ID, _NOTHING)


def _uuid_hex() -> str:
    return uuid.uuid4().hex


class Coordinator:
    """Kafka's classic group coordinator plus docs/protocol.md §7's extensions.

    Deterministic where Kafka is not: a leader that leaves hands over to the earliest
    remaining member; at the end of a join phase a leader that did not re-join is replaced
    by the earliest-joined member that did; a protocol vote tie goes to the tied name
    first in the leader's preference order.
    """

    def __init__(self, config: CoordinatorConfig,
                 partition_count: Callable[[str], int | None],
                 new_uuid: Callable[[], str] = _uuid_hex, *,
                 offsets_partitions: int | None = None,
                 hosts: Callable[[str], bool] | None = None,
                 loading: Callable[[str], bool] | None = None) -> None:
        self.config = config
        self._engine = Engine(config, partition_count, new_uuid)
        if offsets_partitions is not None and offsets_partitions <= 0:
            raise ValueError(f"offsets_partitions must be positive, got {offsets_partitions}")
        self._engine.offsets_partitions = offsets_partitions
        self.set_hosting(hosts, loading)
        self.renew: Callable[[int, HeartbeatFields, int], Renewal | None] = MethodType(
            renew, self._engine)
        """The heartbeat fast path, ``renew(conn_id, heartbeat, now_ms)``: a
        :class:`Renewal` (every change it made) if the heartbeat is settled with a plain
        NONE answer and nothing else to do; None (nothing changed): call :meth:`handle`.
        Both decide with ``heartbeat.classify``. ``renew`` bound to the engine rather
        than a method that calls it: the broker calls it once per heartbeat, and the extra
        frame showed in profiles (a bound method, unlike ``functools.partial``, lets
        CPython call into ``renew`` without a new C-level frame)."""

    # --- inputs ---------------------------------------------------------------------
    # ``now_ms`` is always the monotonic clock's: deadlines and durations count on it.

    def set_wall_clock(self, wall_ms: int, now_ms: int) -> None:
        """The wall clock read ``wall_ms`` when the monotonic one read ``now_ms``: what
        timestamps users read (events, records, DescribeGroups) are put on from now on,
        and what persisted times are re-based from when loaded. The shell tells it
        before each input; a wall clock step then moves those timestamps and no
        deadline. Never called (simulations): both clocks are one."""
        self._engine.wall_offset_ms = wall_ms - now_ms

    def handle(self, ctx: RequestContext, request: Request, now_ms: int) -> Result:
        """One group API request. Its reply may be absent (parked) and come later."""
        engine = self._engine
        engine.out.reset()
        if engine.refusal is not None and isinstance(request, _WHOLE_REQUEST):
            code = engine.refusal(request.group_id)
            if code is not None:
                engine.out.reply(ctx.conn_id, ctx.correlation_id,
                                 hosting.refused_response(request, request.group_id, code))
                return engine.out.build()
        match request:
            case HeartbeatRequest():
                handle_heartbeat(engine, ctx, request, now_ms)
            case JoinGroupRequest():
                handle_join(engine, ctx, request, now_ms)
            case SyncGroupRequest():
                handle_sync(engine, ctx, request, now_ms)
            case OffsetCommitRequest():
                handle_offset_commit(engine, ctx, request, now_ms)
            case TxnOffsetCommitRequest():
                txn_offsets.handle_txn_offset_commit(engine, ctx, request, now_ms)
            case OffsetFetchRequest():
                handle_offset_fetch(engine, ctx, request)
            case LeaveGroupRequest():
                handle_leave(engine, ctx, request, now_ms)
            case DescribeGroupsRequest():
                handle_describe(engine, ctx, request)
            case ListGroupsRequest():
                handle_list(engine, ctx, request)
            case DeleteGroupsRequest():
                handle_delete(engine, ctx, request, now_ms)
            case OffsetDeleteRequest():
                handle_offset_delete(engine, ctx, request)
            case _:
                raise TypeError(f"not a group API request: {type(request).__name__}")
        return engine.out.build()

    # --- read-only APIs as steps (protocol.steps) ----------------------------------------
    # The answer ``handle`` gives, computed in pieces the shell runs in time slices
    # (request- or state-sized work: 10 000 groups or offsets). They change nothing and
    # produce no timers, records or events, only the response; the shell sends it.

    def answer_steps(self, request: Request) -> Steps[Response] | None:
        """The answer of a read-only request as steps; None: not one, ``handle`` it."""
        kind = type(request)
        if kind is DescribeGroupsRequest:
            return describe_steps(self._engine, request)  # type: ignore[arg-type]
        if kind is OffsetFetchRequest:
            return offset_fetch_steps(self._engine, request)  # type: ignore[arg-type]
        if kind is ListGroupsRequest:
            return list_steps(self._engine, request)  # type: ignore[arg-type]
        return None

    def describe_groups_steps(self, request: DescribeGroupsRequest,
                              ) -> Steps[DescribeGroupsResponse]:
        return describe_steps(self._engine, request)

    def list_groups_steps(self, request: ListGroupsRequest) -> Steps[ListGroupsResponse]:
        return list_steps(self._engine, request)

    def offset_fetch_steps(self, request: OffsetFetchRequest) -> Steps[OffsetFetchResponse]:
        return offset_fetch_steps(self._engine, request)

    # --- a large OffsetCommit as steps --------------------------------------------------
    # Validated on arrival (the first step), built in steps that change nothing, applied
    # in one piece by ``apply_commit`` once the shell has its records' batch ready.

    def offset_commit_steps(self, ctx: RequestContext, request: OffsetCommitRequest,
                            now_ms: int) -> Steps[Result | PreparedCommit]:
        """A Result if the commit is refused as a whole on arrival (execute it as
        ``handle``'s), else the prepared commit: write ``records``, then ``apply_commit``
        in the same loop turn. For commits of more than ``LONG_COMMIT`` partitions;
        smaller ones cost less through ``handle``."""
        return offset_commit_steps(self._engine, ctx, request, now_ms)

    def apply_commit(self, prepared: PreparedCommit) -> AppliedCommit:
        """Apply a prepared commit now, in one piece (``offsets_api.apply_commit``)."""
        return apply_commit(self._engine, prepared)

    def expire(self, key: TimerKey, now_ms: int) -> Result:
        """A timer the coordinator asked for is due."""
        engine = self._engine
        engine.out.reset()
        expiry.expire(engine, key, now_ms)
        return engine.out.build()

    def connection_closed(self, conn_id: int, now_ms: int) -> Result:
        """Requests parked on the connection are dropped unanswered; members left with no
        connection get the reconnect grace (dynamic) or keep their session (static)."""
        engine = self._engine
        engine.out.reset()
        expiry.connection_closed(engine, conn_id, now_ms)
        return engine.out.build()

    def check_fetch(self, group: FetchGroup, partitions: Iterable[tuple[str, int]],
                    principal: str = ANONYMOUS, superuser: bool = False) -> FetchCheck:
        """Ownership fencing of a Fetch with group context (docs/protocol.md §7.2), by the
        connection authenticated as ``principal``: another principal's member is refused
        GROUP_AUTHORIZATION_FAILED unless ``superuser`` (§7.5)."""
        if not self.config.ownership_fencing:
            return FETCH_OK
        g = self._engine.groups.get(group.group_id)
        if g is None or g.state is DEAD:
            return _FETCH_UNKNOWN
        code = g.validate_member(group.member_id, group.group_instance_id)
        if code is ErrorCode.FENCED_INSTANCE_ID:
            return _FETCH_FENCED
        if code is not ErrorCode.NONE:
            return _FETCH_UNKNOWN
        member = g.members[group.member_id]
        if not may_use(member, principal, superuser):
            return FetchCheck(NOT_YOURS, _NOTHING, member_message(group.member_id))
        if not g.is_consumer:
            return FETCH_OK
        refused = not_owned(member, partitions, releasing=False)
        return FetchCheck(ErrorCode.NONE, refused) if refused else FETCH_OK

    # --- cluster mode: which groups are served here ----------------------------------

    def set_hosting(self, hosts: Callable[[str], bool] | None,
                    loading: Callable[[str], bool] | None = None) -> None:
        """Cluster mode: ``hosts(group_id)`` says whether this broker serves the group
        (it leads and has loaded its offsets partition), ``loading(group_id)`` whether its
        partition is being loaded here. A group loading is answered
        COORDINATOR_LOAD_IN_PROGRESS, one not hosted NOT_COORDINATOR: per group by
        DescribeGroups and DeleteGroups, which ListGroups leaves out, and as a whole by
        the single-group APIs. Both None (the default): every group is served and
        nothing is checked (single-broker mode)."""
        self._engine.refusal = hosting.refusal(hosts, loading)

    def partition_of(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition that holds the group."""
        count = self._engine.offsets_partitions
        if count is None:
            raise ValueError("the coordinator was not given offsets_partitions")
        return coordinator_partition(group_id, count)

    def load_partition(self, partition: int, records: Iterable[GroupRecord],
                       now_ms: int) -> Result:
        """This broker became the leader of offsets ``partition``: rebuild its groups and
        offsets from its ``records`` (log order) and arm their timers from ``now_ms``.

        Each group resumes as it persisted (members, generation, leader, assignments):
        its members carry on heartbeating without a rebalance. Groups of the partition
        already here are replaced (their parked requests answered NOT_COORDINATOR).
        The Result holds timers (sessions, a restored CompletingRebalance group's sync
        timer), and replies only when groups were replaced; no records, no events."""
        engine = self._engine
        engine.out.reset()
        loading.load_partition(engine, partition, records, now_ms)
        return engine.out.build()

    def unload_partition(self, partition: int, now_ms: int) -> Result:
        """This broker is no longer the leader of offsets ``partition``: its groups and
        their committed offsets leave memory (the log keeps them for the next leader).
        The Result holds the NOT_COORDINATOR replies to their parked JoinGroup, SyncGroup
        and long-poll Heartbeat requests and the cancellations of all their timers; no
        records, no events. Other partitions' groups are untouched."""
        engine = self._engine
        engine.out.reset()
        holds = unloading.partition_filter(engine, partition)
        unloading.unload(engine, unloading.groups_of(engine, holds), now_ms)
        return engine.out.build()

    def load(self, records: Iterable[GroupRecord], now_ms: int) -> None:
        """Rebuild groups and offsets from persisted records, in log order."""
        loading.load(self._engine, records, now_ms)

    def start(self, now_ms: int) -> Result:
        """Arm the retention sweep and the session timers of restored members."""
        engine = self._engine
        engine.out.reset()
        loading.start(engine, now_ms)
        return engine.out.build()

    def delete_topic_offsets(self, topics: Collection[str]) -> Result:
        """``topics`` were deleted: every group's committed offsets for their partitions
        are forgotten and tombstoned (Kafka: ``GroupMetadataManager.cleanupGroupMetadata``
        on deletion). The shell also calls it at start for topics that no longer exist
        (a crash between a deletion and these tombstones)."""
        engine = self._engine
        engine.out.reset()
        deleted = frozenset(topics)
        for group_id, (topic, partition) in engine.offsets.drop_topics(deleted):
            engine.out.records.append(OffsetDeleteRecord(group_id, topic, partition))
        for group_id, producer_id, (topic, partition) in engine.offsets.drop_txn_topics(
                deleted):  # transactions' pending ones too (Kafka's onTopicsDeleted)
            engine.out.records.append(
                TxnOffsetDeleteRecord(group_id, topic, partition, producer_id))
        return engine.out.build()

    def committed_topics(self) -> set[str]:
        """Every topic some group has a committed offset for, or a transaction's pending
        one: those ``delete_topic_offsets`` has something to tombstone of."""
        return self._engine.offsets.topics()

    # --- transactions (KIP-98, KIP-447; txn_offsets.py) ---------------------------------

    def complete_transaction(self, partition: int, producer_id: int, commit: bool,
                             now_ms: int) -> Result:
        """The marker of ``producer_id``'s transaction for ``__consumer_offsets``
        ``partition`` (the shell calls it when the transaction coordinator's marker work
        names the partition): the producer's pending offsets in the partition's groups
        become committed (``commit``) or vanish, once the Result's write is stored.

        The Result's ``write`` is the marker's token: the marker is written when the
        shell's ``stored(write)`` for it has been executed (tell the transaction
        coordinator then); ``failed(write, code)`` leaves the offsets pending, for the
        marker to come again. ``write`` None (an empty Result): the producer had nothing
        pending there, the marker is written at once. The Result has ``records`` and
        no replies; more than one marker may be pending at a time, and calling it again
        for the same transaction (a marker re-sent) writes the same records again.

        Call it only for a partition this broker leads and has loaded: for any other an
        empty Result would say the marker is written while the log still holds the
        offsets pending (answer such a marker NOT_COORDINATOR or
        COORDINATOR_LOAD_IN_PROGRESS, as Kafka's broker does)."""
        engine = self._engine
        engine.out.reset()
        txn_offsets.complete(engine, partition, producer_id, commit, now_ms)
        return engine.out.build()

    def pending_transactional(self, group_id: str) -> dict[tuple[str, int], dict[int, int]]:
        """The group's pending transactional offsets: partition -> producer id -> offset
        (the latest TxnOffsetCommit's, written or being written)."""
        return {tp: {pid: value.offset for pid, value in by_producer.items()}
                for tp, by_producer in self._engine.offsets.txn_pending(group_id).items()}

    # --- a write's outcome ------------------------------------------------------------
    # A Result with ``write`` holds its replies and its commits' offsets under that token
    # until the shell reports the outcome here: exactly once per token, in any order.

    def stored(self, token: int, now_ms: int) -> Result:
        """Write ``token`` is durable (in a cluster, in the ISR): the offsets it committed
        become what OffsetFetch reads (a transaction marker's: its pending offsets end),
        and its replies come out as they were."""
        engine = self._engine
        engine.out.reset()
        writes.stored(engine, token)
        return engine.out.build()

    def failed(self, token: int, code: ErrorCode, now_ms: int) -> Result:
        """Write ``token`` did not happen, or is not known to have: the offsets it
        committed are dropped (OffsetFetch never showed them), a TxnOffsetCommit's are
        no longer pending, a transaction marker's still are; its replies come out
        saying so (OffsetCommit and TxnOffsetCommit partitions that said NONE say
        ``code``, a SyncGroup answered NONE says COORDINATOR_NOT_AVAILABLE); a group
        whose metadata it held for its current generation, if Stable, resets its
        assignments and rebalances (Kafka's rule for a leader's SyncGroup whose store
        failed). ``code``: KAFKA_STORAGE_ERROR, COORDINATOR_NOT_AVAILABLE or
        NOT_COORDINATOR."""
        engine = self._engine
        engine.out.reset()
        writes.failed(engine, token, code, now_ms)
        return engine.out.build()

    def pending_writes(self) -> list[int]:
        """Tokens of the writes whose outcome is not known yet, oldest first."""
        return sorted(self._engine.out.held)

    # --- read-only views ------------------------------------------------------------

    @property
    def view(self) -> CoreView:
        """Groups, members and parked requests, read-only (tests, invariant checks)."""
        return CoreView(self._engine)

    def group_counts_by_state(self) -> dict[str, int]:
        counts = {state.value: 0 for state in GroupState if state is not DEAD}
        for group in self._engine.groups.values():
            counts[group.state.value] = counts.get(group.state.value, 0) + 1
        return counts

    def member_count(self) -> int:
        return sum(len(g.members) for g in self._engine.groups.values())

    def committed(self, group_id: str) -> dict[tuple[str, int], int]:
        """The group's committed offsets (transactions' pending ones are not)."""
        return {tp: c.offset for tp, c in self._engine.offsets.of(group_id).items()}

    def group_ids(self) -> list[str]:
        return list(self._engine.groups)
