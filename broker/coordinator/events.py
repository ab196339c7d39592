"""Group events (docs/protocol.md §9): what happened to a group, for logs, metrics and
``__group_events``. Events never delay replies; the shell writes them best effort. The
schema is ``protocol.group_events``, shared with the report that reads them back."""

from __future__ import annotations

from groupwire.protocol.group_events import (
    CONNECTION_LOST,
    DELETE_GROUPS,
    EVENT_TYPES,
    OFFSETS_EXPIRED,
    REBALANCE_TIMEOUT,
    SESSION_EXPIRED,
    SYNC_TIMEOUT,
    EventType,
    GroupEvent,
)

__all__ = ["CONNECTION_LOST", "DELETE_GROUPS", "EVENT_TYPES", "OFFSETS_EXPIRED",
           "REBALANCE_TIMEOUT", "SESSION_EXPIRED", "SYNC_TIMEOUT", "EventType", "GroupEvent"]
