"""InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn: each code, in Kafka's
order of checks, and replies that wait for their record."""

from __future__ import annotations

import pytest

from groupwire.broker.transactions import (
    MAX_EPOCH,
    NO_START,
    TransactionConfig,
    TxnMetadata,
    TxnRecord,
    TxnState,
)
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.hashing import coordinator_partition
from tests.unit.transactions.shell import TIMEOUT, Shell

E = ErrorCode
TID = "app-1"
ORDERS = ("orders", 0)


# --- InitProducerId ---------------------------------------------------------------------

def test_a_new_id_gets_the_fresh_producer_id_once_its_record_is_stored() -> None:
    shell = Shell(auto_store=False)
    token = shell.token()
    result = shell.coordinator.init_producer_id(token, TID, 30_000, -1, -1, 777, shell.now)
    assert result.replies == ()
    (write,) = result.writes
    assert write.partition == shell.coordinator.partition_of(TID)
    meta = write.record.metadata
    assert meta is not None and write.record.transactional_id == TID
    assert (meta.producer_id, meta.producer_epoch, meta.state) == (777, 0, TxnState.EMPTY)
    assert (meta.timeout_ms, meta.start_ms, meta.partitions) == (30_000, NO_START, frozenset())
    assert shell.state(TID) == "TRANSACTIONAL_ID_NOT_FOUND"  # nothing stored yet
    shell.run(result)
    stored = shell.store(write.token)
    assert [(r.token, r.code, r.producer_id, r.producer_epoch) for r in stored.replies] == [
        (token, E.NONE, 777, 0)]
    assert stored.transitions == ((TID, TxnState.EMPTY, TxnState.EMPTY),)
    assert shell.state(TID) == "Empty"


@pytest.mark.parametrize("timeout", [0, -5, 900_001])
def test_a_timeout_out_of_range_is_refused(timeout: int) -> None:
    shell = Shell()
    reply = shell.init(TID, timeout)
    assert reply is not None and reply.code == E.INVALID_TRANSACTION_TIMEOUT
    assert (reply.producer_id, reply.producer_epoch) == (-1, -1)
    ok = shell.init(TID, 900_000)
    assert ok is not None and ok.code == E.NONE


def test_bad_requests_and_unhosted_ids() -> None:
    shell = Shell(host=[p for p in range(4) if p != coordinator_partition(TID, 4)])
    assert shell.init("") is not None and shell.replies[shell._token].code == E.INVALID_REQUEST
    for pid, epoch in ((5, -1), (-1, 0)):
        reply = shell.init("other", pid=pid, epoch=epoch)
        assert reply is not None and reply.code == E.INVALID_REQUEST
    for reply in (shell.init(TID), shell.add(TID, 1, 0), shell.add_offsets(TID, 1, 0, "g"),
                  shell.end(TID, 1, 0)):
        assert reply is not None and reply.code == E.NOT_COORDINATOR
    with pytest.raises(ValueError):
        shell.coordinator.init_producer_id(99, TID, 1000, -1, -1, -1, shell.now)


def test_each_init_bumps_the_epoch_of_the_same_producer_id() -> None:
    shell = Shell()
    first = shell.init(TID)
    second = shell.init(TID, 5_000)
    assert first is not None and second is not None
    assert second.producer_id == first.producer_id
    assert second.producer_epoch == first.producer_epoch + 1
    (d,) = shell.coordinator.describe([TID])
    assert d.timeout_ms == 5_000  # the new call's timeout


def test_kip360_current_epoch_bumps_a_retry_of_it_does_not_and_a_stale_one_is_fenced() -> None:
    shell = Shell()
    first = shell.init(TID)
    assert first is not None
    pid, epoch = first.producer_id, first.producer_epoch
    bumped = shell.init(TID, pid=pid, epoch=epoch)
    assert bumped is not None and (bumped.code, bumped.producer_epoch) == (E.NONE, epoch + 1)
    retry = shell.init(TID, pid=pid, epoch=epoch)  # its answer was lost: same call again
    assert retry is not None and (retry.code, retry.producer_epoch) == (E.NONE, epoch + 1)
    # a new producer (no id given) bumps and forgets the last epoch: the old call is fenced
    other = shell.init(TID)
    assert other is not None and other.producer_epoch == epoch + 2
    stale = shell.init(TID, pid=pid, epoch=epoch)
    assert stale is not None and stale.code == E.PRODUCER_FENCED
    unknown = shell.init(TID, pid=pid + 50, epoch=0)
    assert unknown is not None and unknown.code == E.PRODUCER_FENCED
    assert shell.coordinator.counters().producers_fenced == 2


def test_init_while_a_transaction_is_open_fences_it_and_asks_the_client_to_retry() -> None:
    shell = Shell(auto_markers=False)
    pid, epoch = shell.begin(TID, [ORDERS, ("audit", 2)])
    reply = shell.init(TID)
    assert reply is not None and reply.code == E.CONCURRENT_TRANSACTIONS
    assert (reply.producer_id, reply.producer_epoch) == (-1, -1)
    assert shell.state(TID) == "PrepareAbort"
    assert shell.transitions[-2:] == [(TID, TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE),
                                      (TID, TxnState.PREPARE_EPOCH_FENCE, TxnState.PREPARE_ABORT)]
    (work,) = shell.markers.values()
    assert (work.producer_id, work.producer_epoch, work.commit) == (pid, epoch + 1, False)
    assert work.partitions == (("audit", 2), ORDERS)
    # the fenced producer
    for late in (shell.add(TID, pid, epoch), shell.end(TID, pid, epoch)):
        assert late is not None and late.code == E.PRODUCER_FENCED
    # while the markers are out, the new producer's retry waits
    again = shell.init(TID)
    assert again is not None and again.code == E.CONCURRENT_TRANSACTIONS
    shell.markers_done(work.token)
    assert shell.state(TID) == "CompleteAbort"
    final = shell.init(TID)
    assert final is not None and (final.code, final.producer_epoch) == (E.NONE, epoch + 2)
    assert shell.coordinator.counters().aborts_fenced == 1


def test_init_while_a_write_is_out_or_markers_are_pending() -> None:
    shell = Shell(auto_store=False)
    token = shell.token()
    shell.run(shell.coordinator.init_producer_id(token, TID, TIMEOUT, -1, -1, 55, shell.now))
    for reply in (shell.init(TID), shell.add(TID, 55, 0), shell.end(TID, 55, 0)):
        assert reply is not None and reply.code == E.CONCURRENT_TRANSACTIONS
    assert shell.coordinator.describe([TID])[0].error_code == E.TRANSACTIONAL_ID_NOT_FOUND


def _load(shell: Shell, meta: TxnMetadata, tid: str = TID) -> None:
    partition = shell.coordinator.partition_of(tid)
    shell.log[partition].append(TxnRecord(tid, meta))
    shell.load(partition)


def _idle(pid: int, epoch: int, last_pid: int | None = None, last_epoch: int = -1,
          state: TxnState = TxnState.COMPLETE_COMMIT) -> TxnMetadata:
    return TxnMetadata(pid, pid if last_pid is None else last_pid, epoch, last_epoch, TIMEOUT,
                       state, frozenset(), 500, 900)


def test_exhausted_epochs_move_to_the_fresh_producer_id() -> None:
    shell = Shell()
    _load(shell, _idle(10, MAX_EPOCH - 2))
    last = shell.init(TID, fresh=901)
    assert last is not None and (last.producer_id, last.producer_epoch) == (10, MAX_EPOCH - 1)
    rotated = shell.init(TID, pid=10, epoch=MAX_EPOCH - 1, fresh=902)
    assert rotated is not None and (rotated.producer_id, rotated.producer_epoch) == (902, 0)
    # a retry of that call (answer lost) names the old id and is answered the same
    retry = shell.init(TID, pid=10, epoch=MAX_EPOCH - 1, fresh=903)
    assert retry is not None and (retry.code, retry.producer_id, retry.producer_epoch) == (
        E.NONE, 902, 0)
    (d,) = shell.coordinator.describe([TID])
    assert (d.producer_id, d.producer_epoch) == (902, 0)
    # the old id with an epoch that is not exhausted is a zombie
    zombie = shell.init(TID, pid=10, epoch=5)
    assert zombie is not None and zombie.code == E.PRODUCER_FENCED


def test_exhausted_epoch_without_a_producer_given_also_rotates() -> None:
    shell = Shell()
    _load(shell, _idle(10, MAX_EPOCH - 1))
    reply = shell.init(TID, fresh=950)
    assert reply is not None and (reply.producer_id, reply.producer_epoch) == (950, 0)
    partition = shell.coordinator.partition_of(TID)
    meta = shell.log[partition][-1].metadata
    assert meta is not None and (meta.last_producer_id, meta.last_producer_epoch) == (10, -1)


def test_an_open_transaction_at_the_last_epoch_can_still_be_fenced() -> None:
    shell = Shell(auto_markers=False)
    _load(shell, TxnMetadata(10, 10, MAX_EPOCH - 1, -1, TIMEOUT, TxnState.ONGOING,
                             frozenset({ORDERS}), shell.now, shell.now))
    reply = shell.init(TID)
    assert reply is not None and reply.code == E.CONCURRENT_TRANSACTIONS
    (work,) = shell.markers.values()
    assert work.producer_epoch == MAX_EPOCH
    shell.markers_done(work.token)
    after = shell.init(TID, fresh=960)
    assert after is not None and (after.producer_id, after.producer_epoch) == (960, 0)


def test_prepared_transactions_answer_init_concurrent() -> None:
    shell = Shell(auto_markers=False)
    pid, epoch = shell.begin(TID)
    assert shell.end(TID, pid, epoch) is not None
    reply = shell.init(TID)
    assert reply is not None and reply.code == E.CONCURRENT_TRANSACTIONS
    assert shell.state(TID) == "PrepareCommit"


# --- AddPartitionsToTxn / AddOffsetsToTxn ---------------------------------------------

def test_add_partitions_checks_in_kafkas_order() -> None:
    shell = Shell()
    unknown = shell.add(TID, 1, 0)
    assert unknown is not None and unknown.code == E.INVALID_PRODUCER_ID_MAPPING
    init = shell.init(TID)
    assert init is not None
    pid, epoch = init.producer_id, init.producer_epoch
    for reply, code in ((shell.add(TID, pid + 1, epoch), E.INVALID_PRODUCER_ID_MAPPING),
                        (shell.add(TID, pid, epoch + 1), E.PRODUCER_FENCED),
                        (shell.add(TID, pid, epoch - 1), E.PRODUCER_FENCED)):
        assert reply is not None and reply.code == code
    assert shell.state(TID) == "Empty"


def test_the_first_add_starts_the_transaction_and_later_ones_keep_its_start() -> None:
    shell = Shell(auto_store=False)
    shell.auto_store = True
    init = shell.init(TID)
    assert init is not None
    pid, epoch = init.producer_id, init.producer_epoch
    shell.auto_store = False
    start = shell.now
    token = shell.token()
    result = shell.run(shell.coordinator.add_partitions(token, TID, pid, epoch, [ORDERS],
                                                        shell.now))
    assert result.replies == () and len(result.writes) == 1
    assert token not in shell.replies
    shell.store(result.writes[0].token)
    assert shell.replies[token].code == E.NONE
    assert shell.state(TID) == "Ongoing"
    shell.now += 500
    # nothing new: answered at once, nothing written
    token = shell.token()
    result = shell.run(shell.coordinator.add_partitions(token, TID, pid, epoch, [ORDERS],
                                                        shell.now))
    assert result.writes == () and [r.code for r in result.replies] == [E.NONE]
    shell.auto_store = True
    assert shell.add(TID, pid, epoch, [("audit", 1)]) is not None
    (d,) = shell.coordinator.describe([TID])
    assert d.start_ms == start and d.partitions == (("audit", 1), ORDERS)


def test_add_while_its_previous_write_is_out_is_concurrent() -> None:
    shell = Shell()
    init = shell.init(TID)
    assert init is not None
    shell.auto_store = False
    first = shell.add(TID, init.producer_id, init.producer_epoch)
    assert first is None
    second = shell.add(TID, init.producer_id, init.producer_epoch, [("x", 1)])
    assert second is not None and second.code == E.CONCURRENT_TRANSACTIONS


def test_add_after_a_completed_transaction_begins_a_new_one() -> None:
    shell = Shell()
    pid, epoch = shell.begin(TID)
    assert shell.end(TID, pid, epoch) is not None
    assert shell.state(TID) == "CompleteCommit"
    shell.now += 1_234
    reply = shell.add(TID, pid, epoch, [("other", 3)])
    assert reply is not None and reply.code == E.NONE
    (d,) = shell.coordinator.describe([TID])
    assert (d.state, d.start_ms, d.partitions) == ("Ongoing", shell.now, (("other", 3),))


def test_add_offsets_adds_the_groups_offsets_partition() -> None:
    config = TransactionConfig(partitions=4, offsets_partitions=50)
    shell = Shell(config)
    init = shell.init(TID)
    assert init is not None
    reply = shell.add_offsets(TID, init.producer_id, init.producer_epoch, "test-group")
    assert reply is not None and reply.code == E.NONE
    (d,) = shell.coordinator.describe([TID])
    assert d.partitions == (("__consumer_offsets", 12),)  # Kafka places test-group on 12


# --- EndTxn -----------------------------------------------------------------------------

def test_commit_stores_the_decision_answers_then_sends_markers_then_completes() -> None:
    shell = Shell(auto_markers=False)
    pid, epoch = shell.begin(TID, [ORDERS, ("audit", 0)])
    shell.auto_store = False
    token = shell.token()
    result = shell.run(shell.coordinator.end_txn(token, TID, pid, epoch, True, shell.now))
    assert result.replies == () and result.markers == ()
    (write,) = result.writes
    assert write.record.metadata is not None
    assert write.record.metadata.state is TxnState.PREPARE_COMMIT
    stored = shell.store(write.token)
    assert [(r.token, r.code, r.producer_id, r.producer_epoch) for r in stored.replies] == [
        (token, E.NONE, pid, epoch)]
    (work,) = stored.markers
    partition = shell.coordinator.partition_of(TID)
    assert (work.transactional_id, work.producer_id, work.producer_epoch, work.commit,
            work.coordinator_epoch, work.partitions) == (
        TID, pid, epoch, True, shell.coordinator_epochs[partition],
        (("audit", 0), ORDERS))
    assert shell.coordinator.next_deadline() is None or shell.state(TID) == "PrepareCommit"
    done = shell.markers_done(work.token)
    (complete,) = done.writes
    assert complete.record.metadata is not None
    assert complete.record.metadata.state is TxnState.COMPLETE_COMMIT
    assert complete.record.metadata.partitions == frozenset()
    shell.store(complete.token)
    (d,) = shell.coordinator.describe([TID])
    assert (d.state, d.partitions) == ("CompleteCommit", ())
    assert shell.coordinator.counters().commits == 1


@pytest.mark.parametrize("commit", [True, False])
def test_retries_of_end_txn(commit: bool) -> None:
    shell = Shell(auto_markers=False)
    pid, epoch = shell.begin(TID)
    first = shell.end(TID, pid, epoch, commit)
    assert first is not None and first.code == E.NONE
    same = shell.end(TID, pid, epoch, commit)
    other = shell.end(TID, pid, epoch, not commit)
    assert same is not None and same.code == E.CONCURRENT_TRANSACTIONS
    assert other is not None and other.code == E.INVALID_TXN_STATE
    (work,) = shell.markers.values()
    assert work.commit is commit
    shell.markers_done(work.token)
    same = shell.end(TID, pid, epoch, commit)
    other = shell.end(TID, pid, epoch, not commit)
    assert same is not None and (same.code, same.producer_id) == (E.NONE, pid)
    assert other is not None and other.code == E.INVALID_TXN_STATE


def test_end_txn_refusals() -> None:
    shell = Shell()
    unknown = shell.end(TID, 1, 0)
    assert unknown is not None and unknown.code == E.INVALID_PRODUCER_ID_MAPPING
    init = shell.init(TID)
    assert init is not None
    pid, epoch = init.producer_id, init.producer_epoch
    empty = shell.end(TID, pid, epoch)
    assert empty is not None and empty.code == E.INVALID_TXN_STATE
    wrong_pid = shell.end(TID, pid + 1, epoch)
    assert wrong_pid is not None and wrong_pid.code == E.INVALID_PRODUCER_ID_MAPPING
    assert shell.add(TID, pid, epoch) is not None
    for stale in (epoch - 1, epoch + 1):
        reply = shell.end(TID, pid, stale)
        assert reply is not None and reply.code == E.PRODUCER_FENCED
    assert shell.state(TID) == "Ongoing"


def test_a_transaction_without_partitions_completes_without_markers() -> None:
    shell = Shell(auto_markers=False)
    init = shell.init(TID)
    assert init is not None
    added = shell.add(TID, init.producer_id, init.producer_epoch, [])
    assert added is not None and added.code == E.NONE and shell.state(TID) == "Ongoing"
    reply = shell.end(TID, init.producer_id, init.producer_epoch, False)
    assert reply is not None and reply.code == E.NONE
    assert shell.markers == {} and shell.marker_history == []
    assert shell.state(TID) == "CompleteAbort"


# --- reads and counters -------------------------------------------------------------------

def test_describe_and_list() -> None:
    shell = Shell(host=[coordinator_partition(t, 4) for t in ("app-1", "app-2")])
    pid1, _ = shell.begin("app-1")
    init2 = shell.init("app-2")
    assert init2 is not None
    unhosted = next(t for t in ("t0", "t1", "t2", "orders")
                    if not shell.coordinator.hosts(coordinator_partition(t, 4)))
    missing = next(t for t in (f"x{i}" for i in range(100))
                   if shell.coordinator.hosts(coordinator_partition(t, 4)))
    described = shell.coordinator.describe(["app-1", missing, unhosted, ""])
    assert [d.error_code for d in described] == [
        E.NONE, E.TRANSACTIONAL_ID_NOT_FOUND, E.NOT_COORDINATOR, E.INVALID_REQUEST]
    d = described[0]
    assert (d.state, d.producer_id, d.producer_epoch, d.timeout_ms, d.partitions) == (
        "Ongoing", pid1, 0, TIMEOUT, (ORDERS,))
    everything = shell.coordinator.list_transactions()
    assert [(t.transactional_id, t.state) for t in everything.transactions] == [
        ("app-1", "Ongoing"), ("app-2", "Empty")]
    filtered = shell.coordinator.list_transactions(["Ongoing", "Bogus", "ongoing"])
    assert [t.transactional_id for t in filtered.transactions] == ["app-1"]
    assert filtered.unknown_state_filters == ("Bogus", "ongoing")
    by_pid = shell.coordinator.list_transactions(producer_id_filters=[init2.producer_id])
    assert [t.transactional_id for t in by_pid.transactions] == ["app-2"]
    assert shell.coordinator.list_transactions(["Empty"], [pid1]).transactions == ()
