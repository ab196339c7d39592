"""A produced record's arrays are bounded, so checking one record stays cheap (issue 14):
a record of millions of headers took ~2 s of the event loop to check in one piece."""

from __future__ import annotations

import pytest

from groupwire.protocol.batches import (
    MAX_RECORD_ARRAY,
    BatchRecord,
    MalformedRecordError,
    check_records,
    encode_batch,
    validate_batch,
)


def _batch(headers: int) -> bytes:
    return encode_batch([
        BatchRecord(value=b"ok", key=None, headers=[], timestamp_ms=1),
        BatchRecord(value=b"v", key=None, headers=[("h", None)] * headers, timestamp_ms=1),
    ])


def test_a_record_with_headers_up_to_the_limit_is_a_record() -> None:
    data = _batch(MAX_RECORD_ARRAY)
    check_records(data, validate_batch(data))


def test_a_record_with_more_headers_is_refused_naming_record_and_limit() -> None:
    data = _batch(MAX_RECORD_ARRAY + 1)
    with pytest.raises(MalformedRecordError) as refused:
        check_records(data, validate_batch(data))
    assert [e.batch_index for e in refused.value.record_errors] == [1]
    assert str(refused.value).startswith("record 1: does not unpack: ")
    assert f"{MAX_RECORD_ARRAY + 1} exceeds max_array_len({MAX_RECORD_ARRAY})" in str(
        refused.value)
