"""A partition log holding msgpack and Kafka batches side by side: appended (whole and
in steps), served as stored, recovered after a restart or a torn write, replicated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from groupwire.broker.storage.errors import CorruptLogError
from groupwire.broker.storage.partition_log import WRITE_PIECE
from groupwire.protocol import batches as mp
from groupwire.protocol.batches import BatchRecord
from groupwire.protocol.kafka import records as kr
from groupwire.protocol.steps import run_steps
from groupwire.protocol.stored_batches import (
    decode_any_records,
    iter_any_batch_spans,
    read_any_header,
)

T0 = 1_732_250_000_000
CODECS = [kr.COMPRESSION_NONE, kr.COMPRESSION_GZIP, kr.COMPRESSION_SNAPPY,
          kr.COMPRESSION_LZ4, kr.COMPRESSION_ZSTD]


def make(i: int) -> tuple[bytes, Any]:
    """Batch ``i`` of a mix, as a producer sends it, and its validated header: msgpack
    v1, msgpack v0, then Kafka with each codec in turn."""
    n = 1 + i % 3
    recs = [BatchRecord(value=b"b%d-r%d" % (i, j), key=b"k" if j else None,
                        headers=[("h", b"%d" % i)] if i % 2 else [],
                        timestamp_ms=T0 + 100 * i + j) for j in range(n)]
    kind = i % 4
    if kind == 0:
        batch = mp.encode_batch(recs)
        return batch, mp.validate_batch(batch)
    if kind == 1:
        batch = mp.encode_batch(recs, version=mp.BATCH_V0)
        return batch, mp.validate_batch(batch)
    batch = kr.encode_batch(recs, compression=CODECS[i % len(CODECS)])
    return batch, kr.validate_batch(batch)


def fill(log: Any, count: int) -> list[tuple[bytes, int]]:
    """Append ``count`` batches of the mix; returns each (as sent, base offset)."""
    out = []
    for i in range(count):
        batch, header = make(i)
        out.append((batch, log.append(batch, header)))
    return out


def read_everything(log: Any) -> bytes:
    out, offset = b"", log.log_start_offset
    while offset < log.high_watermark:
        data = log.read(offset, 1 << 20, True)
        assert data
        out += data
        offset = list(iter_any_batch_spans(data))[-1][0].next_offset
    return out


def records_of(data: bytes) -> list[tuple[int, int, bytes | None, bytes | None, Any]]:
    return [(r.offset, r.timestamp_ms, r.key, r.value, r.headers)
            for r in decode_any_records(data)]


def expected_records(sent: list[tuple[bytes, int]]) -> list[tuple[Any, ...]]:
    out = []
    for batch, base in sent:
        if batch[0] == 0x92:
            decoded = mp.decode_records(mp.with_base_offset(batch, base))
        else:
            decoded = kr.decode_records(kr.stamp_batch(batch, base, 0))
        out += [(r.offset, r.timestamp_ms, r.key, r.value, r.headers) for r in decoded]
    return out


def test_a_mix_is_stored_as_sent_and_read_back(open_log: Any) -> None:
    log = open_log(segment_bytes=400)
    sent = fill(log, 20)
    assert log.segment_count > 2
    data = read_everything(log)
    spans = list(iter_any_batch_spans(data))
    assert len(spans) == len(sent)
    for (batch, base), (header, start, end) in zip(sent, spans, strict=True):
        stored = data[start:end]
        assert header.base_offset == base
        if batch[0] == 0x92:
            assert not header.kafka and mp.decode_records(stored)
        else:
            assert header.kafka and header.leader_epoch == log.leader_epoch
            assert stored == kr.stamp_batch(batch, base, log.leader_epoch)
    assert records_of(data) == expected_records(sent)
    # a read from inside a batch starts at that batch
    middle = sent[10][1] + 1   # batch 10 holds two records
    assert read_any_header(log.read(middle, 1, True)).base_offset == sent[10][1]


@pytest.mark.parametrize("trust_index", [True, False])
def test_a_mix_survives_a_restart(open_log: Any, trust_index: bool) -> None:
    log = open_log(segment_bytes=400)
    fill(log, 16)
    before = read_everything(log)
    assert log.close() is True
    again = open_log(segment_bytes=400, trust_index=trust_index)
    assert again.recovery is None
    assert again.log_end_offset == log.log_end_offset
    assert read_everything(again) == before
    batch, header = make(2)   # Kafka
    assert again.append(batch, header) == again.log_end_offset - header.record_count
    assert records_of(read_everything(again))[-1][3] == b"b2-r2"
    again.close()


def test_a_torn_tail_is_cut_at_the_last_whole_batch_of_either_format(
        open_log: Any, tmp_path: Path) -> None:
    source = tmp_path / "source"
    log = open_log(segment_bytes=1 << 20, directory=source)
    sent = fill(log, 8)
    log.close(sync=False)
    (segment,) = sorted(source.glob("*.log"))
    data = segment.read_bytes()
    ends = [end for _, _, end in iter_any_batch_spans(data)]
    # cut inside each batch (the last of each format among them), and at its end
    for victim in range(1, len(ends)):
        for cut in (ends[victim - 1] + 1, ends[victim] - 1, ends[victim - 1] + 30):
            if cut >= ends[victim]:
                continue
            target = tmp_path / f"cut-{victim}-{cut}"
            target.mkdir()
            (target / segment.name).write_bytes(data[:cut])
            recovered = open_log(segment_bytes=1 << 20, directory=target)
            assert recovered.recovery is not None
            assert recovered.recovery.truncated_bytes == cut - ends[victim - 1]
            assert recovered.log_end_offset == sent[victim][1]
            assert records_of(read_everything(recovered)) == expected_records(sent[:victim])
            batch, header = make(victim)   # the log goes on, either format
            assert recovered.append(batch, header) == sent[victim][1]
            recovered.close()
            reopened = open_log(segment_bytes=1 << 20, directory=target)
            assert reopened.recovery is None
            assert records_of(read_everything(reopened)) == expected_records(sent[:victim + 1])
            reopened.close()


def test_a_big_kafka_batch_is_written_in_steps(open_log: Any) -> None:
    log = open_log(segment_bytes=8 << 20)
    fill(log, 2)
    recs = [BatchRecord(value=bytes([i % 251]) * 1000, timestamp_ms=T0) for i in range(2500)]
    big = kr.encode_batch(recs)
    assert len(big) > 2 * WRITE_PIECE
    header = kr.validate_batch(big)
    steps = log.append_steps(big, header)
    base = run_steps(steps)
    assert base == 3
    stored = log.read(base, 1, True)
    assert stored == kr.stamp_batch(big, base, log.leader_epoch)
    assert log.log_end_offset == base + len(recs)


def test_rot_in_a_kafka_batch_is_caught_before_it_is_served(open_log: Any,
                                                           tmp_path: Path) -> None:
    log = open_log(segment_bytes=1 << 20)
    sent = fill(log, 4)
    log.close()
    (segment,) = sorted((tmp_path / "t-0").glob("*.log"))
    data = bytearray(segment.read_bytes())
    spans = list(iter_any_batch_spans(bytes(data)))
    end = spans[2][2]   # Kafka (gzip)
    data[end - 2] ^= 0xFF
    segment.write_bytes(bytes(data))
    again = open_log(segment_bytes=1 << 20, trust_index=True)
    with pytest.raises(CorruptLogError):
        again.read(sent[2][1], 1 << 20, True)
    assert records_of(again.read(0, 1 << 20, True)) == expected_records(sent[:2])


def test_retention_and_timestamps_use_a_kafka_batchs_max_timestamp(open_log: Any) -> None:
    log = open_log(segment_bytes=1 << 20)
    recs = [BatchRecord(value=b"a", timestamp_ms=T0), BatchRecord(value=b"b",
                                                                  timestamp_ms=T0 + 5000)]
    batch = kr.encode_batch(recs)
    log.append(batch, kr.validate_batch(batch))
    assert log.offset_for_timestamp(T0 + 1) == (1, T0 + 5000)
    log.roll()
    later = mp.encode_batch([BatchRecord(value=b"c", timestamp_ms=T0 + 9000)])
    log.append(later, mp.validate_batch(later))
    # the first segment's newest record is T0 + 5000: 4 s old at T0 + 9000
    assert log.apply_retention(T0 + 9000, 4500, -1) == 0
    assert log.apply_retention(T0 + 9000, 3500, -1) == 1
    assert log.log_start_offset == 2


def test_a_follower_copies_a_mix_with_its_epochs(open_log: Any, tmp_path: Path) -> None:
    leader = open_log(segment_bytes=1 << 20, directory=tmp_path / "leader")
    leader.become_leader(3)
    fill(leader, 3)
    leader.become_leader(6)
    batch, header = make(3)   # Kafka
    leader.append(batch, header)
    data = leader.read(0, 1 << 20, True, to_log_end=True)
    follower = open_log(segment_bytes=1 << 20, directory=tmp_path / "follower")
    assert follower.append_replica(data) == leader.log_end_offset
    assert follower.read(0, 1 << 20, True, to_log_end=True) == data
    assert follower.epoch_cache.entries == leader.epoch_cache.entries
    assert [h.leader_epoch for h, _, _ in iter_any_batch_spans(data)] == [3, 3, 3, 6]
