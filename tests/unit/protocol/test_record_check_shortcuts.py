"""The produce-time row check (``check_records``) takes column shortcuts for speed: an
offset_delta column is typed by its sum and its first two items, a header column by zip.
These rows sit exactly where a shortcut could let one through, in the first chunk and in a
later one."""

from __future__ import annotations

import gc

import msgpack
import pytest

from groupwire.protocol.batches import (
    RECORD_CHUNK,
    BatchRecord,
    MalformedRecordError,
    check_records,
    encode_batch,
    validate_batch,
)
from tests.unit.protocol.test_batch_validation import batch_of_rows, good_row, pack


def row_with(index: int, **fields: object) -> bytes:
    row: list[object] = [index, 0, None, b"v", []]
    for name, value in fields.items():
        row[["delta", "ts", "key", "value", "headers"].index(name)] = value
    return pack(row)


SNEAKY: dict[str, object] = {
    "float-delta": {"delta": None},          # filled in with float(index)
    "bool-ts": {"ts": True},
    "str-key-among-nils": {"key": "k"},
    "header-triple": {"headers": [["h", b"1", None]]},
    "header-single": {"headers": [["h"]]},
    "header-empty-pair": {"headers": [[]]},
    "empty-str-headers": {"headers": ""},
    "empty-bin-headers": {"headers": b""},
    "empty-map-headers": {"headers": {}},
    "map-header-pair": {"headers": [{"a": b"x", "b": None}]},
    "ext-header-pair": {"headers": [msgpack.ExtType(1, b"x")]},
}


@pytest.mark.parametrize("where", [2, RECORD_CHUNK + 7])
@pytest.mark.parametrize("name", sorted(SNEAKY))
def test_a_row_that_defeats_a_shortcut_is_still_refused(name: str, where: int) -> None:
    n = where + 3
    fields = dict(SNEAKY[name])  # type: ignore[call-overload]
    if name == "float-delta":
        fields["delta"] = float(where)
    rows = [good_row(i) for i in range(n)]
    rows[where] = row_with(where, **fields)
    data = batch_of_rows(rows)
    with pytest.raises(MalformedRecordError) as info:
        check_records(data, validate_batch(data))
    assert [e.batch_index for e in info.value.record_errors] == [where]


@pytest.mark.parametrize("where", [0, 1])
def test_a_bool_offset_delta_equal_to_its_index_is_refused(where: int) -> None:
    rows = [good_row(i) for i in range(3)]
    rows[where] = row_with(where, delta=bool(where))   # False == 0, True == 1
    data = batch_of_rows(rows)
    with pytest.raises(MalformedRecordError):
        check_records(data, validate_batch(data))


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_left_as_it_was_found(enabled: bool) -> None:
    good = encode_batch([BatchRecord(value=b"v", headers=[("h", b"1")])] * 3)
    bad = batch_of_rows([good_row(0), pack([1])])
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        check_records(good, validate_batch(good))
        assert gc.isenabled() is enabled
        with pytest.raises(MalformedRecordError):
            check_records(bad, validate_batch(bad))
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
