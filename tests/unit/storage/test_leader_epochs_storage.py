"""A replicated partition's log: leader epochs stamped into v1 batches and kept in
``leader-epoch-checkpoint``, follower appends, truncation, and a high watermark set from
outside; a log never told it is replicated behaves as in single-broker mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from groupwire.broker.cluster.epochs import EpochEntry, LeaderEpochCache
from groupwire.broker.storage import FsyncPolicy, OffsetNotInLogError, StorageError
from groupwire.broker.storage import partition_log as partition_log_module
from groupwire.broker.storage.errors import CorruptLogError
from groupwire.broker.storage.replica_files import (
    EPOCH_CHECKPOINT_FILE,
    HIGH_WATERMARK_FILE,
    encode_high_watermark,
)
from groupwire.protocol.batches import (
    BATCH_V0,
    BATCH_V1,
    BatchRecord,
    encode_batch,
    iter_batch_spans,
    stamp_batch,
    upconvert_v0,
    validate_batch,
    with_base_offset,
)
from groupwire.protocol.steps import run_steps

H = Any


def batch(values: list[bytes], *, version: int = BATCH_V1, ts: int = 1_000) -> bytes:
    return encode_batch([BatchRecord(value=v, timestamp_ms=ts + i) for i, v in enumerate(values)],
                        version=version)


def put(log: Any, values: list[bytes], *, version: int = BATCH_V1) -> int:
    data = batch(values, version=version)
    return int(log.append(data, validate_batch(data)))


def everything(log: Any, start: int | None = None) -> bytes:
    """The stored bytes from ``start`` to the log end, as a follower's fetches get them."""
    offset = log.log_start_offset if start is None else start
    out = b""
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20, True, to_log_end=True)
        out += data
        offset = list(iter_batch_spans(data))[-1][0].next_offset
    return out


def epochs_of(data: bytes) -> list[tuple[int, int, int]]:
    """``(base_offset, version, leader_epoch)`` of every batch."""
    return [(h.base_offset, h.version, h.leader_epoch) for h, _, _ in iter_batch_spans(data)]


def checkpoint(directory: Path) -> list[tuple[int, int]]:
    cache = LeaderEpochCache.decode((directory / EPOCH_CHECKPOINT_FILE).read_bytes())
    return [(e.epoch, e.start_offset) for e in cache.entries]


def flush(log: Any) -> None:
    ticket = log.take_dirty()
    ticket.sync()
    log.complete(ticket)


# --- single-broker mode ---------------------------------------------------------------


def test_single_mode_stores_v0_as_sent_stamps_v1_with_epoch_0_and_writes_no_file(
        open_log: Any, tmp_path: Path) -> None:
    log = open_log(FsyncPolicy.INTERVAL)
    v0 = batch([b"a", b"b"], version=BATCH_V0)
    v1 = batch([b"c"])
    assert log.append(v0, validate_batch(v0)) == 0
    assert log.append(v1, validate_batch(v1)) == 2
    assert log.high_watermark == log.log_end_offset == 3
    stored = everything(log)
    assert stored == with_base_offset(v0, 0) + stamp_batch(v1, 2, 0)
    assert log.read(0, 1 << 20, True) == stored
    flush(log)
    assert log.close()
    names = {p.name for p in (tmp_path / "t-0").iterdir()}
    assert EPOCH_CHECKPOINT_FILE not in names and HIGH_WATERMARK_FILE not in names
    again = open_log()
    assert not again.replicated and again.high_watermark == 3


# --- leader ---------------------------------------------------------------------------


def test_become_leader_stamps_its_epoch_upconverts_v0_and_writes_the_checkpoint(
        open_log: Any, tmp_path: Path) -> None:
    log = open_log()
    put(log, [b"old"], version=BATCH_V0)          # single mode: stays v0
    log.become_leader(3)
    assert checkpoint(tmp_path / "t-0") == [(3, 1)]
    v0 = batch([b"x", b"y"], version=BATCH_V0)
    assert log.append(v0, validate_batch(v0)) == 1
    put(log, [b"z"])
    log.become_leader(5)
    put(log, [b"w"])
    stored = everything(log)
    assert epochs_of(stored) == [(0, 0, -1), (1, 1, 3), (3, 1, 3), (4, 1, 5)]
    assert stored[len(with_base_offset(batch([b"old"], version=BATCH_V0), 0)):].startswith(
        stamp_batch(upconvert_v0(v0), 1, 3))
    assert checkpoint(tmp_path / "t-0") == [(3, 1), (5, 4)]
    assert log.end_offset_for_epoch(3) == (3, 4)
    assert log.end_offset_for_epoch(4) == (3, 4)
    assert log.end_offset_for_epoch(5) == (5, 5)
    assert log.end_offset_for_epoch(6) == (-1, -1)


def test_a_restart_reloads_the_cache_and_stays_replicated(open_log: Any) -> None:
    log = open_log()
    log.become_leader(2)
    put(log, [b"a", b"b"])
    log.become_leader(4)
    put(log, [b"c"])
    log.set_high_watermark(2)
    log.close()
    again = open_log()
    assert again.replicated and again.leader_epoch == 4
    assert again.epoch_cache.entries == (EpochEntry(2, 0), EpochEntry(4, 2))
    assert again.high_watermark == 2
    put(again, [b"d"])
    assert epochs_of(everything(again, 3)) == [(3, 1, 4)]


def test_opening_drops_epochs_at_or_past_the_recovered_log_end(open_log: Any,
                                                               tmp_path: Path) -> None:
    log = open_log()
    log.become_leader(1)
    put(log, [b"a"])
    log.become_leader(2)          # at offset 1, nothing written in it
    log.close()
    directory = tmp_path / "t-0"
    assert checkpoint(directory) == [(1, 0), (2, 1)]
    again = open_log()
    assert again.epoch_cache.entries == (EpochEntry(1, 0),)
    assert checkpoint(directory) == [(1, 0)]


def test_a_big_v0_batch_is_upconverted_across_the_pieces_of_a_stepped_append(
        open_log: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(partition_log_module, "WRITE_PIECE", 64)
    log = open_log(segment_bytes=1 << 20)
    log.become_leader(7)
    put(log, [b"first"])
    big = batch([b"v-%d-" % i + b"x" * 40 for i in range(6)], version=BATCH_V0)
    assert len(big) > 4 * 64
    assert run_steps(log.append_steps(big, validate_batch(big))) == 1
    stored = everything(log, 1)
    assert stored == stamp_batch(upconvert_v0(big), 1, 7)
    assert next(r.value for r in log.scan(1)) == b"v-0-" + b"x" * 40


def test_become_leader_refuses_an_older_epoch(open_log: Any) -> None:
    log = open_log()
    log.become_leader(3)
    with pytest.raises(ValueError):
        log.become_leader(2)


# --- follower -------------------------------------------------------------------------


def leader_with_history(open_log: Any, tmp_path: Path) -> Any:
    leader = open_log(directory=tmp_path / "leader", segment_bytes=100)
    put(leader, [b"pre"], version=BATCH_V0)
    leader.become_leader(1)
    put(leader, [b"a", b"b"])
    put(leader, [b"c"], version=BATCH_V0)
    leader.become_leader(3)
    put(leader, [b"d", b"e", b"f"])
    put(leader, [b"g"])
    return leader


def test_append_replica_keeps_offsets_epochs_and_bytes(open_log: Any, tmp_path: Path) -> None:
    leader = leader_with_history(open_log, tmp_path)
    follower = open_log(directory=tmp_path / "follower", segment_bytes=100)
    offset = 0
    while offset < leader.log_end_offset:       # fetch by fetch, as a follower does
        chunk = leader.read(offset, 60, True, to_log_end=True)
        offset = follower.append_replica(chunk)
    assert follower.log_end_offset == leader.log_end_offset == 8
    assert everything(follower) == everything(leader)
    assert follower.epoch_cache == leader.epoch_cache
    assert follower.epoch_cache.entries == (EpochEntry(1, 1), EpochEntry(3, 4))
    assert checkpoint(tmp_path / "follower") == [(1, 1), (3, 4)]
    assert follower.high_watermark == 0          # only the leader's answer moves it


def test_append_replica_skips_batches_below_the_log_end(open_log: Any, tmp_path: Path) -> None:
    leader = leader_with_history(open_log, tmp_path)
    follower = open_log(directory=tmp_path / "follower")
    follower.append_replica(leader.read(0, 1 << 20, True, to_log_end=True))   # a segment
    end = follower.log_end_offset
    # the leader answers from the batch holding fetch_offset: the overlap is skipped
    assert follower.append_replica(everything(leader, 0)) == leader.log_end_offset > end
    assert everything(follower) == everything(leader)
    assert follower.append_replica(everything(leader, 2)) == leader.log_end_offset


def test_append_replica_refuses_a_gap_and_corrupt_data_appending_nothing(
        open_log: Any, tmp_path: Path) -> None:
    leader = leader_with_history(open_log, tmp_path)
    follower = open_log(directory=tmp_path / "follower")
    with pytest.raises(StorageError, match="gap"):
        follower.append_replica(everything(leader, 5))
    assert follower.log_end_offset == 0
    data = bytearray(everything(leader))
    data[-2] ^= 0xFF
    with pytest.raises(CorruptLogError):
        follower.append_replica(bytes(data))
    assert follower.log_end_offset == 0


def test_truncate_to_mid_batch_and_across_segments(open_log: Any, tmp_path: Path) -> None:
    log = leader_with_history(open_log, tmp_path)
    assert log.segment_count > 2
    log.set_high_watermark(7)
    log.truncate_to(5)              # inside the batch 4-6: cut at 4
    assert (log.log_end_offset, log.high_watermark) == (4, 4)
    assert log.epoch_cache.entries == (EpochEntry(1, 1),)
    assert checkpoint(tmp_path / "leader") == [(1, 1)]
    assert epochs_of(everything(log)) == [(0, 0, -1), (1, 1, 1), (3, 1, 1)]
    log.truncate_to(2)              # inside 1-2, a segment or more away
    assert log.log_end_offset == 1
    assert [r.value for r in log.scan()] == [b"pre"]
    log.become_leader(4)
    put(log, [b"new"])
    log.close()
    again = open_log(directory=tmp_path / "leader", segment_bytes=100)
    assert [r.value for r in again.scan()] == [b"pre", b"new"]
    assert again.epoch_cache.entries == (EpochEntry(4, 1),)


# --- high watermark -------------------------------------------------------------------


def test_the_high_watermark_bounds_consumer_reads_not_replica_reads(open_log: Any) -> None:
    log = open_log(segment_bytes=1 << 20)
    log.become_leader(0)
    for v in (b"a", b"b", b"c"):
        put(log, [v])
    assert log.high_watermark == 0              # nothing committed yet
    assert log.read(0, 1 << 20, True) == b""
    log.set_high_watermark(2)
    assert [h.base_offset for h, _, _ in iter_batch_spans(log.read(0, 1 << 20, True))] == [0, 1]
    # Between the high watermark and the log end a consumer reads nothing, as in Kafka:
    # a new leader's high watermark may trail what its consumers already read.
    assert log.read(2, 1 << 20, True) == b""
    assert log.read(3, 1 << 20, True) == b""
    with pytest.raises(OffsetNotInLogError):
        log.read(4, 1 << 20, True)
    assert len(list(iter_batch_spans(log.read(0, 1 << 20, True, to_log_end=True)))) == 3
    log.set_high_watermark(99)
    assert log.high_watermark == 3               # never past the log end
    log.set_high_watermark(-5)
    assert log.high_watermark == 0


def test_the_high_watermark_is_saved_at_flush_and_close(open_log: Any, tmp_path: Path) -> None:
    log = open_log(FsyncPolicy.INTERVAL)
    log.become_leader(0)
    put(log, [b"a", b"b"])
    put(log, [b"c"])
    log.set_high_watermark(2)
    flush(log)
    hw_file = tmp_path / "t-0" / HIGH_WATERMARK_FILE
    assert hw_file.read_bytes() == encode_high_watermark(2)
    log.set_high_watermark(3)
    log.close()
    assert hw_file.read_bytes() == encode_high_watermark(3)
    hw_file.write_bytes(encode_high_watermark(50))     # clamped to the log end
    assert open_log().high_watermark == 3


def test_a_replica_without_a_saved_high_watermark_starts_from_the_log_start(
        open_log: Any) -> None:
    log = open_log()
    log.append_replica(batch([b"a"]) + stamp_batch(batch([b"b"]), 1, 0))
    log.close(sync=False)
    assert open_log().high_watermark == 0


def test_a_single_broker_serves_a_former_replicas_whole_log(open_log: Any) -> None:
    log = open_log(segment_bytes=1 << 20)
    log.become_leader(3)
    for v in (b"a", b"b"):
        put(log, [v])
    log.set_high_watermark(1)
    log.close()
    alone = open_log(segment_bytes=1 << 20, replica_files=False)
    assert not alone.replicated
    assert (alone.high_watermark, alone.log_end_offset) == (2, 2)
    assert len(list(iter_batch_spans(alone.read(0, 1 << 20, True)))) == 2
