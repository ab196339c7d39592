"""Loading a ``__transaction_state`` partition from its records, unloading it, and the wall
clock the records are written on."""

from __future__ import annotations

import pytest

from groupwire.broker.transactions import (
    NO_START,
    TransactionConfig,
    TransactionCoordinator,
    TxnMetadata,
    TxnRecord,
    TxnState,
)
from groupwire.protocol.errors import ErrorCode
from tests.unit.transactions.shell import TIMEOUT, Shell

E = ErrorCode
S = TxnState
TID = "app-1"
ORDERS = ("orders", 0)


def _meta(state: TxnState, epoch: int = 0, start: int = 500, update: int = 900,
          partitions: frozenset[tuple[str, int]] = frozenset({ORDERS}),
          timeout: int = TIMEOUT) -> TxnMetadata:
    return TxnMetadata(70, 70, epoch, -1, timeout, state, partitions, start, update)


def test_replay_keeps_the_last_record_per_id_and_tombstones_remove() -> None:
    coordinator = TransactionCoordinator(TransactionConfig(partitions=1))
    records = [
        TxnRecord("a", _meta(S.EMPTY, 0, NO_START, partitions=frozenset())),
        TxnRecord("b", _meta(S.EMPTY, 0, NO_START, partitions=frozenset())),
        TxnRecord("a", _meta(S.ONGOING, 0)),
        TxnRecord("b", None),
        TxnRecord("c", _meta(S.COMPLETE_COMMIT, 4, partitions=frozenset())),
        TxnRecord("c", None),
        TxnRecord("c", _meta(S.EMPTY, 0, NO_START, partitions=frozenset())),
    ]
    result = coordinator.load_partition(0, records, 3, 1_000)
    assert not result
    assert coordinator.hosts(0) and coordinator.coordinator_epoch(0) == 3
    states = {d.transactional_id: (d.error_code, d.state)
              for d in coordinator.describe(["a", "b", "c"])}
    assert states == {"a": (E.NONE, "Ongoing"), "b": (E.TRANSACTIONAL_ID_NOT_FOUND, ""),
                      "c": (E.NONE, "Empty")}


def test_prepared_transactions_have_their_markers_sent_again_on_load() -> None:
    coordinator = TransactionCoordinator(TransactionConfig(partitions=1))
    records = [TxnRecord("a", _meta(S.PREPARE_COMMIT, 2, partitions=frozenset(
                   {ORDERS, ("audit", 3)}))),
               TxnRecord("b", _meta(S.PREPARE_ABORT, 7)),
               TxnRecord("c", _meta(S.PREPARE_ABORT, 1, partitions=frozenset())),
               TxnRecord("d", _meta(S.COMPLETE_COMMIT, 1, partitions=frozenset()))]
    result = coordinator.load_partition(0, records, 9, 1_000)
    work = {w.transactional_id: w for w in result.markers}
    assert set(work) == {"a", "b"}
    assert (work["a"].commit, work["a"].producer_epoch, work["a"].coordinator_epoch,
            work["a"].partitions) == (True, 2, 9, (("audit", 3), ORDERS))
    assert (work["b"].commit, work["b"].producer_epoch) == (False, 7)
    # "c" had no partitions: it completes at once
    (complete,) = result.writes
    assert complete.record.transactional_id == "c"
    assert complete.record.metadata is not None
    assert complete.record.metadata.state is S.COMPLETE_ABORT
    done = coordinator.markers_written(work["a"].token, 1_100)
    (write,) = done.writes
    assert write.record.metadata is not None
    assert write.record.metadata.state is S.COMPLETE_COMMIT
    coordinator.stored(write.token, 1_100)
    assert coordinator.describe(["a"])[0].state == "CompleteCommit"


def test_open_transactions_keep_their_deadline_from_their_start() -> None:
    coordinator = TransactionCoordinator(TransactionConfig(partitions=1))
    result = coordinator.load_partition(
        0, [TxnRecord("a", _meta(S.ONGOING, 3, start=10_000, timeout=5_000))], 1, 12_000)
    assert not result  # nothing due yet, nothing done at load
    assert coordinator.next_deadline() == 15_000
    expired = coordinator.expire(15_000)
    (abort,) = expired.writes
    assert abort.record.metadata is not None
    assert (abort.record.metadata.state, abort.record.metadata.producer_epoch) == (
        S.PREPARE_ABORT, 4)


def test_an_open_transaction_already_past_its_deadline_is_due_at_once() -> None:
    coordinator = TransactionCoordinator(TransactionConfig(partitions=1))
    coordinator.load_partition(
        0, [TxnRecord("a", _meta(S.ONGOING, 3, start=1_000, timeout=5_000))], 1, 60_000)
    assert coordinator.next_deadline() == 6_000
    assert len(coordinator.expire(60_000).writes) == 1


def test_bad_partitions_and_records_host_nothing() -> None:
    coordinator = TransactionCoordinator(TransactionConfig(partitions=4))
    partition = coordinator.partition_of(TID)
    with pytest.raises(ValueError):
        coordinator.load_partition(4, [], 1, 0)
    other = next(t for t in (f"x{i}" for i in range(50))
                 if coordinator.partition_of(t) != partition)
    with pytest.raises(ValueError, match="not in partition"):
        coordinator.load_partition(partition, [TxnRecord(other, None)], 1, 0)
    for state in (S.DEAD, S.PREPARE_EPOCH_FENCE):
        with pytest.raises(ValueError, match="never stored"):
            coordinator.load_partition(partition, [TxnRecord(TID, _meta(state))], 1, 0)
    assert coordinator.hosted_partitions() == frozenset()


def test_unload_answers_waiting_requests_and_forgets_the_partition() -> None:
    shell = Shell(auto_markers=False)
    partition = shell.coordinator.partition_of(TID)
    pid, epoch = shell.begin(TID)
    assert shell.end(TID, pid, epoch) is not None
    (work,) = shell.markers.values()
    shell.auto_store = False
    other = next(t for t in (f"x{i}" for i in range(50))
                 if shell.coordinator.partition_of(t) == partition)
    assert shell.init(other) is None
    (pending,) = shell.writes
    waiting = shell._token
    result = shell.unload(partition)
    assert [(r.token, r.code) for r in result.replies] == [(waiting, E.NOT_COORDINATOR)]
    assert not shell.coordinator.hosts(partition)
    assert shell.coordinator.next_deadline() is None
    # outcomes reported late are ignored
    assert not shell.coordinator.stored(pending, shell.now)
    assert not shell.coordinator.markers_written(work.token, shell.now)
    for reply in (shell.init(TID), shell.add(TID, pid, epoch), shell.end(TID, pid, epoch)):
        assert reply is not None and reply.code == E.NOT_COORDINATOR
    assert shell.coordinator.describe([TID])[0].error_code == E.NOT_COORDINATOR
    assert shell.coordinator.list_transactions().transactions == ()
    assert not shell.unload(partition)  # twice: nothing more


def test_reload_resumes_from_the_log_with_a_new_coordinator_epoch() -> None:
    shell = Shell(auto_markers=False)
    partition = shell.coordinator.partition_of(TID)
    pid, epoch = shell.begin(TID, [ORDERS, ("audit", 0)])
    assert shell.end(TID, pid, epoch) is not None
    (before,) = shell.markers.values()
    shell.unload(partition)
    result = shell.load(partition)
    (after,) = result.markers
    assert after.token != before.token
    assert after.coordinator_epoch == before.coordinator_epoch + 1
    assert (after.producer_id, after.producer_epoch, after.commit, after.partitions) == (
        before.producer_id, before.producer_epoch, True, before.partitions)
    retry = shell.end(TID, pid, epoch)
    assert retry is not None and retry.code == E.CONCURRENT_TRANSACTIONS
    shell.markers_done(after.token)
    retry = shell.end(TID, pid, epoch)
    assert retry is not None and retry.code == E.NONE


def test_loading_a_hosted_partition_replaces_it() -> None:
    shell = Shell()
    partition = shell.coordinator.partition_of(TID)
    shell.begin(TID)
    shell.auto_store = False
    assert shell.init(TID) is None  # a fence, waiting for its write
    waiting = shell._token
    result = shell.load(partition)
    assert [(r.token, r.code) for r in result.replies] == [(waiting, E.NOT_COORDINATOR)]
    assert shell.state(TID) == "Ongoing"


def test_a_restart_rebuilds_everything_stored() -> None:
    shell = Shell()
    tids = [f"app-{i}" for i in range(12)]
    for i, tid in enumerate(tids):
        pid, epoch = shell.begin(tid, [("t", i)])
        if i % 3 == 1:
            shell.end(tid, pid, epoch, commit=bool(i % 2))
        elif i % 3 == 2:
            shell.init(tid)
    before = shell.coordinator.describe(tids)
    shell.restart()
    assert shell.coordinator.describe(tids) == before


def test_records_carry_wall_clock_times_and_load_brings_them_back() -> None:
    shell = Shell(auto_markers=False)
    wall = 1_700_000_000_000
    shell.coordinator.set_wall_clock(wall + shell.now, shell.now)
    partition = shell.coordinator.partition_of(TID)
    start = shell.now
    shell.begin(TID, timeout_ms=5_000)
    meta = shell.log[partition][-1].metadata
    assert meta is not None and (meta.start_ms, meta.update_ms) == (wall + start, wall + start)
    (d,) = shell.coordinator.describe([TID])
    assert d.start_ms == wall + start
    # a new broker whose monotonic clock reads differently
    coordinator = TransactionCoordinator(shell.config)
    coordinator.set_wall_clock(wall + start + 2_000, 50)  # 2 s later on the wall clock
    coordinator.load_partition(partition, shell.log[partition], 2, 50)
    assert coordinator.next_deadline() == 50 + 3_000
    assert coordinator.describe([TID])[0].start_ms == wall + start
