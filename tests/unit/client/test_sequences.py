"""An idempotent producer's numbering (client/sequences.py): per partition from 0, moved on
by each batch's record count modulo 2**31, from 0 again under a new producer id, and a
refused batch's numbers given back only when it was the partition's last."""

from __future__ import annotations

import pytest

from groupwire.client.sequences import SEQUENCE_MODULUS, BatchSequence, ProducerSequences
from groupwire.client.types import TopicPartition

A = TopicPartition("t", 0)
B = TopicPartition("t", 1)


def numbered(producer_id: int = 7, epoch: int = 0) -> ProducerSequences:
    seqs = ProducerSequences()
    seqs.reset(producer_id, epoch)
    return seqs


def test_nothing_is_numbered_before_a_producer_id() -> None:
    seqs = ProducerSequences()
    assert not seqs.has_id and seqs.producer_id == -1
    with pytest.raises(ValueError, match="producer id"):
        seqs.assign(A, 1)
    with pytest.raises(ValueError):
        seqs.reset(-1, 0)
    with pytest.raises(ValueError):
        seqs.reset(3, -1)


def test_each_partition_counts_its_own_records_from_zero() -> None:
    seqs = numbered(producer_id=40, epoch=2)
    assert seqs.assign(A, 5) == BatchSequence(40, 2, 0)
    assert seqs.assign(B, 3) == BatchSequence(40, 2, 0)
    assert seqs.assign(A, 1) == BatchSequence(40, 2, 5)
    assert seqs.assign(A, 10) == BatchSequence(40, 2, 6)
    assert seqs.assign(B, 2) == BatchSequence(40, 2, 3)
    assert (seqs.next_sequence(A), seqs.next_sequence(B)) == (16, 5)
    with pytest.raises(ValueError, match="at least one record"):
        seqs.assign(A, 0)
    assert seqs.next_sequence(A) == 16


def test_the_sequence_wraps_at_two_to_the_31() -> None:
    seqs = numbered()
    first = seqs.assign(A, SEQUENCE_MODULUS - 3)
    assert first.base_sequence == 0
    assert seqs.assign(A, 5).base_sequence == SEQUENCE_MODULUS - 3  # records ..., 2**31-1, 0, 1
    assert seqs.next_sequence(A) == 2
    assert seqs.assign(A, 1).base_sequence == 2


def test_a_new_producer_id_numbers_every_partition_from_zero() -> None:
    seqs = numbered(producer_id=1)
    seqs.assign(A, 4)
    seqs.assign(B, 9)
    seqs.reset(2, 0)
    assert seqs.producer_id == 2
    assert seqs.assign(A, 1) == BatchSequence(2, 0, 0)
    assert seqs.assign(B, 1) == BatchSequence(2, 0, 0)


def test_a_refused_batch_gives_its_numbers_back_only_when_it_was_the_last() -> None:
    seqs = numbered(producer_id=5)
    seqs.assign(A, 3)
    refused = seqs.assign(A, 4)
    assert seqs.give_back(A, refused, 4)
    assert seqs.next_sequence(A) == 3
    assert seqs.assign(A, 2).base_sequence == 3  # the next batch takes them


def test_numbers_are_not_given_back_out_of_turn() -> None:
    seqs = numbered(producer_id=5)
    older = seqs.assign(A, 3)
    seqs.assign(A, 4)
    assert not seqs.give_back(A, older, 3)       # another batch was numbered after it
    assert seqs.next_sequence(A) == 7
    stale = seqs.assign(B, 2)
    seqs.reset(6, 0)
    assert not seqs.give_back(B, stale, 2)       # numbered under the old producer id
    assert seqs.next_sequence(B) == 0
    wrapped = numbered()
    wrapped.assign(A, SEQUENCE_MODULUS - 1)
    last = wrapped.assign(A, 3)                  # 2**31-1, 0, 1
    assert wrapped.give_back(A, last, 3)
    assert wrapped.next_sequence(A) == SEQUENCE_MODULUS - 1
