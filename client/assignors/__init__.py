"""Partition assignors the group leader runs (docs/design/kafka.md §16): range, roundrobin,
sticky and cooperative-sticky. Sans-I/O: plain functions of partition counts and
subscriptions."""

from groupwire.client.assignors.base import (
    COOPERATIVE,
    EAGER,
    Assignment,
    PartitionAssignor,
    RebalanceProtocol,
    Subscription,
)
from groupwire.client.assignors.cooperative import CooperativeStickyAssignor
from groupwire.client.assignors.range import RangeAssignor
from groupwire.client.assignors.registry import (
    ASSIGNORS,
    get_assignor,
    rebalance_protocol_for,
    supported_protocols,
    user_data_for,
)
from groupwire.client.assignors.roundrobin import RoundRobinAssignor
from groupwire.client.assignors.sticky import StickyAssignor

__all__ = [
    "ASSIGNORS",
    "COOPERATIVE",
    "EAGER",
    "Assignment",
    "CooperativeStickyAssignor",
    "PartitionAssignor",
    "RangeAssignor",
    "RebalanceProtocol",
    "RoundRobinAssignor",
    "StickyAssignor",
    "Subscription",
    "get_assignor",
    "rebalance_protocol_for",
    "supported_protocols",
    "user_data_for",
]
