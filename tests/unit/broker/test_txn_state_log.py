"""``__transaction_state`` compacted (issue 27): many transactions of a few transactional
ids compact to one record per live id, tombstoned ids go, and a replay gives the latest
record per id whether the compaction finished, was abandoned or failed half-way, with
writes going on between its steps. The topic may appear after the log object is made."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
import structlog

import groupwire.broker.compacted_log as compacted_log_module
from groupwire.broker.storage import (
    TRANSACTIONS_TOPIC,
    NoSuchPartitionError,
    StorageConfig,
    StorageError,
    TopicStore,
)
from groupwire.broker.storage.fileops import FileOps
from groupwire.broker.transactions import TxnMetadata, TxnRecord, TxnState
from groupwire.broker.txn_state_log import TxnStateLog
from groupwire.protocol.hashing import coordinator_partition
from groupwire.protocol.steps import Steps, run_steps

NOW = 1_795_573_208_092
PARTITIONS = 3
P = 1
IDS = [f"txn-{i}" for i in range(200) if coordinator_partition(f"txn-{i}", PARTITIONS) == P][:6]
"""Transactional ids the coordinator would keep in partition ``P``."""

STEPS = (TxnState.EMPTY, TxnState.ONGOING, TxnState.PREPARE_COMMIT,
         TxnState.COMPLETE_COMMIT)
"""The records of one committed transaction."""


class FaultyDisk(FileOps):
    """Every pwrite fails while ``failing`` is set."""

    def __init__(self) -> None:
        self.failing = False
        self.refused = 0

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        if self.failing:
            self.refused += 1
            raise OSError(errno.ENOSPC, "injected disk failure")
        return super().pwrite(fd, data, offset)


def _store(path: Path, file_ops: FileOps | None = None) -> TopicStore:
    return TopicStore(path, StorageConfig(offsets_partitions=1), file_ops=file_ops)


def _create_topic(store: TopicStore) -> None:
    """As ``TransactionRuntime`` makes it, on the first transactional FindCoordinator."""
    creation = store.begin_create_internal(TRANSACTIONS_TOPIC, PARTITIONS)
    try:
        store.build(creation)
    finally:
        store.finish(creation)


def _record(tid: str, state: TxnState, epoch: int, at: int) -> TxnRecord:
    ongoing = state not in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT)
    return TxnRecord(tid, TxnMetadata(
        producer_id=1000 + IDS.index(tid) if tid in IDS else 999, last_producer_id=-1,
        producer_epoch=epoch, last_producer_epoch=-1, timeout_ms=60_000, state=state,
        partitions=frozenset({("t", epoch % 4)}) if ongoing else frozenset(),
        start_ms=at if ongoing else -1, update_ms=at))


def _transactions(log: TxnStateLog, rounds: int) -> None:
    """``rounds`` committed transactions of every id, a record a write, as the runtime
    writes them."""
    for round_ in range(rounds):
        for tid in IDS:
            for i, state in enumerate(STEPS):
                at = NOW + 10 * round_ + i
                log.write(P, [_record(tid, state, round_, at)], at)


def _latest(records: list[TxnRecord]) -> dict[str, TxnRecord]:
    """What ``TransactionCoordinator.load_partition`` makes of records: the last per id."""
    latest: dict[str, TxnRecord] = {}
    for r in records:
        if r.metadata is None:
            latest.pop(r.transactional_id, None)
        else:
            latest[r.transactional_id] = r
    return latest


def _replayed(path: Path) -> tuple[dict[str, TxnRecord], int, int]:
    """After a restart: the latest record per id, how many records the replay read, and
    the offset the partition starts at."""
    store = _store(path)
    records = list(TxnStateLog(store).replay_partition(P))
    start = store.log(TRANSACTIONS_TOPIC, P).log_start_offset
    store.close()
    return _latest(records), len(records), start


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compacted_log_module, "SNAPSHOT_BATCH", 2)


def test_the_topic_made_after_the_log_is_learnt_when_first_used(tmp_path: Path) -> None:
    store = _store(tmp_path)
    log = TxnStateLog(store, compact_min_records=8)
    with pytest.raises(StorageError) as refused:
        log.write(P, [_record(IDS[0], TxnState.EMPTY, 0, NOW)], NOW)
    assert isinstance(refused.value, NoSuchPartitionError)
    assert not log.needs_compaction(P)
    _create_topic(store)
    _transactions(log, 2)  # 4 records of 6 ids, twice
    assert log.needs_compaction(P)
    assert not log.needs_compaction(0) and not log.needs_compaction(PARTITIONS - 1)
    assert list(log.replay_partition(0)) == []
    store.close()


def test_many_transactions_of_few_ids_compact_to_the_live_ones(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _create_topic(store)
    log = TxnStateLog(store, compact_min_records=50)
    _transactions(log, 5)
    log.write(P, [TxnRecord(IDS[0], None)], NOW + 100)  # expired
    before = _latest(list(log.replay_partition(P)))
    assert IDS[0] not in before and len(before) == len(IDS) - 1
    assert log.needs_compaction(P)

    drops: list[object] = []
    run_steps(log.compact_steps(P, drops.append))
    assert log.compactions == 1 and len(drops) == 1
    drop = drops[0]
    assert callable(drop)
    drop()  # the snapshot is durable: what precedes it goes
    assert not log.needs_compaction(P)
    plog = store.log(TRANSACTIONS_TOPIC, P)
    snapshot = list(store.scan(TRANSACTIONS_TOPIC, P, plog.log_start_offset))
    assert sorted(r.key for r in snapshot if r.key is not None) \
        == sorted(r.to_kv()[0] for r in before.values())  # one record per live id
    assert {r.timestamp_ms for r in snapshot} == {NOW + 43}  # each its last write's
    store.close()

    replayed, read, start = _replayed(tmp_path)
    assert start > 0
    assert replayed == before
    assert read == len(before)


@pytest.mark.usefixtures("small_batches")
def test_a_compaction_interleaved_with_writes_replays_the_latest_record_per_id(
        tmp_path: Path) -> None:
    store = _store(tmp_path)
    _create_topic(store)
    log = TxnStateLog(store, compact_min_records=50)
    _transactions(log, 5)
    drops: list[object] = []
    steps = log.compact_steps(P, drops.append)
    taken = _interleave(log, steps)
    assert taken == 3  # a step a batch of 2 ids
    assert log.compactions == 1 and len(drops) == 1
    expected = _latest(list(TxnStateLog(store).replay_partition(P)))
    assert set(expected) == {*IDS[1:], "late"} - {IDS[4]}
    drop = drops[0]
    assert callable(drop)
    drop()
    store.close()
    replayed, _, start = _replayed(tmp_path)
    assert start > 0
    assert replayed == expected
    assert replayed[IDS[1]].metadata == _record(IDS[1], TxnState.ONGOING, 9, NOW + 500).metadata


def _interleave(log: TxnStateLog, steps: Steps[None], stop_after: int | None = None) -> int:
    """Run ``steps``, writing between them: on ids whose snapshot batch is written
    (``IDS[0]``, ``IDS[1]``) and still to come (``IDS[4]``), and an id new since."""
    taken = 0
    while stop_after is None or taken < stop_after:
        try:
            next(steps)
        except StopIteration:
            break
        taken += 1
        if taken == 2:
            log.write(P, [TxnRecord(IDS[0], None), TxnRecord(IDS[4], None),
                          _record("late", TxnState.EMPTY, 0, NOW + 500)], NOW + 500)
            log.write(P, [_record(IDS[1], TxnState.ONGOING, 9, NOW + 500)], NOW + 500)
    return taken


@pytest.mark.usefixtures("small_batches")
def test_an_abandoned_compaction_replays_the_latest_record_per_id(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _create_topic(store)
    log = TxnStateLog(store, compact_min_records=50)
    _transactions(log, 5)
    steps = log.compact_steps(P, lambda drop: pytest.fail("abandoned: nothing to drop"))
    assert _interleave(log, steps, stop_after=2) == 2
    steps.close()  # the broker closing
    log.write(P, [_record(IDS[2], TxnState.ONGOING, 7, NOW + 600)], NOW + 600)
    assert log.compactions == 0
    expected = _latest(list(TxnStateLog(store).replay_partition(P)))
    meta = expected[IDS[2]].metadata
    assert IDS[0] not in expected and meta is not None and meta.producer_epoch == 7
    store.close()
    replayed, read, start = _replayed(tmp_path)
    assert (replayed, start) == (expected, 0)
    assert read > 5 * 4 * len(IDS)  # the history and the half snapshot are all there


@pytest.mark.usefixtures("small_batches")
def test_a_compaction_failing_half_way_is_abandoned_and_the_log_replays(
        tmp_path: Path) -> None:
    disk = FaultyDisk()
    store = _store(tmp_path, disk)
    _create_topic(store)
    log = TxnStateLog(store, compact_min_records=50)
    _transactions(log, 5)
    expected = _latest(list(TxnStateLog(store).replay_partition(P)))
    steps = log.compact_steps(P, lambda drop: pytest.fail("failed: nothing to drop"))
    next(steps)
    next(steps)  # one batch of the snapshot written
    disk.failing = True
    assert run_steps(steps) is None  # abandoned at its next batch, quietly
    assert disk.refused > 0 and log.compactions == 0
    store.close(sync=False)
    replayed, _, start = _replayed(tmp_path)
    assert (replayed, start) == (expected, 0)


def test_an_unreadable_record_is_logged_and_skipped(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _create_topic(store)
    log = TxnStateLog(store)
    log.write(P, [_record(IDS[0], TxnState.EMPTY, 0, NOW)], NOW)
    store.append_kv(TRANSACTIONS_TOPIC, P, [(b"\xc1 not msgpack", b"x", NOW)])
    log.write(P, [_record(IDS[1], TxnState.EMPTY, 0, NOW)], NOW)
    with structlog.testing.capture_logs() as logs:
        records = list(log.replay_partition(P))
    assert [r.transactional_id for r in records] == IDS[:2]
    assert [(e["event"], e["offset"]) for e in logs] == [("transaction_record_unreadable", 1)]
    store.close()


def test_a_write_is_one_batch_of_the_records_as_to_kv_encodes_them(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _create_topic(store)
    log = TxnStateLog(store)
    records = [_record(IDS[0], TxnState.ONGOING, 3, NOW), TxnRecord(IDS[1], None)]
    assert log.write(P, records, NOW + 1) == 0
    assert log.write(P, records[:1], NOW + 2) == 2
    stored = list(store.scan(TRANSACTIONS_TOPIC, P))
    assert [(s.key, s.value, s.timestamp_ms) for s in stored] == [
        (*records[0].to_kv(), NOW + 1), (*records[1].to_kv(), NOW + 1),
        (*records[0].to_kv(), NOW + 2)]
    store.close()
