"""``__consumer_offsets`` written in steps (issue 14): a large OffsetCommit's batch is
prepared ahead and appended whole, byte for byte what ``write`` appends; compaction
writes its snapshot a batch a step while commits and tombstones go on, and the log
replays to the live keys whether it finished, was abandoned or failed half-way."""

from __future__ import annotations

from pathlib import Path

import pytest

import groupwire.broker.offsets_log as offsets_log_module
from groupwire.broker.coordinator import (
    GroupDeleteRecord,
    GroupRecord,
    OffsetCommitRecord,
    OffsetDeleteRecord,
)
from groupwire.broker.coordinator.records import OffsetRecordEncoder
from groupwire.broker.offsets_log import OFFSETS_TOPIC, OffsetsLog
from groupwire.broker.storage import StorageConfig, TopicStore
from groupwire.broker.storage.fileops import FileOps
from groupwire.protocol.batches import BatchRecord, encode_batch
from groupwire.protocol.steps import Steps, run_steps
from tests.faults.conftest import FaultyDisk
from tests.steps import steps_taken

NOW = 1_795_573_208_092


def _store(path: Path, file_ops: FileOps | None = None) -> TopicStore:
    return TopicStore(path, StorageConfig(offsets_partitions=1), file_ops=file_ops)


def _commits(group: str, count: int, offset: int, ts: int = NOW) -> list[GroupRecord]:
    return [OffsetCommitRecord(group, "t", p, offset + p, "m" * (p % 3), ts)
            for p in range(count)]


def _replayed(path: Path) -> tuple[dict[bytes, tuple[bytes, int]], int]:
    """The live keys a restart rebuilds, and the offset the log starts at."""
    store = _store(path)
    log = OffsetsLog(store)
    for _ in log.replay():
        pass
    start = store.log(OFFSETS_TOPIC, 0).log_start_offset
    store.close()
    return log._live[0], start


# --- a prepared batch -------------------------------------------------------------------


def test_a_prepared_batch_is_the_one_write_appends(tmp_path: Path) -> None:
    records = _commits("g", 5000, 7)
    kv = OffsetRecordEncoder().kv
    pairs = [kv(r.group_id, r.topic, r.partition, r.offset, r.metadata, r.commit_ms)
             for r in records if isinstance(r, OffsetCommitRecord)]
    store = _store(tmp_path / "a")
    log = OffsetsLog(store)
    log.write(_commits("g", 10, 1), NOW - 5)
    yields, prepared = steps_taken(log.prepare_steps("g", pairs, NOW))
    assert yields > 2
    assert prepared.batch == encode_batch([BatchRecord(value=v, key=k, timestamp_ms=NOW)
                                           for k, v in pairs])
    assert store.log(OFFSETS_TOPIC, 0).log_end_offset == 10  # nothing written yet
    assert log.write_prepared(prepared) == 0

    twin_store = _store(tmp_path / "b")
    twin = OffsetsLog(twin_store)
    twin.write(_commits("g", 10, 1), NOW - 5)
    twin.write(records, NOW)
    assert [(r.offset, r.key, r.value, r.timestamp_ms) for r in store.scan(OFFSETS_TOPIC, 0)] \
        == [(r.offset, r.key, r.value, r.timestamp_ms) for r in twin_store.scan(OFFSETS_TOPIC, 0)]
    assert log._live == twin._live and log._records == twin._records
    store.close()
    twin_store.close()
    assert _replayed(tmp_path / "a")[0] == log._live[0]


# --- compaction in steps -----------------------------------------------------------------


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(offsets_log_module, "SNAPSHOT_BATCH", 10)


def _history(log: OffsetsLog) -> None:
    """Far more records than live keys: four rounds over the same 60 keys."""
    for round_ in range(4):
        log.write(_commits("g", 50, 100 * round_, NOW + round_), NOW + round_)
        log.write(_commits("h", 10, 100 * round_, NOW + round_), NOW + round_)
    assert log.needs_compaction(0)


def _meanwhile(log: OffsetsLog, step: int) -> None:
    """Commits and tombstones while a snapshot is written, on keys of batches already
    written and of batches still to come, and keys new since the roll."""
    if step == 1:
        log.write([OffsetCommitRecord("g", "t", 2, 9000, "", NOW + 10),
                   OffsetCommitRecord("g", "t", 45, 9001, "", NOW + 10),
                   OffsetDeleteRecord("g", "t", 3), OffsetDeleteRecord("g", "t", 44),
                   OffsetCommitRecord("new", "t", 0, 1, "", NOW + 10)], NOW + 10)
    elif step == 3:
        log.write([GroupDeleteRecord("h"), OffsetDeleteRecord("h", "t", 0),
                   OffsetDeleteRecord("g", "t", 4),
                   OffsetCommitRecord("g", "t", 5, 9002, "", NOW + 20),
                   OffsetCommitRecord("g", "t", 3, 5, "back", NOW + 20)], NOW + 20)


def _run(steps: Steps[None], log: OffsetsLog, stop_after: int | None = None) -> int:
    taken = 0
    while stop_after is None or taken < stop_after:
        try:
            next(steps)
        except StopIteration:
            break
        taken += 1
        _meanwhile(log, taken)
    return taken


@pytest.mark.usefixtures("small_batches")
def test_a_compaction_interleaved_with_writes_replays_to_the_live_keys(
        tmp_path: Path) -> None:
    store = _store(tmp_path)
    log = OffsetsLog(store, compact_min_records=10)
    _history(log)
    drops: list[object] = []
    steps = log.compact_steps(0, drops.append)
    assert _run(steps, log) >= 6  # a step a batch of 10
    assert log.compactions == 1 and len(drops) == 1
    live = dict(log._live[0])
    drop = drops[0]
    assert callable(drop)
    drop()  # the snapshot is durable: what precedes it goes
    start = store.log(OFFSETS_TOPIC, 0).log_start_offset
    assert start > 0
    assert log._records[0] == len(list(store.scan(OFFSETS_TOPIC, 0, start)))
    store.close()
    replayed, start = _replayed(tmp_path)
    assert start > 0
    assert replayed == live
    assert OffsetRecordEncoder().kv("g", "t", 4, 0, "", 0)[0] not in replayed
    assert OffsetRecordEncoder().kv("g", "t", 3, 0, "", 0)[0] in replayed


@pytest.mark.usefixtures("small_batches")
def test_an_abandoned_compaction_leaves_a_log_that_replays_to_the_live_keys(
        tmp_path: Path) -> None:
    store = _store(tmp_path)
    log = OffsetsLog(store, compact_min_records=10)
    _history(log)
    steps = log.compact_steps(0, lambda drop: pytest.fail("abandoned: nothing to drop"))
    assert _run(steps, log, stop_after=3) == 3
    steps.close()  # the broker closing
    log.write(_commits("g", 5, 7000, NOW + 30), NOW + 30)
    assert log.compactions == 0
    live = dict(log._live[0])
    store.close()
    replayed, start = _replayed(tmp_path)
    assert (replayed, start) == (live, 0)


@pytest.mark.usefixtures("small_batches")
def test_a_compaction_failing_half_way_is_abandoned_and_the_log_replays(
        tmp_path: Path) -> None:
    disk = FaultyDisk()
    store = _store(tmp_path, disk)
    log = OffsetsLog(store, compact_min_records=10)
    _history(log)
    steps = log.compact_steps(0, lambda drop: pytest.fail("failed: nothing to drop"))
    assert _run(steps, log, stop_after=2) == 2
    disk.failing = True
    assert run_steps(steps) is None  # abandoned at its next batch, quietly
    assert disk.refused > 0 and log.compactions == 0
    live = dict(log._live[0])
    store.close(sync=False)
    replayed, start = _replayed(tmp_path)
    assert (replayed, start) == (live, 0)
