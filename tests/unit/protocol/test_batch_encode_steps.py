"""``encode_kv_batch_steps`` (issue 14: a large OffsetCommit's batch is packed between
loop turns) makes ``encode_batch``'s bytes exactly, a few rows a step."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from groupwire.protocol.batches import (
    ENCODE_ROWS,
    BatchRecord,
    decode_records,
    encode_batch,
    encode_kv_batch_steps,
)
from groupwire.protocol.errors import LocalProtocolError
from groupwire.protocol.steps import run_steps
from tests.steps import steps_taken

Item = tuple[bytes | None, bytes | None, int]

items = st.lists(st.tuples(st.none() | st.binary(max_size=40), st.none() | st.binary(max_size=40),
                           st.integers(-(2**40), 2**40)), min_size=1, max_size=60)


def _old(rows: list[Item], base_offset: int = 0) -> bytes:
    return encode_batch([BatchRecord(value=v, key=k, timestamp_ms=ts) for k, v, ts in rows],
                        base_offset)


@given(items, st.integers(1, 70), st.integers(0, 2**64 - 1))
def test_the_bytes_are_encode_batchs(rows: list[Item], per_step: int, base: int) -> None:
    assert run_steps(encode_kv_batch_steps(rows, base, rows_per_step=per_step)) == _old(
        rows, base)


@pytest.mark.parametrize("count", [15, 16, 65_535, 65_536])  # each array header width
def test_large_batches_yield_between_pieces(count: int) -> None:
    rows: list[Item] = [(b"k%d" % i, b"v", 1_700_000_000_000 + i % 3) for i in range(count)]
    yields, batch = steps_taken(encode_kv_batch_steps(rows))
    assert yields == (count - 1) // ENCODE_ROWS
    assert batch == _old(rows)
    if count == 16:
        assert [(r.key, r.timestamp_ms) for r in decode_records(batch)] == [
            (k, ts) for k, _, ts in rows]


def test_what_encode_batch_refuses_is_refused() -> None:
    with pytest.raises(LocalProtocolError):
        run_steps(encode_kv_batch_steps([]))
    with pytest.raises(LocalProtocolError):
        run_steps(encode_kv_batch_steps([(b"k", b"v", 0)], -1))
    with pytest.raises(LocalProtocolError):
        run_steps(encode_kv_batch_steps([(b"k", b"v", 0), (b"k", b"v", 2**64 + 5)]))
