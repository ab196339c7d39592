"""An idempotent producer's numbering: its producer id and epoch, and where each partition's
records are numbered next (docs/protocol.md §5.4).

Pure bookkeeping, no I/O: the producer asks InitProducerId and hands the answer to
:meth:`ProducerSequences.reset`, and numbers each batch with :meth:`~ProducerSequences.assign`
when it first sends it (a batch the application filled through ``create_batch()`` is
built before its partition is known, so a batch cannot be numbered when it is created).
The producer keeps one batch per partition in flight, so the batch a partition numbered
last is the only one that may come back unsent.

Rules, as Kafka's idempotent producer keeps them:

* a partition's records are numbered from 0; a batch takes the partition's next number
  for its first record and moves it on by its record count, modulo 2**31 (after
  2**31 - 1 comes 0);
* a new producer id (and epoch) numbers every partition from 0 again;
* a batch the broker refused outright (nothing of it stored) gives its numbers back:
  :meth:`~ProducerSequences.give_back` moves the partition back to the batch's first
  number, if the batch was numbered last there, under the current producer id.
"""

from __future__ import annotations

from typing import Final, NamedTuple

from groupwire.client.types import TopicPartition

__all__ = ["SEQUENCE_MODULUS", "BatchSequence", "ProducerSequences"]

SEQUENCE_MODULUS: Final = 1 << 31
"""Sequence numbers are int32 and never negative: record ``i`` of a batch is numbered
``(base_sequence + i) % SEQUENCE_MODULUS``."""

NO_PRODUCER_ID: Final = -1


class BatchSequence(NamedTuple):
    """What one batch was numbered with: its header's producer fields."""

    producer_id: int
    producer_epoch: int
    base_sequence: int


class ProducerSequences:
    """The producer id and epoch, and each partition's next sequence number."""

    __slots__ = ("_next", "producer_epoch", "producer_id")

    def __init__(self) -> None:
        self.producer_id = NO_PRODUCER_ID
        """-1 until :meth:`reset` gives one."""
        self.producer_epoch = NO_PRODUCER_ID
        self._next: dict[TopicPartition, int] = {}

    @property
    def has_id(self) -> bool:
        """Whether batches can be numbered (a producer id was given)."""
        return self.producer_id >= 0

    def reset(self, producer_id: int, producer_epoch: int) -> None:
        """A new producer id and epoch: every partition is numbered from 0 again."""
        if producer_id < 0 or producer_epoch < 0:
            raise ValueError(f"producer id {producer_id}, epoch {producer_epoch}: "
                             f"both must be >= 0")
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self._next.clear()

    def next_sequence(self, tp: TopicPartition) -> int:
        """The number ``tp``'s next batch's first record gets."""
        return self._next.get(tp, 0)

    def assign(self, tp: TopicPartition, count: int) -> BatchSequence:
        """Number a batch of ``count`` records (>= 1) about to go to ``tp`` for the first
        time: its producer fields; the partition moves on by ``count``."""
        if not self.has_id:
            raise ValueError("no producer id yet: reset() first")
        if count < 1:
            raise ValueError(f"a batch holds at least one record, not {count}")
        base = self._next.get(tp, 0)
        self._next[tp] = (base + count) % SEQUENCE_MODULUS
        return BatchSequence(self.producer_id, self.producer_epoch, base)

    def give_back(self, tp: TopicPartition, sequence: BatchSequence, count: int) -> bool:
        """A batch numbered ``sequence`` (of ``count`` records) that the broker did not
        store: ``tp`` numbers its next batch from the same first number, when that batch
        was the last numbered there under the current producer id and epoch (True);
        otherwise nothing changes (False)."""
        if (sequence.producer_id != self.producer_id
                or sequence.producer_epoch != self.producer_epoch
                or self._next.get(tp) != (sequence.base_sequence + count) % SEQUENCE_MODULUS):
            return False
        self._next[tp] = sequence.base_sequence
        return True
