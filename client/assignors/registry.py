"""Assignors by name, and the consumer-side choices that depend on the configured list."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Final

from groupwire.client.assignors.base import COOPERATIVE, EAGER, PartitionAssignor, RebalanceProtocol
from groupwire.client.assignors.cooperative import CooperativeStickyAssignor
from groupwire.client.assignors.range import RangeAssignor
from groupwire.client.assignors.roundrobin import RoundRobinAssignor
from groupwire.client.assignors.sticky import StickyAssignor
from groupwire.client.types import TopicPartition

__all__ = [
    "ASSIGNORS",
    "get_assignor",
    "rebalance_protocol_for",
    "supported_protocols",
    "user_data_for",
]

ASSIGNORS: Final[dict[str, type[PartitionAssignor]]] = {
    "range": RangeAssignor,
    "roundrobin": RoundRobinAssignor,
    "sticky": StickyAssignor,
    "cooperative-sticky": CooperativeStickyAssignor,
}

_PROTOCOL_RANK: Final[dict[str, int]] = {EAGER: 0, COOPERATIVE: 1}


def get_assignor(assignor: str | PartitionAssignor | type[PartitionAssignor]) -> PartitionAssignor:
    """An assignor from its name (``"range"``), its class, or an instance (returned as is)."""
    if isinstance(assignor, str):
        try:
            return ASSIGNORS[assignor]()
        except KeyError:
            known = ", ".join(sorted(ASSIGNORS))
            raise ValueError(f"unknown assignor {assignor!r} (known: {known})") from None
    if isinstance(assignor, type):
        return assignor()
    if not isinstance(assignor, PartitionAssignor):
        raise TypeError(f"not a partition assignor: {assignor!r}")
    return assignor


def supported_protocols(assignor: PartitionAssignor) -> tuple[RebalanceProtocol, ...]:
    """Which rebalance protocols the assignor can run under; ``("eager",)`` unless it says."""
    protocols: tuple[RebalanceProtocol, ...] = getattr(assignor, "supported_protocols", (EAGER,))
    return protocols


def rebalance_protocol_for(assignors: Iterable[PartitionAssignor]) -> RebalanceProtocol:
    """Reference §15.4: the highest protocol every configured assignor supports, so
    ``[range, cooperative-sticky]`` runs eager and cooperative-sticky alone cooperative."""
    common: set[RebalanceProtocol] | None = None
    for assignor in assignors:
        mine = set(supported_protocols(assignor))
        common = mine if common is None else common & mine
    if common is None:
        raise ValueError("no assignor configured")
    if not common:
        raise ValueError("the configured assignors share no rebalance protocol")
    return max(common, key=_PROTOCOL_RANK.__getitem__)


def user_data_for(
    assignor: PartitionAssignor, assigned: Collection[TopicPartition], generation: int
) -> bytes | None:
    """The user data a member sends for this assignor (only the eager sticky one has any)."""
    hook = getattr(assignor, "metadata_user_data", None)
    if hook is None:
        return None
    data: bytes | None = hook(assigned, generation)
    return data
