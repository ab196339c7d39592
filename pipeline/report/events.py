"""``__group_events`` values (docs/protocol.md §9) as typed rows.

Pure: no Spark, no I/O, so the decoding rules are unit-tested on their own and the same
function runs inside Spark's Python workers. A value that is not a §9 map becomes a row of
type ``undecodable`` carrying the reason, so the report counts it instead of hiding it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import msgpack

from groupwire.protocol.group_events import EventDecodeError, event_from_value

MEMBER_JOINED: Final = "member_joined"
MEMBER_LEFT: Final = "member_left"
MEMBER_EXPIRED: Final = "member_expired"
POLL_INTERVAL_EXPIRED: Final = "poll_interval_expired"
CONNECTION_LOST: Final = "connection_lost"
REBALANCE_STARTED: Final = "rebalance_started"
REBALANCE_COMPLETED: Final = "rebalance_completed"
COMMIT_FENCED: Final = "commit_fenced"
GROUP_EMPTIED: Final = "group_emptied"
GROUP_DELETED: Final = "group_deleted"
UNDECODABLE: Final = "undecodable"

KNOWN_TYPES: Final = frozenset({
    MEMBER_JOINED, MEMBER_LEFT, MEMBER_EXPIRED, POLL_INTERVAL_EXPIRED, CONNECTION_LOST,
    REBALANCE_STARTED, REBALANCE_COMPLETED, COMMIT_FENCED, GROUP_EMPTIED, GROUP_DELETED,
})
REMOVAL_TYPES: Final = frozenset({MEMBER_LEFT, MEMBER_EXPIRED, POLL_INTERVAL_EXPIRED})
"""Events after which the member is no longer in the group (its partitions are free)."""


TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class EventRow:
    """One event, flattened for tables: partitions are ``(topic, partition)`` pairs."""

    offset: int
    ts_ms: int
    type: str
    group_id: str
    generation_id: int = -1
    member_id: str | None = None
    group_instance_id: str | None = None
    reason: str | None = None
    detail: str | None = None
    duration_ms: int | None = None
    partitions: tuple[TopicPartition, ...] = field(default_factory=tuple)
    replaced_member_id: str | None = None
    """The older member id a static ``member_joined`` replaced, if any."""

    def as_record(self) -> dict[str, Any]:
        """The row as the report's ``events`` schema holds it (see ``tables.EVENT_SCHEMA``)."""
        return {
            "offset": self.offset,
            "ts_ms": self.ts_ms,
            "event_time": self.ts_ms * 1000,  # microseconds: Spark's timestamp unit
            "type": self.type,
            "group_id": self.group_id,
            "generation_id": self.generation_id,
            "member_id": self.member_id,
            "group_instance_id": self.group_instance_id,
            "reason": self.reason,
            "detail": self.detail,
            "duration_ms": self.duration_ms,
            "partitions": [{"topic": t, "partition": p} for t, p in self.partitions],
            "replaced_member_id": self.replaced_member_id,
        }


def decode_event(value: bytes | None, offset: int, timestamp_ms: int,
                 key: bytes | None = None) -> EventRow:
    """Decode one record of ``__group_events``.

    ``timestamp_ms`` (the record's) stands in when the map has no ``ts_ms``, and ``key``
    (the group id) when it has no ``group_id``: both are written from the same event.
    Unknown keys are ignored (§2 rule 1); a wrong type raises ``EventDecodeError``.
    """
    if value is None:
        raise EventDecodeError("no value")
    try:
        raw = msgpack.unpackb(value, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated classes
        raise EventDecodeError(f"not msgpack ({type(exc).__name__}: {exc})") from exc
    if not isinstance(raw, dict):
        raise EventDecodeError(f"expected a map, got {type(raw).__name__}")
    event = event_from_value(
        raw, ts_ms=timestamp_ms,
        group_id=None if key is None else key.decode("utf-8", errors="replace"))
    return EventRow(
        offset=offset,
        ts_ms=event.ts_ms,
        type=event.type,
        group_id=event.group_id,
        generation_id=event.generation_id,
        member_id=event.member_id,
        group_instance_id=event.group_instance_id,
        reason=event.reason,
        detail=event.detail,
        duration_ms=event.duration_ms,
        partitions=tuple(sorted((t, p) for t, parts in event.partitions for p in parts)),
        replaced_member_id=event.replaced_member_id,
    )


def decode_or_mark(value: bytes | None, offset: int, timestamp_ms: int,
                   key: bytes | None = None) -> EventRow:
    """``decode_event``, or an ``undecodable`` row naming the offset and the reason."""
    try:
        return decode_event(value, offset, timestamp_ms, key)
    except EventDecodeError as exc:
        group = key.decode("utf-8", errors="replace") if key is not None else ""
        return EventRow(offset=offset, ts_ms=timestamp_ms, type=UNDECODABLE, group_id=group,
                        detail=f"offset {offset}: {exc}")


def decode_all(records: Iterable[tuple[bytes | None, bytes | None, int, int]],
               ) -> Iterator[EventRow]:
    """``(key, value, offset, timestamp_ms)`` records to rows, in the order given."""
    for key, value, offset, timestamp_ms in records:
        yield decode_or_mark(value, offset, timestamp_ms, key)


def event_from_record(rec: dict[str, Any]) -> EventRow:
    """The inverse of ``EventRow.as_record`` (rows coming back from Spark)."""
    return EventRow(
        offset=rec["offset"], ts_ms=rec["ts_ms"], type=rec["type"], group_id=rec["group_id"],
        generation_id=rec["generation_id"], member_id=rec["member_id"],
        group_instance_id=rec["group_instance_id"], reason=rec["reason"],
        detail=rec["detail"], duration_ms=rec["duration_ms"],
        partitions=tuple((p["topic"], p["partition"]) for p in rec["partitions"] or ()),
        replaced_member_id=rec.get("replaced_member_id"),
    )
