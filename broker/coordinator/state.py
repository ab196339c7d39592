"""Group states and the only transitions Kafka allows between them (reference §2).

The table is the documentation: each state lists its legal predecessors, and every
transition the coordinator makes goes through :func:`check_transition`.
"""

from __future__ import annotations

import enum
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

PREDECESSORS: Final[dict[GroupState, frozenset[GroupState]]] = {
    # joins, leaves and expiries start a rebalance from these
    PREPARING_REBALANCE: frozenset({EMPTY, STABLE, COMPLETING_REBALANCE}),
    # the join phase completed with at least one member
    COMPLETING_REBALANCE: frozenset({PREPARING_REBALANCE}),
    # the leader's assignment was applied
    STABLE: frozenset({COMPLETING_REBALANCE}),
    # the join phase completed with no member left
    EMPTY: frozenset({PREPARING_REBALANCE}),
    # deleted: terminal, reachable from anywhere
    DEAD: frozenset(GroupState),
}

CAN_REBALANCE: Final = frozenset({EMPTY, STABLE, COMPLETING_REBALANCE})
"""States from which a trigger starts a rebalance; in PreparingRebalance it tries to finish."""

BY_NAME_LOWER: Final[dict[str, GroupState]] = {s.value.lower(): s for s in GroupState}


class IllegalTransitionError(RuntimeError):
    """The coordinator tried a move the table forbids: a bug in the coordinator."""


def diagram() -> str:
    """A Mermaid state diagram drawn from :data:`PREDECESSORS`, for the docs."""
    lines = ["stateDiagram-v2", f"    [*] --> {EMPTY.value}"]
    for target in GroupState:
        for source in sorted(PREDECESSORS[target], key=lambda s: s.value):
            if target is DEAD and source is DEAD:
                continue
            lines.append(f"    {source.value} --> {target.value}")
    return "\n".join(lines) + "\n"


def check_transition(current: GroupState, target: GroupState) -> None:
    if current not in PREDECESSORS[target]:
        raise IllegalTransitionError(f"illegal group transition {current.value} -> {target.value}")
