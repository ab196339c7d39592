"""The producer's record accumulator: batches per partition and when each may be sent.

Pure bookkeeping — no asyncio, no I/O, no clock: every rule that depends on time takes
``now`` (seconds, any monotonic origin) as an argument, so the linger, size, retry and
sticky-partitioner rules are tested without a broker. Each record carries an opaque
``handle`` (the producer's future) that the accumulator keeps in order and never reads.
A record is packed into its batch's :class:`~groupwire.protocol.batches.BatchWriter` as
it is appended: nothing is kept per record but its handle and timestamp.

Rules:

* records of a partition fill its last batch until ``max_batch_bytes``; a full batch is
  closed and the next record opens a new one;
* unkeyed records stick to one partition per batch (Kafka's sticky partitioner): closing
  that batch moves them to the next partition, round robin;
* a batch built whole (:meth:`Accumulator.append_batch`, the producer's ``send_batch``)
  is queued closed, behind its partition's batches, whose open one it closes;
* a partition's head batch may go when it is closed, another batch waits behind it, the
  producer flushes or closes, or it has lingered ``linger`` seconds; a batch put back
  after a retriable error waits until its ``retry_at``;
* one round takes at most ``limit`` bytes (the broker's frame size), at least one batch.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from groupwire.client.sequences import BatchSequence
from groupwire.client.types import TopicPartition
from groupwire.protocol.batches import BatchWriter

__all__ = ["CLOSED", "OPENED", "RECORD_OVERHEAD", "Accumulator", "Batch", "headers_size",
           "record_size"]

H = TypeVar("H")

RECORD_OVERHEAD = 24
"""Bytes a record costs in a batch besides key, value and headers (a generous estimate)."""

Headers = Sequence[tuple[str, bytes | None]]

OPENED = 1
""":meth:`Accumulator.append` opened a batch: the sender learns when it may go."""
CLOSED = 2
""":meth:`Accumulator.append` closed a batch: it may go now."""


def record_size(key: bytes | None, value: bytes | None, headers: Headers) -> int:
    """The bytes ``max_batch_bytes`` and ``max_buffer_bytes`` count for one record."""
    size = RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
    return size + headers_size(headers) if headers else size


def headers_size(headers: Headers) -> int:
    """What ``headers`` add to :func:`record_size`."""
    return sum(len(h) + (len(v) if v else 0) + 4 for h, v in headers)


@dataclass(slots=True, eq=False)
class Batch(Generic[H]):
    """Records of one partition sent (and retried) together, in order."""

    tp: TopicPartition
    created: float
    writer: BatchWriter = field(default_factory=BatchWriter)
    handles: list[H] = field(default_factory=list)
    """One per record appended alone, in order (none in a batch appended whole)."""
    timestamps: list[int] = field(default_factory=list)
    """The timestamp of each record in ``handles``."""
    whole: H | None = None
    """The handle of a batch appended whole."""
    size: int = 0
    closed: bool = False
    attempts: int = 0
    deadline: float = 0.0  # set at the first send: retries stop here
    retry_at: float = 0.0
    last_error: BaseException | None = None
    done: bool = False
    settled: object | None = None  # the sender's "this batch is done" signal, for flush
    sequence: BatchSequence | None = None
    """An idempotent producer's numbering of the batch, given when it is first sent (and
    kept for its retries, which resend the same bytes)."""

    @property
    def record_count(self) -> int:
        return len(self.writer)


class Accumulator(Generic[H]):
    def __init__(self, *, max_batch_bytes: int, max_buffer_bytes: int, linger: float) -> None:
        self.max_batch_bytes = max_batch_bytes
        self.max_buffer_bytes = max(max_buffer_bytes, max_batch_bytes)
        self.linger = linger
        self.partition_counts: dict[str, int] = {}   # known topics (the producer's metadata)
        self._queues: dict[TopicPartition, deque[Batch[H]]] = {}
        # each partition's last batch while it takes records; looked up by a plain
        # (topic, partition) tuple, which hashes and compares as a TopicPartition does
        self._open: dict[tuple[str, int], Batch[H]] = {}
        self._sticky: dict[str, int] = {}
        self._round_robin: dict[str, int] = {}
        self.buffered = 0

    # --- adding records ----------------------------------------------------------------

    @property
    def full(self) -> bool:
        """``max_buffer_bytes`` are queued: senders wait for space."""
        return self.buffered >= self.max_buffer_bytes

    def sticky_partition(self, topic: str, count: int) -> int:
        """The partition unkeyed records of ``topic`` go to now."""
        p = self._sticky.get(topic)
        if p is None or p >= count:
            p = self._advance_sticky(topic, count)
        return p

    def append(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
               headers: Headers, timestamp_ms: int, size: int, handle: H, *,
               sticky: bool, now: float) -> int:
        """Queue one record (``size`` bytes, from :func:`record_size`) on ``partition``,
        or on the next one when it is ``sticky`` and its batch is full; returns
        :data:`CLOSED` when a batch was closed (it may go now), else :data:`OPENED` when
        one was opened, else 0: the sender should look again when it is not 0.

        Raises as :meth:`BatchWriter.append` does, with nothing queued."""
        batch = self._open.get((topic, partition))
        if batch is None or batch.size + size > self.max_batch_bytes:
            return self._append_new(topic, partition, key, value, headers, timestamp_ms,
                                    size, handle, sticky, now)
        batch.writer.append(key, value, timestamp_ms, headers)
        batch.handles.append(handle)
        batch.timestamps.append(timestamp_ms)
        batch.size += size
        self.buffered += size
        if batch.size >= self.max_batch_bytes:
            self._close(batch)
            return CLOSED
        return 0

    def _append_new(self, topic: str, partition: int, key: bytes | None,
                    value: bytes | None, headers: Headers, timestamp_ms: int, size: int,
                    handle: H, sticky: bool, now: float) -> int:
        """:meth:`append` when the partition has no open batch or its batch is full."""
        full = self._open.get((topic, partition))
        batch = None
        changed = OPENED
        if full is not None:
            changed = CLOSED
            self._close(full)
            if sticky:
                # Kafka's sticky partitioner moves on rather than starting a new batch
                partition = self.sticky_partition(topic, self.partition_counts.get(topic, 1))
                batch = self._open.get((topic, partition))
                if batch is not None and batch.size + size > self.max_batch_bytes:
                    self._close(batch)
                    batch = None
        if batch is not None:   # the next sticky partition's batch has room
            batch.writer.append(key, value, timestamp_ms, headers)
        else:
            batch = Batch(tp=TopicPartition(topic, partition), created=now)
            batch.writer.append(key, value, timestamp_ms, headers)  # raises: nothing queued
            self._queues.setdefault(batch.tp, deque()).append(batch)
            self._open[batch.tp] = batch
        batch.handles.append(handle)
        batch.timestamps.append(timestamp_ms)
        batch.size += size
        self.buffered += size
        if batch.size >= self.max_batch_bytes:
            self._close(batch)
            changed = CLOSED
        return changed

    def append_batch(self, tp: TopicPartition, writer: BatchWriter, size: int, handle: H,
                     *, now: float) -> None:
        """Queue a batch built whole, closed, behind ``tp``'s batches (whose open one is
        closed, so records keep the order they were given in)."""
        if not len(writer):
            raise ValueError("a batch holds at least one record")
        tp = TopicPartition(*tp)
        if (last := self._open.get(tp)) is not None:
            self._close(last)
        batch: Batch[H] = Batch(tp=tp, created=now, writer=writer, whole=handle, size=size,
                                closed=True)
        self._queues.setdefault(tp, deque()).append(batch)
        self.buffered += size

    def _close(self, batch: Batch[H]) -> None:
        """No more records go into ``batch``; unkeyed records move to the next partition."""
        batch.closed = True
        if self._open.get(batch.tp) is batch:
            del self._open[batch.tp]
        if self._sticky.get(batch.tp.topic) == batch.tp.partition:
            self._advance_sticky(batch.tp.topic, self.partition_counts.get(batch.tp.topic, 1))

    def _advance_sticky(self, topic: str, count: int) -> int:
        p = (self._round_robin.get(topic, -1) + 1) % count
        self._round_robin[topic] = p
        self._sticky[topic] = p
        return p

    # --- draining ------------------------------------------------------------------------

    def ready(self, now: float, *, limit: int, flushing: bool = False,
              ) -> tuple[list[Batch[H]], float | None]:
        """The head batch of every partition that may go now (at most ``limit`` bytes,
        at least one batch), and when the next may go (None: nothing is waiting)."""
        ready: list[Batch[H]] = []
        total = 0
        next_at: float | None = None
        for queue in self._queues.values():
            if not queue:
                continue
            batch = queue[0]
            if batch.retry_at > now:
                at = batch.retry_at
            elif batch.closed or len(queue) > 1 or flushing:
                at = now
            else:
                at = batch.created + self.linger
            if at > now:
                next_at = at if next_at is None else min(next_at, at)
                continue
            if ready and total + batch.size > limit:
                next_at = now
                break
            ready.append(batch)
            total += batch.size
        return ready, next_at

    def take(self, batches: list[Batch[H]], now: float, timeout: float) -> None:
        """``batches`` (from :meth:`ready`) leave their queues for one send; a first send
        starts each batch's ``timeout`` for retries."""
        for batch in batches:
            self._queues[batch.tp].popleft()
            if not batch.closed:
                self._close(batch)
            if batch.attempts == 0:
                batch.deadline = now + timeout
            batch.attempts += 1

    def retry(self, batch: Batch[H], error: BaseException, retry_at: float) -> None:
        """Put ``batch`` back at the head of its partition's queue, to go at ``retry_at``
        (ahead of later batches, so a partition's records keep their order)."""
        batch.last_error = error
        batch.retry_at = retry_at
        self._queues.setdefault(batch.tp, deque()).appendleft(batch)

    def complete(self, batch: Batch[H]) -> bool:
        """Mark ``batch`` done and free its bytes; False if it already was."""
        if batch.done:
            return False
        batch.done = True
        self.buffered -= batch.size
        return True

    def queued(self) -> Iterator[Batch[H]]:
        """Every batch still in a queue, oldest first per partition."""
        for queue in self._queues.values():
            yield from queue

    def pop_all(self) -> list[Batch[H]]:
        """Empty every queue (the producer is closing); returns what was queued."""
        out = [b for q in self._queues.values() for b in q]
        for queue in self._queues.values():
            queue.clear()
        self._open.clear()
        return out
