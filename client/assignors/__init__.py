"""Partition assignors the group leader runs (reference §16): range, roundrobin, sticky and
cooperative-sticky. Sans-I/O: plain functions of partition counts and subscriptions."""

from client.assignors.base import (
    COOPERATIVE,
    EAGER,
    Assignment,
    PartitionAssignor,
    RebalanceProtocol,
    Subscription,
)
from client.assignors.cooperative import CooperativeStickyAssignor
from client.assignors.range import RangeAssignor
from client.assignors.registry import (
    ASSIGNORS,
    get_assignor,
    rebalance_protocol_for,
    supported_protocols,
    user_data_for,
)
from client.assignors.roundrobin import RoundRobinAssignor
from client.assignors.sticky import StickyAssignor

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
