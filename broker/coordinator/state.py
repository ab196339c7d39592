"""Kafka's classic group states (docs/design/kafka.md §2). How each one answers each input, and so
which moves between them are legal, is the table in transitions.py."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final


class GroupState(enum.Enum):
    """Kafka's classic group states; values are the names Describe/ListGroups return."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


EMPTY: Final = GroupState.EMPTY
PREPARING_REBALANCE: Final = GroupState.PREPARING_REBALANCE
COMPLETING_REBALANCE: Final = GroupState.COMPLETING_REBALANCE
STABLE: Final = GroupState.STABLE
DEAD: Final = GroupState.DEAD

BY_NAME_LOWER: Final[Mapping[str, GroupState]] = MappingProxyType(
    {s.value.lower(): s for s in GroupState})
