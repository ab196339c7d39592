"""The transition table (docs/design/kafka.md §2) and the diagram drawn from it."""

from __future__ import annotations

import pytest

from groupwire.broker.coordinator.state import GroupState
from groupwire.broker.coordinator.transitions import (
    ROWS,
    TABLE,
    Admit,
    Commit,
    DeleteOffsets,
    Describe,
    Expire,
    Ignore,
    IllegalTransitionError,
    Input,
    Join,
    Refuse,
    Rejoin,
    Retain,
    Sync,
    SyncReply,
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
        if i in (Input.DELETE_GROUPS, Input.OFFSET_DELETE):
            assert c == Refuse(ErrorCode.GROUP_ID_NOT_FOUND)
        elif i is Input.DESCRIBE_GROUPS:  # answered: the group is described as Dead
            assert c == Describe("describe", shows_protocol=False)
        elif i.value[0].isupper():  # a request
            assert c == Refuse(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        else:
            assert isinstance(c, Ignore) and not c.moves_to


def test_what_each_state_answers_is_in_its_cells() -> None:
    """The per-state data the handlers read instead of testing states."""
    join = {s: ROWS[s].join_group for s in S}
    assert join[S.DEAD] == Refuse(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    assert [s for s, c in join.items() if isinstance(c, Join) and c.any_protocol] == [S.EMPTY]
    assert {s: c.admit for s, c in join.items() if isinstance(c, Join)} == {
        S.EMPTY: Admit.ANYONE, S.PREPARING_REBALANCE: Admit.WHILE_FEW_REJOINED,
        S.COMPLETING_REBALANCE: Admit.WHILE_FEW_MEMBERS, S.STABLE: Admit.WHILE_FEW_MEMBERS}
    assert {s: c.rejoin for s, c in join.items() if isinstance(c, Join)} == {
        S.EMPTY: Rejoin.UNKNOWN, S.PREPARING_REBALANCE: Rejoin.UPDATE,
        S.COMPLETING_REBALANCE: Rejoin.REPEAT_UNLESS_CHANGED,
        S.STABLE: Rejoin.REPEAT_UNLESS_LEADER_OR_CHANGED}
    sync = {s: ROWS[s].sync_group for s in S}
    assert sync[S.EMPTY] == Refuse(ErrorCode.UNKNOWN_MEMBER_ID)
    assert {s: (c.reply, c.answer) for s, c in sync.items() if isinstance(c, Sync)} == {
        S.PREPARING_REBALANCE: (SyncReply.ANSWER, ErrorCode.REBALANCE_IN_PROGRESS),
        S.COMPLETING_REBALANCE: (SyncReply.AWAIT_LEADER, ErrorCode.NONE),
        S.STABLE: (SyncReply.ASSIGNMENT, ErrorCode.NONE)}
    commit = {s: ROWS[s].offset_commit for s in S}
    assert {s: (c.without_member, c.renews_session, c.answer)
            for s, c in commit.items() if isinstance(c, Commit)} == {
        S.EMPTY: (True, False, ErrorCode.NONE),
        S.PREPARING_REBALANCE: (False, True, ErrorCode.NONE),
        S.COMPLETING_REBALANCE: (False, False, ErrorCode.REBALANCE_IN_PROGRESS),
        S.STABLE: (False, True, ErrorCode.NONE)}
    delete = {s: ROWS[s].offset_delete for s in S}
    assert delete[S.DEAD] == Refuse(ErrorCode.GROUP_ID_NOT_FOUND)
    assert {s: c.consumers_only for s, c in delete.items() if isinstance(c, DeleteOffsets)} == {
        S.EMPTY: False, S.PREPARING_REBALANCE: True, S.COMPLETING_REBALANCE: True,
        S.STABLE: True}
    assert [s for s in S if ROWS[s].describe_groups.shows_protocol] == [S.STABLE]
    assert [s for s in S if ROWS[s].in_join_phase] == [S.PREPARING_REBALANCE]
    assert {s: c.expires for s in S if isinstance(c := ROWS[s].retention, Retain)} == {
        S.EMPTY: Expire.ALL_AFTER_EMPTY, S.STABLE: Expire.UNSUBSCRIBED}


def test_the_table_is_not_a_mutable_cache() -> None:
    with pytest.raises(TypeError):
        TABLE[(S.EMPTY, Input.HEARTBEAT)] = Refuse(ErrorCode.NONE)  # type: ignore[index]
