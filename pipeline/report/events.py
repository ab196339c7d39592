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

REPLACES_PREFIX: Final = "replaces "
"""``detail`` of a static member's ``member_joined`` that took over an older member id."""

TopicPartition = tuple[str, int]


class EventDecodeError(ValueError):
    """A record value that is not a §9 event map."""


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

    @property
    def replaced_member_id(self) -> str | None:
        """The older member id a static ``member_joined`` replaced, if any."""
        if self.type == MEMBER_JOINED and self.detail and self.detail.startswith(REPLACES_PREFIX):
            return self.detail[len(REPLACES_PREFIX):] or None
        return None

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
    group_id = _opt_str(raw, "group_id")
    if group_id is None and key is not None:
        group_id = key.decode("utf-8", errors="replace")
    event_type = _opt_str(raw, "type")
    if event_type is None or group_id is None:
        raise EventDecodeError("missing type or group_id")
    ts = _opt_int(raw, "ts_ms")
    generation = _opt_int(raw, "generation_id")
    return EventRow(
        offset=offset,
        ts_ms=timestamp_ms if ts is None else ts,
        type=event_type,
        group_id=group_id,
        generation_id=-1 if generation is None else generation,
        member_id=_opt_str(raw, "member_id"),
        group_instance_id=_opt_str(raw, "group_instance_id"),
        reason=_opt_str(raw, "reason"),
        detail=_opt_str(raw, "detail"),
        duration_ms=_opt_int(raw, "duration_ms"),
        partitions=_partitions(raw.get("partitions")),
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


def _opt_str(raw: dict[str, Any], name: str) -> str | None:
    value = raw.get(name)
    if value is None or isinstance(value, str):
        return value
    raise EventDecodeError(f"{name}: expected str, got {type(value).__name__}")


def _opt_int(raw: dict[str, Any], name: str) -> int | None:
    value = raw.get(name)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise EventDecodeError(f"{name}: expected int, got {type(value).__name__}")


def _partitions(value: object) -> tuple[TopicPartition, ...]:
    """``[[topic, [int]]]`` flattened to sorted ``(topic, partition)`` pairs."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise EventDecodeError("partitions: expected [[topic, [int]]]")
    out: list[TopicPartition] = []
    for entry in value:
        if (not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[0], str)
                or not isinstance(entry[1], list)):
            raise EventDecodeError("partitions: expected [[topic, [int]]]")
        for p in entry[1]:
            if not isinstance(p, int) or isinstance(p, bool):
                raise EventDecodeError(f"partitions: {entry[0]}: expected int partitions")
            out.append((entry[0], p))
    return tuple(sorted(out))


def event_from_record(rec: dict[str, Any]) -> EventRow:
    """The inverse of ``EventRow.as_record`` (rows coming back from Spark)."""
    return EventRow(
        offset=rec["offset"], ts_ms=rec["ts_ms"], type=rec["type"], group_id=rec["group_id"],
        generation_id=rec["generation_id"], member_id=rec["member_id"],
        group_instance_id=rec["group_instance_id"], reason=rec["reason"],
        detail=rec["detail"], duration_ms=rec["duration_ms"],
        partitions=tuple((p["topic"], p["partition"]) for p in rec["partitions"] or ()),
    )
