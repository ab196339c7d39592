"""Decoding ``__group_events`` values (docs/protocol.md §9) into rows, without Spark."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from groupwire.broker.coordinator.events import GroupEvent
from groupwire.pipeline.report.events import (
    UNDECODABLE,
    EventDecodeError,
    EventRow,
    decode_all,
    decode_event,
    decode_or_mark,
    event_from_record,
)


def pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def test_the_brokers_own_events_round_trip() -> None:
    """What the coordinator writes (GroupEvent.to_value) is what the report reads."""
    event = GroupEvent(type="rebalance_completed", group_id="billing", generation_id=4,
                       member_id="m-1", reason="connection-lost", detail=None,
                       ts_ms=1_732_250_000_123, duration_ms=250,
                       partitions=[("orders", [2, 0]), ("audit", [1])])
    row = decode_event(pack(event.to_value()), offset=17, timestamp_ms=1)
    assert row == EventRow(offset=17, ts_ms=1_732_250_000_123, type="rebalance_completed",
                           group_id="billing", generation_id=4, member_id="m-1",
                           group_instance_id=None, reason="connection-lost", detail=None,
                           duration_ms=250,
                           partitions=(("audit", 1), ("orders", 0), ("orders", 2)))


def test_unknown_keys_are_ignored_and_absent_ones_take_defaults() -> None:
    row = decode_event(pack({"type": "group_emptied", "group_id": "g", "future": [1, 2]}),
                       offset=3, timestamp_ms=1_700_000_000_000)
    assert row.ts_ms == 1_700_000_000_000  # the record's timestamp stands in for ts_ms
    assert (row.generation_id, row.member_id, row.duration_ms, row.partitions) == (
        -1, None, None, ())


def test_the_key_stands_in_for_a_missing_group_id() -> None:
    row = decode_event(pack({"type": "member_joined", "ts_ms": 5}), 0, 0, key=b"orders-app")
    assert row.group_id == "orders-app"


@pytest.mark.parametrize(("value", "message"), [
    (None, "no value"),
    (b"\xc1", "not msgpack"),
    (pack([1, 2]), "expected a map"),
    (pack({"group_id": "g"}), "missing type"),
    (pack({"type": "member_left", "group_id": "g", "ts_ms": "soon"}), "ts_ms: expected int"),
    (pack({"type": "member_left", "group_id": "g", "generation_id": True}), "generation_id"),
    (pack({"type": "member_left", "group_id": "g", "member_id": 7}), "member_id: expected str"),
    (pack({"type": "member_left", "group_id": "g", "partitions": [["t", ["0"]]]}),
     "expected int partitions"),
    (pack({"type": "member_left", "group_id": "g", "partitions": {"t": [0]}}), "partitions"),
    (pack({"type": "member_left", "group_id": "g", "partitions": [["t"]]}), "partitions"),
])
def test_malformed_values_are_refused_with_the_reason(value: bytes | None,
                                                      message: str) -> None:
    with pytest.raises(EventDecodeError, match=message):
        decode_event(value, offset=9, timestamp_ms=0)


def test_undecodable_values_become_marked_rows_not_gaps() -> None:
    rows = list(decode_all([
        (b"g", pack({"type": "member_joined", "group_id": "g", "ts_ms": 10}), 0, 10),
        (b"g", b"\x00garbage", 1, 11),
        (b"g", pack({"type": "group_emptied", "group_id": "g", "ts_ms": 12}), 2, 12),
    ]))
    assert [r.type for r in rows] == ["member_joined", UNDECODABLE, "group_emptied"]
    bad = rows[1]
    assert (bad.offset, bad.ts_ms, bad.group_id) == (1, 11, "g")
    assert bad.detail is not None and bad.detail.startswith("offset 1:")


def test_a_value_that_is_not_utf8_is_marked() -> None:
    row = decode_or_mark(b"\xa2\xff\xfe", offset=4, timestamp_ms=0, key=None)
    assert row.type == UNDECODABLE and row.group_id == ""


def test_static_replacement_is_a_typed_field() -> None:
    event = GroupEvent(type="member_joined", group_id="g", generation_id=2,
                       member_id="host-1-b", group_instance_id="host-1",
                       detail="replaces host-1-a", ts_ms=5,
                       replaced_member_id="host-1-a")
    row = decode_event(pack(event.to_value()), offset=0, timestamp_ms=0)
    assert row.replaced_member_id == "host-1-a"
    assert event_from_record(row.as_record()) == row
    # the field, not the text, is what counts
    other = decode_event(pack({**event.to_value(), "detail": "replaces someone-else"}), 0, 0)
    assert other.replaced_member_id == "host-1-a"


def test_static_replacement_names_the_replaced_member() -> None:
    """Values written before ``replaced_member_id`` existed say it in ``detail``."""
    joined = decode_event(pack({"type": "member_joined", "group_id": "g", "ts_ms": 1,
                                "member_id": "host-1-b", "group_instance_id": "host-1",
                                "detail": "replaces host-1-a"}), 0, 0)
    assert joined.replaced_member_id == "host-1-a"
    plain = decode_event(pack({"type": "member_joined", "group_id": "g", "ts_ms": 1,
                               "detail": "replaces "}), 0, 0)
    assert plain.replaced_member_id is None


def test_records_for_spark_round_trip() -> None:
    row = EventRow(offset=2, ts_ms=1500, type="member_left", group_id="g", generation_id=3,
                   member_id="m", reason="shutting down", partitions=(("t", 0), ("t", 4)))
    rec = row.as_record()
    assert rec["event_time"] == 1_500_000  # microseconds
    assert rec["partitions"] == [{"topic": "t", "partition": 0},
                                 {"topic": "t", "partition": 4}]
    assert event_from_record(rec) == row


def test_the_report_knows_every_event_type_the_broker_emits() -> None:
    from groupwire.broker.coordinator.events import EVENT_TYPES
    from groupwire.pipeline.report.events import KNOWN_TYPES

    assert KNOWN_TYPES == EVENT_TYPES
