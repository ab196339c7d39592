"""Committed offsets per group and the retention rules that expire them (docs/design/kafka.md
§10.3)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from groupwire.broker.coordinator.group import Group
from groupwire.broker.coordinator.member import TP
from groupwire.broker.coordinator.transitions import Expire, Retain


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """``commit_ms`` is on the monotonic clock (retention counts from it); its record
    keeps the wall time, re-based onto the monotonic clock when loaded."""

    offset: int
    metadata: str
    commit_ms: int


class OffsetStore:
    """group -> partition -> last committed offset."""

    __slots__ = ("_by_group",)

    def __init__(self) -> None:
        self._by_group: dict[str, dict[TP, CommittedOffset]] = {}

    def commit(self, group_id: str, tp: TP, value: CommittedOffset) -> None:
        self._by_group.setdefault(group_id, {})[tp] = value

    def for_commit(self, group_id: str) -> dict[TP, CommittedOffset]:
        """The group's offsets to commit into (created if it has none): a commit of many
        partitions stores each with one dict assignment, not a call."""
        return self._by_group.setdefault(group_id, {})

    def delete(self, group_id: str, tp: TP) -> None:
        offsets = self._by_group.get(group_id)
        if offsets is not None:
            offsets.pop(tp, None)
            if not offsets:
                del self._by_group[group_id]

    def of(self, group_id: str) -> dict[TP, CommittedOffset]:
        return self._by_group.get(group_id, {})

    def has_offsets(self, group_id: str) -> bool:
        return group_id in self._by_group

    def group_ids(self) -> list[str]:
        """The groups with committed offsets."""
        return list(self._by_group)

    def drop_group(self, group_id: str) -> list[TP]:
        return sorted(self._by_group.pop(group_id, {}))

    def drop_topics(self, topics: Collection[str]) -> list[tuple[str, TP]]:
        """Forget every group's offsets for partitions of ``topics``; returns what went,
        as ``(group, partition)`` sorted."""
        dropped: list[tuple[str, TP]] = []
        for group_id, offsets in list(self._by_group.items()):
            gone = sorted(tp for tp in offsets if tp[0] in topics)
            for tp in gone:
                del offsets[tp]
                dropped.append((group_id, tp))
            if not offsets:
                del self._by_group[group_id]
        return sorted(dropped)

    def topics(self) -> set[str]:
        """Every topic some group has an offset for."""
        return {tp[0] for offsets in self._by_group.values() for tp in offsets}


def expired_offsets(group: Group, offsets: dict[TP, CommittedOffset], now_ms: int,
                    retention_ms: int) -> list[TP]:
    """Kafka's expiration condition for a classic group:

    * no protocol type (a "simple" group): ``now - commit time >= retention``;
    * otherwise as the state's retention cell says (:class:`Expire`): Empty, ``now - time
      it became Empty >= retention``; Stable "consumer" group with known subscriptions:
      unsubscribed topics' offsets by commit time;
    * anything else (rebalancing, other protocol types while not Empty): nothing.
    """
    if group.protocol_type is None:
        return [tp for tp, o in offsets.items() if now_ms - o.commit_ms >= retention_ms]
    cell = group.row.retention
    if not isinstance(cell, Retain):
        return []
    if cell.expires is Expire.ALL_AFTER_EMPTY:
        if now_ms - group.state_ms >= retention_ms:
            return list(offsets)
        return []
    if group.is_consumer and group.subscribed_topics is not None:
        subscribed = group.subscribed_topics
        return [tp for tp, o in offsets.items()
                if tp[0] not in subscribed and now_ms - o.commit_ms >= retention_ms]
    return []
