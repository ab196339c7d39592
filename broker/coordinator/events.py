"""Group events (docs/protocol.md §9): what happened to a group, for logs, metrics and
``__group_events``. Events never delay replies; the shell writes them best effort."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal, get_args

from groupwire.protocol.types import TopicPartitions

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

# reasons of member_expired and group_deleted
SESSION_EXPIRED: Final = "session-expired"
CONNECTION_LOST: Final = "connection-lost"
REBALANCE_TIMEOUT: Final = "rebalance-timeout"
SYNC_TIMEOUT: Final = "sync-timeout"
DELETE_GROUPS: Final = "delete-groups"
OFFSETS_EXPIRED: Final = "offsets-expired"


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
        }
