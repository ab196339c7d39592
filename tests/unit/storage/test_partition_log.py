"""PartitionLog: appends, reads of whole batches, high watermark, retention, timestamps."""

from __future__ import annotations

from typing import Any

import pytest

from groupwire.broker.storage import FsyncPolicy, OffsetNotInLogError, StorageError
from groupwire.protocol.batches import (
    BatchRecord,
    decode_records,
    encode_batch,
    iter_batches,
    validate_batch,
)
from groupwire.protocol.errors import ErrorCode

H = Any  # the `h` fixture: helpers from conftest


def fill(h: H, log: Any, batches: int, per_batch: int = 2, size: int = 10) -> list[bytes]:
    """Append ``batches`` batches of ``per_batch`` records; returns every value in order."""
    out: list[bytes] = []
    for b in range(batches):
        vals = [b"%d-%d-" % (b, i) + b"x" * size for i in range(per_batch)]
        base = h.append(log, vals, ts=1_000 + 10 * b)
        assert base == len(out)
        out += vals
    return out


def test_append_assigns_consecutive_offsets_and_reads_back_across_segments(h: H,
                                                                         open_log: Any) -> None:
    log = open_log(segment_bytes=200)
    written = fill(h, log, 30, per_batch=3)
    assert log.segment_count > 3
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 90, 90)
    records = h.read_all(log)
    assert [r.offset for r in records] == list(range(90))
    assert h.values(records) == written


def test_stored_batches_carry_their_assigned_base_offset(h: H, open_log: Any) -> None:
    log = open_log(segment_bytes=10_000)
    fill(h, log, 4, per_batch=3)
    data = log.read(0, 1 << 20, True)
    assert [hd.base_offset for hd, _ in iter_batches(data)] == [0, 3, 6, 9]
    for _, batch in iter_batches(data):
        validate_batch(batch)


def test_read_starts_at_the_batch_holding_the_offset(h: H, open_log: Any) -> None:
    log = open_log(segment_bytes=10_000)
    fill(h, log, 3, per_batch=4)
    for offset in range(12):
        first = next(iter_batches(log.read(offset, 1 << 20, True)))[0]
        assert first.base_offset == offset - offset % 4
    assert [r.offset for r in decode_records(log.read(5, 1 << 20, True), 5)] == list(range(5, 12))


def test_read_returns_whole_batches_within_max_bytes(h: H, open_log: Any) -> None:
    log = open_log(segment_bytes=10_000)
    fill(h, log, 5, per_batch=1)
    sizes = [len(b) for _, b in iter_batches(log.read(0, 1 << 20, True))]
    assert len(set(sizes)) == 1
    size = sizes[0]
    for max_bytes in range(size, 5 * size + 3):
        data = log.read(0, max_bytes, False)
        assert len(data) == (max_bytes // size) * size
        assert len(list(iter_batches(data))) == max_bytes // size


def test_kip74_first_batch_goes_regardless_of_max_bytes(h: H, open_log: Any) -> None:
    log = open_log(segment_bytes=10_000)
    fill(h, log, 3, per_batch=3, size=50)
    assert log.read(0, 10, False) == b""
    assert log.read(0, 0, False) == b""
    one = log.read(4, 10, True)
    assert [hd.base_offset for hd, _ in iter_batches(one)] == [3]
    assert log.read(4, 0, True) == one


def test_read_stops_at_a_segment_end(h: H, open_log: Any) -> None:
    log = open_log(segment_bytes=200)
    fill(h, log, 10, per_batch=2)
    assert log.segment_count > 1
    data = log.read(0, 1 << 20, True)
    last = list(iter_batches(data))[-1][0]
    assert 0 < last.next_offset < log.high_watermark
    rest = log.read(last.next_offset, 1 << 20, True)
    assert next(iter_batches(rest))[0].base_offset == last.next_offset


def test_offsets_outside_the_log_are_out_of_range(h: H, open_log: Any) -> None:
    log = open_log()
    fill(h, log, 2)
    assert log.read(4, 100, True) == b""
    with pytest.raises(OffsetNotInLogError) as info:
        log.read(5, 100, True)
    assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    with pytest.raises(OffsetNotInLogError):
        log.read(-1, 100, True)


def test_empty_log_serves_nothing_at_offset_zero(open_log: Any) -> None:
    log = open_log()
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 0, 0)
    assert log.read(0, 100, True) == b""
    assert log.offset_for_timestamp(0) is None


# --- high watermark and fsync policy -----------------------------------------------------


def test_always_serves_data_only_after_the_ticket_completes(h: H, open_log: Any) -> None:
    log = open_log(FsyncPolicy.ALWAYS)
    h.append(log, [b"a", b"b"])
    assert (log.log_end_offset, log.high_watermark) == (2, 0)
    assert log.read(0, 100, True) == b""
    assert log.read(1, 100, True) == b""  # not committed yet: nothing, not out of range
    with pytest.raises(OffsetNotInLogError):
        log.read(3, 100, True)
    ticket = log.take_dirty()
    h.append(log, [b"c"])  # written after the ticket was taken: not covered by it
    ticket.sync()
    assert log.high_watermark == 0  # synced, but not completed yet
    log.complete(ticket)
    assert log.high_watermark == 2
    assert h.values(h.read_all(log)) == [b"a", b"b"]
    ticket = log.take_dirty()
    ticket.sync()
    log.complete(ticket)
    assert log.high_watermark == 3


def test_always_ticket_never_synced_does_not_advance(h: H, open_log: Any) -> None:
    log = open_log(FsyncPolicy.ALWAYS)
    h.append(log, [b"a"])
    ticket = log.take_dirty()
    log.complete(ticket)
    assert log.high_watermark == 0
    retry = log.take_dirty()  # still dirty: the next round covers it
    assert not retry.empty
    retry.sync()
    log.complete(retry)
    assert log.high_watermark == 1
    assert log.take_dirty().empty


@pytest.mark.parametrize("policy", [FsyncPolicy.NEVER, FsyncPolicy.INTERVAL])
def test_other_policies_serve_data_at_once(h: H, open_log: Any, policy: FsyncPolicy) -> None:
    log = open_log(policy)
    h.append(log, [b"a"])
    assert log.high_watermark == 1
    ticket = log.take_dirty()
    assert not ticket.empty
    ticket.sync()
    log.complete(ticket)
    assert log.high_watermark == 1
    assert log.take_dirty().empty


def test_fsync_failure_takes_the_log_offline_but_reads_go_on(h: H, open_log: Any) -> None:
    ops = h.FailingOps()
    log = open_log(FsyncPolicy.ALWAYS, ops=ops)
    h.append(log, [b"a"])
    ticket = log.take_dirty()
    ticket.sync()
    log.complete(ticket)
    h.append(log, [b"b"])
    ops.fail_fsync = True
    ticket = log.take_dirty()
    with pytest.raises(OSError):
        ticket.sync()
    assert log.offline and log.high_watermark == 1
    with pytest.raises(StorageError) as info:
        h.append(log, [b"c"])
    assert info.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert h.values(h.read_all(log)) == [b"a"]


# --- scan ---------------------------------------------------------------------------------


def test_scan_reads_to_the_log_end_even_above_the_high_watermark(h: H, open_log: Any) -> None:
    log = open_log(FsyncPolicy.ALWAYS, segment_bytes=150)
    written = fill(h, log, 12, per_batch=2)
    assert log.high_watermark == 0
    assert h.values(list(log.scan())) == written
    assert [r.offset for r in log.scan(5)] == list(range(5, 24))
    assert list(log.scan(24)) == []


# --- retention ----------------------------------------------------------------------------


def test_retention_by_bytes_deletes_oldest_segments_only(h: H, open_log: Any) -> None:
    log = open_log(segment_bytes=200)
    written = fill(h, log, 20, per_batch=2)
    segments, total = log.segment_count, log.size_bytes
    assert log.apply_retention(0, -1, -1) == 0
    deleted = log.apply_retention(0, -1, total // 2)
    assert 0 < deleted < segments
    assert log.size_bytes >= total // 2
    start = log.log_start_offset
    assert start > 0
    assert h.values(h.read_all(log)) == written[start:]
    with pytest.raises(OffsetNotInLogError):
        log.read(start - 1, 100, True)
    before = log.segment_count
    assert log.apply_retention(0, -1, 0) == before - 1
    assert log.segment_count == 1  # the active segment always stays
    assert log.log_end_offset == 40


def test_retention_by_time_uses_batch_timestamps(h: H, open_log: Any) -> None:
    log = open_log(segment_bytes=200)
    fill(h, log, 20, per_batch=2)  # batch b holds offsets 2b, 2b+1 at timestamp 1000 + 10 b
    newest = 1_000 + 10 * 19
    assert log.apply_retention(newest + 10**6, -1, -1) == 0
    assert log.apply_retention(1_100, 10**6, -1) == 0
    assert log.apply_retention(1_100, 0, -1) > 0
    start = log.log_start_offset
    assert 1_000 + 10 * (start // 2 - 1) < 1_100  # every deleted batch was older
    first_segment = list(iter_batches(log.read(start, 1 << 20, True)))
    assert max(hd.base_timestamp_ms for hd, _ in first_segment) >= 1_100
    before = log.segment_count
    assert log.apply_retention(newest + 1, 0, -1) == before - 1
    assert log.segment_count == 1


def test_retention_never_deletes_data_above_the_high_watermark(h: H, open_log: Any) -> None:
    log = open_log(FsyncPolicy.ALWAYS, segment_bytes=150)
    fill(h, log, 10)
    assert log.segment_count > 1
    assert log.apply_retention(10**9, 0, 0) == 0
    ticket = log.take_dirty()
    ticket.sync()
    log.complete(ticket)
    assert log.apply_retention(10**9, 0, 0) > 0


# --- timestamps ---------------------------------------------------------------------------


def test_offset_for_timestamp_finds_the_first_record_at_or_after(h: H, open_log: Any) -> None:
    log = open_log(segment_bytes=150)
    # Timestamps per offset: batches [100, 101], [50, 300], [200], [400, 401] ...
    h.append(log, [b"a", b"b"], ts=100)
    b = encode_batch([BatchRecord(value=b"c", timestamp_ms=50),
                      BatchRecord(value=b"d", timestamp_ms=300)])
    log.append(b, validate_batch(b))
    h.append(log, [b"e"], ts=200)
    h.append(log, [b"f", b"g"], ts=400)
    assert log.segment_count > 1
    assert log.offset_for_timestamp(0) == (0, 100)
    assert log.offset_for_timestamp(101) == (1, 101)
    assert log.offset_for_timestamp(102) == (3, 300)
    assert log.offset_for_timestamp(300) == (3, 300)
    assert log.offset_for_timestamp(301) == (5, 400)
    assert log.offset_for_timestamp(401) == (6, 401)
    assert log.offset_for_timestamp(402) is None
    # Cached maxima of sealed segments must not hide later answers.
    assert log.offset_for_timestamp(200) == (3, 300)
    assert log.offset_for_timestamp(402) is None


def test_offset_for_timestamp_ignores_data_above_the_high_watermark(h: H,
                                                                     open_log: Any) -> None:
    log = open_log(FsyncPolicy.ALWAYS)
    h.append(log, [b"a"], ts=100)
    assert log.offset_for_timestamp(0) is None
    ticket = log.take_dirty()
    ticket.sync()
    log.complete(ticket)
    assert log.offset_for_timestamp(0) == (0, 100)


def test_closed_log_refuses_work(h: H, open_log: Any) -> None:
    log = open_log()
    h.append(log, [b"a"])
    assert log.close() is True
    with pytest.raises(StorageError):
        h.append(log, [b"b"])
    with pytest.raises(StorageError):
        log.read(0, 100, True)
