"""The ``__group_events`` value (docs/protocol.md §9), written once for both sides.

The broker's coordinator makes these events and the Spark report reads them back; the
two used to keep their own copies of the schema, and the report parsed a static member's
replacement out of free text. Here is the one definition: the event types, the reasons,
the map's keys and types, and the decoder that validates a value read from the log.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, get_args

from groupwire.protocol.types import TopicPartitions

__all__ = [
    "EVENT_TYPES",
    "EventDecodeError",
    "EventType",
    "GroupEvent",
    "event_from_value",
]

EventType = Literal[
    "member_joined",
    "member_left",
    "member_expired",
    "poll_interval_expired",
    "connection_lost",
    "rebalance_started",
    "rebalance_completed",
    "commit_fenced",
    "group_emptied",
    "group_deleted",
]

EVENT_TYPES: Final[frozenset[str]] = frozenset(get_args(EventType))

MEMBER_JOINED: Final = "member_joined"

# reasons of member_expired and group_deleted
SESSION_EXPIRED: Final = "session-expired"
CONNECTION_LOST: Final = "connection-lost"
REBALANCE_TIMEOUT: Final = "rebalance-timeout"
SYNC_TIMEOUT: Final = "sync-timeout"
DELETE_GROUPS: Final = "delete-groups"
OFFSETS_EXPIRED: Final = "offsets-expired"

LEGACY_REPLACES_PREFIX: Final = "replaces "
"""Before ``replaced_member_id`` existed, a static member's replacement was only told in
``detail`` as ``replaces <old id>``; values written then are still read that way."""


class EventDecodeError(ValueError):
    """A record value that is not a §9 event map."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupEvent:
    """One §9 event; ``member_id`` is the subject (or the trigger of a rebalance)."""

    type: EventType
    group_id: str
    generation_id: int
    member_id: str | None = None
    group_instance_id: str | None = None
    reason: str | None = None
    detail: str | None = None
    ts_ms: int
    duration_ms: int | None = None
    partitions: TopicPartitions = field(default_factory=list)
    replaced_member_id: str | None = None
    """``member_joined`` of a static member: the member id it took over."""

    def to_value(self) -> dict[str, object]:
        """The msgpack-able map of §9, with exactly its keys."""
        return {
            "type": self.type,
            "group_id": self.group_id,
            "generation_id": self.generation_id,
            "member_id": self.member_id,
            "group_instance_id": self.group_instance_id,
            "reason": self.reason,
            "detail": self.detail,
            "ts_ms": self.ts_ms,
            "duration_ms": self.duration_ms,
            "partitions": [[topic, list(parts)] for topic, parts in self.partitions],
            "replaced_member_id": self.replaced_member_id,
        }


def event_from_value(raw: Mapping[str, Any], *, ts_ms: int | None = None,
                     group_id: str | None = None) -> GroupEvent:
    """Validate a decoded §9 map. ``ts_ms`` (the record's timestamp) and ``group_id``
    (the record's key) stand in for a missing ``ts_ms`` / ``group_id``: both are written
    from the same event. Unknown keys are ignored (§2 rule 1) and so is an unknown event
    type (a newer broker's: it is kept as read); a missing type or group id, or a value
    of the wrong type raises :class:`EventDecodeError`."""
    event_type = _opt_str(raw, "type")
    group = _opt_str(raw, "group_id") or group_id
    if event_type is None or group is None:
        raise EventDecodeError("missing type or group_id")
    ts = _opt_int(raw, "ts_ms")
    if ts is None:
        if ts_ms is None:
            raise EventDecodeError("missing ts_ms")
        ts = ts_ms
    generation = _opt_int(raw, "generation_id")
    detail = _opt_str(raw, "detail")
    replaced = _opt_str(raw, "replaced_member_id")
    if (replaced is None and event_type == MEMBER_JOINED and detail is not None
            and detail.startswith(LEGACY_REPLACES_PREFIX)):
        replaced = detail[len(LEGACY_REPLACES_PREFIX):] or None
    return GroupEvent(
        type=event_type,  # type: ignore[arg-type]  # a newer broker's type is kept as read
        group_id=group,
        generation_id=-1 if generation is None else generation,
        member_id=_opt_str(raw, "member_id"),
        group_instance_id=_opt_str(raw, "group_instance_id"),
        reason=_opt_str(raw, "reason"),
        detail=detail,
        ts_ms=ts,
        duration_ms=_opt_int(raw, "duration_ms"),
        partitions=_partitions(raw.get("partitions")),
        replaced_member_id=replaced,
    )


def _opt_str(raw: Mapping[str, Any], name: str) -> str | None:
    value = raw.get(name)
    if value is None or isinstance(value, str):
        return value
    raise EventDecodeError(f"{name}: expected str, got {type(value).__name__}")


def _opt_int(raw: Mapping[str, Any], name: str) -> int | None:
    value = raw.get(name)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise EventDecodeError(f"{name}: expected int, got {type(value).__name__}")


def _partitions(value: object) -> TopicPartitions:
    """``[[topic, [int]]]``, each entry checked."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise EventDecodeError("partitions: expected [[topic, [int]]]")
    out: TopicPartitions = []
    for entry in value:
        if (not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[0], str)
                or not isinstance(entry[1], list)):
            raise EventDecodeError("partitions: expected [[topic, [int]]]")
        for p in entry[1]:
            if not isinstance(p, int) or isinstance(p, bool):
                raise EventDecodeError(f"partitions: {entry[0]}: expected int partitions")
        out.append((entry[0], list(entry[1])))
    return out
