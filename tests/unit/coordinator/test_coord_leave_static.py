"""LeaveGroup (docs/design/kafka.md §7) and static membership (§4.12, KIP-345, KIP-814)."""

from __future__ import annotations

from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    JoinGroupResponse,
    LeaveGroupMemberResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberIdentity,
    SyncGroupResponse,
)

from .coord_sim import Member, Sim, assignment, form_group, join_all


def _leave(sim: Sim, *identities: MemberIdentity, group_id: str = "g") -> LeaveGroupResponse:
    resp = sim.call(LeaveGroupRequest(group_id=group_id, members=list(identities)))
    assert isinstance(resp, LeaveGroupResponse)
    return resp


def test_batch_leave_is_one_rebalance() -> None:
    sim = Sim()
    a, b, c = (Member(sim, client_id=x) for x in "abc")
    form_group(sim, [a, b, c])
    resp = _leave(sim, MemberIdentity(member_id=b.member_id, reason="bye"),
                  MemberIdentity(member_id=c.member_id, reason="later"))
    assert resp == LeaveGroupResponse(members=[
        LeaveGroupMemberResponse(member_id=b.member_id),
        LeaveGroupMemberResponse(member_id=c.member_id)])
    started = sim.events_of("rebalance_started")
    assert [(e.reason, e.detail, e.member_id) for e in started[1:]] == [
        ("member-left", "bye", b.member_id)]
    left = sim.events_of("member_left")
    assert [(e.member_id, e.reason) for e in left] == [(b.member_id, "bye"),
                                                        (c.member_id, "later")]
    assert a.hb() == ErrorCode.REBALANCE_IN_PROGRESS


def test_leave_answers_each_identity() -> None:
    sim = Sim()
    s = Member(sim, client_id="s", instance_id="inst")
    d = Member(sim, client_id="d")
    form_group(sim, [s, d])
    resp = _leave(
        sim,
        MemberIdentity(member_id="nobody"),
        MemberIdentity(member_id="", group_instance_id="unknown-instance"),
        MemberIdentity(member_id="stale-id", group_instance_id="inst"),
        MemberIdentity(member_id=""),
    )
    assert [m.error_code for m in resp.members] == [
        ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.FENCED_INSTANCE_ID, ErrorCode.UNKNOWN_MEMBER_ID]
    assert resp.members[2].group_instance_id == "inst"
    assert sim.state("g") == "Stable"  # nothing left: no rebalance


def test_static_member_removed_by_instance_id_rebalances() -> None:
    sim = Sim()
    s = Member(sim, client_id="s", instance_id="inst")
    d = Member(sim, client_id="d")
    form_group(sim, [s, d])
    resp = _leave(sim, MemberIdentity(member_id="", group_instance_id="inst"))
    assert resp.members[0].error_code == ErrorCode.NONE
    assert s.hb() == ErrorCode.UNKNOWN_MEMBER_ID
    assert sim.state("g") == "PreparingRebalance"


def test_leave_with_missing_group_answers_every_member() -> None:
    sim = Sim()
    resp = _leave(sim, MemberIdentity(member_id="x"), MemberIdentity(member_id="y"),
                  group_id="nope")
    assert resp.error_code == ErrorCode.NONE
    assert [m.error_code for m in resp.members] == [ErrorCode.UNKNOWN_MEMBER_ID] * 2
    resp = _leave(sim, MemberIdentity(member_id="x"), group_id="")
    assert resp.error_code == ErrorCode.INVALID_GROUP_ID


def test_pending_member_leave_drops_the_id_and_counts_as_a_removal() -> None:
    sim = Sim()
    a = Member(sim)
    form_group(sim, [a])
    p = Member(sim, client_id="p")
    p.send_join()
    assert ("session", "g", p.member_id) in sim.timers
    assert p.leave().members[0].error_code == ErrorCode.NONE
    assert ("session", "g", p.member_id) not in sim.timers
    # Kafka counts it among the successful removals: a Stable group rebalances
    assert sim.state("g") == "PreparingRebalance"


def test_leave_of_member_parked_in_join_answers_its_join() -> None:
    sim = Sim()
    a, b = Member(sim, client_id="a"), Member(sim, client_id="b")
    leader = form_group(sim, [a, b])
    other = b if leader is a else a
    leader.send_join()
    assert leader.join_response() is None
    _leave(sim, MemberIdentity(member_id=leader.member_id))
    assert leader.join_response() == JoinGroupResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID,
                                                       member_id="")
    # the leader is gone: the earliest remaining member leads the next generation
    resp = other.send_join()
    assert resp is not None and resp.leader == other.member_id and resp.generation_id == 2


# --- static membership -------------------------------------------------------------------


def test_static_first_join_needs_no_member_id_round_trip() -> None:
    sim = Sim()
    s = Member(sim, instance_id="inst-1")
    resp = join_all(sim, [s])[0]
    assert resp.error_code == ErrorCode.NONE and resp.member_id == "inst-1-u1"


def _static_pair(sim: Sim) -> tuple[Member, Member, dict[str, bytes]]:
    s1 = Member(sim, client_id="c1", instance_id="i1")
    s2 = Member(sim, client_id="c2", instance_id="i2")
    join_all(sim, [s1, s2])
    plan = {s1.member_id: assignment(("t", 0), ("t", 1), ("t", 2)),
            s2.member_id: assignment(("t", 3), ("t", 4), ("t", 5))}
    s2.send_sync()
    s1.send_sync(plan)
    assert sim.state("g") == "Stable"
    return s1, s2, plan


def test_static_follower_restart_keeps_assignment_without_rebalance() -> None:
    sim = Sim()
    s1, s2, plan = _static_pair(sim)
    old_id = s2.member_id
    records_before = len(sim.records)
    restarted = Member(sim, client_id="other-client", instance_id="i2")
    resp = restarted.send_join()
    assert resp is not None and resp.error_code == ErrorCode.NONE
    assert resp.member_id != old_id and resp.member_id.startswith("i2-")
    assert (resp.generation_id, resp.leader, resp.members, resp.skip_assignment) == (
        1, s1.member_id, [], False)
    assert sim.state("g") == "Stable"
    assert len(sim.records) == records_before + 1  # the replacement is persisted
    joined = sim.events_of("member_joined")[-1]
    assert (joined.member_id, joined.replaced_member_id) == (resp.member_id, old_id)
    sync = restarted.send_sync()
    assert sync is not None and sync.assignment == plan[old_id]
    # the old incarnation is fenced, or unknown without its instance id
    assert s2.hb() == ErrorCode.FENCED_INSTANCE_ID
    s2.instance_id = None
    assert s2.hb() == ErrorCode.UNKNOWN_MEMBER_ID
    assert restarted.hb() == ErrorCode.NONE and s1.hb() == ErrorCode.NONE
    assert sim.events_of("rebalance_started")[1:] == []
    # client id and host of the old member are kept (Kafka copies them)
    described = {m.member_id: m for m in sim.describe("g").members}
    assert described[restarted.member_id].client_id == "c2"


def test_static_leader_restart_skips_assignment_kip_814() -> None:
    sim = Sim()
    s1, s2, plan = _static_pair(sim)
    restarted = Member(sim, client_id="c1", instance_id="i1")
    resp = restarted.send_join()
    assert resp is not None and resp.error_code == ErrorCode.NONE
    assert resp.leader == restarted.member_id and resp.skip_assignment is True
    assert sorted(x.member_id for x in resp.members) == sorted(
        [restarted.member_id, s2.member_id])
    sync = restarted.send_sync()  # computes nothing, keeps what it had
    assert sync is not None and sync.assignment == plan[s1.member_id]
    assert sim.state("g") == "Stable" and sim.describe("g").generation_id == 1
    assert s2.hb() == ErrorCode.NONE


def test_static_restart_that_changes_the_selected_protocol_rebalances() -> None:
    sim = Sim()
    both = [("range", b""), ("roundrobin", b"")]
    s1 = Member(sim, client_id="c1", instance_id="i1", protocols=both)
    s2 = Member(sim, client_id="c2", instance_id="i2", protocols=both)
    s3 = Member(sim, client_id="c3", instance_id="i3", protocols=both[::-1])
    form_group(sim, [s1, s2, s3])  # votes: range 2, roundrobin 1
    assert sim.describe("g").protocol_data == "range"
    restarted = Member(sim, instance_id="i2", protocols=both[::-1])  # now roundrobin 2
    assert restarted.send_join() is None
    assert sim.state("g") == "PreparingRebalance"
    started = sim.events_of("rebalance_started")[-1]
    assert s2.hb() == ErrorCode.FENCED_INSTANCE_ID
    s1.send_join()
    s3.send_join()
    resp = restarted.join_response()
    assert resp is not None and resp.protocol_name == "roundrobin" and resp.generation_id == 2
    assert (started.reason, started.member_id) == ("static-member-replaced", resp.member_id)


def test_static_restart_during_completing_rebalance_rebalances_and_fences_old_sync() -> None:
    sim = Sim()
    s1 = Member(sim, client_id="c1", instance_id="i1")
    s2 = Member(sim, client_id="c2", instance_id="i2")
    join_all(sim, [s1, s2])
    assert s2.send_sync() is None  # parked
    restarted = Member(sim, instance_id="i2")
    assert restarted.send_join() is None
    assert s2.sync_response() == SyncGroupResponse(error_code=ErrorCode.FENCED_INSTANCE_ID)
    assert sim.state("g") == "PreparingRebalance"
    assert sim.events_of("rebalance_started")[-1].reason == "member-joined"  # continues
    history = sim.describe("g").rebalances
    assert len(history) == 1 and history[0].completed_ms is None


def test_static_restart_while_old_join_is_parked_fences_it() -> None:
    sim = Sim()
    s1, s2, s3 = (Member(sim, client_id=f"c{i}", instance_id=f"i{i}") for i in (1, 2, 3))
    leader = form_group(sim, [s1, s2, s3])
    assert leader is s1
    s1.send_join()  # PreparingRebalance
    assert s2.send_join() is None  # parked; s3 has not re-joined yet
    restarted = Member(sim, instance_id="i2")
    assert restarted.send_join() is None  # replaces s2 and parks in its place
    resp = s2.join_response()
    assert resp == JoinGroupResponse(error_code=ErrorCode.FENCED_INSTANCE_ID,
                                     member_id=s2.member_id)
    s3.send_join()
    resp = restarted.join_response()
    assert resp is not None and resp.error_code == ErrorCode.NONE and resp.generation_id == 2
    leader_resp = s1.join_response()
    assert leader_resp is not None
    assert sorted(x.member_id for x in leader_resp.members) == sorted(
        [s1.member_id, restarted.member_id, s3.member_id])
