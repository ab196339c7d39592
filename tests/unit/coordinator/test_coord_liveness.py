"""Session expiry (docs/design/kafka.md §8), the rebalance timeout (§4.10), pending ids (§4.3) and
the pending-sync timeout (§9), all on the simulated clock."""

from __future__ import annotations

from dataclasses import replace

from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import JoinGroupResponse, SyncGroupResponse

from .coord_sim import TEST_CONFIG, Member, Sim, form_group, join_all, sub


def test_stable_member_without_heartbeats_expires_and_group_empties() -> None:
    sim = Sim()
    a = Member(sim, session_timeout_ms=5000)
    form_group(sim, [a])
    assert sim.describe("g").generation_id == 1
    sim.advance(4999)
    assert sim.state("g") == "Stable"
    sim.advance(1)
    described = sim.describe("g")
    assert described.group_state == "Empty" and described.generation_id == 2
    assert described.members == []
    assert a.hb() == ErrorCode.UNKNOWN_MEMBER_ID
    expired = sim.events_of("member_expired")
    assert [(e.member_id, e.reason) for e in expired] == [(a.member_id, "session-expired")]
    assert expired[0].partitions == [("t", [0, 1, 2, 3, 4, 5])]


def test_generation_one_leave_then_empty_generation_two() -> None:
    sim = Sim()
    a = Member(sim)
    form_group(sim, [a])
    assert a.leave().members[0].error_code == ErrorCode.NONE
    described = sim.describe("g")
    assert (described.group_state, described.generation_id) == ("Empty", 2)
    assert described.protocol_type == "consumer"  # kept; only the protocol name is cleared
    assert sim.records[-1].state == "Empty"  # type: ignore[union-attr]


def test_stable_expiry_of_one_member_rebalances_the_others() -> None:
    sim = Sim()
    a, b = Member(sim, client_id="a"), Member(sim, client_id="b", session_timeout_ms=3000)
    form_group(sim, [a, b])
    sim.advance(2000)
    assert a.hb() == ErrorCode.NONE
    sim.advance(1000)  # b's session is over
    assert sim.state("g") == "PreparingRebalance"
    assert a.hb() == ErrorCode.REBALANCE_IN_PROGRESS
    resp = a.send_join()
    assert resp is not None and resp.generation_id == 2 and resp.members[0].member_id == "a-u1"


def test_session_expiry_in_completing_rebalance() -> None:
    sim = Sim()
    a = Member(sim, client_id="a", session_timeout_ms=3000)
    b = Member(sim, client_id="b", session_timeout_ms=3000)
    join_all(sim, [a, b])
    assert sim.state("g") == "CompletingRebalance"
    sim.advance(2000)
    assert a.hb() == ErrorCode.NONE  # heartbeats are fine in CompletingRebalance
    sim.advance(1000)  # b neither synced nor heartbeated
    assert sim.state("g") == "PreparingRebalance"
    assert [e.member_id for e in sim.events_of("member_expired")] == [b.member_id]


def test_preparing_member_that_heartbeats_but_never_rejoins_is_dropped_at_timeout() -> None:
    sim = Sim()
    a = Member(sim, client_id="a", rebalance_timeout_ms=8000)
    b = Member(sim, client_id="b", rebalance_timeout_ms=8000)
    leader = form_group(sim, [a, b])
    other = b if leader is a else a
    t0 = sim.now
    leader.send_join()
    for _ in range(3):
        sim.advance(2500)
        assert other.hb() == ErrorCode.REBALANCE_IN_PROGRESS  # keeps its session alive
    sim.advance_to(t0 + 7999)
    assert leader.join_response() is None
    sim.advance(1)
    resp = leader.join_response()
    assert resp is not None and resp.generation_id == 2
    assert [x.member_id for x in resp.members] == [leader.member_id]
    assert other.hb() == ErrorCode.UNKNOWN_MEMBER_ID
    dropped = sim.events_of("member_expired")
    assert [(e.member_id, e.reason) for e in dropped] == [(other.member_id, "rebalance-timeout")]


def test_static_member_that_does_not_rejoin_is_kept_until_its_session_expires() -> None:
    sim = Sim()
    a = Member(sim, client_id="a", rebalance_timeout_ms=5000)
    s = Member(sim, instance_id="s", rebalance_timeout_ms=5000, session_timeout_ms=20_000)
    leader = form_group(sim, [a, s])
    assert leader is a
    t0 = sim.now
    a.send_join()
    sim.advance_to(t0 + 5000)  # the join phase ends: the static member is kept
    resp = a.join_response()
    assert resp is not None and resp.generation_id == 2
    assert sorted(x.member_id for x in resp.members) == sorted([a.member_id, s.member_id])
    # and its session was re-armed by the completion
    assert sim.timer_deadline(("session", "g", s.member_id)) == t0 + 5000 + 20_000


def test_member_parked_in_join_does_not_expire() -> None:
    sim = Sim()
    a, b, c = (Member(sim, client_id=x, session_timeout_ms=2000, rebalance_timeout_ms=10_000)
               for x in "abc")
    leader = form_group(sim, [a, b, c])
    follower, straggler = [m for m in (a, b, c) if m is not leader]
    t0 = sim.now
    leader.send_join()
    follower.send_join()  # two members parked: neither will heartbeat again
    for _ in range(6):  # the third keeps its session but never re-joins
        sim.advance(1500)
        assert straggler.hb() == ErrorCode.REBALANCE_IN_PROGRESS
    assert sim.now - t0 == 9000  # far past the parked members' 2 s sessions
    assert sim.events_of("member_expired") == []
    sim.advance_to(t0 + 10_000)
    resp = leader.join_response()
    assert resp is not None and resp.generation_id == 2
    assert sorted(x.member_id for x in resp.members) == sorted(
        [leader.member_id, follower.member_id])
    assert [e.reason for e in sim.events_of("member_expired")] == ["rebalance-timeout"]


def test_follower_parked_in_sync_survives_but_silent_leader_expires() -> None:
    sim = Sim()
    a = Member(sim, client_id="a", session_timeout_ms=2000)
    b = Member(sim, client_id="b", session_timeout_ms=2000)
    join_all(sim, [a, b])
    assert b.send_sync() is None  # parked, never heartbeats
    sim.advance(2000)  # the leader neither syncs nor heartbeats
    assert b.sync_response() == SyncGroupResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS)
    assert [e.member_id for e in sim.events_of("member_expired")] == [a.member_id]
    assert b.hb() == ErrorCode.REBALANCE_IN_PROGRESS


def test_new_member_expires_on_new_member_join_timeout_even_while_parked() -> None:
    sim = Sim(replace(TEST_CONFIG, new_member_join_timeout_ms=5000))
    a = Member(sim, client_id="a", rebalance_timeout_ms=60_000)
    form_group(sim, [a])
    a.send_join()  # leader re-joins: PreparingRebalance, waits for up to 60 s
    n = Member(sim, client_id="n", rebalance_timeout_ms=60_000)
    assert n.join() is None  # the new member parks
    sim.advance(4999)
    assert n.join_response() is None
    sim.advance(1)
    assert n.join_response() == JoinGroupResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID,
                                                  member_id="")
    # everyone left has joined: the phase completes without waiting out the 60 s
    resp = a.join_response()
    assert resp is not None and resp.generation_id == 2 and len(resp.members) == 1


def test_pending_member_id_expires_and_unblocks_the_join_phase() -> None:
    sim = Sim()
    a = Member(sim, client_id="a", rebalance_timeout_ms=60_000)
    form_group(sim, [a])
    p = Member(sim, client_id="p", session_timeout_ms=4000)
    resp = p.send_join()
    assert resp is not None and resp.error_code == ErrorCode.MEMBER_ID_REQUIRED
    a.send_join()  # all members joined, but the pending id blocks completion
    assert a.join_response() is None
    sim.advance(3999)
    assert a.join_response() is None
    sim.advance(1)  # the pending id is dropped: the phase completes
    resp = a.join_response()
    assert resp is not None and resp.generation_id == 2
    again = p.send_join()
    assert again is not None and again.error_code == ErrorCode.UNKNOWN_MEMBER_ID


# --- pending-sync timeout: docs/design/kafka.md §9's four examples --------------------------------


def _three_joined(sim: Sim) -> tuple[Member, list[Member]]:
    ms = [Member(sim, client_id=x, rebalance_timeout_ms=5000) for x in "abc"]
    responses = join_all(sim, ms)
    leader = next(m for m in ms if m.member_id == responses[0].leader)
    return leader, [m for m in ms if m is not leader]


def test_pending_sync_nobody_syncs() -> None:
    sim = Sim()
    leader, followers = _three_joined(sim)
    t0 = sim.now
    sim.advance(2500)
    assert all(m.hb() == ErrorCode.NONE for m in [leader, *followers])
    sim.advance_to(t0 + 5000)
    described = sim.describe("g")
    assert (described.group_state, described.generation_id) == ("Empty", 2)
    assert all(m.hb() == ErrorCode.UNKNOWN_MEMBER_ID for m in [leader, *followers])
    assert {e.reason for e in sim.events_of("member_expired")} == {"sync-timeout"}
    assert sim.describe("g").rebalances[-1].reason == "member-joined"


def test_pending_sync_only_leader_syncs() -> None:
    sim = Sim()
    leader, followers = _three_joined(sim)
    t0 = sim.now
    leader.send_sync({m.member_id: b"" for m in [leader, *followers]})
    assert sim.state("g") == "Stable"
    sim.advance(2500)
    assert all(m.hb() == ErrorCode.NONE for m in [leader, *followers])
    sim.advance_to(t0 + 5000)
    assert sim.state("g") == "PreparingRebalance"
    assert leader.hb() == ErrorCode.REBALANCE_IN_PROGRESS
    assert all(m.hb() == ErrorCode.UNKNOWN_MEMBER_ID for m in followers)
    assert sim.describe("g").rebalances[-1].reason == "sync-timeout"


def test_pending_sync_only_followers_sync() -> None:
    sim = Sim()
    leader, followers = _three_joined(sim)
    t0 = sim.now
    for m in followers:
        assert m.send_sync() is None
    sim.advance(2500)
    assert leader.hb() == ErrorCode.NONE
    sim.advance_to(t0 + 5000)
    assert sim.state("g") == "PreparingRebalance"
    for m in followers:
        assert m.sync_response() == SyncGroupResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS)
    assert leader.hb() == ErrorCode.UNKNOWN_MEMBER_ID


def test_pending_sync_everyone_syncs() -> None:
    sim = Sim()
    leader, followers = _three_joined(sim)
    t0 = sim.now
    for m in followers:
        m.send_sync()
    leader.send_sync({m.member_id: b"" for m in [leader, *followers]})
    assert ("sync", "g", "1") not in sim.timers
    sim.advance_to(t0 + 5000)
    assert all(m.hb() == ErrorCode.NONE for m in [leader, *followers])
    sim.advance_to(t0 + 7500)
    assert all(m.hb() == ErrorCode.NONE for m in [leader, *followers])
    assert sim.state("g") == "Stable"


def test_join_phase_waits_while_only_non_rejoined_static_members_remain() -> None:
    sim = Sim(replace(TEST_CONFIG, connection_loss_grace_ms=500))
    s1 = Member(sim, client_id="s1", instance_id="i1", session_timeout_ms=20_000,
                rebalance_timeout_ms=4000)
    s2 = Member(sim, client_id="s2", instance_id="i2", session_timeout_ms=20_000,
                rebalance_timeout_ms=4000)
    form_group(sim, [s1, s2])
    t0 = sim.now
    n = Member(sim, client_id="n", rebalance_timeout_ms=4000)
    n.join()  # PreparingRebalance; the static members will not re-join
    sim.close(n.conn)  # and the newcomer vanishes
    sim.advance(500)
    assert sim.state("g") == "PreparingRebalance"
    sim.advance_to(t0 + 4000)  # the phase ends with nobody to lead: it waits again
    d = sim.describe("g")
    assert (d.group_state, d.generation_id) == ("PreparingRebalance", 1)
    assert sim.timer_deadline(("join", "g")) == t0 + 8000
    s1.send_join()  # one static member comes back; the next deadline completes the phase
    sim.advance_to(t0 + 8000)
    resp = s1.join_response()
    assert resp is not None and resp.generation_id == 2 and resp.leader == s1.member_id
    assert sorted(x.member_id for x in resp.members) == sorted([s1.member_id, s2.member_id])


def test_leader_that_does_not_rejoin_is_replaced_by_earliest_joined_rejoiner() -> None:
    sim = Sim()
    a = Member(sim, client_id="a", rebalance_timeout_ms=4000)
    s = Member(sim, client_id="s", instance_id="i", rebalance_timeout_ms=4000,
               session_timeout_ms=30_000)
    b = Member(sim, client_id="b", rebalance_timeout_ms=4000)
    c = Member(sim, client_id="c", rebalance_timeout_ms=4000)
    leader = form_group(sim, [a, s, b, c])
    assert leader is a
    t0 = sim.now
    c.protocols = [("range", sub("t", "u"))]
    c.send_join()  # changed metadata: rebalance
    b.send_join()
    for _ in range(3):
        sim.advance(1000)
        assert a.hb() == ErrorCode.REBALANCE_IN_PROGRESS  # alive, but never re-joins
    sim.advance_to(t0 + 4000)
    # a (dynamic) is dropped; s (static) stays without leading; b joined before c
    resp_b, resp_c = b.join_response(), c.join_response()
    assert resp_b is not None and resp_c is not None
    assert resp_b.leader == resp_c.leader == b.member_id
    assert sorted(x.member_id for x in resp_b.members) == sorted(
        [s.member_id, b.member_id, c.member_id])


def test_completing_rebalance_rejoin_with_changed_metadata_rebalances() -> None:
    sim = Sim()
    a, b = Member(sim, client_id="a"), Member(sim, client_id="b")
    join_all(sim, [a, b])
    b.protocols = [("range", sub("t", "u"))]
    assert b.send_join() is None
    assert sim.state("g") == "PreparingRebalance"
    a.send_join()
    resp = a.join_response()
    assert resp is not None and resp.generation_id == 2


def test_static_member_parked_in_join_gets_a_full_session_when_its_connection_dies() -> None:
    sim = Sim(replace(TEST_CONFIG, connection_loss_grace_ms=500))
    a = Member(sim, client_id="a", rebalance_timeout_ms=60_000, session_timeout_ms=2000)
    s = Member(sim, client_id="s", instance_id="i", rebalance_timeout_ms=60_000,
               session_timeout_ms=3000)
    d = Member(sim, client_id="d", rebalance_timeout_ms=60_000, session_timeout_ms=2000)
    form_group(sim, [a, s, d])
    a.send_join()
    s.send_join()
    for _ in range(4):  # d keeps the phase open; s's timer fires while it is parked
        sim.advance(1000)
        assert d.hb() == ErrorCode.REBALANCE_IN_PROGRESS
    assert ("session", "g", s.member_id) not in sim.timers
    sim.close(s.conn)
    assert sim.timer_deadline(("session", "g", s.member_id)) == sim.now + 3000


def test_session_expiry_during_preparing_rebalance_completes_the_phase() -> None:
    sim = Sim()
    a = Member(sim, client_id="a", rebalance_timeout_ms=60_000)
    b = Member(sim, client_id="b", rebalance_timeout_ms=60_000, session_timeout_ms=3000)
    leader = form_group(sim, [a, b])
    assert leader is a
    t0 = sim.now
    a.send_join()  # b neither heartbeats nor re-joins
    sim.advance_to(t0 + 2999)
    assert a.join_response() is None
    sim.advance(1)  # b's session ends long before the 60 s rebalance timeout
    resp = a.join_response()
    assert resp is not None and resp.generation_id == 2
    assert [x.member_id for x in resp.members] == [a.member_id]
    assert [(e.member_id, e.reason) for e in sim.events_of("member_expired")] == [
        (b.member_id, "session-expired")]
