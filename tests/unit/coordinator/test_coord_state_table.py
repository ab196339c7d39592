"""The transition table (reference §2) and the diagram drawn from it."""

from __future__ import annotations

import pytest

from groupwire.broker.coordinator.state import (
    GroupState,
    IllegalTransitionError,
    check_transition,
    diagram,
)

S = GroupState
LEGAL = {
    (S.EMPTY, S.PREPARING_REBALANCE), (S.STABLE, S.PREPARING_REBALANCE),
    (S.COMPLETING_REBALANCE, S.PREPARING_REBALANCE),
    (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE),
    (S.COMPLETING_REBALANCE, S.STABLE), (S.PREPARING_REBALANCE, S.EMPTY),
    *((s, S.DEAD) for s in S),
}


@pytest.mark.parametrize("source", list(S))
@pytest.mark.parametrize("target", list(S))
def test_only_kafkas_transitions_are_legal(source: GroupState, target: GroupState) -> None:
    if (source, target) in LEGAL:
        check_transition(source, target)
    else:
        with pytest.raises(IllegalTransitionError):
            check_transition(source, target)


def test_diagram_has_every_edge_of_the_table() -> None:
    text = diagram()
    edges = {tuple(line.strip().split(" --> ")) for line in text.splitlines()[2:]}
    assert edges == {(s.value, t.value) for s, t in LEGAL if not (s is t is S.DEAD)}
