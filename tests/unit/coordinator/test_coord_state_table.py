"""The transition table (reference §2) and the diagram drawn from it."""

from __future__ import annotations

import pytest

from groupwire.broker.coordinator.state import GroupState
from groupwire.broker.coordinator.transitions import (
    ROWS,
    TABLE,
    Handle,
    IllegalTransitionError,
    Input,
    Refuse,
    cell,
    check_transition,
    diagram,
)
from groupwire.protocol.errors import ErrorCode

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
    edges = {tuple(line.strip().split(":")[0].split(" --> "))
             for line in text.splitlines()[2:]}
    assert edges == {(s.value, t.value) for s, t in LEGAL if not (s is t is S.DEAD)}


def test_the_table_has_a_cell_for_every_state_and_input() -> None:
    assert set(TABLE) == {(s, i) for s in S for i in Input}
    for state, row in ROWS.items():
        for i in Input:
            assert getattr(row, i.name.lower()) is cell(state, i)


def test_a_dead_group_refuses_every_request_and_ignores_its_timers() -> None:
    for i in Input:
        c = cell(S.DEAD, i)
        if i in (Input.DELETE_GROUPS,):
            assert c == Refuse(ErrorCode.GROUP_ID_NOT_FOUND)
        elif i.value[0].isupper():  # a request
            assert c == Refuse(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        else:
            assert isinstance(c, Handle) and not c.moves_to


def test_the_table_is_not_a_mutable_cache() -> None:
    with pytest.raises(TypeError):
        TABLE[(S.EMPTY, Input.HEARTBEAT)] = Refuse(ErrorCode.NONE)  # type: ignore[index]
