"""Kafka's CooperativeStickyAssignor (KIP-429): sticky, in two rounds when partitions move.

A partition whose old owner may still hold it is left out of this round's assignment: the
old owner sees it missing, revokes it and asks for another rebalance, and in that second
round nobody owns it, so it goes to its new member. Members keep consuming everything else
throughout.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Final

from groupwire.client.assignors.base import (
    COOPERATIVE,
    EAGER,
    Assignment,
    RebalanceProtocol,
    Subscription,
)
from groupwire.client.assignors.ownership import Claim
from groupwire.client.assignors.sticky_core import sticky_assign

__all__ = ["CooperativeStickyAssignor"]


class CooperativeStickyAssignor:
    """Sticky and balanced; never gives a partition to a new member in the round in which
    another member may still hold it (withheld, contested ones included)."""

    name: Final = "cooperative-sticky"
    rebalance_protocol: Final[RebalanceProtocol] = COOPERATIVE
    supported_protocols: ClassVar[tuple[RebalanceProtocol, ...]] = (EAGER, COOPERATIVE)

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> Assignment:
        claims = {
            m: Claim(tuple(s.owned_partitions), s.generation) for m, s in subscriptions.items()
        }
        assignment, ownership = sticky_assign(partitions_per_topic, subscriptions, claims)
        return {
            member: [tp for tp in partitions if not ownership.must_wait(tp, member)]
            for member, partitions in assignment.items()
        }

    def __repr__(self) -> str:
        return "CooperativeStickyAssignor()"
