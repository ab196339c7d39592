"""Timeouts, transactional-id expiry and retries on a simulated clock; write failures
revert what they would have changed."""

from __future__ import annotations

import pytest

from groupwire.broker.transactions import TransactionConfig, TxnState, write_error_code
from groupwire.protocol.errors import ErrorCode
from tests.unit.transactions.shell import TIMEOUT, Shell

E = ErrorCode
TID = "app-1"
ORDERS = ("orders", 0)
AUDIT = ("audit", 1)


def test_an_open_transaction_past_its_timeout_is_aborted_and_its_producer_fenced() -> None:
    shell = Shell(auto_markers=False)
    start = shell.now
    pid, epoch = shell.begin(TID, [ORDERS], timeout_ms=5_000)
    assert shell.coordinator.next_deadline() == start + 5_000
    shell.now = start + 4_999
    assert not shell.expire()
    assert shell.state(TID) == "Ongoing"
    shell.now = start + 5_000
    result = shell.expire()
    (write,) = result.writes
    assert result.replies == ()
    meta = write.record.metadata
    assert meta is not None
    assert (meta.state, meta.producer_epoch, meta.last_producer_epoch) == (
        TxnState.PREPARE_ABORT, epoch + 1, -1)
    assert shell.transitions[-2:] == [(TID, TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE),
                                      (TID, TxnState.PREPARE_EPOCH_FENCE, TxnState.PREPARE_ABORT)]
    (work,) = shell.markers.values()
    assert (work.producer_id, work.producer_epoch, work.commit, work.partitions) == (
        pid, epoch + 1, False, (ORDERS,))
    # the old producer is fenced from now on, its commit included
    for reply in (shell.end(TID, pid, epoch), shell.add(TID, pid, epoch, [AUDIT])):
        assert reply is not None and reply.code == E.PRODUCER_FENCED
    shell.markers_done(work.token)
    assert shell.state(TID) == "CompleteAbort"
    retry = shell.end(TID, pid, epoch, commit=False)
    assert retry is not None and retry.code == E.PRODUCER_FENCED
    counters = shell.coordinator.counters()
    assert (counters.aborts_timeout, counters.commits, counters.producers_fenced) == (1, 0, 3)
    # its own re-initialization (KIP-360, naming its old epoch) is fenced too
    zombie = shell.init(TID, pid=pid, epoch=epoch)
    assert zombie is not None and zombie.code == E.PRODUCER_FENCED


def test_adding_partitions_does_not_extend_the_timeout() -> None:
    shell = Shell()
    start = shell.now
    pid, epoch = shell.begin(TID, [ORDERS], timeout_ms=5_000)
    shell.now += 4_000
    assert shell.add(TID, pid, epoch, [AUDIT]) is not None
    assert shell.coordinator.next_deadline() == start + 5_000
    shell.advance(1_000)
    assert shell.state(TID) == "CompleteAbort"


def test_committing_in_time_cancels_the_timeout() -> None:
    shell = Shell()
    pid, epoch = shell.begin(TID, timeout_ms=5_000)
    shell.now += 4_000
    assert shell.end(TID, pid, epoch) is not None
    config = shell.config
    assert shell.coordinator.next_deadline() == shell.now + config.transactional_id_expiration_ms
    shell.advance(10_000)
    assert shell.state(TID) == "CompleteCommit"


def test_idle_ids_expire_after_their_last_update() -> None:
    config = TransactionConfig(partitions=4, transactional_id_expiration_ms=60_000)
    shell = Shell(config, auto_store=False)
    token = shell.token()
    shell.run(shell.coordinator.init_producer_id(token, TID, 10_000, -1, -1, 42, shell.now))
    shell.store(next(iter(shell.writes)))
    created = shell.now
    assert shell.coordinator.next_deadline() == created + 60_000
    shell.now = created + 59_999
    assert not shell.expire()
    shell.now = created + 60_000
    result = shell.expire()
    (tombstone,) = result.writes
    assert tombstone.record.metadata is None and tombstone.record.to_kv()[1] is None
    # while the tombstone is being written the id is busy
    busy = shell.init(TID)
    assert busy is not None and busy.code == E.CONCURRENT_TRANSACTIONS
    stored = shell.store(tombstone.token)
    assert stored.transitions == ((TID, TxnState.EMPTY, TxnState.DEAD),)
    assert shell.state(TID) == "TRANSACTIONAL_ID_NOT_FOUND"
    assert shell.coordinator.counters().ids_expired == 1
    gone = shell.add(TID, 42, 0)
    assert gone is not None and gone.code == E.INVALID_PRODUCER_ID_MAPPING
    # a new producer starts it again, with a new producer id
    shell.auto_store = True
    again = shell.init(TID, fresh=43)
    assert again is not None and (again.producer_id, again.producer_epoch) == (43, 0)


def test_open_and_prepared_transactions_never_expire_as_ids() -> None:
    config = TransactionConfig(partitions=4, transactional_id_expiration_ms=1_000)
    shell = Shell(config, auto_markers=False)
    pid, epoch = shell.begin(TID, timeout_ms=500_000)
    shell.advance(10_000)
    assert shell.state(TID) == "Ongoing"
    assert shell.end(TID, pid, epoch) is not None
    shell.advance(10_000)
    assert shell.state(TID) == "PrepareCommit"
    assert shell.coordinator.next_deadline() is None  # waiting on the markers only
    (work,) = shell.markers
    shell.markers_done(work)
    completed = shell.now
    assert shell.coordinator.next_deadline() == completed + 1_000
    shell.advance(1_000)
    assert shell.state(TID) == "TRANSACTIONAL_ID_NOT_FOUND"


def test_markers_that_fail_on_some_partitions_are_sent_again_after_the_backoff() -> None:
    config = TransactionConfig(partitions=4, retry_backoff_ms=200)
    shell = Shell(config, auto_markers=False)
    pid, epoch = shell.begin(TID, [ORDERS, AUDIT, ("x", 9)])
    assert shell.end(TID, pid, epoch) is not None
    (first,) = shell.markers.values()
    result = shell.markers_fail(first.token, [AUDIT, ("not-in-the-job", 0)])
    assert not result
    assert shell.coordinator.next_deadline() == shell.now + 200
    again = shell.init(TID)
    assert again is not None and again.code == E.CONCURRENT_TRANSACTIONS
    shell.now += 199
    assert not shell.expire()
    shell.now += 1
    result = shell.expire()
    (second,) = result.markers
    assert second.token != first.token
    assert (second.partitions, second.commit, second.producer_epoch) == ((AUDIT,), True, epoch)
    shell.markers_done(second.token)
    assert shell.state(TID) == "CompleteCommit"
    # a report for a job already settled is ignored
    assert not shell.coordinator.markers_written(first.token, shell.now)


def test_a_failed_init_write_leaves_no_trace_of_a_new_id() -> None:
    shell = Shell(auto_store=False)
    token = shell.token()
    result = shell.run(shell.coordinator.init_producer_id(token, TID, 10_000, -1, -1, 42,
                                                          shell.now))
    failed = shell.fail(result.writes[0].token, E.NOT_COORDINATOR)
    assert [(r.token, r.code, r.producer_id) for r in failed.replies] == [
        (token, E.NOT_COORDINATOR, -1)]
    assert shell.state(TID) == "TRANSACTIONAL_ID_NOT_FOUND"
    assert shell.coordinator.next_deadline() is None
    assert not shell.coordinator.stored(result.writes[0].token, shell.now)  # settled already


def test_a_failed_init_bump_keeps_the_stored_epoch() -> None:
    shell = Shell()
    first = shell.init(TID)
    assert first is not None
    shell.auto_store = False
    assert shell.init(TID) is None
    (token,) = shell.writes
    shell.fail(token)
    assert shell.replies[shell._token].code == E.COORDINATOR_NOT_AVAILABLE
    (d,) = shell.coordinator.describe([TID])
    assert (d.producer_epoch, d.state) == (first.producer_epoch, "Empty")
    ok = shell.add(TID, first.producer_id, first.producer_epoch)
    assert ok is None  # accepted, waiting for its write: the old epoch is still current


def test_a_failed_add_keeps_the_transaction_as_stored() -> None:
    shell = Shell()
    pid, epoch = shell.begin(TID, [ORDERS])
    shell.auto_store = False
    assert shell.add(TID, pid, epoch, [AUDIT]) is None
    (token,) = shell.writes
    shell.fail(token)
    (d,) = shell.coordinator.describe([TID])
    assert (d.state, d.partitions) == ("Ongoing", (ORDERS,))
    init = Shell()
    reply = init.init(TID)
    assert reply is not None
    init.auto_store = False
    assert init.add(TID, reply.producer_id, reply.producer_epoch) is None
    init.fail(next(iter(init.writes)))
    (d,) = init.coordinator.describe([TID])
    assert (d.state, d.start_ms, d.partitions) == ("Empty", -1, ())


def test_a_failed_end_txn_leaves_it_open_to_be_ended_again() -> None:
    shell = Shell()
    pid, epoch = shell.begin(TID)
    shell.auto_store = False
    assert shell.end(TID, pid, epoch) is None
    (token,) = shell.writes
    result = shell.fail(token, E.NOT_COORDINATOR)
    assert result.markers == () and [r.code for r in result.replies] == [E.NOT_COORDINATOR]
    assert shell.state(TID) == "Ongoing"
    assert shell.coordinator.counters().commits == 0
    shell.auto_store = True
    again = shell.end(TID, pid, epoch, commit=False)
    assert again is not None and again.code == E.NONE
    assert shell.state(TID) == "CompleteAbort"


def test_a_failed_fence_keeps_the_old_producer_and_its_deadline() -> None:
    shell = Shell()
    start = shell.now
    _, epoch = shell.begin(TID, timeout_ms=5_000)
    shell.auto_store = False
    assert shell.init(TID) is None
    (token,) = shell.writes
    shell.fail(token)
    assert shell.replies[shell._token].code == E.COORDINATOR_NOT_AVAILABLE
    (d,) = shell.coordinator.describe([TID])
    assert (d.state, d.producer_epoch) == ("Ongoing", epoch)
    assert shell.coordinator.next_deadline() == start + 5_000
    assert shell.coordinator.counters().aborts_fenced == 0


def test_the_coordinators_own_failed_writes_are_tried_again_after_the_backoff() -> None:
    config = TransactionConfig(partitions=4, retry_backoff_ms=300,
                               transactional_id_expiration_ms=100_000)
    shell = Shell(config, auto_store=False, auto_markers=False)
    shell.auto_store = True
    shell.begin(TID, timeout_ms=1_000)
    shell.auto_store = False
    # the timeout's abort fails: tried again 300 ms later
    shell.now += 1_000
    (abort,) = shell.expire().writes
    shell.fail(abort.token)
    assert shell.state(TID) == "Ongoing"
    assert shell.coordinator.next_deadline() == shell.now + 300
    shell.now += 300
    (abort,) = shell.expire().writes
    shell.store(abort.token)
    # the Complete record after the markers fails: tried again too
    (work,) = shell.markers.values()
    (complete,) = shell.markers_done(work.token).writes
    shell.fail(complete.token)
    assert shell.state(TID) == "PrepareAbort"
    assert shell.coordinator.next_deadline() == shell.now + 300
    shell.now += 300
    (complete,) = shell.expire().writes
    assert shell.markers == {}  # the markers are not sent again
    shell.store(complete.token)
    assert shell.state(TID) == "CompleteAbort"
    # the tombstone fails: tried again
    shell.now += 100_000
    (tombstone,) = shell.expire().writes
    shell.fail(tombstone.token)
    assert shell.state(TID) == "CompleteAbort"
    assert shell.coordinator.next_deadline() == shell.now + 300
    shell.now += 300
    (tombstone,) = shell.expire().writes
    shell.store(tombstone.token)
    assert shell.state(TID) == "TRANSACTIONAL_ID_NOT_FOUND"
    counters = shell.coordinator.counters()
    assert (counters.aborts_timeout, counters.ids_expired) == (1, 1)


def test_one_deadline_for_many_ids() -> None:
    shell = Shell()
    tids = [f"app-{i}" for i in range(20)]
    for i, tid in enumerate(tids):
        shell.now += 10
        shell.begin(tid, timeout_ms=10_000 - 50 * i)
    assert shell.coordinator.next_deadline() == min(
        1_000 + 10 * (i + 1) + 10_000 - 50 * i for i in range(20))
    shell.advance(10_000)
    assert {shell.state(t) for t in tids} == {"CompleteAbort"}
    assert shell.coordinator.counters().aborts_timeout == 20


def test_the_timer_queue_stays_bounded_by_the_ids() -> None:
    """Each write moves an id's deadline; the queue must not keep every old one (an idle
    id's is a week away, so none would surface for a week)."""
    shell = Shell()
    pid, epoch = shell.begin(TID)
    for _ in range(2_000):
        shell.now += 1
        assert shell.end(TID, pid, epoch) is not None
        assert shell.add(TID, pid, epoch) is not None
    assert len(shell.coordinator._heap) <= 2 * 1 + 64 + 1
    assert shell.coordinator.next_deadline() == shell.now + TIMEOUT


def test_write_failures_need_a_code_and_map_like_kafkas() -> None:
    shell = Shell(auto_store=False)
    token = shell.token()
    result = shell.run(shell.coordinator.init_producer_id(token, TID, 10_000, -1, -1, 42,
                                                          shell.now))
    with pytest.raises(ValueError):
        shell.coordinator.write_failed(result.writes[0].token, E.NONE, shell.now)
    assert write_error_code(E.NOT_LEADER_OR_FOLLOWER) == E.NOT_COORDINATOR
    assert write_error_code(E.KAFKA_STORAGE_ERROR) == E.NOT_COORDINATOR
    assert write_error_code(E.REQUEST_TIMED_OUT) == E.COORDINATOR_NOT_AVAILABLE
    assert write_error_code(E.NOT_ENOUGH_REPLICAS) == E.COORDINATOR_NOT_AVAILABLE
    assert write_error_code(E.MESSAGE_TOO_LARGE) == E.UNKNOWN_SERVER_ERROR
    assert write_error_code(E.NOT_COORDINATOR) == E.NOT_COORDINATOR
