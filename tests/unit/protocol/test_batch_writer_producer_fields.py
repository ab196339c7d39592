"""``BatchWriter.build`` given the producer fields (an idempotent producer numbers a batch
when it first sends it, after its records were packed): the same bytes as
:func:`encode_batch` with those fields, the spec's v2 vector included, built once."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupwire.protocol.batches import (
    BATCH_V0,
    BATCH_V1,
    BATCH_V2,
    BatchRecord,
    BatchWriter,
    encode_batch,
    validate_batch,
)
from groupwire.protocol.errors import LocalProtocolError
from tests.unit.protocol.test_batch_writer import records_st
from tests.unit.protocol.test_batches_v2 import PRODUCER, RECORDS, V2_VECTOR


def filled(records: list[BatchRecord] = RECORDS, **kwargs: int) -> BatchWriter:
    writer = BatchWriter(**kwargs)
    for r in records:
        writer.append(r.key, r.value, r.timestamp_ms, r.headers)
    return writer


def test_fields_given_at_build_make_the_spec_vector() -> None:
    writer = filled()
    assert writer.version == BATCH_V1
    assert writer.build(**PRODUCER).hex() == V2_VECTOR
    assert writer.version == BATCH_V2


@settings(max_examples=100, deadline=None)
@given(records=records_st, producer_id=st.integers(0, (1 << 63) - 1),
       producer_epoch=st.integers(0, (1 << 15) - 1),
       base_sequence=st.integers(0, (1 << 31) - 1))
def test_fields_given_at_build_make_encode_batchs_bytes(
        records: list[BatchRecord], producer_id: int, producer_epoch: int,
        base_sequence: int) -> None:
    fields = {"producer_id": producer_id, "producer_epoch": producer_epoch,
              "base_sequence": base_sequence}
    data = filled(records).build(**fields)
    assert data == encode_batch(records, **fields)
    header = validate_batch(data)
    assert (header.version, header.producer_id, header.producer_epoch,
            header.base_sequence) == (BATCH_V2, producer_id, producer_epoch, base_sequence)


def test_build_time_fields_take_the_place_of_the_constructors() -> None:
    writer = filled(producer_id=1, producer_epoch=0, base_sequence=0)
    assert writer.build(**PRODUCER).hex() == V2_VECTOR


def test_a_built_batch_keeps_its_bytes_and_refuses_other_fields() -> None:
    writer = filled()
    first = writer.build(**PRODUCER)
    assert writer.build() is first                 # a retry resends the same bytes
    assert writer.build(**PRODUCER) is first
    with pytest.raises(LocalProtocolError, match="other producer fields"):
        writer.build(**{**PRODUCER, "base_sequence": 18})
    plain = filled()
    built = plain.build()
    assert validate_batch(built).version == BATCH_V1
    with pytest.raises(LocalProtocolError, match="other producer fields"):
        plain.build(**PRODUCER)
    assert plain.build() is built


@pytest.mark.parametrize("fields", [
    {"producer_epoch": 3},                                # an epoch without an id
    {"producer_id": 4000, "producer_epoch": -1, "base_sequence": 0},
    {"producer_id": 4000, "producer_epoch": 0, "base_sequence": 1 << 31},
    {"producer_id": -2, "producer_epoch": 0, "base_sequence": 0},
])
def test_bad_fields_at_build_are_refused_and_leave_the_writer_as_it_was(
        fields: dict[str, int]) -> None:
    writer = filled()
    with pytest.raises(LocalProtocolError):
        writer.build(**fields)
    assert writer.version == BATCH_V1
    assert writer.build(**PRODUCER).hex() == V2_VECTOR


def test_a_v0_writer_has_no_room_for_producer_fields() -> None:
    writer = filled(version=BATCH_V0)
    with pytest.raises(LocalProtocolError, match="v0"):
        writer.build(**PRODUCER)
    assert validate_batch(writer.build()).version == BATCH_V0
