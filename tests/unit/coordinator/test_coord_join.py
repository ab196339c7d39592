"""JoinGroup: KIP-394 round trip, initial delay (docs/design/kafka.md §4.8), protocols,
admission."""

from __future__ import annotations

from dataclasses import replace

from groupwire.broker.coordinator import GroupMetadataRecord
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import JoinGroupResponse

from .coord_sim import TEST_CONFIG, Member, Sim, form_group, join_all, sub

D3000 = replace(TEST_CONFIG, initial_rebalance_delay_ms=3000)


def test_single_member_member_id_required_round_trip() -> None:
    sim = Sim(replace(TEST_CONFIG, initial_rebalance_delay_ms=0))
    m = Member(sim, client_id="app")
    first = m.send_join()
    assert first is not None and first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert first.member_id == "app-u1"
    assert first.generation_id == -1
    assert sim.state("g") == "Empty"  # no rebalance before the id comes back
    second = m.send_join()
    assert second is not None and second.error_code == ErrorCode.NONE
    assert second.generation_id == 1
    assert second.leader == "app-u1" and second.member_id == "app-u1"
    assert second.protocol_type == "consumer" and second.protocol_name == "range"
    assert [(x.member_id, x.metadata) for x in second.members] == [("app-u1", sub("t"))]
    assert sim.state("g") == "CompletingRebalance"


def test_group_creation_is_persisted_as_empty_generation_zero() -> None:
    sim = Sim()
    Member(sim).send_join()
    assert sim.records == [GroupMetadataRecord(
        group_id="g", protocol_type=None, protocol_name=None, generation_id=0,
        leader_id=None, state="Empty", state_ms=0, members=())]


def test_three_members_one_generation_only_leader_gets_member_list() -> None:
    sim = Sim(D3000)
    members = [Member(sim, client_id=f"c{i}") for i in range(3)]
    for m in members:
        assert m.join() is None  # parked in the initial delay
    # members 2 and 3 arrived during the first window: one more window (budget 27 s)
    sim.step_through(5999)
    assert all(m.join_response() is None for m in members)
    sim.step_through(1)
    responses = [m.join_response() for m in members]
    assert all(r is not None and r.error_code == ErrorCode.NONE for r in responses)
    leaders = {r.leader for r in responses if r is not None}
    assert leaders == {"c0-u1"}  # the first to join leads
    with_list = [r for r in responses if r is not None and r.members]
    assert len(with_list) == 1 and with_list[0].member_id == "c0-u1"
    assert sorted(x.member_id for x in with_list[0].members) == ["c0-u1", "c1-u2", "c2-u3"]


def _joined_at(sim: Sim, m: Member) -> bool:
    resp = m.join_response()
    return resp is not None and resp.error_code == ErrorCode.NONE


def test_initial_delay_one_member_waits_full_delay_even_with_short_rebalance_timeout() -> None:
    sim = Sim(D3000)
    m = Member(sim, rebalance_timeout_ms=500)
    m.join()
    sim.advance(1500)
    assert not _joined_at(sim, m)
    sim.advance(1500)
    assert _joined_at(sim, m)
    assert sim.now == 3000


def test_initial_delay_extended_by_late_joiner() -> None:
    sim = Sim(D3000)
    a = Member(sim, rebalance_timeout_ms=9000)
    a.join()
    sim.step_through(2999)
    b = Member(sim, rebalance_timeout_ms=9000)
    b.join()
    sim.step_through(4502 - sim.now)
    assert not _joined_at(sim, a) and not _joined_at(sim, b)
    sim.step_through(6002 - sim.now)
    assert _joined_at(sim, a) and _joined_at(sim, b)
    assert a.generation_id == b.generation_id == 1


def test_initial_delay_capped_by_rebalance_timeout_budget() -> None:
    # Kafka's example: the timer fires at 3001 (clock jumped) and re-arms from there
    sim = Sim(D3000)
    a, b = Member(sim, rebalance_timeout_ms=6000), Member(sim, rebalance_timeout_ms=6000)
    a.join()
    b.join()
    sim.advance(3001)
    c = Member(sim, rebalance_timeout_ms=6000)
    c.join()
    sim.advance_to(6000)
    assert not any(_joined_at(sim, m) for m in (a, b, c))
    sim.advance_to(6001)
    assert all(_joined_at(sim, m) for m in (a, b, c))


def test_initial_delay_with_timers_firing_on_time() -> None:
    sim = Sim(D3000)
    a, b = Member(sim, rebalance_timeout_ms=6000), Member(sim, rebalance_timeout_ms=6000)
    a.join()
    b.join()  # added during the first window: one extension allowed by the budget
    sim.step_through(2999)
    assert not _joined_at(sim, a)
    sim.step_through(3000)  # fired at 3000, re-armed to 6000, budget used up
    assert sim.now == 5999 and not _joined_at(sim, a)
    sim.step_through(1)
    assert _joined_at(sim, a) and _joined_at(sim, b)


def test_joins_do_not_complete_an_initial_rebalance_early() -> None:
    sim = Sim(D3000)
    a = Member(sim)
    a.join()
    sim.advance(100)
    a.join()  # re-join with the same id: everyone has joined, but the delay still runs
    assert not _joined_at(sim, a)
    sim.advance(2900)
    assert _joined_at(sim, a)


def test_zero_delay_completes_at_first_tick() -> None:
    sim = Sim(replace(TEST_CONFIG, initial_rebalance_delay_ms=0))
    m = Member(sim)
    resp = m.join()
    assert resp is not None and resp.generation_id == 1


def test_unknown_member_id_on_missing_group_does_not_create_it() -> None:
    sim = Sim()
    m = Member(sim, member_id="ghost")
    resp = m.send_join()
    assert resp == JoinGroupResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID, member_id="ghost")
    assert sim.state("g") == "Dead"
    assert sim.records == []


def test_invalid_group_id_and_session_timeout() -> None:
    sim = Sim()
    resp = Member(sim, group_id="", member_id="x").send_join()
    assert resp is not None and resp.error_code == ErrorCode.INVALID_GROUP_ID
    assert resp.member_id == "x"
    for timeout in (9, 600_001):
        resp = Member(sim, session_timeout_ms=timeout, member_id="y").send_join()
        assert resp is not None and resp.error_code == ErrorCode.INVALID_SESSION_TIMEOUT
        assert resp.member_id == "y"
    assert sim.state("g") == "Dead"


def test_protocol_selection_majority_vote() -> None:
    sim = Sim()
    m1 = Member(sim, protocols=[("range", b"1"), ("roundrobin", b"1")])
    m2 = Member(sim, protocols=[("roundrobin", b"2"), ("range", b"2")])
    m3 = Member(sim, protocols=[("roundrobin", b"3"), ("range", b"3")])
    responses = join_all(sim, [m1, m2, m3])
    assert {r.protocol_name for r in responses} == {"roundrobin"}
    leader = next(r for r in responses if r.members)
    assert [x.metadata for x in leader.members] == [b"1", b"2", b"3"]  # the chosen one's


def test_protocol_candidates_must_be_supported_by_all() -> None:
    sim = Sim()
    m1 = Member(sim, protocols=[("range", b""), ("roundrobin", b"")])
    m2 = Member(sim, protocols=[("roundrobin", b""), ("foo", b"")])
    responses = join_all(sim, [m1, m2])
    assert {r.protocol_name for r in responses} == {"roundrobin"}


def test_protocol_tie_goes_to_leader_preference() -> None:
    sim = Sim()
    m1 = Member(sim, protocols=[("range", b""), ("roundrobin", b"")])
    m2 = Member(sim, protocols=[("roundrobin", b""), ("range", b"")])
    r1, r2 = join_all(sim, [m1, m2])
    assert r1.leader == m1.member_id
    assert r1.protocol_name == r2.protocol_name == "range"


def test_inconsistent_group_protocol() -> None:
    sim = Sim()
    a = Member(sim)
    form_group(sim, [a])
    # a different protocol type, or no protocol in common, is refused
    b = Member(sim, protocol_type="connect")
    resp = b.send_join()
    assert resp is not None and resp.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert resp.member_id == ""
    c = Member(sim, protocols=[("roundrobin", b"")])
    resp = c.send_join()
    assert resp is not None and resp.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    # a sole member switching protocols is refused too: counts include its old ones
    a.protocols = [("roundrobin", b"")]
    resp = a.send_join()
    assert resp is not None and resp.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert resp.member_id == a.member_id
    # an empty protocol list or type can never start a group
    resp = Member(sim, group_id="h", protocols=[]).send_join()
    assert resp is not None and resp.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    resp = Member(sim, group_id="h2", protocol_type="").send_join()
    assert resp is not None and resp.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_stable_follower_rejoin_with_same_metadata_gets_current_generation() -> None:
    sim = Sim()
    a, b = Member(sim), Member(sim)
    leader = form_group(sim, [a, b])
    follower = b if leader is a else a
    resp = follower.send_join()
    assert resp is not None and resp.error_code == ErrorCode.NONE
    assert resp.generation_id == 1 and resp.members == [] and resp.leader == leader.member_id
    assert sim.state("g") == "Stable"


def test_stable_leader_rejoin_forces_rebalance() -> None:
    sim = Sim()
    a, b = Member(sim), Member(sim)
    leader = form_group(sim, [a, b])
    follower = b if leader is a else a
    assert leader.send_join() is None
    assert sim.state("g") == "PreparingRebalance"
    assert follower.hb() == ErrorCode.REBALANCE_IN_PROGRESS
    follower.send_join()
    assert leader.join_response().generation_id == 2  # type: ignore[union-attr]
    assert sim.events_of("rebalance_started")[-1].reason == "member-rejoined"


def test_follower_rejoin_with_changed_metadata_rebalances() -> None:
    sim = Sim()
    a, b = Member(sim), Member(sim)
    leader = form_group(sim, [a, b])
    follower = b if leader is a else a
    follower.protocols = [("range", sub("t", "u"))]
    assert follower.send_join() is None
    assert sim.state("g") == "PreparingRebalance"


def test_completing_rebalance_rejoin_same_metadata_repeats_generation() -> None:
    sim = Sim()
    a, b = Member(sim), Member(sim)
    join_all(sim, [a, b])
    assert sim.state("g") == "CompletingRebalance"
    again = a.send_join()
    assert again is not None and again.generation_id == 1
    assert len(again.members) == 2  # a leads, so it gets the list again
    again_b = b.send_join()
    assert again_b is not None and again_b.members == []
    assert sim.state("g") == "CompletingRebalance"


def test_group_max_size_rejects_new_member_before_member_id_required() -> None:
    sim = Sim(replace(TEST_CONFIG, group_max_size=2))
    form_group(sim, [Member(sim), Member(sim)])
    resp = Member(sim).send_join()
    assert resp == JoinGroupResponse(error_code=ErrorCode.GROUP_MAX_SIZE_REACHED, member_id="")
    assert sim.state("g") == "Stable"


def test_group_max_size_drops_pending_id_that_comes_back_too_late() -> None:
    sim = Sim(replace(TEST_CONFIG, group_max_size=2))
    a = Member(sim, client_id="a")
    form_group(sim, [a])
    c, d = Member(sim, client_id="c"), Member(sim, client_id="d")
    for m in (c, d):  # 1 member < 2: both get ids
        resp = m.send_join()
        assert resp is not None and resp.error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert c.send_join() is None  # c is added: PreparingRebalance, 1 awaiting
    assert a.send_join() is None  # 2 awaiting; d's pending id still blocks completion
    assert sim.state("g") == "PreparingRebalance"
    resp = d.send_join()  # 2 awaiting >= 2: refused, and its pending id dropped
    assert resp == JoinGroupResponse(error_code=ErrorCode.GROUP_MAX_SIZE_REACHED, member_id="")
    # its id is no longer pending: leaving with it finds nothing
    assert d.leave().members[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID
    sim.advance(a.rebalance_timeout_ms)
    ra = a.join_response()
    assert ra is not None and ra.generation_id == 2
    assert sorted(x.member_id for x in ra.members) == ["a-u1", "c-u2"]


def test_group_max_size_in_preparing_removes_member_that_rejoins_too_late() -> None:
    sim = Sim(replace(TEST_CONFIG, group_max_size=2))
    a, b = Member(sim, client_id="a"), Member(sim, client_id="b")
    leader = form_group(sim, [a, b])
    assert leader is a
    assert a.send_join() is None  # the leader re-joins: PreparingRebalance, 1 awaiting
    c = Member(sim, client_id="c")
    resp = c.send_join()  # 1 awaiting < 2
    assert resp is not None and resp.error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert c.send_join() is None  # the pending id becomes a member: 2 awaiting
    # b never re-joined; the limit counts members awaiting join, so b is refused now and
    # removed from the group (Kafka's quirk, docs/design/kafka.md §17.9)
    resp = b.send_join()
    assert resp == JoinGroupResponse(error_code=ErrorCode.GROUP_MAX_SIZE_REACHED, member_id="")
    assert b.hb() == ErrorCode.UNKNOWN_MEMBER_ID
    assert sim.state("g") == "PreparingRebalance"  # the removal alone does not complete it
    sim.advance(a.rebalance_timeout_ms)
    ra, rc = a.join_response(), c.join_response()
    assert ra is not None and rc is not None and ra.generation_id == rc.generation_id == 2
    assert sorted(x.member_id for x in ra.members) == ["a-u1", "c-u3"]


def test_group_max_size_quirk_refuses_static_restart_in_full_group() -> None:
    sim = Sim(replace(TEST_CONFIG, group_max_size=2))
    s = Member(sim, instance_id="s1")
    d = Member(sim)
    form_group(sim, [s, d])
    restarted = Member(sim, instance_id="s1")  # member_id "" again: it would replace itself
    resp = restarted.send_join()
    assert resp == JoinGroupResponse(error_code=ErrorCode.GROUP_MAX_SIZE_REACHED, member_id="")
    assert s.hb() == ErrorCode.NONE  # the old incarnation is untouched
    assert sim.state("g") == "Stable"
