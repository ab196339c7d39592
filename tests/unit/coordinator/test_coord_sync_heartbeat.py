"""SyncGroup (docs/design/kafka.md §5) and Heartbeat (§6)."""

from __future__ import annotations

import pytest

from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import SyncGroupResponse

from .coord_sim import Member, Sim, assignment, form_group, join_all


def _three(sim: Sim) -> tuple[Member, Member, Member]:
    a, b, c = (Member(sim, client_id=x) for x in "abc")
    join_all(sim, [a, b, c])
    return a, b, c


def test_leader_assignment_reaches_every_member() -> None:
    sim = Sim()
    a, b, c = _three(sim)
    plan = {a.member_id: assignment(("t", 0), ("t", 1)), b.member_id: assignment(("t", 2)),
            c.member_id: assignment(("t", 3), ("t", 4), ("t", 5))}
    assert b.send_sync() is None and c.send_sync() is None  # followers wait for the leader
    resp = a.send_sync(plan)
    assert resp == SyncGroupResponse(protocol_type="consumer", protocol_name="range",
                                     assignment=plan[a.member_id])
    for m in (b, c):
        got = m.sync_response()
        assert got is not None and got.error_code == ErrorCode.NONE
        assert got.assignment == plan[m.member_id]
    assert sim.state("g") == "Stable"
    described = {x.member_id: x.member_assignment for x in sim.describe("g").members}
    assert described == plan
    # a follower syncing after the leader gets its assignment at once
    late = c.send_sync()
    assert late is not None and late.assignment == plan[c.member_id]


def test_member_left_out_by_leader_gets_empty_assignment_and_unknown_ids_ignored() -> None:
    sim = Sim()
    a, b = Member(sim, client_id="a"), Member(sim, client_id="b")
    join_all(sim, [a, b])
    b.send_sync()
    a.send_sync({a.member_id: assignment(("t", 0)), "stranger": assignment(("t", 1))})
    resp = b.sync_response()
    assert resp is not None and resp.error_code == ErrorCode.NONE and resp.assignment == b""
    assert [x.member_id for x in sim.describe("g").members] == [a.member_id, b.member_id]


def test_sync_error_checks_in_order() -> None:
    sim = Sim()
    nobody = Member(sim, member_id="x", generation_id=1)
    assert nobody.send_sync().error_code == ErrorCode.UNKNOWN_MEMBER_ID  # type: ignore[union-attr]
    empty_group = Member(sim, group_id="e")
    empty_group.send_join()  # creates "e", Empty, with a pending id
    empty_group.generation_id = 0
    assert empty_group.send_sync().error_code == ErrorCode.UNKNOWN_MEMBER_ID  # type: ignore[union-attr]
    a, b = Member(sim, client_id="a"), Member(sim, client_id="b")
    join_all(sim, [a, b])
    stranger = Member(sim, member_id="nope", generation_id=1)
    assert stranger.send_sync().error_code == ErrorCode.UNKNOWN_MEMBER_ID  # type: ignore[union-attr]
    resp = b.send_sync(generation_id=7)
    assert resp is not None and resp.error_code == ErrorCode.ILLEGAL_GENERATION
    resp = Member(sim, group_id="", member_id="z").send_sync()
    assert resp is not None and resp.error_code == ErrorCode.INVALID_GROUP_ID
    from groupwire.protocol.messages import SyncGroupRequest

    wrong_name = SyncGroupRequest(group_id="g", generation_id=1, member_id=b.member_id,
                                  protocol_type="consumer", protocol_name="roundrobin")
    cid = sim.send(wrong_name, b.conn)
    assert sim.reply(b.conn, cid).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL  # type: ignore[union-attr]
    right = SyncGroupRequest(group_id="g", generation_id=1, member_id=b.member_id,
                             protocol_type="consumer", protocol_name="range")
    assert sim.send(right, b.conn) and sim.state("g") == "CompletingRebalance"


def test_sync_during_preparing_rebalance_is_told_to_rejoin() -> None:
    sim = Sim()
    a, b = Member(sim, client_id="a"), Member(sim, client_id="b")
    leader = form_group(sim, [a, b])
    leader.send_join()
    resp = b.send_sync()
    assert resp is not None and resp.error_code == ErrorCode.REBALANCE_IN_PROGRESS


def test_rebalance_during_completing_cancels_parked_syncs_and_clears_assignments() -> None:
    sim = Sim()
    a, b = Member(sim, client_id="a"), Member(sim, client_id="b")
    leader = form_group(sim, [a, b])
    leader.send_join()
    b.send_join()  # generation 2, CompletingRebalance
    assert sim.state("g") == "CompletingRebalance"
    assert b.send_sync() is None
    newcomer = Member(sim, client_id="n")
    newcomer.join()  # joins during CompletingRebalance: back to PreparingRebalance
    resp = b.sync_response()
    assert resp == SyncGroupResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS)
    assert all(x.member_assignment == b"" for x in sim.describe("g").members)
    assert sim.state("g") == "PreparingRebalance"


def test_new_member_makes_others_heartbeats_rebalance_in_progress() -> None:
    sim = Sim()
    a, b = Member(sim, client_id="a"), Member(sim, client_id="b")
    form_group(sim, [a, b])
    assert a.hb() == ErrorCode.NONE and b.hb() == ErrorCode.NONE
    c = Member(sim, client_id="c")
    assert c.join() is None
    assert a.hb() == ErrorCode.REBALANCE_IN_PROGRESS
    assert b.hb() == ErrorCode.REBALANCE_IN_PROGRESS
    a.send_join()
    b.send_join()  # everyone is back: the join phase completes at once
    assert {m.join_response().generation_id for m in (a, b, c)} == {2}  # type: ignore[union-attr]
    # with the new generation a heartbeat in CompletingRebalance is fine...
    assert a.hb() == ErrorCode.NONE
    # ...and the old generation is not
    assert a.hb(generation_id=1) == ErrorCode.ILLEGAL_GENERATION


def test_heartbeat_errors() -> None:
    sim = Sim()
    assert Member(sim, member_id="x", generation_id=1).hb() == ErrorCode.UNKNOWN_MEMBER_ID
    assert Member(sim, group_id="", member_id="x").hb() == ErrorCode.INVALID_GROUP_ID
    a = Member(sim)
    form_group(sim, [a])
    assert Member(sim, member_id="x", generation_id=1).hb() == ErrorCode.UNKNOWN_MEMBER_ID
    assert a.hb(generation_id=0) == ErrorCode.ILLEGAL_GENERATION
    assert a.hb() == ErrorCode.NONE


def test_heartbeat_reschedules_session_only_when_accepted() -> None:
    sim = Sim()
    a = Member(sim, session_timeout_ms=1000)
    form_group(sim, [a])
    t0 = sim.now
    sim.advance(900)
    assert a.hb(generation_id=5) == ErrorCode.ILLEGAL_GENERATION  # does not count
    sim.advance(99)
    assert a.hb() == ErrorCode.NONE
    assert sim.timer_deadline(("session", "g", a.member_id)) == t0 + 999 + 1000
    sim.advance(1000)
    assert a.hb() == ErrorCode.UNKNOWN_MEMBER_ID


def _next_generation(sim: Sim, leader: Member, members: list[Member],
                     plan: dict[str, bytes], *, hold: bool) -> int | None:
    """Rejoin everyone; the SyncGroup write is held if ``hold`` (its token returned)."""
    join_all(sim, members)
    sim.hold_writes = hold
    for m in members:
        if m is not leader:
            m.send_sync()
    leader.send_sync(plan)
    sim.hold_writes = False
    return sim.held[-1] if hold else None


def test_a_failed_metadata_write_rebalances_the_stable_generation_it_stored() -> None:
    sim = Sim()
    a, b = Member(sim, client_id="a"), Member(sim, client_id="b")
    leader = form_group(sim, [a, b])
    plan = {a.member_id: assignment(("t", 0)), b.member_id: assignment(("t", 1))}
    token = _next_generation(sim, leader, [a, b], plan, hold=True)
    assert token is not None and sim.held == [token]
    assert sim.state("g") == "Stable"
    assert a.sync_response() is None and b.sync_response() is None  # held with the write
    sim.failed(token, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    assert sim.state("g") == "PreparingRebalance"
    assert [m.member_assignment for m in sim.describe("g").members] == [b"", b""]
    for m in (a, b):
        resp = m.sync_response()
        assert resp is not None and resp.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert resp.assignment == b""


def test_a_failed_write_of_an_older_generation_changes_nothing() -> None:
    sim = Sim()
    a, b = Member(sim, client_id="a"), Member(sim, client_id="b")
    leader = form_group(sim, [a, b])
    plan = {a.member_id: assignment(("t", 0)), b.member_id: assignment(("t", 1))}
    old = _next_generation(sim, leader, [a, b], plan, hold=True)
    assert old is not None
    # the next generation, stored, while the older write pends
    _next_generation(sim, leader, [a, b], plan, hold=False)
    assert sim.held == [old]
    assert sim.state("g") == "Stable"
    result = sim.failed(old)
    assert sim.state("g") == "Stable" and not result.transitions
    assert all(m.member_assignment for m in sim.describe("g").members)
    with pytest.raises(ValueError, match="not pending"):
        sim.coord.failed(old, ErrorCode.KAFKA_STORAGE_ERROR, sim.now)
