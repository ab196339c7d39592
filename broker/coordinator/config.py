"""Coordinator settings: Kafka's group.* and offsets.* knobs plus our extensions."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CoordinatorConfig:
    """Defaults are Kafka's (docs/design/kafka.md §14) and docs/protocol.md §7's."""

    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    group_max_size: int = 10_000
    """At most a request array's length (``protocol.limits.MAX_ARRAY_ITEMS``): SyncGroup
    carries one assignment per member."""
    new_member_join_timeout_ms: int = 300000
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600000
    offset_metadata_max_bytes: int = 4096
    connection_loss_grace_ms: int = 1000
    ownership_fencing: bool = True
    history_size: int = 20
