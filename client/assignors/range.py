"""Kafka's RangeAssignor: contiguous ranges per topic, the first members take the extras."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Final

from groupwire.client.assignors.base import (
    EAGER,
    Assignment,
    RebalanceProtocol,
    Subscription,
    empty_assignment,
    member_order,
)
from groupwire.client.types import TopicPartition

__all__ = ["RangeAssignor"]


class RangeAssignor:
    """Per topic, independently: ``n // k`` each, the first ``n % k`` members one more.

    Members are in :func:`~client.assignors.base.member_order`, so with many topics the
    first member collects every topic's extra partition (3 members, 2 x 10 -> 8/6/6), and
    a static member keeps the same partitions across restarts.
    """

    name: Final = "range"
    rebalance_protocol: Final[RebalanceProtocol] = EAGER
    supported_protocols: ClassVar[tuple[RebalanceProtocol, ...]] = (EAGER,)

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> Assignment:
        assignment = empty_assignment(subscriptions)
        order = member_order(subscriptions)
        subscribed = {m: frozenset(s.topics) for m, s in subscriptions.items()}
        for topic in sorted(set().union(*subscribed.values())):
            count = partitions_per_topic.get(topic)
            if count is None:
                continue
            consumers = [m for m in order if topic in subscribed[m]]
            per_member, extra = divmod(count, len(consumers))
            start = 0
            for i, member in enumerate(consumers):
                length = per_member + (1 if i < extra else 0)
                assignment[member].extend(
                    TopicPartition(topic, p) for p in range(start, start + length)
                )
                start += length
        return assignment

    def __repr__(self) -> str:
        return "RangeAssignor()"
