"""What the consumer reads: subscribed topics (or a pattern, or a manual assignment) and,
per assigned partition, the position, the fetch offset, pause and ownership flags.

Plain data on the application's loop; the fetcher and the consumer update it.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from groupwire.client.errors import IllegalStateError
from groupwire.client.types import Record, TopicPartition

__all__ = ["PartitionState", "SubscriptionState"]


@dataclass(slots=True)
class PartitionState:
    """``position``: next offset handed to the app; ``fetch_offset``: next one to fetch
    (ahead of it by the buffered records)."""

    position: int | None = None
    fetch_offset: int | None = None
    paused: bool = False
    owned: bool = True            # False after PARTITION_NOT_OWNED, until the next assignment
    reset_needed: bool = False    # OFFSET_OUT_OF_RANGE: apply auto_offset_reset
    highwater: int | None = None
    buffer: deque[Record[Any, Any]] = field(default_factory=deque)  # deserialized

    def seek(self, offset: int) -> None:
        self.position = offset
        self.fetch_offset = offset
        self.buffer.clear()
        self.reset_needed = False


class SubscriptionState:
    def __init__(self) -> None:
        self.topics: frozenset[str] = frozenset()
        self.pattern: re.Pattern[str] | None = None
        self.manual = False
        self.partitions: dict[TopicPartition, PartitionState] = {}
        self.epoch = 0   # bumped when the assignment changes: stale fetches are dropped

    @property
    def subscribed(self) -> bool:
        return bool(self.topics) or self.pattern is not None

    def subscribe(self, topics: Iterable[str] | None, pattern: str | None) -> None:
        if self.manual and self.partitions:
            raise IllegalStateError("subscribe() after assign(): call unsubscribe() first")
        if (topics is None) == (pattern is None):
            raise ValueError("subscribe(): give exactly one of topics or pattern")
        self.manual = False
        self.pattern = re.compile(pattern) if pattern is not None else None
        self.topics = frozenset(topics or ())

    def match(self, all_topics: Iterable[str]) -> frozenset[str]:
        """Topics the subscription covers, given the cluster's topic names."""
        if self.pattern is None:
            return self.topics
        pat = self.pattern
        return frozenset(t for t in all_topics if pat.fullmatch(t))

    def assign_manual(self, partitions: Iterable[TopicPartition]) -> None:
        if self.subscribed:
            raise IllegalStateError("assign() after subscribe(): call unsubscribe() first")
        self.manual = True
        self.set_assignment(partitions)

    def unsubscribe(self) -> None:
        self.topics = frozenset()
        self.pattern = None
        self.manual = False
        self.set_assignment(())

    def set_assignment(self, partitions: Iterable[TopicPartition]) -> None:
        """Keep states of partitions still assigned (cooperative), add fresh ones."""
        wanted = set(partitions)
        kept = {tp: st for tp, st in self.partitions.items() if tp in wanted}
        for tp in wanted - kept.keys():
            kept[tp] = PartitionState()
        for st in kept.values():
            st.owned = True
        self.partitions = kept
        self.epoch += 1

    def assigned(self) -> set[TopicPartition]:
        return set(self.partitions)

    def state(self, tp: TopicPartition) -> PartitionState:
        st = self.partitions.get(tp)
        if st is None:
            raise IllegalStateError(f"partition {tp} is not assigned to this consumer")
        return st

    def missing_positions(self) -> list[TopicPartition]:
        return [tp for tp, st in self.partitions.items()
                if st.position is None or st.reset_needed]

    def fetchable(self) -> list[TopicPartition]:
        return [tp for tp, st in self.partitions.items()
                if not st.paused and st.owned and st.fetch_offset is not None
                and not st.reset_needed and not st.buffer]
