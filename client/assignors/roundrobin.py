"""Kafka's RoundRobinAssignor: one circular pass over every partition, by (topic, partition)."""

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
    sorted_partitions,
)

__all__ = ["RoundRobinAssignor"]


class RoundRobinAssignor:
    """Members in :func:`~client.assignors.base.member_order` form a circle; each partition
    goes to the next member subscribed to its topic, and the circle advances past it.

    Balanced when every member subscribes to the same topics; not otherwise (Kafka's too).
    """

    name: Final = "roundrobin"
    rebalance_protocol: Final[RebalanceProtocol] = EAGER
    supported_protocols: ClassVar[tuple[RebalanceProtocol, ...]] = (EAGER,)

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> Assignment:
        assignment = empty_assignment(subscriptions)
        circle = member_order(subscriptions)
        subscribed = {m: frozenset(s.topics) for m, s in subscriptions.items()}
        pos = 0
        for tp in sorted_partitions(set().union(*subscribed.values()), partitions_per_topic):
            # Some member subscribes to tp.topic (it came from the union), so this ends.
            while tp.topic not in subscribed[circle[pos]]:
                pos = (pos + 1) % len(circle)
            assignment[circle[pos]].append(tp)
            pos = (pos + 1) % len(circle)
        return assignment

    def __repr__(self) -> str:
        return "RoundRobinAssignor()"
