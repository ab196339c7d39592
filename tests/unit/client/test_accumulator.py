"""The producer's record accumulator, without a broker, an event loop or a clock."""

from __future__ import annotations

import pytest

from groupwire.client.accumulator import (
    CLOSED,
    OPENED,
    RECORD_OVERHEAD,
    Accumulator,
    record_size,
)
from groupwire.client.types import TopicPartition
from groupwire.protocol.batches import BatchRecord, BatchWriter, encode_batch

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)


def put(a: Accumulator[int], tp: TopicPartition, size: int, handle: int, *,
        sticky: bool = False, now: float = 0.0, value: bytes = b"v", ts: int = 0) -> int:
    """One record of ``size`` counted bytes on ``tp``; what ``append`` returned."""
    return a.append(tp.topic, tp.partition, None, value, (), ts, size, handle,
                    sticky=sticky, now=now)


def acc(*, batch: int = 1000, buffer: int = 10_000, linger: float = 0.5) -> Accumulator[int]:
    a: Accumulator[int] = Accumulator(max_batch_bytes=batch, max_buffer_bytes=buffer,
                                      linger=linger)
    a.partition_counts["t"] = 3
    return a


def test_record_size_counts_key_value_headers_and_overhead() -> None:
    assert record_size(None, None, []) == RECORD_OVERHEAD
    assert record_size(b"kk", b"vvv", [("h", b"xy"), ("n", None)]) == (
        RECORD_OVERHEAD + 2 + 3 + (1 + 2 + 4) + (1 + 0 + 4))


def test_a_batch_waits_for_its_linger_then_goes() -> None:
    a = acc(linger=0.5)
    assert put(a, T0, 10, 1, now=100.0) == OPENED  # the sender must learn when it may go
    assert put(a, T0, 10, 2, now=100.2) == 0  # same open batch, nothing new for the sender
    assert a.ready(100.4, limit=1 << 20) == ([], 100.5)
    ready, next_at = a.ready(100.5, limit=1 << 20)
    assert [b.handles for b in ready] == [[1, 2]] and next_at is None


def test_a_full_batch_is_closed_and_goes_without_lingering() -> None:
    a = acc(batch=25, linger=60.0)
    put(a, T0, 10, 1, now=0.0)
    put(a, T0, 10, 2, now=0.0)
    assert put(a, T0, 10, 3, now=0.0) == CLOSED  # 30 > 25: a new batch, the full one may go
    ready, next_at = a.ready(0.0, limit=1 << 20)
    assert [b.handles for b in ready] == [[1, 2]]  # one head batch per partition a round
    assert next_at is None
    a.take(ready, 0.0, 30.0)
    ready, next_at = a.ready(0.0, limit=1 << 20)
    assert ready == [] and next_at == 60.0  # the second batch lingers from its creation


def test_flushing_sends_open_batches_at_once() -> None:
    a = acc(linger=60.0)
    put(a, T0, 10, 1, now=0.0)
    put(a, T1, 10, 2, now=0.0)
    assert a.ready(0.0, limit=1 << 20)[0] == []
    ready, _ = a.ready(0.0, limit=1 << 20, flushing=True)
    assert sorted(b.tp for b in ready) == [T0, T1]


def test_a_round_stays_under_the_frame_limit_but_always_takes_one_batch() -> None:
    a = acc(batch=100)
    put(a, T0, 80, 1, now=0.0)
    put(a, T1, 80, 2, now=0.0)
    ready, next_at = a.ready(0.0, limit=50, flushing=True)
    assert [b.handles for b in ready] == [[1]] and next_at == 0.0  # the other goes next


def test_unkeyed_records_stick_to_a_partition_until_its_batch_is_full() -> None:
    a = acc(batch=25)
    first = a.sticky_partition("t", 3)
    for i in range(6):
        put(a, TopicPartition("t", a.sticky_partition("t", 3)), 10, i, sticky=True)
    ready, _ = a.ready(0.0, limit=1 << 20, flushing=True)
    # two records fit per batch; a third closes the batch and moves on, round robin
    assert {b.tp.partition: b.handles for b in ready} == {
        first: [0, 1], (first + 1) % 3: [2, 3], (first + 2) % 3: [4, 5]}


def test_a_retried_batch_goes_back_ahead_of_later_ones_after_its_backoff() -> None:
    a = acc(linger=0.0)
    put(a, T0, 10, 1, now=0.0)
    (first,), _ = a.ready(0.0, limit=1 << 20)
    a.take([first], 0.0, 30.0)
    assert first.attempts == 1 and first.deadline == 30.0
    put(a, T0, 10, 2, now=0.1)
    error = TimeoutError("lost")
    a.retry(first, error, retry_at=1.0)
    assert first.last_error is error
    assert a.ready(0.5, limit=1 << 20) == ([], 1.0)  # the later batch may not overtake it
    (again,), _ = a.ready(1.0, limit=1 << 20)
    assert again is first
    a.take([again], 1.0, 30.0)
    assert again.attempts == 2 and again.deadline == 30.0  # the deadline is the first's


def test_buffered_bytes_fill_up_and_free_on_completion() -> None:
    a = acc(batch=100, buffer=100)
    put(a, T0, 60, 1, now=0.0)
    assert not a.full
    put(a, T1, 40, 2, now=0.0)
    assert a.full and a.buffered == 100
    (batch, _), _ = a.ready(0.0, limit=1 << 20, flushing=True)
    assert a.complete(batch) and not a.complete(batch)  # completing twice frees once
    assert a.buffered == 40 and not a.full


def test_pop_all_empties_every_queue() -> None:
    a = acc()
    put(a, T0, 10, 1, now=0.0)
    put(a, T1, 10, 2, now=0.0)
    popped = a.pop_all()
    assert sorted(b.tp for b in popped) == [T0, T1]
    assert list(a.queued()) == [] and a.ready(0.0, limit=1 << 20, flushing=True) == ([], None)


def test_records_are_packed_into_their_batch_as_they_come() -> None:
    a = acc(linger=0.0)
    put(a, T0, 10, 1, value=b"a", ts=1000)
    a.append("t", 0, b"k", b"b", [("h", b"x")], 1005, 10, 2, sticky=False, now=0.0)
    (batch,), _ = a.ready(0.0, limit=1 << 20)
    assert batch.handles == [1, 2] and batch.timestamps == [1000, 1005]
    assert batch.record_count == 2
    assert batch.writer.build() == encode_batch([
        BatchRecord(b"a", None, (), 1000), BatchRecord(b"b", b"k", [("h", b"x")], 1005)])


def test_a_record_the_batch_refuses_leaves_nothing_queued() -> None:
    a = acc()
    with pytest.raises(TypeError):
        a.append("t", 0, None, b"v", (), 1.5, 10, 1, sticky=False, now=0.0)  # type: ignore[arg-type]
    assert list(a.queued()) == [] and a.buffered == 0
    put(a, T0, 10, 2)
    with pytest.raises(TypeError):
        a.append("t", 0, None, "text", (), 0, 10, 3, sticky=False, now=0.0)  # type: ignore[arg-type]
    (batch,) = a.queued()
    assert batch.handles == [2] and batch.record_count == 1 and a.buffered == 10


def test_a_batch_appended_whole_goes_closed_behind_the_partition_s_batches() -> None:
    a = acc(linger=60.0)
    put(a, T0, 10, 1)
    writer = BatchWriter()
    writer.append(None, b"whole", 0)
    a.append_batch(T0, writer, 30, 99, now=0.0)
    assert a.buffered == 40
    # the open batch was closed, so it goes at once, the whole one behind it
    (first,), next_at = a.ready(0.0, limit=1 << 20)
    assert first.handles == [1] and first.closed and next_at is None
    a.take([first], 0.0, 30.0)
    (whole,), _ = a.ready(0.0, limit=1 << 20)
    assert whole.whole == 99 and whole.handles == [] and whole.writer is writer
    # a record after it opens a new batch behind it
    assert put(a, T0, 10, 2) == OPENED
    assert [b.handles or [b.whole] for b in a.queued()] == [[99], [2]]
    with pytest.raises(ValueError):
        a.append_batch(T1, BatchWriter(), 0, 100, now=0.0)
